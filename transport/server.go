package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"sync"
	"time"
)

// Handler serves decoded, validated requests. The node implements it.
// Serve calls its methods concurrently, each request on a goroutine of its
// own while it runs (goroutines are reused from one request to the next).
type Handler interface {
	// Handle serves a unary request. req is a pointer to op's request type
	// (for example *AppendRequest for OpAppend), already validated against
	// the connection's Limits. resp must be a pointer to op's response type,
	// or nil for its zero value. An *Error reaches the client as is; other
	// errors as Internal, or Canceled and Timeout for context errors. ctx is
	// cancelled when the client cancels or the connection ends. A Handler
	// may keep the request's byte slices, unless it is an AppendCopier.
	Handle(ctx context.Context, op Op, req any) (resp any, err error)
	// Stream serves a streaming request (OpTail) by calling s.Send for each
	// item until it returns an error or ctx is done. Returning nil ends the
	// stream normally; an error ends it with an Error frame as for Handle.
	Stream(ctx context.Context, op Op, req any, s *ServerStream) error
}

// AppendCopier is implemented by a Handler that keeps nothing of an
// *AppendRequest's byte slices (its Records) once Handle returns, copying
// what it needs. Serve then reads the bodies of Append requests into
// buffers it reuses for later requests (bodypool.go); for any other
// Handler each body is a fresh slice the Handler may keep.
type AppendCopier interface {
	// CopiesAppendRecords reports whether the Handler copies what it
	// keeps of an AppendRequest's records before Handle returns.
	CopiesAppendRecords() bool
}

// RefusalObserver is implemented by a Handler that wants to know of the
// requests Serve refuses by itself, without calling the Handler, for
// example to count them: a frame that cannot be read or breaks the
// protocol, a body that does not decode or fails Validate, an unknown op,
// a request beyond the in-flight limits. Serve calls Refused once for
// each, with the Error the client is sent (code BadRequest, TooLarge,
// Busy, UnknownOp or UnsupportedVersion) and the op the frame names: 0
// when the frame could not be read that far, and otherwise any value a
// client sent, so check Op.Valid before using it as a label. A connection
// that ends without an answer (the client went away mid-frame, a frame
// took longer than Limits.FrameTimeout) is no refusal.
//
// Refused is called from a connection's read loop or a request's worker
// goroutine, concurrently for different connections and requests; it must
// not block.
type RefusalObserver interface {
	Refused(op Op, e *Error)
}

// Serve serves one client connection until the client closes it, ctx is
// done, or the client breaks the protocol, and closes it before returning.
// A TLS connection (one with a ConnectionState method, as *tls.Conn) has
// its handshake completed first, within Limits.FrameTimeout, and its
// state is handed to every request: see ConnectionState.
// It returns nil for a clean end (the client closed, the connection idled
// out, ctx was cancelled) and otherwise the error that ended it, which wraps
// ErrMalformedFrame, ErrUnsupportedVersion, ErrFrameTooLarge or ErrProtocol
// for a misbehaving client. Every request still in flight is cancelled and
// Serve waits for its handler to return. A handler that implements
// RefusalObserver hears of every request Serve refuses by itself.
//
// What goes wrong with one connection stays with it: Serve recovers a
// panicking handler (the client gets Internal), bounds the memory a client
// can pin through limits, and never touches state shared with other
// connections except through handler.
func Serve(ctx context.Context, nc net.Conn, handler Handler, limits Limits) error {
	lim, err := limits.WithDefaults()
	if err != nil {
		nc.Close()
		return err
	}
	s := &serverConn{
		nc:       nc,
		h:        handler,
		lim:      lim,
		br:       bufio.NewReaderSize(nc, 64<<10),
		work:     make(chan *serverReq),
		quit:     make(chan struct{}),
		inflight: make(map[uint64]*serverReq),
		w:        newFrameWriter(nc, lim.WriteTimeout),
	}
	s.obs, _ = handler.(RefusalObserver)
	if c, ok := handler.(AppendCopier); ok && c.CopiesAppendRecords() {
		s.bodies = &appendBodies
	}
	s.w.limit = lim.MaxFrameSize
	s.w.onFail = s.writeFailed
	if tc, ok := nc.(tlsConn); ok {
		st, err := handshake(ctx, tc, lim.FrameTimeout)
		if err != nil {
			nc.Close()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		ctx = context.WithValue(ctx, connStateKey{}, st)
	}
	// Requests are cancelled only after the connection is closed, so that a
	// client sees the connection end rather than a Canceled it never asked
	// for.
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	err = s.readLoop(reqCtx)
	stop()
	close(s.quit)
	nc.Close()
	cancelReqs()
	s.wg.Wait()
	s.w.wait()
	if ctx.Err() != nil {
		return nil // shutting down: the read failed because ctx closed nc
	}
	s.mu.Lock()
	if s.writeErr != nil && errors.Is(err, net.ErrClosed) {
		err = s.writeErr // the read failed because a write closed nc
	}
	s.mu.Unlock()
	return err
}

// tlsConn is a TLS connection, as *tls.Conn.
type tlsConn interface {
	net.Conn
	HandshakeContext(ctx context.Context) error
	ConnectionState() tls.ConnectionState
}

// connStateKey is the context key of a request's *tls.ConnectionState.
type connStateKey struct{}

// ConnectionState returns the TLS state of the connection a request
// arrived on, for a Handler's ctx, or nil when the connection is not TLS.
// The handshake is complete: PeerCertificates and VerifiedChains hold what
// the server's tls.Config asked for and verified. The caller must not
// modify it.
func ConnectionState(ctx context.Context) *tls.ConnectionState {
	st, _ := ctx.Value(connStateKey{}).(*tls.ConnectionState)
	return st
}

// handshake completes a TLS connection's handshake within timeout.
func handshake(ctx context.Context, tc tlsConn, timeout time.Duration) (*tls.ConnectionState, error) {
	tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("transport: TLS handshake with %s: %w", tc.RemoteAddr(), err)
	}
	tc.SetDeadline(time.Time{})
	st := tc.ConnectionState()
	return &st, nil
}

