package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ConnOptions configure a client Conn. The zero value of each field means
// its default; negative values are invalid.
type ConnOptions struct {
	// MaxFrameSize is the largest frame length sent or accepted; default
	// DefaultMaxFrameSize. A request that would exceed it fails locally with
	// ErrFrameTooLarge; a larger frame from the server fails the connection.
	MaxFrameSize int
	// MaxInFlight is the most requests, streams included, this side keeps in
	// flight; further calls wait for a slot. Default DefaultMaxInFlight. A
	// request stays in flight, as on the server, until its final frame
	// arrives, even after its caller gave up; so a value no larger than the
	// server's Limits.MaxInFlight never meets Busy for the request count
	// (the server may still refuse by Limits.MaxInFlightBytes).
	MaxInFlight int
	// WriteTimeout bounds the write of one frame; default
	// DefaultWriteTimeout. A write that times out fails the connection.
	WriteTimeout time.Duration
}

// DefaultStreamWindow is the credit window of a stream opened with a
// window of 0.
const DefaultStreamWindow = 64

// Conn is the client side of a connection. It pipelines requests: any
// number of goroutines may call it at once, each request gets a fresh id,
// and replies are matched by id in whatever order they come. Call waits
// for its reply; Go returns at once and hands the reply to a function. When
// the connection fails, every call in flight and every later call returns
// an error wrapping ErrClosed and the cause.
type Conn struct {
	nc    net.Conn      // immutable
	opts  ConnOptions   // immutable, defaults applied
	slots chan struct{} // one token per request in flight
	done  chan struct{} // closed when the read loop has exited

	w *frameWriter // coalesces and serialises frame writes

	mu      sync.Mutex          // guards the fields below
	nextID  uint64              // last request id used
	pending map[uint64]*pending // requests without a final frame; nil once failed
	err     error               // why the connection failed; set once
}

// pending is a request waiting for its final frame.
type pending struct {
	final  chan Frame  // capacity 1: the final frame of a Call
	stream *Stream     // set for a stream
	done   func(error) // set for a Go: called with the outcome, by the read loop
	resp   any         // with done: what the reply is decoded into
}

// NewConn starts a client on nc, which it owns from now on.
func NewConn(nc net.Conn, opts *ConnOptions) (*Conn, error) {
	var o ConnOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxFrameSize == 0 {
		o.MaxFrameSize = DefaultMaxFrameSize
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxFrameSize < minFrameSize || uint64(o.MaxFrameSize) > MaxFrameLength || o.MaxInFlight < 0 || o.WriteTimeout < 0 {
		nc.Close()
		return nil, fmt.Errorf("transport: invalid conn options %+v", o)
	}
	c := &Conn{
		nc:      nc,
		opts:    o,
		slots:   make(chan struct{}, o.MaxInFlight),
		done:    make(chan struct{}),
		pending: make(map[uint64]*pending),
		w:       newFrameWriter(nc, o.WriteTimeout),
	}
	go c.readLoop()
	return c, nil
}

// Dial connects to a server over TCP.
func Dial(ctx context.Context, addr string, opts *ConnOptions) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return NewConn(nc, opts)
}

// Close closes the connection; calls in flight fail with ErrClosed. It
// waits for the read loop to exit.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	<-c.done
	return nil
}

// Done is closed once the connection has failed or been closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection failed, wrapping ErrClosed, or nil while
// it works.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Call sends req, a pointer to op's request type, and decodes the reply
// into resp, a pointer to a zero value of op's response type (or nil to
// drop it). An error reply is returned as an *Error. If ctx is done first
// Call sends a Cancel and returns ctx.Err() at once; the request keeps its
// in-flight slot until the server's final frame arrives.
func (c *Conn) Call(ctx context.Context, op Op, req, resp any) error {
	if op.Streaming() {
		return fmt.Errorf("transport: %v is a streaming op; use OpenStream", op)
	}
	p := &pending{final: make(chan Frame, 1)}
	id, err := c.start(ctx, op, req, p)
	if err != nil {
		return err
	}
	select {
	case f := <-p.final:
		return replyError(f, resp)
	case <-ctx.Done():
		c.abandon(op, id)
		return ctx.Err()
	case <-c.done:
		select {
		case f := <-p.final:
			return replyError(f, resp)
		default:
			return c.Err()
		}
	}
}

// Go sends req, a pointer to op's request type, like Call, but returns
// once the request is sent, without waiting for the reply: done is then
// called exactly once, with the error Call would have returned, after the
// reply was decoded into resp (a pointer to a zero value of op's response
// type, or nil to drop it), or with an error wrapping ErrClosed when the
// connection fails first. ctx bounds only the wait for an in-flight slot
// (see ConnOptions.MaxInFlight), not the request.
//
// Go returns the request's id, for Abandon, or an error when it sent
// nothing: then done is never called. A request whose frame could not be
// written fails the connection and is completed through done.
//
// done runs on the goroutine that reads the connection, possibly before Go
// returns: it must not block, nor wait for another reply of this Conn
// (Call from done would deadlock); hand anything slow to another
// goroutine. Go lets one goroutine keep many requests in flight without a
// goroutine waiting for each.
func (c *Conn) Go(ctx context.Context, op Op, req, resp any, done func(error)) (uint64, error) {
	if op.Streaming() {
		return 0, fmt.Errorf("transport: %v is a streaming op; use OpenStream", op)
	}
	if done == nil {
		return 0, errors.New("transport: Go without a done function")
	}
	id, err := c.start(ctx, op, req, &pending{done: done, resp: resp})
	if id == 0 {
		return 0, err
	}
	return id, nil // a failed write reaches done through the read loop
}

