package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testTimeout bounds every wait in these tests; nothing sleeps.
const testTimeout = 20 * time.Second

// funcHandler adapts functions to Handler. A nil function answers
// UnknownOp-like Internal errors.
type funcHandler struct {
	handle func(ctx context.Context, op Op, req any) (any, error)
	stream func(ctx context.Context, op Op, req any, s *ServerStream) error
	copies bool // what CopiesAppendRecords answers (AppendCopier)
}

func (h funcHandler) CopiesAppendRecords() bool { return h.copies }

func (h funcHandler) Handle(ctx context.Context, op Op, req any) (any, error) {
	if h.handle == nil {
		return nil, errors.New("no handler")
	}
	return h.handle(ctx, op, req)
}

func (h funcHandler) Stream(ctx context.Context, op Op, req any, s *ServerStream) error {
	if h.stream == nil {
		return errors.New("no stream handler")
	}
	return h.stream(ctx, op, req, s)
}

// server is a listener on 127.0.0.1 serving each connection with Serve.
type server struct {
	addr string
	errs chan error // what each Serve returned
}

// startServer serves h until the test ends, then shuts down and waits for
// every Serve to return.
func startServer(t *testing.T, h Handler, lim Limits) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{addr: ln.Addr().String(), errs: make(chan error, 1000)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.errs <- Serve(ctx, nc, h, lim)
			}()
		}
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
	})
	return s
}

// dial opens a client Conn closed when the test ends.
func (s *server) dial(t *testing.T, opts *ConnOptions) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := Dial(ctx, s.addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialRaw opens a plain TCP connection for hand-made frames.
func (s *server) dialRaw(t *testing.T) *net.TCPConn {
	t.Helper()
	nc, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(testTimeout))
	return nc.(*net.TCPConn)
}

// nextErr returns the next value a Serve returned.
func (s *server) nextErr(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.errs:
		return err
	case <-time.After(testTimeout):
		t.Fatal("no Serve returned")
		return nil
	}
}

// testCtx is a context bounded by testTimeout.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// echoHandler answers Append with indexes parsed from the records, Status
// with the node id "n1", and Tail with an endless stream from From.
func echoHandler() funcHandler {
	return funcHandler{
		handle: func(ctx context.Context, op Op, req any) (any, error) {
			switch r := req.(type) {
			case *AppendRequest:
				resp := &AppendResponse{}
				for _, rec := range r.Records {
					n, err := strconv.ParseUint(string(rec), 10, 64)
					if err != nil {
						return nil, errorf(CodeBadRequest, "record %q is not a number", rec)
					}
					resp.Indexes = append(resp.Indexes, n)
				}
				return resp, nil
			case *StatusRequest:
				return &StatusResponse{NodeID: "n1", Role: "Leader"}, nil
			}
			return nil, errorf(CodeUnavailable, "%v not served", op)
		},
		stream: func(ctx context.Context, op Op, req any, s *ServerStream) error {
			next := req.(*TailRequest).From
			for {
				if err := s.Send(&TailItem{Records: []Record{{Index: next, Data: []byte("r")}}, Next: next + 1}); err != nil {
					return err
				}
				next++
			}
		},
	}
}

// status makes one Status call and checks its answer.
func status(t *testing.T, c *Conn) {
	t.Helper()
	var resp StatusResponse
	if err := c.Call(testCtx(t), OpStatus, &StatusRequest{}, &resp); err != nil {
		t.Fatalf("Status: %v", err)
	}
	if resp.NodeID != "n1" {
		t.Fatalf("Status answered %+v", resp)
	}
}

// readFrames reads frames from a raw connection until it ends, returning
// them and the error that ended the reading.
func readFrames(t *testing.T, nc net.Conn) ([]Frame, error) {
	t.Helper()
	var frames []Frame
	for {
		f, err := ReadFrame(nc, 0)
		if err != nil {
			return frames, err
		}
		frames = append(frames, f)
	}
}

// wantErrorFrame checks that f is an Error frame for id with code.
func wantErrorFrame(t *testing.T, f Frame, id uint64, code Code) *Error {
	t.Helper()
	if f.Type != FrameError || f.ID != id {
		t.Fatalf("got %v frame for id %d, want Error for id %d", f.Type, f.ID, id)
	}
	e := new(Error)
	if err := DecodeBody(f.Body, e); err != nil {
		t.Fatal(err)
	}
	if e.Code != code {
		t.Fatalf("got %v, want code %v", e, code)
	}
	return e
}