// serverConn is the state of one served connection.
//
// The read loop reads frames and answers those it can at once (Credit,
// Cancel, refusals); it hands each request to a worker goroutine, which
// decodes it, calls the handler, encodes the reply and queues it on the
// frame writer, then waits for the next request. A worker is reused while
// requests keep coming and exits after workerIdle without one, so a
// connection has at most as many workers as it had requests in flight at
// once, and a request rarely pays for a new goroutine or for growing its
// stack. The frame writer coalesces the replies that workers queue at about
// the same time into one write.
type serverConn struct {
	nc  net.Conn        // immutable
	h   Handler         // immutable
	obs RefusalObserver // immutable: h, if it observes refusals, else nil
	lim Limits          // immutable, defaults applied
	// bodies keeps Append bodies for reuse when h is an AppendCopier;
	// nil otherwise. Immutable.
	bodies *bodyPool
	br     *bufio.Reader                 // owned by the read loop
	hdr    [PrefixSize + HeaderSize]byte // owned by the read loop: frame header scratch
	wg     sync.WaitGroup                // the workers
	work   chan *serverReq               // unbuffered: hands a request to an idle worker
	quit   chan struct{}                 // closed when the read loop has ended: idle workers exit

	w *frameWriter // coalesces and serialises frame writes

	lastTurn <-chan struct{} // owned by the read loop: closed once the last append request passed its turn

	mu       sync.Mutex            // guards the fields below and read deadlines
	inflight map[uint64]*serverReq // requests without a final frame yet
	bytes    int                   // sum of the body sizes in inflight
	idle     bool                  // the read loop waits for a frame's first byte
	writeErr error                 // the first failed write, which closed nc
}

// serverReq is one request in flight. Its fields are set by the read loop
// before the request is handed to a worker, then immutable.
type serverReq struct {
	s      *serverConn
	ctx    context.Context    // the handler's context
	cancel context.CancelFunc // cancels ctx
	f      Frame              // the request frame
	info   opInfo             // its op
	size   int                // body size, counted in serverConn.bytes
	stream *ServerStream      // nil for a unary request
	turn   *Turn              // an append's place among the connection's appends; nil for other ops
}

// workerIdle is how long a worker waits for another request before it
// exits.
const workerIdle = 5 * time.Second

// readLoop reads frames until the connection ends or misbehaves.
func (s *serverConn) readLoop(ctx context.Context) error {
	for {
		// A frame already in the buffer is read without touching the
		// connection, so its deadlines need not be armed: a client that
		// pipelines saves two deadline updates per request.
		if !s.frameBuffered() {
			if err := s.awaitFrame(); err != nil {
				if err == io.EOF || errors.Is(err, os.ErrDeadlineExceeded) {
					return nil // closed by the client, or idle
				}
				return err
			}
		}
		f, err := readFrameFrom(s.br, s.hdr[:], s.lim.MaxFrameSize, s.bodies)
		if err != nil {
			return s.fatal(f, err)
		}
		switch f.Type {
		case FrameRequest:
			err = s.request(ctx, f)
		case FrameCredit:
			err = s.credit(f)
		case FrameCancel:
			err = s.cancel(f)
		default:
			err = fmt.Errorf("%w: %v frame from a client", ErrProtocol, f.Type)
		}
		if err != nil {
			return s.fatal(f, err)
		}
	}
}