// Abandon tells the server that nobody waits any more for request id, which
// Go returned for op; the server then ends it early, usually with Canceled.
// The request keeps its in-flight slot, and its done function is still
// called, once the final frame arrives or the connection fails. Abandoning
// a request that has completed does nothing.
func (c *Conn) Abandon(op Op, id uint64) {
	c.abandon(op, id)
}

// start encodes a request, takes an in-flight slot, registers p under a
// new id and sends the request. It returns the id once p is registered,
// also when sending then failed (which fails the connection, so the read
// loop completes p), and 0 when it registered nothing.
func (c *Conn) start(ctx context.Context, op Op, req any, p *pending) (uint64, error) {
	body, err := EncodeBody(req)
	if err != nil {
		return 0, err
	}
	if n := FrameLength(len(body)); n > c.opts.MaxFrameSize {
		return 0, fmt.Errorf("%w: %v request of %d bytes, limit %d", ErrFrameTooLarge, op, n, c.opts.MaxFrameSize)
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-c.done:
		return 0, c.Err()
	}
	c.mu.Lock()
	if c.pending == nil {
		c.mu.Unlock()
		<-c.slots
		return 0, c.err
	}
	c.nextID++
	id := c.nextID
	if p.stream != nil {
		p.stream.id = id // published to the read loop by c.mu
	}
	c.pending[id] = p
	c.mu.Unlock()
	if err := c.write(Frame{Type: FrameRequest, Op: op, ID: id, Body: body}); err != nil {
		return id, err
	}
	return id, nil
}

// abandon tells the server that nobody waits for request id any more.
func (c *Conn) abandon(op Op, id uint64) {
	c.mu.Lock()
	_, inflight := c.pending[id]
	c.mu.Unlock()
	if inflight {
		go c.write(Frame{Type: FrameCancel, Op: op, ID: id})
	}
}

// replyError decodes a final frame into resp or into an *Error.
func replyError(f Frame, resp any) error {
	if f.Type == FrameError {
		e := new(Error)
		if err := DecodeBody(f.Body, e); err != nil {
			return fmt.Errorf("%w: undecodable error reply: %w", ErrProtocol, err)
		}
		return e
	}
	if resp == nil {
		return nil
	}
	return DecodeBody(f.Body, resp)
}

// write sends one frame. A failed write fails the connection.
func (c *Conn) write(f Frame) error {
	if err := c.Err(); err != nil {
		return err
	}
	if err := c.w.write(f); err != nil {
		return c.fail(err)
	}
	return nil
}

// fail records why the connection failed, unless it already has, and
// closes it; the read loop then fails everything in flight. It returns the
// recorded error.
func (c *Conn) fail(cause error) error {
	c.mu.Lock()
	if c.err == nil {
		if errors.Is(cause, ErrClosed) {
			c.err = cause
		} else {
			c.err = fmt.Errorf("%w: %w", ErrClosed, cause)
		}
	}
	err := c.err
	c.mu.Unlock()
	c.nc.Close()
	return err
}

// readLoop reads and routes frames until the connection fails.
func (c *Conn) readLoop() {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var err error
	for err == nil {
		var f Frame
		if f, err = ReadFrame(br, c.opts.MaxFrameSize); err == nil {
			err = c.route(f)
		}
	}
	if err == io.EOF {
		err = fmt.Errorf("server closed the connection: %w", io.EOF)
	}
	c.fail(err)
	c.mu.Lock()
	pend := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, p := range pend {
		switch {
		case p.stream != nil:
			p.stream.finish(c.Err())
		case p.done != nil:
			p.done(c.Err())
		}
	}
	close(c.done)
}

// route delivers one frame from the server.
func (c *Conn) route(f Frame) error {
	switch f.Type {
	case FrameResponse, FrameError:
		if f.ID == 0 {
			if f.Type != FrameError {
				return fmt.Errorf("%w: response for request id 0", ErrProtocol)
			}
			return replyError(f, nil) // a fault of the whole connection
		}
		c.mu.Lock()
		p := c.pending[f.ID]
		delete(c.pending, f.ID)
		c.mu.Unlock()
		if p == nil {
			return fmt.Errorf("%w: %v for unknown request id %d", ErrProtocol, f.Type, f.ID)
		}
		<-c.slots
		switch {
		case p.stream != nil:
			p.stream.finish(replyError(f, nil))
		case p.done != nil:
			p.done(replyError(f, p.resp))
		default:
			p.final <- f
		}
		return nil
	case FrameStreamItem:
		c.mu.Lock()
		p := c.pending[f.ID]
		c.mu.Unlock()
		if p == nil || p.stream == nil {
			return fmt.Errorf("%w: stream item for request id %d, not a stream in flight", ErrProtocol, f.ID)
		}
		return p.stream.push(f.Body)
	}
	return fmt.Errorf("%w: %v frame from a server", ErrProtocol, f.Type)
}