func TestPipelinedCalls(t *testing.T) {
	const n = 100
	// The handler holds every request until all n have arrived, so they
	// are provably in flight on one connection at once.
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
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp AppendResponse
			want := uint64(1000 + i)
			err := c.Call(testCtx(t), OpAppend, &AppendRequest{Records: [][]byte{[]byte(strconv.Itoa(int(want)))}}, &resp)
			if err == nil && (len(resp.Indexes) != 1 || resp.Indexes[0] != want) {
				err = fmt.Errorf("call %d got %v", i, resp.Indexes)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestErrorsReachCaller(t *testing.T) {
	h := funcHandler{handle: func(ctx context.Context, op Op, req any) (any, error) {
		switch r := req.(type) {
		case *RemoveRequest:
			switch r.NodeID {
			case "leader":
				return nil, &Error{Code: CodeNotLeader, Message: "follower", LeaderID: "n2", LeaderAddr: "127.0.0.2:7000"}
			case "plain":
				return nil, errors.New("disk on fire")
			case "deadline":
				return nil, fmt.Errorf("apply: %w", context.DeadlineExceeded)
			case "panic":
				panic("handler bug")
			case "wrong type":
				return &StatusResponse{}, nil
			case "nil":
				return nil, nil
			}
		case *ReadRequest:
			return &ReadResponse{Records: []Record{{Index: 1, Data: make([]byte, 9000)}}}, nil
		}
		return nil, errors.New("unexpected")
	}}
	srv := startServer(t, h, Limits{MaxFrameSize: 8192})
	c := srv.dial(t, nil)
	ctx := testCtx(t)

	tests := []struct {
		name string
		op   Op
		req  any
		want Code
	}{
		{"NotLeader", OpRemove, &RemoveRequest{NodeID: "leader"}, CodeNotLeader},
		{"plain error", OpRemove, &RemoveRequest{NodeID: "plain"}, CodeInternal},
		{"deadline", OpRemove, &RemoveRequest{NodeID: "deadline"}, CodeTimeout},
		{"panic", OpRemove, &RemoveRequest{NodeID: "panic"}, CodeInternal},
		{"wrong response type", OpRemove, &RemoveRequest{NodeID: "wrong type"}, CodeInternal},
		{"validation", OpRemove, &RemoveRequest{}, CodeBadRequest},
		{"undecodable body", OpRemove, &StatusResponse{NodeID: "x"}, CodeBadRequest},
		{"unknown op", Op(99), &StatusRequest{}, CodeUnknownOp},
		{"response too large", OpRead, &ReadRequest{}, CodeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Call(ctx, tt.op, tt.req, nil)
			var e *Error
			if !errors.As(err, &e) || e.Code != tt.want {
				t.Fatalf("Call = %v, want code %v", err, tt.want)
			}
			if tt.want == CodeNotLeader && (e.LeaderAddr != "127.0.0.2:7000" || e.LeaderID != "n2") {
				t.Fatalf("NotLeader without the leader: %+v", e)
			}
		})
	}
	// A nil response is the zero response, and the connection survived
	// every error above, the panic included.
	resp := RemoveResponse{Index: 9}
	if err := c.Call(ctx, OpRemove, &RemoveRequest{NodeID: "nil"}, &resp); err != nil || resp.Index != 0 {
		t.Fatalf("nil response: %v %+v", err, resp)
	}
}

func TestCallCancel(t *testing.T) {
	started := make(chan struct{})
	canceled := make(chan struct{})
	h := echoHandler()
	h.handle = func(ctx context.Context, op Op, req any) (any, error) {
		if op == OpTrim {
			close(started)
			<-ctx.Done()
			close(canceled)
			return nil, ctx.Err()
		}
		return echoHandler().handle(ctx, op, req)
	}
	srv := startServer(t, h, Limits{})
	c := srv.dial(t, &ConnOptions{MaxInFlight: 1})

	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, OpTrim, &TrimRequest{Below: 5}, nil) }()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Call = %v", err)
	}
	select {
	case <-canceled: // the Cancel frame reached the handler
	case <-time.After(testTimeout):
		t.Fatal("handler was not cancelled")
	}
	// With one slot, this call waits for the cancelled request's final frame.
	status(t, c)
}

