package transport

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// outcome is what one done function of Go received.
type outcome struct {
	i   int
	err error
}

// await returns the next outcome from ch, failing the test after
// testTimeout.
func await(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(testTimeout):
		t.Fatal("done was not called")
		return outcome{}
	}
}

// TestGoPipelines starts many requests from one goroutine with Go: every
// done function is called once with its own decoded reply, while all the
// requests are in flight at once.
func TestGoPipelines(t *testing.T) {
	const n = 100
	var arrived atomic.Int32
	all := make(chan struct{})
	h := echoHandler()
	echo := h.handle
	h.handle = func(ctx context.Context, op Op, req any) (any, error) {
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return echo(ctx, op, req)
	}
	srv := startServer(t, h, Limits{})
	c := srv.dial(t, nil)
	outs := make(chan outcome, n)
	resps := make([]AppendResponse, n)
	var calls [n]atomic.Int32
	for i := range n {
		req := &AppendRequest{Records: [][]byte{[]byte(strconv.Itoa(1000 + i))}}
		_, err := c.Go(testCtx(t), OpAppend, req, &resps[i], func(err error) {
			calls[i].Add(1)
			outs <- outcome{i, err}
		})
		if err != nil {
			t.Fatalf("Go %d: %v", i, err)
		}
	}
	for range n {
		o := await(t, outs)
		if o.err != nil {
			t.Fatalf("request %d: %v", o.i, o.err)
		}
		if got := resps[o.i].Indexes; len(got) != 1 || got[0] != uint64(1000+o.i) {
			t.Errorf("request %d decoded %v, want [%d]", o.i, got, 1000+o.i)
		}
	}
	for i := range calls {
		if n := calls[i].Load(); n != 1 {
			t.Errorf("done of request %d called %d times", i, n)
		}
	}
}

// TestGoErrors: an error reply reaches done as an *Error; a request that
// cannot be sent is refused by Go itself and done is never called.
func TestGoErrors(t *testing.T) {
	srv := startServer(t, echoHandler(), Limits{})
	c := srv.dial(t, &ConnOptions{MaxFrameSize: minFrameSize})
	outs := make(chan outcome, 4)
	never := func(err error) { t.Errorf("done called with %v for a request Go refused", err) }

	var resp AppendResponse
	if _, err := c.Go(testCtx(t), OpAppend, &AppendRequest{Records: [][]byte{[]byte("x")}}, &resp, func(err error) { outs <- outcome{0, err} }); err != nil {
		t.Fatal(err)
	}
	if o := await(t, outs); ErrorCode(o.err) != CodeBadRequest {
		t.Errorf("done got %v, want BadRequest", o.err)
	}

	big := &AppendRequest{Records: [][]byte{make([]byte, minFrameSize)}}
	if _, err := c.Go(testCtx(t), OpAppend, big, nil, never); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("Go of an oversized request: %v, want ErrFrameTooLarge", err)
	}
	if _, err := c.Go(testCtx(t), OpTail, &TailRequest{}, nil, never); err == nil {
		t.Error("Go of a streaming op succeeded")
	}
	if _, err := c.Go(testCtx(t), OpStatus, &StatusRequest{}, nil, nil); err == nil {
		t.Error("Go without a done function succeeded")
	}
	c.Close()
	if _, err := c.Go(testCtx(t), OpStatus, &StatusRequest{}, nil, never); !errors.Is(err, ErrClosed) {
		t.Errorf("Go after Close: %v, want ErrClosed", err)
	}
}

// TestGoSlotWait: with every in-flight slot taken, Go waits for one, and
// its context bounds the wait.
func TestGoSlotWait(t *testing.T) {
	release := make(chan struct{})
	h := echoHandler()
	h.handle = func(ctx context.Context, op Op, req any) (any, error) {
		if op == OpTrim {
			select {
			case <-release:
				return &TrimResponse{Index: 1}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return echoHandler().handle(ctx, op, req)
	}
	srv := startServer(t, h, Limits{})
	c := srv.dial(t, &ConnOptions{MaxInFlight: 1})
	outs := make(chan outcome, 2)
	if _, err := c.Go(testCtx(t), OpTrim, &TrimRequest{Below: 1}, nil, func(err error) { outs <- outcome{0, err} }); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Go(short, OpStatus, &StatusRequest{}, nil, func(err error) { t.Errorf("done of a request never sent: %v", err) }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Go without a free slot: %v, want the context's deadline", err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := c.Go(testCtx(t), OpStatus, &StatusRequest{}, nil, func(err error) { outs <- outcome{1, err} })
		waited <- err
	}()
	close(release)
	for range 2 {
		if o := await(t, outs); o.err != nil {
			t.Errorf("request %d: %v", o.i, o.err)
		}
	}
	if err := <-waited; err != nil {
		t.Errorf("Go that waited for a slot: %v", err)
	}
}

// TestGoAbandonAndFailure: Abandon ends a request early, through its done
// function; a failing connection completes every request in flight.
func TestGoAbandonAndFailure(t *testing.T) {
	var entered sync.WaitGroup
	h := echoHandler()
	h.handle = func(ctx context.Context, op Op, req any) (any, error) {
		entered.Done()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	srv := startServer(t, h, Limits{})
	c := srv.dial(t, nil)
	outs := make(chan outcome, 3)
	entered.Add(3)
	var ids []uint64
	for i := range 3 {
		id, err := c.Go(testCtx(t), OpTrim, &TrimRequest{Below: 1}, nil, func(err error) { outs <- outcome{i, err} })
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	entered.Wait()
	c.Abandon(OpTrim, ids[0])
	if o := await(t, outs); o.i != 0 || ErrorCode(o.err) != CodeCanceled {
		t.Fatalf("abandoned request: done got request %d, %v; want 0, Canceled", o.i, o.err)
	}
	c.Close()
	for range 2 {
		if o := await(t, outs); !errors.Is(o.err, ErrClosed) {
			t.Errorf("request %d in flight at Close: %v, want ErrClosed", o.i, o.err)
		}
	}
	c.Abandon(OpTrim, ids[1]) // completed: does nothing
}