// OpenStream starts a streaming request (OpTail) and grants the server
// window items of credit (0 means DefaultStreamWindow). Recv returns the
// items; as they are consumed, the stream grants more, so at most window
// items are ever buffered. The stream is cancelled when ctx is done or
// Close is called.
func (c *Conn) OpenStream(ctx context.Context, op Op, req any, window uint32) (*Stream, error) {
	if !op.Streaming() {
		return nil, fmt.Errorf("transport: %v is not a streaming op; use Call", op)
	}
	if window == 0 {
		window = DefaultStreamWindow
	}
	st := &Stream{c: c, op: op, ctx: ctx, window: window, ready: make(chan struct{}, 1), granted: int64(window)}
	id, err := c.start(ctx, op, req, &pending{stream: st})
	if err != nil {
		return nil, err
	}
	if err := c.sendCredit(op, id, window); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { st.cancel(ctx.Err()) })
	st.mu.Lock()
	ended := st.end != nil
	if !ended {
		st.stop = stop
	}
	st.mu.Unlock()
	if ended {
		stop()
	}
	return st, nil
}

// sendCredit grants n items to stream id.
func (c *Conn) sendCredit(op Op, id uint64, n uint32) error {
	body, err := EncodeBody(&Credit{Items: n})
	if err != nil {
		return err
	}
	return c.write(Frame{Type: FrameCredit, Op: op, ID: id, Body: body})
}

// ErrStreamClosed is returned by Recv after Close.
var ErrStreamClosed = errors.New("transport: stream closed")

// Stream is the client side of a streaming request. Recv must be called
// from one goroutine at a time; Close may be called from any.
type Stream struct {
	c      *Conn           // immutable
	op     Op              // immutable
	id     uint64          // set by Conn.start before the stream is visible, then immutable
	ctx    context.Context // immutable
	window uint32          // immutable

	ready chan struct{} // signalled (capacity 1) when items or the end arrive

	mu       sync.Mutex  // guards the fields below
	items    [][]byte    // received, not yet returned
	granted  int64       // credits granted minus items received
	consumed uint32      // items returned since the last grant
	end      error       // why the stream ended: io.EOF, an *Error, a conn error
	canceled bool        // the client gave up; items are dropped
	stop     func() bool // stops watching the context; nil once ended
}

// Recv decodes the next item into v, a pointer to a zero value of the op's
// item type (*TailItem for OpTail). It returns io.EOF when the server ended
// the stream normally, an *Error when it ended it with one, the context's
// error or ErrStreamClosed after the client cancelled, and an error
// wrapping ErrClosed when the connection failed. Items that arrived before
// the server ended the stream are returned first; once the stream's
// context is done, Recv returns its error at once and drops them.
func (s *Stream) Recv(v any) error {
	for {
		if err := s.ctx.Err(); err != nil {
			s.cancel(err)
		}
		s.mu.Lock()
		if len(s.items) > 0 {
			b := s.items[0]
			s.items[0] = nil
			s.items = s.items[1:]
			s.consumed++
			var grant uint32
			if s.end == nil && s.consumed >= max(1, s.window/2) {
				grant, s.consumed = s.consumed, 0
				s.granted += int64(grant)
			}
			s.mu.Unlock()
			if grant > 0 {
				if err := s.c.sendCredit(s.op, s.id, grant); err != nil {
					return err
				}
			}
			return DecodeBody(b, v)
		}
		if s.end != nil {
			err := s.end
			s.mu.Unlock()
			return err
		}
		s.mu.Unlock()
		<-s.ready
	}
}

// Close cancels the stream if it is still running. Recv then returns
// ErrStreamClosed.
func (s *Stream) Close() error {
	s.cancel(ErrStreamClosed)
	return nil
}

// cancel ends the stream on the client's side and tells the server.
func (s *Stream) cancel(why error) {
	s.mu.Lock()
	if s.end != nil {
		s.mu.Unlock()
		return
	}
	s.end, s.canceled, s.items = why, true, nil
	s.mu.Unlock()
	s.signal()
	s.c.abandon(s.op, s.id)
}

// push queues an item from the server.
func (s *Stream) push(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.granted <= 0 {
		return fmt.Errorf("%w: stream %d sent an item without credit", ErrProtocol, s.id)
	}
	s.granted--
	if !s.canceled {
		s.items = append(s.items, b)
		s.signal()
	}
	return nil
}

// finish records the server's end of the stream (err nil means a normal
// end) unless the client ended it first.
func (s *Stream) finish(err error) {
	if err == nil {
		err = io.EOF
	}
	s.mu.Lock()
	if s.end == nil {
		s.end = err
	}
	stop := s.stop
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.signal()
}

// signal wakes Recv.
func (s *Stream) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}
