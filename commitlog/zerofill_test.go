package commitlog

import (
	"bytes"
	"testing"
	"time"

	"github.com/raftlog/raftlog/internal/testwait"
)

// slowZeroFill opens a log of 8 MiB segments and appends until the next
// segment is being prepared, zero-filled at the pace of a log that took
// half an hour to fill the second quarter of a segment: its chunks half an
// hour apart. It returns the log and the records appended.
func slowZeroFill(t *testing.T) (*Log, [][]byte, []int64) {
	t.Helper()
	const segSize = 8 << 20
	l, err := Open(t.TempDir(), &Options{SegmentSize: segSize, Flush: AsyncFlushUnsafe})
	if err != nil {
		t.Fatal(err)
	}
	var payloads [][]byte
	var pos []int64
	aged := false
	for l.End() < segSize/2+(64<<10) {
		if !aged && l.End() >= segSize/4+(64<<10) {
			l.mu.Lock()
			if l.quarterAt.IsZero() {
				t.Fatal("a quarter full, the active segment has no quarterAt")
			}
			l.quarterAt = l.quarterAt.Add(-30 * time.Minute)
			l.mu.Unlock()
			aged = true
		}
		p := bytes.Repeat([]byte{byte(len(payloads))}, 4000)
		at, err := l.Append(p)
		if err != nil {
			t.Fatal(err)
		}
		payloads, pos = append(payloads, p), append(pos, at)
	}
	l.mu.Lock()
	p := l.pending
	l.mu.Unlock()
	if p == nil {
		t.Fatal("the next segment is not being prepared once the active one is half full")
	}
	select {
	case <-p.done:
		t.Fatal("the next segment was prepared at once, not zero-filled at the pace asked for")
	default:
	}
	return l, payloads, pos
}

// TestZeroFillYieldsToAppends checks that an append that needs the next
// segment while it is still being zero-filled, slowly so as not to hold
// back the appends' syncs, stops the zero-filling instead of waiting for
// it (half an hour here), and that records written into the partly
// zero-filled segment read back.
func TestZeroFillYieldsToAppends(t *testing.T) {
	l, payloads, pos := slowZeroFill(t)
	defer func() {
		if !t.Failed() { // a Close would wait for the zero-filling
			l.Close()
		}
	}()
	testwait.Within(t, "appends into the segment being zero-filled", 20*time.Second, func() {
		first := l.Segments()[0]
		for l.End() < first.Base+first.Size+(1<<20) {
			p := bytes.Repeat([]byte{byte(len(payloads))}, 4000)
			at, err := l.Append(p)
			if err != nil {
				t.Error(err)
				return
			}
			payloads, pos = append(payloads, p), append(pos, at)
		}
	})
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := len(l.Segments()); n != 2 {
		t.Fatalf("%d segments, want 2", n)
	}
	for i, at := range pos {
		r, err := l.Read(at)
		if err != nil {
			t.Fatalf("record %d at %d: %v", i, at, err)
		}
		if !bytes.Equal(r.Payload, payloads[i]) {
			t.Fatalf("record %d at %d: payload differs", i, at)
		}
	}
}

// TestCloseStopsZeroFill checks that Close does not wait for a segment
// being zero-filled slowly.
func TestCloseStopsZeroFill(t *testing.T) {
	l, _, _ := slowZeroFill(t)
	testwait.Within(t, "Close", 20*time.Second, func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
}

// TestNoZeroFillAfterAPause: zero-filling is for a log that appends
// slowly, judged by the pace of the active segment's second quarter. A
// segment that sat idle for an hour before a burst filled it (a fresh
// node before its first clients, a log after a quiet night) is not slow:
// the next segment is only reserved, at once, rather than zero-filled
// during the burst, spread over half an hour.
func TestNoZeroFillAfterAPause(t *testing.T) {
	const segSize = 8 << 20
	l, err := Open(t.TempDir(), &Options{SegmentSize: segSize, Flush: AsyncFlushUnsafe})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.mu.Lock()
	l.activeSince = time.Now().Add(-time.Hour)
	l.mu.Unlock()
	p := bytes.Repeat([]byte{7}, 4000)
	for l.End() < segSize/2+(64<<10) {
		if _, err := l.Append(p); err != nil {
			t.Fatal(err)
		}
	}
	l.mu.Lock()
	pending := l.pending
	l.mu.Unlock()
	if pending == nil {
		t.Fatal("the next segment is not being prepared once the active one is half full")
	}
	testwait.Within(t, "preparing the next segment after a burst that followed an idle hour", 20*time.Second, func() {
		<-pending.done
	})
	if pending.err != nil {
		t.Fatal(pending.err)
	}
}