// frameBuffered reports whether the read buffer holds a whole frame.
func (s *serverConn) frameBuffered() bool {
	n := s.br.Buffered()
	if n < PrefixSize {
		return false
	}
	p, _ := s.br.Peek(PrefixSize)
	return uint64(n) >= PrefixSize+uint64(binary.BigEndian.Uint32(p))
}

// awaitFrame waits for the first byte of the next frame under the idle
// deadline, then gives the rest of the frame FrameTimeout to arrive.
func (s *serverConn) awaitFrame() error {
	s.mu.Lock()
	s.idle = true
	s.setIdleDeadlineLocked()
	s.mu.Unlock()
	_, err := s.br.Peek(1)
	s.mu.Lock()
	s.idle = false
	s.nc.SetReadDeadline(time.Now().Add(s.lim.FrameTimeout))
	s.mu.Unlock()
	return err
}

// setIdleDeadlineLocked arms the idle timeout when nothing is in flight and
// disarms it otherwise: a client waiting on a long request or a stream
// need not send anything. Called with s.mu held while s.idle.
func (s *serverConn) setIdleDeadlineLocked() {
	if len(s.inflight) == 0 {
		s.nc.SetReadDeadline(time.Now().Add(s.lim.IdleTimeout))
	} else {
		s.nc.SetReadDeadline(time.Time{})
	}
}

// fatal answers the frame or fault that ends the connection, when the
// client can use an answer, and returns err.
func (s *serverConn) fatal(f Frame, err error) error {
	var reply *Error
	id := uint64(0)
	switch {
	case errors.Is(err, ErrUnsupportedVersion):
		reply = &Error{Code: CodeUnsupportedVersion, Message: err.Error(), Version: Version}
	case errors.Is(err, ErrFrameTooLarge):
		reply, id = errorf(CodeTooLarge, "%v", err), f.ID
	case errors.Is(err, ErrMalformedFrame), errors.Is(err, ErrProtocol):
		reply = errorf(CodeBadRequest, "%v", err)
	}
	if reply != nil {
		s.refused(f.Op, reply)
		s.writeError(f.Op, id, reply)
	}
	return err
}

// refused tells the observer, if any, of a refusal.
func (s *serverConn) refused(op Op, e *Error) {
	if s.obs != nil {
		s.obs.Refused(op, e)
	}
}

// refuse tells the observer of a refused request and queues e as its
// final frame.
func (s *serverConn) refuse(op Op, id uint64, e *Error) error {
	s.refused(op, e)
	return s.queueError(op, id, e, nil)
}

// request starts a request, or refuses it at once.
func (s *serverConn) request(ctx context.Context, f Frame) error {
	if f.ID == 0 {
		return fmt.Errorf("%w: request id 0", ErrProtocol)
	}
	info, known := f.Op.info()
	s.mu.Lock()
	if _, dup := s.inflight[f.ID]; dup {
		s.mu.Unlock()
		return fmt.Errorf("%w: request id %d is already in flight", ErrProtocol, f.ID)
	}
	if len(s.inflight) >= s.lim.MaxInFlight {
		s.mu.Unlock()
		return s.refuse(f.Op, f.ID, errorf(CodeBusy, "the limit of %d requests in flight is reached", s.lim.MaxInFlight))
	}
	if len(s.inflight) > 0 && s.bytes+len(f.Body) > s.lim.MaxInFlightBytes {
		s.mu.Unlock()
		return s.refuse(f.Op, f.ID, errorf(CodeBusy, "%d bytes in flight, a request of %d, limit %d", s.bytes, len(f.Body), s.lim.MaxInFlightBytes))
	}
	if !known {
		s.mu.Unlock()
		return s.refuse(f.Op, f.ID, errorf(CodeUnknownOp, "unknown op %d", uint16(f.Op)))
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &serverReq{s: s, cancel: cancel, f: f, info: info, size: len(f.Body)}
	if f.Op == OpAppend {
		r.turn = nextTurn(s.lastTurn)
		s.lastTurn = r.turn.done
		rctx = context.WithValue(rctx, turnKey{}, r.turn)
	}
	r.ctx = rctx
	if info.stream {
		r.stream = &ServerStream{s: s, ctx: rctx, op: f.Op, id: f.ID, item: info.respPtr, more: make(chan struct{}, 1)}
	}
	s.inflight[f.ID] = r
	s.bytes += r.size
	s.mu.Unlock()
	select {
	case s.work <- r: // an idle worker takes it
	default:
		s.wg.Add(1)
		go s.worker(r)
	}
	return nil
}

// worker serves r, then every request handed to it, until it idles for
// workerIdle or the read loop ends.
func (s *serverConn) worker(r *serverReq) {
	defer s.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		s.serve(r)
		idle.Reset(workerIdle)
		select {
		case r = <-s.work:
		case <-idle.C:
			return
		case <-s.quit:
			return
		}
	}
}

