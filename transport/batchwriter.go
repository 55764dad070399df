package transport

import (
	"net"
	"sync"
	"time"
)

// frameWriter writes frames to a connection, coalescing the frames that
// goroutines write at the same time into one write call: while one
// goroutine writes, others append their frames to a buffer and wait; the
// writer then writes the whole buffer at once. Each write returns once its
// frame was written, or with the error that failed the connection, as a
// write under a mutex would; but a burst of replies (a batch of appends
// committing together) costs one system call instead of one each.
type frameWriter struct {
	nc      net.Conn
	timeout time.Duration // bounds one write call

	mu      sync.Mutex
	cond    sync.Cond
	buf     []byte // frames waiting to be written
	spare   []byte // the buffer last written, reused
	queued  uint64 // frames appended to buf so far
	written uint64 // frames written so far
	writing bool   // a goroutine is in nc.Write
	err     error  // the first write error; later writes return it

	// onQueue, set by tests only, is called with mu held after a frame is
	// queued, with the count queued so far.
	onQueue func(queued uint64)
}

func newFrameWriter(nc net.Conn, timeout time.Duration) *frameWriter {
	w := &frameWriter{nc: nc, timeout: timeout}
	w.cond.L = &w.mu
	return w
}

// maxSpare bounds the buffer kept for reuse between writes.
const maxSpare = 4 << 20

// write writes f and returns once it is written. An error means the
// connection is unusable.
func (w *frameWriter) write(f Frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	var err error
	if w.buf, err = AppendFrame(w.buf, f); err != nil {
		return err
	}
	w.queued++
	mine := w.queued
	if w.onQueue != nil {
		w.onQueue(mine)
	}
	for w.writing && w.written < mine && w.err == nil {
		w.cond.Wait()
	}
	if w.err != nil {
		return w.err
	}
	if w.written >= mine {
		return nil
	}
	// Become the writer until our frame is out.
	w.writing = true
	for w.written < mine && w.err == nil {
		b, upTo := w.buf, w.queued
		w.buf = w.spare[:0]
		w.mu.Unlock()
		w.nc.SetWriteDeadline(time.Now().Add(w.timeout))
		_, err := w.nc.Write(b)
		w.mu.Lock()
		if err != nil {
			w.err = err
		} else {
			w.written = upTo
		}
		if cap(b) <= maxSpare {
			w.spare = b[:0]
		}
	}
	w.writing = false
	w.cond.Broadcast()
	return w.err
}