func TestBusy(t *testing.T) {
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(2)
	h := echoHandler()
	h.handle = func(ctx context.Context, op Op, req any) (any, error) {
		if op == OpTrim {
			started.Done()
			<-release
			return &TrimResponse{Index: 1}, nil
		}
		return echoHandler().handle(ctx, op, req)
	}
	srv := startServer(t, h, Limits{MaxInFlight: 2})
	c := srv.dial(t, nil) // client allows more than the server
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- c.Call(testCtx(t), OpTrim, &TrimRequest{Below: 1}, nil) }()
	}
	started.Wait()
	if err := c.Call(testCtx(t), OpStatus, &StatusRequest{}, nil); ErrorCode(err) != CodeBusy {
		t.Fatalf("third call = %v, want Busy", err)
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	status(t, c)
}

func TestBusyByBytes(t *testing.T) {
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(2)
	h := echoHandler()
	h.handle = func(ctx context.Context, op Op, req any) (any, error) {
		if op == OpAppend {
			started.Done()
			<-release
			return nil, nil
		}
		return echoHandler().handle(ctx, op, req)
	}
	srv := startServer(t, h, Limits{MaxFrameSize: 8192, MaxInFlightBytes: 8192})
	c := srv.dial(t, nil)
	big := &AppendRequest{Records: [][]byte{make([]byte, 4000)}}
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- c.Call(testCtx(t), OpAppend, big, nil) }()
	}
	started.Wait()
	if err := c.Call(testCtx(t), OpAppend, big, nil); ErrorCode(err) != CodeBusy {
		t.Fatalf("third large append = %v, want Busy", err)
	}
	status(t, c) // a small request still fits
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestClientInFlightLimitWaits(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	h := echoHandler()
	h.handle = func(ctx context.Context, op Op, req any) (any, error) {
		if op == OpTrim {
			started <- struct{}{}
			<-release
			return nil, nil
		}
		return echoHandler().handle(ctx, op, req)
	}
	srv := startServer(t, h, Limits{MaxInFlight: 1})
	c := srv.dial(t, &ConnOptions{MaxInFlight: 1})
	first := make(chan error, 1)
	go func() { first <- c.Call(testCtx(t), OpTrim, &TrimRequest{Below: 1}, nil) }()
	<-started
	// The second call cannot get a slot; its context ends first.
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	if err := c.Call(ctx, OpStatus, &StatusRequest{}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("call without a slot = %v", err)
	}
	second := make(chan error, 1)
	go func() { second <- c.Call(testCtx(t), OpStatus, &StatusRequest{}, nil) }()
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil { // waited for the slot, never Busy
		t.Fatal(err)
	}
}

func TestOversizedFrameClosesOnlyItsConnection(t *testing.T) {
	srv := startServer(t, echoHandler(), Limits{MaxFrameSize: 4096})
	good := srv.dial(t, nil)
	status(t, good)

	raw := srv.dialRaw(t)
	raw.Write(rawFrame(1<<20, Version, FrameRequest, OpAppend, 42, make([]byte, 100)))
	frames, err := readFrames(t, raw)
	if err != io.EOF || len(frames) != 1 {
		t.Fatalf("got %d frames, then %v; want one, then EOF", len(frames), err)
	}
	wantErrorFrame(t, frames[0], 42, CodeTooLarge)
	if err := srv.nextErr(t); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Serve returned %v", err)
	}
	status(t, good)

	// The client refuses to send what the server would refuse.
	small := srv.dial(t, &ConnOptions{MaxFrameSize: 4096})
	err = small.Call(testCtx(t), OpAppend, &AppendRequest{Records: [][]byte{make([]byte, 5000)}}, nil)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized request = %v", err)
	}
	status(t, small)
}