// serve runs one request to its final frame.
func (s *serverConn) serve(r *serverReq) {
	defer r.cancel()
	resp, err := s.call(r)
	if s.bodies != nil && r.f.Op == OpAppend {
		s.bodies.put(r.f.Body) // the handler keeps nothing of it (AppendCopier)
		r.f.Body = nil
	}
	r.turn.Pass()
	var body []byte
	sp := scratch.Get().(*[]byte)
	if err == nil {
		body, err = appendBody((*sp)[:0], resp)
	}
	if err == nil && FrameLength(len(body)) > s.lim.MaxFrameSize {
		err = errorf(CodeTooLarge, "response of %d bytes exceeds the frame limit %d", len(body), s.lim.MaxFrameSize)
	}
	if err != nil {
		s.queueError(r.f.Op, r.f.ID, wireError(err), r)
	} else {
		s.queue(Frame{Type: FrameResponse, Op: r.f.Op, ID: r.f.ID, Body: body}, r)
	}
	if cap(body) <= maxScratch { // the frame writer has copied it
		*sp = body[:0]
		scratch.Put(sp)
	}
}

// release takes r out of the in-flight set. The frame writer calls it
// just before r's final frame enters its buffer, so that a client that
// sees the frame may use the slot at once.
func (r *serverReq) release() {
	s := r.s
	s.mu.Lock()
	delete(s.inflight, r.f.ID)
	s.bytes -= r.size
	if s.idle {
		s.setIdleDeadlineLocked()
	}
	s.mu.Unlock()
}

// call decodes and validates the request and runs the handler, turning a
// panic into an Internal error.
func (s *serverConn) call(r *serverReq) (resp any, err error) {
	f, info := r.f, r.info
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, errorf(CodeInternal, "%v handler panicked: %v", f.Op, p)
		}
	}()
	req := info.newReq()
	if err := DecodeBody(f.Body, req); err != nil {
		e := errorf(CodeBadRequest, "%v", err)
		s.refused(f.Op, e)
		return nil, e
	}
	if err := req.Validate(s.lim); err != nil {
		s.refused(f.Op, wireError(err))
		return nil, err
	}
	if info.stream {
		if err := s.h.Stream(r.ctx, f.Op, req, r.stream); err != nil {
			return nil, err
		}
		return struct{}{}, nil
	}
	resp, err = s.h.Handle(r.ctx, f.Op, req)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return reflect.New(info.resp).Interface(), nil
	}
	if t := reflect.TypeOf(resp); t != info.respPtr {
		return nil, errorf(CodeInternal, "%v handler returned %v, want %v", f.Op, t, info.respPtr)
	}
	return resp, nil
}

// scratch holds buffers (*[]byte) to encode replies in.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// maxScratch bounds the buffers kept in scratch.
const maxScratch = 64 << 10

// wireError turns a handler's error into the Error a client sees.
func wireError(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, context.Canceled):
		return errorf(CodeCanceled, "%v", err)
	case errors.Is(err, context.DeadlineExceeded):
		return errorf(CodeTimeout, "%v", err)
	}
	return errorf(CodeInternal, "%v", err)
}

// credit adds credits to a stream. Credits for a request no longer in
// flight are ignored: they may cross its final frame.
func (s *serverConn) credit(f Frame) error {
	var c Credit
	if err := DecodeBody(f.Body, &c); err != nil {
		return fmt.Errorf("%w: credit: %w", ErrProtocol, err)
	}
	s.mu.Lock()
	r := s.inflight[f.ID]
	s.mu.Unlock()
	if r != nil && r.stream != nil {
		r.stream.grant(c.Items)
	}
	return nil
}

