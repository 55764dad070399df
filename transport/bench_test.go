package transport

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// benchAppend is an append of n records of 1 KiB with a session, as the
// Go client sends them.
func benchAppend(n int) *AppendRequest {
	r := &AppendRequest{ClientID: "bench-client-0123456789abcdef", Seq: 1 << 20, Base: 1<<20 - 64}
	for i := range n {
		r.Records = append(r.Records, bytes.Repeat([]byte{byte(i)}, 1024))
	}
	return r
}

// benchAppendResponse answers an append of n records.
func benchAppendResponse(n int) *AppendResponse {
	r := &AppendResponse{}
	for i := range n {
		r.Indexes = append(r.Indexes, 1<<24+uint64(i))
	}
	return r
}

// benchReadResponse is a read reply of n records of 1 KiB.
func benchReadResponse(n int) *ReadResponse {
	r := &ReadResponse{Next: 1<<24 + uint64(n)}
	for i := range n {
		r.Records = append(r.Records, Record{Index: 1<<24 + uint64(i), Data: bytes.Repeat([]byte{byte(i)}, 1024), AppendedAt: 1_700_000_000_000_000_000})
	}
	return r
}

// codecCases are the hot-path messages the codec benchmarks encode and
// decode.
func codecCases() []struct {
	name string
	v    any
} {
	return []struct {
		name string
		v    any
	}{
		{"AppendRequest/records=1", benchAppend(1)},
		{"AppendRequest/records=64", benchAppend(64)},
		{"AppendResponse/indexes=1", benchAppendResponse(1)},
		{"AppendResponse/indexes=64", benchAppendResponse(64)},
		{"ReadResponse/records=64", benchReadResponse(64)},
	}
}

func BenchmarkEncodeBody(b *testing.B) {
	for _, c := range codecCases() {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodeBody(c.v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeBody(b *testing.B) {
	for _, c := range codecCases() {
		body, err := EncodeBody(c.v)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				v := newZero(c.v)
				if err := DecodeBody(body, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// countConn counts the Write calls on a connection.
type countConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// commitHandler answers appends the way the node does: a request waits
// until a committer goroutine completes it, and the committer completes
// every request waiting at once, one after another, as raft's FSM loop
// answers the futures of a committed batch.
type commitHandler struct {
	mu      sync.Mutex
	waiting []chan uint64
	kick    chan struct{} // capacity 1: a request is waiting
	next    uint64        // owned by the committer
}

func newCommitHandler(ctx context.Context) *commitHandler {
	h := &commitHandler{kick: make(chan struct{}, 1)}
	go func() {
		for {
			select {
			case <-h.kick:
			case <-ctx.Done():
				return
			}
			h.mu.Lock()
			batch := h.waiting
			h.waiting = nil
			h.mu.Unlock()
			for _, ch := range batch {
				h.next++
				ch <- h.next
			}
		}
	}()
	return h
}

func (h *commitHandler) Handle(ctx context.Context, op Op, req any) (any, error) {
	ch := make(chan uint64, 1)
	h.mu.Lock()
	h.waiting = append(h.waiting, ch)
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
	select {
	case idx := <-ch:
		return &AppendResponse{Indexes: []uint64{idx}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (h *commitHandler) Stream(context.Context, Op, any, *ServerStream) error { return nil }

func (h *commitHandler) CopiesAppendRecords() bool { return true }

// BenchmarkServe measures the server side of the protocol on loopback: one
// client connection keeps up to inflight appends of one 1 KiB record in
// flight, written by one goroutine that batches its requests and reads
// the replies, so that the client costs little. One op is one request;
// writes/req counts the server's write calls per reply. The handler either
// answers at once (immediate) or as a group commit would (commit). The
// large case sends appends of 64 records of 16 KiB, one at a time, as the
// Go client packs them.
func BenchmarkServe(b *testing.B) {
	for _, kind := range []string{"immediate", "commit"} {
		for _, inflight := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/inflight=%d", kind, inflight), func(b *testing.B) {
				benchServe(b, kind, inflight, benchAppend(1))
			})
		}
	}
	b.Run("immediate/inflight=1/64x16KiB", func(b *testing.B) {
		r := benchAppend(0)
		for i := range 64 {
			r.Records = append(r.Records, bytes.Repeat([]byte{byte(i)}, 16<<10))
		}
		benchServe(b, "immediate", 1, r)
	})
}

func benchServe(b *testing.B, kind string, inflight int, req *AppendRequest) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var h Handler
	switch kind {
	case "immediate":
		var next atomic.Uint64
		h = funcHandler{copies: true, handle: func(ctx context.Context, op Op, req any) (any, error) {
			return &AppendResponse{Indexes: []uint64{next.Add(1)}}, nil
		}}
	case "commit":
		h = newCommitHandler(ctx)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	var cc *countConn
	accepted := make(chan struct{})
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			served <- err
			close(accepted)
			return
		}
		cc = &countConn{Conn: nc}
		close(accepted)
		served <- Serve(ctx, cc, h, Limits{MaxInFlight: max(inflight, DefaultMaxInFlight)})
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	<-accepted
	if cc == nil {
		b.Fatal(<-served)
	}
	body, err := EncodeBody(req)
	if err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	var out []byte
	sent, done, outstanding := 0, 0, 0
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for done < b.N {
		out = out[:0]
		for outstanding < inflight && sent < b.N {
			sent++
			outstanding++
			out, _ = AppendFrame(out, Frame{Type: FrameRequest, Op: OpAppend, ID: uint64(sent), Body: body})
		}
		if len(out) > 0 {
			if _, err := nc.Write(out); err != nil {
				b.Fatal(err)
			}
		}
		// Read one reply, then every reply already buffered.
		for first := true; first || br.Buffered() > 0; first = false {
			f, err := ReadFrame(br, DefaultMaxFrameSize)
			if err != nil {
				b.Fatal(err)
			}
			if f.Type != FrameResponse {
				b.Fatalf("reply %v for request %d: %x", f.Type, f.ID, f.Body)
			}
			done++
			outstanding--
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cc.writes.Load())/float64(b.N), "writes/req")
	nc.Close()
	if err := <-served; err != nil {
		b.Fatal(err)
	}
}
