package transport

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestAppendBodiesInFlight keeps several Append requests of one connection
// in the handler at once, round after round, and checks that each sees
// its own records until it returns, though for an AppendCopier the server
// reads Append bodies into buffers it reuses: a buffer goes back for
// reuse only once its request's handler has returned.
func TestAppendBodiesInFlight(t *testing.T) {
	const inFlight, rounds = 8, 20
	var (
		mu      sync.Mutex
		arrived int
		all     = make(chan struct{})
	)
	h := funcHandler{copies: true, handle: func(ctx context.Context, op Op, req any) (any, error) {
		r := req.(*AppendRequest)
		want := bytes.Clone(r.Records[0])
		mu.Lock()
		arrived++
		if arrived == inFlight {
			close(all)
		}
		wait := all
		mu.Unlock()
		select {
		case <-wait: // every request of the round is in a handler
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !bytes.Equal(r.Records[0], want) {
			return nil, fmt.Errorf("the records of request %s changed while it was served", want[:8])
		}
		return &AppendResponse{Indexes: []uint64{1}}, nil
	}}
	s := startServer(t, h, Limits{MaxInFlight: inFlight})
	c := s.dial(t, nil)
	for round := range rounds {
		mu.Lock()
		arrived, all = 0, make(chan struct{})
		mu.Unlock()
		errs := make(chan error, inFlight)
		for i := range inFlight {
			rec := bytes.Repeat([]byte(fmt.Sprintf("%04d%04d", round, i)), 8<<10) // 64 KiB
			req := &AppendRequest{Records: [][]byte{rec}}
			go func() { errs <- c.Call(context.Background(), OpAppend, req, new(AppendResponse)) }()
		}
		for range inFlight {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// TestAppendBodiesKept: a Handler that is no AppendCopier may keep an
// append's records, and they stay as they were while later appends of the
// same size are served on the connection.
func TestAppendBodiesKept(t *testing.T) {
	var kept [][]byte
	h := funcHandler{handle: func(ctx context.Context, op Op, req any) (any, error) {
		kept = append(kept, req.(*AppendRequest).Records[0]) // one request at a time
		return &AppendResponse{Indexes: []uint64{uint64(len(kept))}}, nil
	}}
	s := startServer(t, h, Limits{})
	c := s.dial(t, nil)
	record := func(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("%08d", i)), 8<<10) }
	const n = 20
	for i := range n {
		if err := c.Call(context.Background(), OpAppend, &AppendRequest{Records: [][]byte{record(i)}}, new(AppendResponse)); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range kept {
		if !bytes.Equal(r, record(i)) {
			t.Fatalf("record %d kept by the handler now reads %q...", i, r[:8])
		}
	}
}
