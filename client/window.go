package client

import (
	"context"
	"sync"
)

// seqWindow hands out the sequence numbers of appends, from 1, so that
// every number in flight lies within limit of the oldest one still in
// flight. A counting semaphore would not do: one append stuck retrying
// while thousands of others complete would fall out of the server's
// duplicate-suppression window (SeqWindow), and its retry could be stored
// twice. The window also bounds the appends in flight to limit.
type seqWindow struct {
	limit uint64 // immutable

	mu    sync.Mutex    // guards the fields below
	base  uint64        // oldest sequence number not yet released
	next  uint64        // next sequence number to hand out
	done  []bool        // done[s%limit]: s in [base, next) was released
	moved chan struct{} // closed, and replaced, when base advances
}

func newSeqWindow(limit int) *seqWindow {
	return &seqWindow{
		limit: uint64(limit),
		base:  1,
		next:  1,
		done:  make([]bool, limit),
		moved: make(chan struct{}),
	}
}

// acquire returns the next sequence number once it is within the window.
// It returns ctx's error if ctx ends first and ErrClosed if closed is
// closed first.
func (w *seqWindow) acquire(ctx context.Context, closed <-chan struct{}) (uint64, error) {
	for {
		w.mu.Lock()
		if w.next-w.base < w.limit {
			s := w.next
			w.next++
			w.mu.Unlock()
			return s, nil
		}
		moved := w.moved
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

// oldest returns the oldest sequence number not yet released (the next
// one to hand out when none is in flight): no number below it is sent
// again.
func (w *seqWindow) oldest() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.base
}

// release ends sequence number s, which acquire returned, whatever became
// of its append.
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
	close(w.moved)
	w.moved = make(chan struct{})
}