func TestBadFramesGetReplyThenClose(t *testing.T) {
	status, _ := EncodeBody(&StatusRequest{})
	credit, _ := EncodeBody(&Credit{Items: 1})
	tests := []struct {
		name string
		in   []byte
		code Code
		want error // what Serve returns
	}{
		{"unsupported version", rawFrame(13, 7, FrameRequest, OpStatus, 1, status), CodeUnsupportedVersion, ErrUnsupportedVersion},
		{"zero length", []byte{0, 0, 0, 0}, CodeBadRequest, ErrMalformedFrame},
		{"short length", rawFrame(5, Version, FrameRequest, OpStatus, 1, nil)[:9], CodeBadRequest, ErrMalformedFrame},
		{"unknown frame type", rawFrame(12, Version, 9, OpStatus, 1, nil), CodeBadRequest, ErrMalformedFrame},
		{"request id 0", goodFrame(FrameRequest, OpStatus, 0, status), CodeBadRequest, ErrProtocol},
		{"response from a client", goodFrame(FrameResponse, OpStatus, 1, status), CodeBadRequest, ErrProtocol},
		{"bad credit body", goodFrame(FrameCredit, OpTail, 1, []byte{0x91}), CodeBadRequest, ErrProtocol},
		{"cancel with a body", goodFrame(FrameCancel, OpTail, 1, credit), CodeBadRequest, ErrProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t, echoHandler(), Limits{})
			raw := srv.dialRaw(t)
			raw.Write(tt.in)
			frames, err := readFrames(t, raw)
			if err != io.EOF || len(frames) != 1 {
				t.Fatalf("got %d frames, then %v; want one, then EOF", len(frames), err)
			}
			e := wantErrorFrame(t, frames[0], 0, tt.code)
			if tt.code == CodeUnsupportedVersion && e.Version != Version {
				t.Fatalf("version reply names %d", e.Version)
			}
			if err := srv.nextErr(t); !errors.Is(err, tt.want) {
				t.Fatalf("Serve returned %v, want %v", err, tt.want)
			}
		})
	}
}

func TestDuplicateRequestIDClosesConnection(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	h := echoHandler()
	h.handle = func(ctx context.Context, op Op, req any) (any, error) {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	}
	srv := startServer(t, h, Limits{})
	t.Cleanup(func() { close(release) })
	raw := srv.dialRaw(t)
	body, _ := EncodeBody(&TrimRequest{Below: 1})
	raw.Write(goodFrame(FrameRequest, OpTrim, 5, body))
	<-started
	raw.Write(goodFrame(FrameRequest, OpTrim, 5, body))
	if err := srv.nextErr(t); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Serve returned %v", err)
	}
}

func TestGarbageDoesNotHurtOtherClients(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	srv := startServer(t, echoHandler(), Limits{MaxFrameSize: 64 << 10})
	good := srv.dial(t, nil)

	// A well-behaved client keeps calling while garbage arrives.
	stop := make(chan struct{})
	goodErr := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				goodErr <- nil
				return
			default:
			}
			var resp AppendResponse
			err := good.Call(testCtx(t), OpAppend, &AppendRequest{Records: [][]byte{[]byte(strconv.Itoa(i))}}, &resp)
			if err == nil && (len(resp.Indexes) != 1 || resp.Indexes[0] != uint64(i)) {
				err = fmt.Errorf("call %d answered %v", i, resp.Indexes)
			}
			if err != nil {
				goodErr <- err
				return
			}
		}
	}()

	body, _ := EncodeBody(&AppendRequest{Records: [][]byte{[]byte("1"), []byte("2")}})
	valid := goodFrame(FrameRequest, OpAppend, 1, body)
	const rounds = 60
	for round := range rounds {
		var in []byte
		switch round % 4 {
		case 0: // random bytes
			in = make([]byte, rng.IntN(2048))
			for i := range in {
				in[i] = byte(rng.Uint32())
			}
		case 1: // a valid frame cut short
			in = valid[:rng.IntN(len(valid))]
		case 2: // a valid header, then a random body
			b := make([]byte, rng.IntN(300))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			in = goodFrame(FrameRequest, Op(rng.IntN(10)), rng.Uint64N(4), b)
		case 3: // valid frames with one random byte flipped
			in = append(append([]byte{}, valid...), valid...)
			in[rng.IntN(len(in))] ^= byte(1 + rng.IntN(255))
		}
		raw := srv.dialRaw(t)
		raw.Write(in)
		raw.CloseWrite()
		io.Copy(io.Discard, raw) // read replies until the server closes
		raw.Close()
		srv.nextErr(t) // that connection's Serve has returned
	}
	close(stop)
	if err := <-goodErr; err != nil {
		t.Fatalf("good client failed: %v", err)
	}
	status(t, good)
}

