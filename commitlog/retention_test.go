package commitlog

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for store timestamps and retention.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestRetentionBySize(t *testing.T) {
	l := openTest(t, &Options{SegmentSize: 4096, RetentionBytes: 4 * 4096, CheckpointInterval: time.Hour})
	var last int64
	for i := 0; i < 40; i++ {
		p, err := l.Append(payloadFor(i, 1000))
		if err != nil {
			t.Fatal(err)
		}
		last = p
	}
	before := len(l.Segments())
	l.applyRetention()
	segs := l.Segments()
	if before <= 4 || len(segs) > 4 {
		t.Fatalf("%d segments before retention, %d after; want at most 4 after", before, len(segs))
	}
	if segs[len(segs)-1].Base > last {
		t.Fatal("retention removed the active segment")
	}
	if _, err := l.Read(0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read of a removed record: %v", err)
	}
	if r, err := l.Read(last); err != nil || r.Position != last {
		t.Fatalf("newest record after retention: %v", err)
	}
}

func TestRetentionByAge(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	l := openTest(t, &Options{SegmentSize: 4096, RetentionAge: time.Hour, CheckpointInterval: time.Hour, Now: clock.Now})
	// Ten old segments, then one recent.
	var old []int64
	for i := 0; i < 40; i++ {
		p, err := l.Append(payloadFor(i, 1000))
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, p)
	}
	clock.advance(2 * time.Hour)
	recent, err := l.Append(payloadFor(99, 3000))
	if err != nil {
		t.Fatal(err)
	}
	l.applyRetention()
	if first := l.First(); first > recent || first <= old[len(old)-5] {
		t.Fatalf("first %d after age retention; old records end near %d, the recent one is at %d", first, old[len(old)-1], recent)
	}
	if _, err := l.Read(recent); err != nil {
		t.Fatalf("recent record: %v", err)
	}
	// Nothing is younger than the cutoff any more except the recent
	// segment: a second pass removes nothing new.
	n := len(l.Segments())
	l.applyRetention()
	if len(l.Segments()) != n {
		t.Fatal("a second pass removed segments holding recent records")
	}
}
