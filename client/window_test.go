package client

import (
	"context"
	"testing"
)

func TestSeqWindow(t *testing.T) {
	w := newSeqWindow(3)
	never := make(chan struct{})
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	take := func(want uint64) {
		t.Helper()
		if s, err := w.acquire(canceled, never); err != nil || s != want {
			t.Fatalf("acquire = %d, %v; want %d", s, err, want)
		}
	}
	full := func() {
		t.Helper()
		if s, err := w.acquire(canceled, never); err == nil {
			t.Fatalf("acquire = %d beyond the window", s)
		}
	}
	take(1)
	take(2)
	take(3)
	full()
	w.release(2) // 1 is still in flight: 4 would be 3 past it
	full()
	w.release(1)
	take(4)
	take(5)
	full()

	got := make(chan uint64)
	go func() {
		s, err := w.acquire(context.Background(), never)
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	w.release(3)
	if s := <-got; s != 6 {
		t.Errorf("a waiter got %d, want 6", s)
	}

	closed := make(chan struct{})
	close(closed)
	if _, err := w.acquire(context.Background(), closed); err != ErrClosed {
		t.Errorf("acquire on a closed client: %v, want ErrClosed", err)
	}
}