func TestTailStream(t *testing.T) {
	const window = 4
	var sent atomic.Int64
	ended := make(chan error, 1)
	h := echoHandler()
	h.stream = func(ctx context.Context, op Op, req any, s *ServerStream) error {
		next := req.(*TailRequest).From
		for {
			if err := s.Send(&TailItem{Records: []Record{{Index: next}}, Next: next + 1}); err != nil {
				ended <- err
				return err
			}
			sent.Add(1)
			next++
		}
	}
	srv := startServer(t, h, Limits{})
	c := srv.dial(t, &ConnOptions{MaxInFlight: 1})
	st, err := c.OpenStream(testCtx(t), OpTail, &TailRequest{From: 10}, window)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		var item TailItem
		if err := st.Recv(&item); err != nil {
			t.Fatal(err)
		}
		if want := uint64(10 + i); len(item.Records) != 1 || item.Records[0].Index != want || item.Next != want+1 {
			t.Fatalf("item %d = %+v", i, item)
		}
		// Credits bound what the server can have sent.
		if s := sent.Load(); s > int64(i+1+window) {
			t.Fatalf("server sent %d items after the client consumed %d with a window of %d", s, i+1, window)
		}
	}
	st.Close()
	if err := st.Recv(&TailItem{}); !errors.Is(err, ErrStreamClosed) {
		t.Fatalf("Recv after Close = %v", err)
	}
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("server stream ended with %v", err)
	}
	// The single slot comes back once the server's final frame arrives.
	status(t, c)
}

func TestTailStreamEnds(t *testing.T) {
	h := echoHandler()
	h.stream = func(ctx context.Context, op Op, req any, s *ServerStream) error {
		for i := range 3 {
			if err := s.Send(&TailItem{Next: uint64(i)}); err != nil {
				return err
			}
		}
		if req.(*TailRequest).From == 1 {
			return nil
		}
		return &Error{Code: CodeTrimmed, Message: "below first index"}
	}
	srv := startServer(t, h, Limits{})
	c := srv.dial(t, nil)
	for _, tt := range []struct {
		from uint64
		end  func(error) bool
	}{
		{1, func(err error) bool { return err == io.EOF }},
		{2, func(err error) bool { return ErrorCode(err) == CodeTrimmed }},
	} {
		st, err := c.OpenStream(testCtx(t), OpTail, &TailRequest{From: tt.from}, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			var item TailItem
			if err := st.Recv(&item); err != nil || item.Next != uint64(i) {
				t.Fatalf("item %d: %+v, %v", i, item, err)
			}
		}
		if err := st.Recv(&TailItem{}); !tt.end(err) {
			t.Fatalf("stream from %d ended with %v", tt.from, err)
		}
	}
}