// cancel cancels a request; one no longer in flight is ignored.
func (s *serverConn) cancel(f Frame) error {
	if len(f.Body) != 0 {
		return fmt.Errorf("%w: cancel frame with a body", ErrProtocol)
	}
	s.mu.Lock()
	r := s.inflight[f.ID]
	s.mu.Unlock()
	if r != nil {
		r.cancel()
	}
	return nil
}

// queueError queues e as the final frame of request id. r, if not nil, is
// the request, which leaves the in-flight set as the frame is queued.
func (s *serverConn) queueError(op Op, id uint64, e *Error, r releaser) error {
	body, err := EncodeBody(e)
	if err != nil {
		if r != nil {
			r.release()
		}
		return err
	}
	return s.queue(Frame{Type: FrameError, Op: op, ID: id, Body: body}, r)
}

// queue queues one frame; see frameWriter.queue. A failed write closes
// the connection (see writeFailed); the error says so.
func (s *serverConn) queue(f Frame, r releaser) error {
	return s.w.queue(f, r)
}

// writeError sends e as the final frame of request id, and waits until it
// is written, for a connection about to be closed.
func (s *serverConn) writeError(op Op, id uint64, e *Error) error {
	body, err := EncodeBody(e)
	if err != nil {
		return err
	}
	return s.w.write(Frame{Type: FrameError, Op: op, ID: id, Body: body})
}

// writeFailed records the write error that failed the connection and
// closes it: the client cannot know how much of a frame arrived. The frame
// writer calls it once, with its lock held.
func (s *serverConn) writeFailed(err error) {
	s.mu.Lock()
	if s.writeErr == nil {
		s.writeErr = fmt.Errorf("transport: write to client: %w", err)
	}
	s.mu.Unlock()
	s.nc.Close()
}

// ServerStream sends the items of one streaming request under the client's
// credits. A handler calls Send from one goroutine.
type ServerStream struct {
	s    *serverConn     // immutable
	ctx  context.Context // immutable: the request's context
	op   Op              // immutable
	id   uint64          // immutable
	item reflect.Type    // immutable: the pointer to item struct type

	mu      sync.Mutex    // guards credits
	credits int64         // items the client has granted and not received
	more    chan struct{} // signalled (capacity 1) when credits arrive
}

// maxCredits caps the credits a stream holds, so that sums never overflow.
const maxCredits = 1 << 40

// Send encodes item, a pointer to the op's item type (*TailItem for
// OpTail), waits for a credit and queues it to be sent; it does not wait
// for the write, except while the connection's write buffer is full. It
// returns the context's error once the client cancels or the connection
// ends, an error wrapping ErrFrameTooLarge for an item that does not fit a
// frame (nothing is sent), and the write error once the connection failed.
func (st *ServerStream) Send(item any) error {
	if t := reflect.TypeOf(item); t != st.item {
		return fmt.Errorf("transport: %v stream item is %v, want %v", st.op, t, st.item)
	}
	body, err := EncodeBody(item)
	if err != nil {
		return err
	}
	if FrameLength(len(body)) > st.s.lim.MaxFrameSize {
		return fmt.Errorf("%w: stream item of %d bytes, limit %d", ErrFrameTooLarge, len(body), st.s.lim.MaxFrameSize)
	}
	for {
		if err := st.ctx.Err(); err != nil {
			return err
		}
		st.mu.Lock()
		ok := st.credits > 0
		if ok {
			st.credits--
		}
		st.mu.Unlock()
		if ok {
			break
		}
		select {
		case <-st.more:
		case <-st.ctx.Done():
			return st.ctx.Err()
		}
	}
	return st.s.queue(Frame{Type: FrameStreamItem, Op: st.op, ID: st.id, Body: body}, nil)
}

// grant adds n credits and wakes a waiting Send.
func (st *ServerStream) grant(n uint32) {
	st.mu.Lock()
	st.credits = min(st.credits+int64(n), maxCredits)
	st.mu.Unlock()
	select {
	case st.more <- struct{}{}:
	default:
	}
}

// Refuse tells a client why its connection is not served, with an Error
// frame for the whole connection (request id 0), and closes it. A server
// calls it instead of Serve, for example when it has too many connections
// (CodeBusy). The client's Conn fails with e.
func Refuse(nc net.Conn, e *Error) error {
	defer nc.Close()
	body, err := EncodeBody(e)
	if err != nil {
		return err
	}
	nc.SetWriteDeadline(time.Now().Add(time.Second))
	return WriteFrame(nc, Frame{Type: FrameError, ID: 0, Body: body})
}
