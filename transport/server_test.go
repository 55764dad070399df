package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countedServer serves one connection with Serve, counting the server's
// write calls.
type countedServer struct {
	addr   string
	conn   chan *countConn // the served connection, once accepted
	served chan error      // what Serve returned
}

func serveCounted(t *testing.T, h Handler, lim Limits) *countedServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &countedServer{addr: ln.Addr().String(), conn: make(chan *countConn, 1), served: make(chan error, 1)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := ln.Accept()
		ln.Close()
		if err != nil {
			s.served <- err
			return
		}
		cc := &countConn{Conn: nc}
		s.conn <- cc
		s.served <- Serve(ctx, cc, h, lim)
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
	})
	return s
}

// The replies of requests that complete together leave in a few writes,
// not one each. The requests complete as the node completes a committed
// batch of appends: one goroutine (raft's FSM loop) completes them one
// after another, each waking the goroutine that serves its request.
func TestRepliesOfABatchCoalesce(t *testing.T) {
	const n, rounds = 64, 3
	var (
		mu      sync.Mutex
		waiting []chan struct{}
		all     = make(chan struct{}, 1)
	)
	h := funcHandler{handle: func(ctx context.Context, op Op, req any) (any, error) {
		ch := make(chan struct{}, 1)
		mu.Lock()
		if waiting = append(waiting, ch); len(waiting) == n {
			all <- struct{}{}
		}
		mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &AppendResponse{Indexes: []uint64{1}}, nil
	}}
	srv := serveCounted(t, h, Limits{})
	nc, err := net.Dial("tcp", srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(testTimeout))
	cc := <-srv.conn
	body, _ := EncodeBody(&AppendRequest{Records: [][]byte{[]byte("r")}})
	br := bufio.NewReader(nc)
	var total int64
	for round := range rounds {
		var out []byte
		for i := range n {
			out, _ = AppendFrame(out, Frame{Type: FrameRequest, Op: OpAppend, ID: uint64(round*n + i + 1), Body: body})
		}
		if _, err := nc.Write(out); err != nil {
			t.Fatal(err)
		}
		select {
		case <-all:
		case <-time.After(testTimeout):
			t.Fatal("the requests did not all reach the handler")
		}
		before := cc.writes.Load()
		mu.Lock()
		batch := waiting
		waiting = nil
		mu.Unlock()
		for _, ch := range batch { // the batch commits
			ch <- struct{}{}
		}
		for range n {
			f, err := ReadFrame(br, DefaultMaxFrameSize)
			if err != nil {
				t.Fatal(err)
			}
			if f.Type != FrameResponse {
				t.Fatalf("%v frame for request %d", f.Type, f.ID)
			}
		}
		writes := cc.writes.Load() - before
		t.Logf("round %d: %d replies in %d writes", round, n, writes)
		total += writes
	}
	if total > rounds*n/4 {
		t.Fatalf("%d replies took %d writes", rounds*n, total)
	}
}

// goroutineID returns the id of the calling goroutine, as its stack
// trace names it.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf)
	if len(f) < 2 {
		return string(buf)
	}
	return string(f[1])
}

// Requests one after another on a connection are served by the same
// goroutine, not one goroutine each.
func TestWorkersAreReused(t *testing.T) {
	var (
		mu  sync.Mutex
		ids = map[string]int{}
	)
	h := funcHandler{handle: func(ctx context.Context, op Op, req any) (any, error) {
		mu.Lock()
		ids[goroutineID()]++
		mu.Unlock()
		return &AppendResponse{Indexes: []uint64{1}}, nil
	}}
	srv := startServer(t, h, Limits{})
	c := srv.dial(t, nil)
	const n = 200
	for i := range n {
		var resp AppendResponse
		if err := c.Call(testCtx(t), OpAppend, &AppendRequest{Records: [][]byte{[]byte(strconv.Itoa(i))}}, &resp); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) > n/10 {
		t.Fatalf("%d requests one after another ran on %d goroutines", n, len(ids))
	}
}

// A client that sends requests and never reads the replies has its
// connection closed after WriteTimeout, and Serve says why.
func TestServeWriteTimeout(t *testing.T) {
	data := make([]byte, 1<<20)
	h := funcHandler{handle: func(ctx context.Context, op Op, req any) (any, error) {
		return &ReadResponse{Records: []Record{{Index: 1, Data: data}}, Next: 2}, nil
	}}
	srv := serveCounted(t, h, Limits{WriteTimeout: 200 * time.Millisecond})
	nc, err := net.Dial("tcp", srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	body, _ := EncodeBody(&ReadRequest{})
	var out []byte
	for i := range 100 { // 100 MiB of replies, more than socket buffers hold
		out, _ = AppendFrame(out, Frame{Type: FrameRequest, Op: OpRead, ID: uint64(i + 1), Body: body})
	}
	nc.SetWriteDeadline(time.Now().Add(testTimeout))
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-srv.served:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Serve = %v, want a write deadline error", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Serve did not give up on a client that does not read")
	}
}

// A frame handed to queue is written without its caller waiting, and
// every frame queued reaches the connection in order.
func TestFrameWriterQueue(t *testing.T) {
	c := &gateConn{gate: make(chan struct{})}
	close(c.gate)
	w := newFrameWriter(c, time.Second)
	for i := range 100 {
		if err := w.queue(Frame{Type: FrameResponse, Op: OpStatus, ID: uint64(i + 1), Body: []byte{0x80}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	w.wait()
	c.mu.Lock()
	all := bytes.Join(c.writes, nil)
	c.mu.Unlock()
	r := bytes.NewReader(all)
	for i := range 100 {
		f, err := ReadFrame(r, DefaultMaxFrameSize)
		if err != nil || f.ID != uint64(i+1) {
			t.Fatalf("frame %d: %+v, %v", i, f, err)
		}
	}
	if r.Len() != 0 {
		t.Fatalf("%d bytes after the frames", r.Len())
	}
}

// funcReleaser adapts a function to releaser.
type funcReleaser func()

func (f funcReleaser) release() { f() }

// queue releases its request before the frame enters the buffer, so
// before the peer can see it; and it waits for room while limit bytes
// wait to be written, with the request still held.
func TestFrameWriterQueueBound(t *testing.T) {
	c := &gateConn{gate: make(chan struct{}), entered: make(chan struct{})}
	w := newFrameWriter(c, time.Second)
	w.limit = 100
	var released atomic.Int64
	waiting := make(chan struct{})
	w.onQueue = func(queued uint64) {
		if released.Load() != int64(queued) {
			t.Errorf("frame %d queued with %d requests released", queued, released.Load())
		}
	}
	w.onWait = func() { close(waiting) }
	rel := funcReleaser(func() { released.Add(1) })
	frame := Frame{Type: FrameResponse, Op: OpStatus, ID: 1, Body: make([]byte, 60)}
	if err := w.queue(frame, rel); err != nil { // the flusher takes it and blocks in Write
		t.Fatal(err)
	}
	<-c.entered
	for range 2 { // 152 bytes wait: over the limit
		if err := w.queue(frame, rel); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error)
	var gateOpen atomic.Bool
	go func() {
		done <- w.queue(frame, funcReleaser(func() {
			if !gateOpen.Load() {
				t.Error("a request was released while the buffer was full")
			}
			released.Add(1)
		}))
	}()
	select {
	case <-waiting:
	case <-time.After(testTimeout):
		t.Fatal("queue did not wait for room")
	}
	gateOpen.Store(true)
	close(c.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w.wait()
	if released.Load() != 4 {
		t.Fatalf("%d requests released", released.Load())
	}
}
