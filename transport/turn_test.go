package transport

import (
	"bufio"
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The appends of a connection take turns in the order they arrived, while
// the server still runs them at once: the handlers here all wait until
// every append has reached one, then race to record their request, each
// after waiting for its turn; without the turns they would record in
// whatever order the scheduler let them. Other ops have no turn.
func TestTurnsOrderTheAppendsOfAConnection(t *testing.T) {
	const n = 32
	var (
		mu      sync.Mutex
		order   []uint64
		count   int
		arrived = make(chan struct{}, n)
		all     = make(chan struct{}) // closed once every append reached a handler
	)
	h := funcHandler{handle: func(ctx context.Context, op Op, req any) (any, error) {
		turn := TurnOf(ctx)
		if op != OpAppend {
			if turn != nil {
				t.Errorf("%v request with a turn", op)
			}
			return &ReadResponse{}, nil
		}
		arrived <- struct{}{}
		mu.Lock()
		if count++; count == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if err := turn.Wait(ctx); err != nil {
			return nil, err
		}
		mu.Lock()
		order = append(order, req.(*AppendRequest).Seq)
		mu.Unlock()
		turn.Pass()
		turn.Pass() // again: nothing happens
		return &AppendResponse{Indexes: []uint64{1}}, nil
	}}
	srv := serveCounted(t, h, Limits{})
	nc, err := net.Dial("tcp", srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(testTimeout))
	var out []byte
	want := make([]uint64, n)
	for i := range n {
		want[i] = uint64(n - i) // any order: the arrival order is what counts
		body, _ := EncodeBody(&AppendRequest{ClientID: "c" + strconv.Itoa(i), Seq: want[i], Records: [][]byte{[]byte("r")}})
		out, _ = AppendFrame(out, Frame{Type: FrameRequest, Op: OpAppend, ID: uint64(2*i + 1), Body: body})
		body, _ = EncodeBody(&ReadRequest{From: 1})
		out, _ = AppendFrame(out, Frame{Type: FrameRequest, Op: OpRead, ID: uint64(2*i + 2), Body: body})
	}
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	for range 2 * n {
		if f, err := ReadFrame(br, DefaultMaxFrameSize); err != nil || f.Type != FrameResponse {
			t.Fatalf("reply %+v, %v", f, err)
		}
	}
	if len(arrived) != n {
		t.Fatalf("%d appends reached a handler, want %d", len(arrived), n)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, want) {
		t.Fatalf("appends handled in order %v, want %v", order, want)
	}
}

// A handler that returns without passing its turn does not hold the next
// append up: Serve passes it.
func TestTurnPassedWhenTheHandlerReturns(t *testing.T) {
	h := funcHandler{handle: func(ctx context.Context, op Op, req any) (any, error) {
		if err := TurnOf(ctx).Wait(ctx); err != nil {
			return nil, err
		}
		return &AppendResponse{Indexes: []uint64{1}}, nil // no Pass
	}}
	srv := serveCounted(t, h, Limits{})
	nc, err := net.Dial("tcp", srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(testTimeout))
	body, _ := EncodeBody(&AppendRequest{Records: [][]byte{[]byte("r")}})
	var out []byte
	for i := range 3 {
		out, _ = AppendFrame(out, Frame{Type: FrameRequest, Op: OpAppend, ID: uint64(i + 1), Body: body})
	}
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	for range 3 {
		if f, err := ReadFrame(br, DefaultMaxFrameSize); err != nil || f.Type != FrameResponse {
			t.Fatalf("reply %+v, %v", f, err)
		}
	}
	if TurnOf(context.Background()) != nil {
		t.Fatal("a context without a turn has one")
	}
	var none *Turn
	if err := none.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	none.Pass()
}
