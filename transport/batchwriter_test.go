package transport

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// gateConn is a net.Conn whose first Write waits for a signal, so that
// other writers pile up behind it; it records every Write.
type gateConn struct {
	net.Conn
	gate    chan struct{}
	entered chan struct{} // closed when the first Write starts
	mu      sync.Mutex
	writes  [][]byte
	fail    error
}

func (c *gateConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	first := len(c.writes) == 0
	c.writes = append(c.writes, append([]byte(nil), p...))
	fail := c.fail
	c.mu.Unlock()
	if first {
		if c.entered != nil {
			close(c.entered)
		}
		<-c.gate
	}
	if fail != nil {
		return 0, fail
	}
	return len(p), nil
}

func (c *gateConn) SetWriteDeadline(time.Time) error { return nil }

// Frames written while another write is in progress go out together in
// one Write, in order, each intact; every writer returns after its frame
// is written.
func TestFrameWriterCoalesces(t *testing.T) {
	c := &gateConn{gate: make(chan struct{}), entered: make(chan struct{})}
	w := newFrameWriter(c, time.Second)
	all := make(chan struct{})
	w.onQueue = func(n uint64) {
		if n == 51 {
			close(all)
		}
	}
	first := make(chan error)
	go func() { first <- w.write(Frame{Type: FrameResponse, Op: OpStatus, ID: 1, Body: []byte{0x80}}) }()
	<-c.entered // the first write is inside Write
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- w.write(Frame{Type: FrameResponse, Op: OpStatus, ID: uint64(2 + i), Body: []byte{0x80}})
		}()
	}
	<-all // every writer queued behind the first
	close(c.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(c.writes) != 2 {
		t.Fatalf("%d Write calls for 51 frames queued behind one, want 2", len(c.writes))
	}
	r := bufio.NewReader(bytes.NewReader(bytes.Join(c.writes, nil)))
	seen := map[uint64]bool{}
	for range 51 {
		f, err := ReadFrame(r, DefaultMaxFrameSize)
		if err != nil {
			t.Fatal(err)
		}
		seen[f.ID] = true
	}
	if len(seen) != 51 {
		t.Fatalf("%d distinct frames", len(seen))
	}
}

// A failed Write fails its writer and every one waiting, and every later
// write.
func TestFrameWriterFailure(t *testing.T) {
	boom := errors.New("boom")
	c := &gateConn{gate: make(chan struct{}), fail: boom}
	close(c.gate)
	w := newFrameWriter(c, time.Second)
	if err := w.write(Frame{Type: FrameResponse, Op: OpStatus, ID: 1}); !errors.Is(err, boom) {
		t.Fatalf("write: %v", err)
	}
	if err := w.write(Frame{Type: FrameResponse, Op: OpStatus, ID: 2}); !errors.Is(err, boom) {
		t.Fatalf("later write: %v", err)
	}
}
