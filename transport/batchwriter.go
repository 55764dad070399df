package transport

import (
	"net"
	"runtime"
	"sync"
	"time"
)

// frameWriter writes frames to a connection, coalescing the frames that
// goroutines hand it at about the same time into one write call, so that a
// burst of replies (a batch of appends committing together) costs one
// system call instead of one each.
//
// Frames are appended to a buffer; one goroutine at a time, the writer,
// takes the whole buffer and writes it. A caller of write waits until its
// frame is written and becomes the writer itself if none is at work. A
// caller of queue does not wait: if no writer is at work it starts a
// flusher goroutine, which writes until the buffer is empty and exits.
//
// Coalescing needs the frames to be there when the writer takes the
// buffer. The replies of a batch come from goroutines woken together,
// which run one after another; a writer that wrote at once would find
// only the first reply. So a writer about to write a small buffer first
// yields the processor once (runtime.Gosched): goroutines that are ready
// to run, the rest of the batch, run first and add their frames. When
// nothing else is ready the yield returns at once.
type frameWriter struct {
	nc      net.Conn      // immutable
	timeout time.Duration // immutable: bounds one write call
	// limit, if positive, bounds the bytes waiting in buf: queue waits
	// while buf holds this many. Set before first use, then immutable.
	limit int
	// onFail, if set, is called once, by the writer, with the write error
	// that failed the connection. Set before first use, then immutable.
	onFail func(error)

	mu      sync.Mutex
	cond    sync.Cond // broadcast when frames are written, when buf is taken, and on failure
	buf     []byte    // frames waiting to be written
	spare   []byte    // the buffer last written, reused; owned by the writer
	queued  uint64    // frames appended to buf so far
	written uint64    // frames written so far
	writing bool      // a writer (a write caller or the flusher) is at work
	err     error     // the first write error; later writes return it

	flushers sync.WaitGroup // the flusher goroutine, while one runs

	// onQueue, set by tests only, is called with mu held after a frame is
	// queued, with the count queued so far.
	onQueue func(queued uint64)
	// onWait, set by tests only, is called with mu held when queue starts
	// to wait for room.
	onWait func()
}

func newFrameWriter(nc net.Conn, timeout time.Duration) *frameWriter {
	w := &frameWriter{nc: nc, timeout: timeout}
	w.cond.L = &w.mu
	return w
}

const (
	// maxSpare bounds the buffer kept for reuse between writes.
	maxSpare = 4 << 20
	// yieldBelow is the buffer size under which a writer yields once
	// before it writes, for more frames to join the write.
	yieldBelow = 64 << 10
)

// write writes f and returns once it is written. An error means the
// connection is unusable.
func (w *frameWriter) write(f Frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if err := w.appendLocked(f); err != nil {
		return err
	}
	mine := w.queued
	for w.writing && w.written < mine && w.err == nil {
		w.cond.Wait()
	}
	if w.err != nil {
		return w.err
	}
	if w.written >= mine {
		return nil
	}
	// Become the writer until our frame is out; hand what others queued
	// meanwhile to a flusher, since callers of queue do not wait for it.
	w.writing = true
	w.flushLocked(mine)
	if len(w.buf) > 0 && w.err == nil {
		w.startFlusherLocked()
	} else {
		w.writing = false
	}
	w.cond.Broadcast()
	return w.err
}

// releaser is told when its frame enters the buffer.
type releaser interface {
	// release is called with the writer's lock held.
	release()
}

// queue queues f to be written and returns without waiting for the write,
// except while limit bytes already wait, when it waits for room first. r,
// if not nil, is released once: just before f enters the buffer, so before
// it can reach the peer, or when queue fails. An error means the
// connection is unusable (f is not written).
func (w *frameWriter) queue(f Frame, r releaser) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.limit > 0 && len(w.buf) >= w.limit && w.err == nil && w.onWait != nil {
		w.onWait()
	}
	for w.limit > 0 && len(w.buf) >= w.limit && w.err == nil {
		w.cond.Wait()
	}
	if r != nil {
		r.release()
	}
	if w.err != nil {
		return w.err
	}
	if err := w.appendLocked(f); err != nil {
		return err
	}
	if !w.writing {
		w.writing = true
		w.startFlusherLocked()
	}
	return nil
}

// wait waits for a flusher started by queue to exit; it exits once the
// buffer is empty or the connection failed.
func (w *frameWriter) wait() { w.flushers.Wait() }

// appendLocked appends f to buf.
func (w *frameWriter) appendLocked(f Frame) error {
	var err error
	if w.buf, err = AppendFrame(w.buf, f); err != nil {
		return err
	}
	w.queued++
	if w.onQueue != nil {
		w.onQueue(w.queued)
	}
	return nil
}

// startFlusherLocked starts a goroutine that writes until the buffer is
// empty. The caller has set writing.
func (w *frameWriter) startFlusherLocked() {
	w.flushers.Add(1)
	go func() {
		defer w.flushers.Done()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.flushLocked(0)
		w.writing = false
		w.cond.Broadcast()
	}()
}

// flushLocked writes buf until frame upTo is written (every frame for 0),
// or a write fails. The caller is the writer and holds mu, which is
// released during each write.
func (w *frameWriter) flushLocked(upTo uint64) {
	yielded := false
	for len(w.buf) > 0 && w.err == nil && (upTo == 0 || w.written < upTo) {
		if !yielded && len(w.buf) < yieldBelow {
			yielded = true
			w.mu.Unlock()
			runtime.Gosched()
			w.mu.Lock()
			continue
		}
		yielded = false
		b, n := w.buf, w.queued
		w.buf, w.spare = w.spare[:0], nil
		w.cond.Broadcast() // room for queue
		w.mu.Unlock()
		w.nc.SetWriteDeadline(time.Now().Add(w.timeout))
		_, err := w.nc.Write(b)
		w.mu.Lock()
		if cap(b) <= maxSpare {
			w.spare = b[:0]
		}
		if err != nil {
			w.err = err
			if w.onFail != nil {
				w.onFail(err)
			}
			break
		}
		w.written = n
		w.cond.Broadcast()
	}
}