func TestStreamContextCancel(t *testing.T) {
	srv := startServer(t, echoHandler(), Limits{})
	c := srv.dial(t, nil)
	ctx, cancel := context.WithCancel(testCtx(t))
	st, err := c.OpenStream(ctx, OpTail, &TailRequest{From: 1}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Recv(&TailItem{}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := st.Recv(&TailItem{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv after cancel = %v, want context.Canceled", err)
	}
	status(t, c) // the connection still serves
}

func TestConnFailureFailsInFlight(t *testing.T) {
	started := make(chan struct{})
	h := echoHandler()
	h.handle = func(ctx context.Context, op Op, req any) (any, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	srv := startServer(t, h, Limits{})
	c := srv.dial(t, nil)
	done := make(chan error, 1)
	go func() { done <- c.Call(testCtx(t), OpTrim, &TrimRequest{Below: 1}, nil) }()
	<-started
	c.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("in-flight call = %v", err)
	}
	if err := c.Call(testCtx(t), OpStatus, &StatusRequest{}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close = %v", err)
	}
	if err := srv.nextErr(t); err != nil {
		t.Fatalf("Serve after a client close returned %v", err)
	}
}

func TestServerShutdownFailsClients(t *testing.T) {
	started := make(chan struct{})
	h := echoHandler()
	h.handle = func(ctx context.Context, op Op, req any) (any, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	client, serverSide := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, serverSide, h, Limits{}) }()
	c, err := NewConn(client, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() { done <- c.Call(testCtx(t), OpTrim, &TrimRequest{Below: 1}, nil) }()
	<-started
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve on shutdown = %v", err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("call during shutdown = %v", err)
	}
	<-c.Done()
}

func TestConnectionLevelErrorFailsCalls(t *testing.T) {
	// A server that answers every request with an UnsupportedVersion error
	// for id 0, as a server of another version would.
	client, fake := net.Pipe()
	defer fake.Close()
	c, err := NewConn(client, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		if _, err := ReadFrame(fake, 0); err != nil {
			return
		}
		body, _ := EncodeBody(&Error{Code: CodeUnsupportedVersion, Version: 9})
		WriteFrame(fake, Frame{Type: FrameError, ID: 0, Body: body})
		fake.Close()
	}()
	err = c.Call(testCtx(t), OpStatus, &StatusRequest{}, nil)
	var e *Error
	if !errors.Is(err, ErrClosed) || !errors.As(err, &e) || e.Code != CodeUnsupportedVersion || e.Version != 9 {
		t.Fatalf("Call = %v", err)
	}
}

func TestClientRefusesMisbehavingServer(t *testing.T) {
	tests := []struct {
		name  string
		reply func(req Frame) []Frame
	}{
		{"reply to an unknown id", func(req Frame) []Frame {
			return []Frame{{Type: FrameResponse, Op: req.Op, ID: req.ID + 1, Body: []byte{0x80}}}
		}},
		{"stream item without credit", func(req Frame) []Frame {
			return []Frame{{Type: FrameStreamItem, Op: req.Op, ID: req.ID, Body: []byte{0x80}}}
		}},
		{"request from a server", func(req Frame) []Frame {
			return []Frame{{Type: FrameRequest, Op: req.Op, ID: 1, Body: []byte{0x80}}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, fake := net.Pipe()
			defer fake.Close()
			c, err := NewConn(client, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go func() {
				req, err := ReadFrame(fake, 0)
				if err != nil {
					return
				}
				for _, f := range tt.reply(req) {
					WriteFrame(fake, f)
				}
				io.Copy(io.Discard, fake)
			}()
			err = c.Call(testCtx(t), OpStatus, &StatusRequest{}, nil)
			if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrProtocol) {
				t.Fatalf("Call = %v, want ErrClosed wrapping ErrProtocol", err)
			}
		})
	}
}

func TestIdleTimeout(t *testing.T) {
	srv := startServer(t, echoHandler(), Limits{IdleTimeout: 50 * time.Millisecond})
	raw := srv.dialRaw(t)
	if n, err := io.Copy(io.Discard, raw); err != nil || n != 0 {
		t.Fatalf("idle connection: read %d bytes, %v; want a clean close", n, err)
	}
	if err := srv.nextErr(t); err != nil {
		t.Fatalf("Serve after idling out = %v", err)
	}
}

func TestIdleTimeoutSparesStreams(t *testing.T) {
	// A stream with no credit left sends nothing and the client sends
	// nothing; the connection must outlive many idle timeouts. The handler
	// proves the time passed by waiting on a timer of its own.
	const idle = 20 * time.Millisecond
	h := echoHandler()
	h.stream = func(ctx context.Context, op Op, req any, s *ServerStream) error {
		if err := s.Send(&TailItem{Next: 1}); err != nil {
			return err
		}
		select {
		case <-time.After(10 * idle):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	srv := startServer(t, h, Limits{IdleTimeout: idle})
	c := srv.dial(t, nil)
	st, err := c.OpenStream(testCtx(t), OpTail, &TailRequest{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Recv(&TailItem{}); err != nil {
		t.Fatal(err)
	}
	if err := st.Recv(&TailItem{}); err != io.EOF {
		t.Fatalf("stream ended with %v, want io.EOF", err)
	}
}

func TestFrameTimeout(t *testing.T) {
	srv := startServer(t, echoHandler(), Limits{FrameTimeout: 50 * time.Millisecond})
	raw := srv.dialRaw(t)
	raw.Write([]byte{0, 0, 0, 20, Version}) // a frame that never completes
	if _, err := io.Copy(io.Discard, raw); err != nil {
		t.Fatal(err)
	}
	if err := srv.nextErr(t); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Serve after a stalled frame = %v", err)
	}
}

func TestServeRejectsInvalidLimits(t *testing.T) {
	client, serverSide := net.Pipe()
	defer client.Close()
	if err := Serve(context.Background(), serverSide, echoHandler(), Limits{MaxInFlight: -1}); err == nil {
		t.Fatal("Serve accepted invalid limits")
	}
	if _, err := client.Write([]byte{0}); err == nil {
		t.Fatal("Serve left the connection open")
	}
}

func TestCallRejectsStreamingOp(t *testing.T) {
	srv := startServer(t, echoHandler(), Limits{})
	c := srv.dial(t, nil)
	if err := c.Call(testCtx(t), OpTail, &TailRequest{}, nil); err == nil {
		t.Fatal("Call accepted a streaming op")
	}
	if _, err := c.OpenStream(testCtx(t), OpRead, &ReadRequest{}, 0); err == nil {
		t.Fatal("OpenStream accepted a unary op")
	}
}
