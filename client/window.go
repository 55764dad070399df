package client

import (
	"context"
	"sync"
)

// seqWindow hands out numbers, from 1, so that every number in flight lies
// within limit of the oldest one still in flight. The Client has two: the
// sequence numbers of append requests, and the tickets of appends (see
// pipeline).
//
// For sequence numbers a counting semaphore would not do: one request
// stuck retrying while thousands of others complete would fall out of the
// server's duplicate-suppression window (SeqWindow), and its retry could
// be stored twice. The window also bounds the numbers in flight to limit.
type seqWindow struct {
	limit uint64 // immutable

	mu   sync.Mutex // guards the fields below
	base uint64     // oldest number not yet released
	next uint64     // next number to hand out
	done []bool     // done[s%limit]: s in [base, next) was released
	// moved is closed, and set to nil, when base advances; nil while
	// nobody waits for that.
	moved chan struct{}
}

func newSeqWindow(limit int) *seqWindow {
	return &seqWindow{
		limit: uint64(limit),
		base:  1,
		next:  1,
		done:  make([]bool, limit),
	}
}

// acquire returns the next number once it is within the window. It
// returns ctx's error if ctx ends first and ErrClosed if closed is closed
// first.
func (w *seqWindow) acquire(ctx context.Context, closed <-chan struct{}) (uint64, error) {
	for {
		w.mu.Lock()
		if w.next-w.base < w.limit {
			s := w.next
			w.next++
			w.mu.Unlock()
			return s, nil
		}
		moved := w.movedLocked()
		w.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-closed:
			return 0, ErrClosed
		}
	}
}

// tryAcquire returns the next number and true if it is within the window,
// false if not.
func (w *seqWindow) tryAcquire() (uint64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.next-w.base >= w.limit {
		return 0, false
	}
	s := w.next
	w.next++
	return s, true
}

// movedLocked returns the channel closed when base next advances. w.mu
// must be held.
func (w *seqWindow) movedLocked() chan struct{} {
	if w.moved == nil {
		w.moved = make(chan struct{})
	}
	return w.moved
}

// oldest returns the oldest number not yet released (the next one to hand
// out when none is in flight): no number below it is in flight.
func (w *seqWindow) oldest() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.base
}

// issued returns the next number to hand out: every number below it has
// been handed out.
func (w *seqWindow) issued() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next
}

// waitReleased waits until every number below upTo has been released. It
// returns ctx's error if ctx ends first and ErrClosed if closed is closed
// first.
func (w *seqWindow) waitReleased(ctx context.Context, upTo uint64, closed <-chan struct{}) error {
	for {
		w.mu.Lock()
		if w.base >= upTo {
			w.mu.Unlock()
			return nil
		}
		moved := w.movedLocked()
		w.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		case <-closed:
			return ErrClosed
		}
	}
}

// release ends number s, which acquire returned, whatever became of its
// request.
func (w *seqWindow) release(s uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done[s%w.limit] = true
	if s != w.base {
		return
	}
	for w.base < w.next && w.done[w.base%w.limit] {
		w.done[w.base%w.limit] = false
		w.base++
	}
	if w.moved != nil {
		close(w.moved)
		w.moved = nil
	}
}
