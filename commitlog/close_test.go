package commitlog

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/raftlog/raftlog/internal/testwait"
)

// closedCallDeadline bounds each call made after Close: a call that spins
// or blocks fails the test instead of hanging it.
const closedCallDeadline = 10 * time.Second

// callBounded runs f and fails the test if it does not return within
// closedCallDeadline, or panics.
func callBounded(t *testing.T, name string, f func()) {
	t.Helper()
	testwait.Within(t, name+" after Close", closedCallDeadline, f)
}

// TestCallsAfterClose calls every exported method of Log and Iterator
// after Close: those that return an error return one matching ErrClosed,
// the others their documented values, and none spins or panics.
func TestCallsAfterClose(t *testing.T) {
	for _, wp := range []WritePath{WritePwrite, WriteMmap} {
		t.Run(fmt.Sprint("writepath=", wp), func(t *testing.T) { testCallsAfterClose(t, wp) })
	}
}

func testCallsAfterClose(t *testing.T, wp WritePath) {
	dir := t.TempDir()
	l, err := Open(dir, &Options{SegmentSize: 8192, WritePath: wp})
	if err != nil {
		t.Fatal(err)
	}
	var pos []int64
	for i := range 40 { // several segments
		p, err := l.Append(payloadFor(i, 500))
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	held := l.NewIterator(l.First()) // holds a segment across Close
	if _, err := held.Next(); err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	first, end, durable, info := l.First(), l.End(), l.Durable(), l.Recovery()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	errCalls := []struct {
		name string
		call func() error
	}{
		{"Close", l.Close},
		{"Append", func() error { _, err := l.Append([]byte("x")); return err }},
		{"AppendBatch", func() error { _, err := l.AppendBatch([][]byte{[]byte("x")}); return err }},
		{"Write", func() error { _, _, err := l.Write([][]byte{[]byte("x")}); return err }},
		{"WaitDurable(written)", func() error { return l.WaitDurable(end) }},
		{"WaitDurable(0)", func() error { return l.WaitDurable(0) }},
		{"Sync", l.Sync},
		{"Checkpoint", l.Checkpoint},
		{"Read(first)", func() error { _, err := l.Read(pos[0]); return err }},
		{"Read(last)", func() error { _, err := l.Read(pos[len(pos)-1]); return err }},
		{"Read(end)", func() error { _, err := l.Read(end); return err }},
		{"Truncate", func() error { return l.Truncate(pos[len(pos)-1]) }},
		{"DeleteBefore", func() error { _, err := l.DeleteBefore(end); return err }},
		{"Verify", l.Verify},
		{"Iterator.Next (new)", func() error { _, err := l.NewIterator(first).Next(); return err }},
		{"Iterator.Next (held)", func() error { _, err := held.Next(); return err }},
	}
	for _, c := range errCalls {
		var err error
		callBounded(t, c.name, func() { err = c.call() })
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", c.name, err)
		}
	}

	// Methods without an error return their documented values.
	callBounded(t, "the methods without an error", func() {
		if got := l.Segments(); got != nil {
			t.Errorf("Segments after Close = %v, want nil", got)
		}
		if got := l.First(); got != first {
			t.Errorf("First after Close = %d, want %d as at Close", got, first)
		}
		if got := l.End(); got != end {
			t.Errorf("End after Close = %d, want %d as at Close", got, end)
		}
		if got := l.Durable(); got < durable || got != end {
			t.Errorf("Durable after Close = %d, want %d (everything written)", got, end)
		}
		if got := l.Err(); got != nil {
			t.Errorf("Err after a clean Close = %v, want nil", got)
		}
		if got := l.Dir(); got != dir {
			t.Errorf("Dir after Close = %q", got)
		}
		if got := l.Recovery(); !reflect.DeepEqual(got, info) {
			t.Errorf("Recovery after Close = %+v, want %+v", got, info)
		}
		_ = l.Meta()
		it := l.NewIterator(pos[3])
		if got := it.Position(); got != pos[3] {
			t.Errorf("Iterator.Position = %d, want %d", got, pos[3])
		}
		it.Close()
		held.Close()
		held.Close()
	})

	// Nothing was written by the calls: the log reopens as it was closed.
	l, err = Open(dir, &Options{SegmentSize: 8192, WritePath: wp})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var got []int64
	for _, r := range readAll(t, l, l.First()) {
		got = append(got, r.Position)
	}
	if !slices.Equal(got, pos) {
		t.Fatalf("reopened with records at %v, want %v", got, pos)
	}
}

// TestReadsRacingClose reads while Close runs: every reader ends with
// ErrClosed, none spins on a released segment or faults on an unmapped one.
func TestReadsRacingClose(t *testing.T) {
	for round := range 20 {
		l, err := Open(t.TempDir(), &Options{SegmentSize: 8192})
		if err != nil {
			t.Fatal(err)
		}
		var pos []int64
		for i := range 40 {
			p, err := l.Append(payloadFor(i, 500))
			if err != nil {
				t.Fatal(err)
			}
			pos = append(pos, p)
		}
		const readers = 4
		errs := make(chan error, readers)
		for r := range readers {
			go func() {
				for i := 0; ; i++ {
					var err error
					if r%2 == 0 {
						_, err = l.Read(pos[(i*7+r)%len(pos)])
					} else {
						it := l.NewIterator(l.First())
						for err == nil {
							_, err = it.Next()
						}
						it.Close()
						if errors.Is(err, io.EOF) {
							err = nil
						}
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		for range readers {
			select {
			case err := <-errs:
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("round %d: a read racing Close returned %v, want ErrClosed", round, err)
				}
			case <-time.After(closedCallDeadline):
				t.Fatalf("round %d: a read racing Close did not return within %v", round, closedCallDeadline)
			}
		}
	}
}
