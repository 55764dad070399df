package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// TailOptions configure a Tail.
type TailOptions struct {
	// MaxRecords bounds the records per stream item; 0 means the server's
	// limit.
	MaxRecords uint32
	// MaxBytes bounds the record data per stream item; 0 means the
	// server's limit.
	MaxBytes uint32
	// Stale lets the member the Client talks to serve the stream from its
	// own log, whether it leads or not; the stream then does not follow the
	// leader, but moves to another member if that one fails.
	Stale bool
	// Window is how many stream items the server may send ahead of Next;
	// 0 means transport.DefaultStreamWindow.
	Window uint32
}

// Tail streams committed records as they commit. Next must be called from
// one goroutine at a time; Close may be called from any.
type Tail struct {
	c      *Client                 // immutable
	l      *logState               // immutable: the log it streams
	err    error                   // immutable: set, Next fails with it (an invalid log name)
	opts   TailOptions             // immutable
	rt     route                   // immutable
	ctx    context.Context         // immutable: the caller's, cancelled by Close
	cancel context.CancelCauseFunc // immutable

	// Owned by the goroutine calling Next.
	next     uint64             // index of the next record to deliver; 0: the first retained
	buf      []transport.Record // received, not yet delivered
	st       *transport.Stream  // the open stream; nil when there is none
	addr     string             // the member st is open on
	openedAt time.Time          // when st was opened
	r        *retrier           // the retries of the current outage; nil when there is none
}

// Tail returns a Tail of the records from index from on (0: the first
// retained record). Nothing is sent until the first Next. The Tail ends,
// and releases its stream, when ctx is done, Close is called, or the
// Client is closed.
//
// Tail streams the default log; Log(name).Tail streams another.
func (c *Client) Tail(ctx context.Context, from uint64, opts TailOptions) *Tail {
	return c.def.tail(ctx, from, opts)
}

func (l *logState) tail(ctx context.Context, from uint64, opts TailOptions) *Tail {
	c := l.c
	tctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.ctx, func() { cancel(ErrClosed) })
	context.AfterFunc(tctx, func() { stop() })
	rt := toLeader
	if opts.Stale {
		rt = toAny
	}
	return &Tail{c: c, l: l, opts: opts, rt: rt, ctx: tctx, cancel: cancel, next: from}
}

// Next returns the next record, waiting for one to commit. Records come in
// index order, each once. After a leader change or a lost connection, Next
// reopens the stream from the next index, backing off between attempts as
// other operations do; when that keeps failing for RetryTimeout it returns
// a *RetryError, and a later call starts retrying afresh. Next returns an
// error wrapping ErrClosed after Close (of the Tail or of the Client), one
// wrapping the context's error once the context is done, and, wrapped, a
// *transport.Error the server ended the stream with that retrying cannot
// help, such as Trimmed when the next record was trimmed away.
func (t *Tail) Next() (transport.Record, error) {
	if t.err != nil {
		return transport.Record{}, t.err
	}
	for {
		if len(t.buf) > 0 {
			rec := t.buf[0]
			t.buf[0] = transport.Record{}
			t.buf = t.buf[1:]
			return rec, nil
		}
		if t.ctx.Err() != nil {
			return transport.Record{}, t.endErr()
		}
		if t.st == nil {
			if err := t.open(); err != nil {
				return transport.Record{}, err
			}
			continue
		}
		var item transport.TailItem
		err := t.st.Recv(&item)
		if err == nil {
			t.take(&item)
			continue
		}
		t.st.Close()
		t.st = nil
		if time.Since(t.openedAt) >= t.c.opts.MaxBackoff {
			t.r = nil // the stream worked for a while: a new outage
		}
		if err := t.retry(t.addr, err); err != nil {
			return transport.Record{}, err
		}
	}
}

// open opens the stream from t.next, or handles the failure to.
func (t *Tail) open() error {
	var addr string
	if t.r != nil {
		addr = t.r.addr()
		t.r.begin(addr)
	} else {
		addr = t.c.current(&t.l.route)
	}
	deadline := time.Now().Add(t.c.opts.RequestTimeout)
	if t.r != nil {
		deadline = t.r.attemptDeadline()
	}
	actx, cancel := context.WithDeadline(t.ctx, deadline)
	conn, err := t.c.conn(actx, addr)
	cancel()
	if err == nil {
		req := &transport.TailRequest{Log: t.l.name, From: t.next, MaxRecords: t.opts.MaxRecords, MaxBytes: t.opts.MaxBytes, Stale: t.opts.Stale}
		var st *transport.Stream
		if st, err = conn.OpenStream(t.ctx, transport.OpTail, req, t.opts.Window); err == nil {
			t.st, t.addr, t.openedAt = st, addr, time.Now()
			return nil
		}
	}
	return t.retry(addr, err)
}

// take queues the records of item that come at or after t.next.
func (t *Tail) take(item *transport.TailItem) {
	for _, rec := range item.Records {
		if t.next != 0 && rec.Index < t.next {
			continue // already delivered
		}
		t.buf = append(t.buf, rec)
		t.next = rec.Index + 1
	}
	t.next = max(t.next, item.Next)
	t.r = nil // progress ends an outage
}

// retry handles the failure err of the stream at addr: nil to try again,
// or the error Next returns.
func (t *Tail) retry(addr string, err error) error {
	if t.ctx.Err() != nil {
		return t.endErr()
	}
	if t.r == nil {
		t.r = t.l.retrier("tail", t.rt, "", true)
		t.r.begin(addr)
	}
	if err = t.r.failed(t.ctx, addr, err); err != nil {
		t.r = nil
		if t.ctx.Err() != nil && !errors.Is(err, ErrClosed) {
			return t.endErr()
		}
		return err
	}
	return nil
}

// endErr is the error of a Tail whose context is done.
func (t *Tail) endErr() error {
	if cause := context.Cause(t.ctx); errors.Is(cause, ErrClosed) {
		return fmt.Errorf("client: %s: %w", opName("tail", t.l.name), ErrClosed)
	}
	return fmt.Errorf("client: %s: %w", opName("tail", t.l.name), t.ctx.Err())
}

// Close ends the Tail: a Next in progress, and every later one, returns an
// error wrapping ErrClosed. It may be called more than once.
func (t *Tail) Close() error {
	if t.cancel == nil {
		return nil // never started: an invalid log name
	}
	t.cancel(ErrClosed)
	return nil
}
