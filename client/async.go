package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/raftlog/raftlog/transport"
)

// ErrWindowFull is returned by TryAppendAsync when Options.MaxInFlightAppends
// appends are in flight.
var ErrWindowFull = errors.New("client: append window full")

// AppendFuture is an append in flight, as AppendAsync returns it. Once the
// append completes, successfully or not, Done is closed and Indexes and Err
// hold the outcome. Its methods may be called from any goroutine.
type AppendFuture struct {
	done    chan struct{} // immutable; closed once indexes and err are set
	indexes []uint64      // set before done is closed
	err     error         // set before done is closed

	records [][]byte // immutable: what is appended
	size    int      // immutable: the record bytes, with per-record overhead
	ticket  uint64   // immutable once submitted: its number in pipeline.win

	// Guarded by pipeline.mu:
	state futureState
	batch *batch      // the request carrying it, with futureSent
	alone bool        // it must go in a request of its own (see pipeline.split)
	stop  func() bool // stops watching its context; nil if not watched
}

// futureState is where an append is in its life.
type futureState uint8

const (
	futureNew    futureState = iota // not yet queued
	futureQueued                    // in pipeline.queue
	futureSent                      // in a batch
	futureDone                      // completed
)

// Done returns a channel that is closed once the append has completed,
// successfully or not.
func (f *AppendFuture) Done() <-chan struct{} { return f.done }

// Err waits for the append to complete and returns its error, nil if it
// succeeded. The errors are those of Append.
func (f *AppendFuture) Err() error {
	<-f.done
	return f.err
}

// Indexes waits for the append to complete and returns the raft indexes of
// its records, in order, or nil if it failed.
func (f *AppendFuture) Indexes() []uint64 {
	<-f.done
	return f.indexes
}

// Wait waits for the append to complete and returns its indexes and error,
// or returns ctx's error if ctx ends first. The append itself goes on: its
// own context is the one given to AppendAsync.
func (f *AppendFuture) Wait(ctx context.Context) ([]uint64, error) {
	select {
	case <-f.done:
		return f.indexes, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// AppendAsync appends records, in order, as Append does, but returns at
// once with a future instead of waiting for the cluster: one goroutine can
// keep up to Options.MaxInFlightAppends appends in flight. When that many
// are in flight, AppendAsync waits for room, or until ctx ends or the
// Client is closed (the future then fails with that error; nothing was
// sent). TryAppendAsync fails at once instead.
//
// ctx bounds the append as it bounds Append: when it ends first, the
// future fails with its error, at once; the append may or may not have
// been stored, unless it had not yet been sent. The records must not be
// modified until the future completes.
//
// The future fails with the errors Append returns, wrapped the same way.
// Appends are sent together, as few requests as possible, each request
// retried as a whole with its own sequence number, so every append is
// stored exactly once or not at all; see "Order" in the package
// documentation for the order they are stored in.
func (c *Client) AppendAsync(ctx context.Context, records ...[]byte) *AppendFuture {
	f, _ := c.def.pipe.submit(ctx, records, true, true)
	return f
}

// TryAppendAsync is AppendAsync, except that it returns ErrWindowFull, and
// no future, instead of waiting when Options.MaxInFlightAppends appends
// are in flight.
func (c *Client) TryAppendAsync(ctx context.Context, records ...[]byte) (*AppendFuture, error) {
	return c.def.pipe.submit(ctx, records, false, true)
}

// Flush waits until every append to the default log submitted before it
// (by Append, AppendAsync or TryAppendAsync) has completed, successfully
// or not: each one's outcome is its own. It returns ctx's error if ctx
// ends first, and an error wrapping ErrClosed once the Client is closed.
// Appends submitted while Flush waits are not waited for.
func (c *Client) Flush(ctx context.Context) error {
	return c.def.pipe.flush(ctx)
}

// flush waits until every append to p's log submitted before it has
// completed, as Client.Flush.
func (p *pipeline) flush(ctx context.Context) error {
	c := p.l.c
	if c.isClosed() {
		return fmt.Errorf("client: %s: %w", opName("flush", p.l.name), ErrClosed)
	}
	if err := p.win.waitReleased(ctx, p.win.issued(), c.done); err != nil {
		return fmt.Errorf("client: %s: %w", opName("flush", p.l.name), err)
	}
	return nil
}

// failedFuture returns a completed future that failed with err.
func failedFuture(err error) *AppendFuture {
	f := &AppendFuture{done: make(chan struct{}), err: err, state: futureDone}
	close(f.done)
	return f
}

// errNoRecords is the error of an append of nothing.
var errNoRecords = &transport.Error{Code: transport.CodeBadRequest, Message: "no records"}
