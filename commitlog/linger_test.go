package commitlog

import (
	"math"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// TestLingerBacksOff: waits that run to their bound with no appender
// joining make the flusher skip the next rounds, twice as many after each,
// up to maxLingerBackoff; waits that gain an appender halve the skip.
func TestLingerBacksOff(t *testing.T) {
	g := newLinger()
	none := func() int64 { return 1 }
	var waited []int
	for round := range 300 {
		before := g.waits
		g.wait(3, none, time.Millisecond, nil)
		if g.waits != before {
			waited = append(waited, round)
		}
	}
	// Skips of 1, 2, 4, ..., 64, then 64 again.
	want := []int{0, 2, 5, 10, 19, 36, 69, 134, 199, 264}
	if !slices.Equal(waited, want) {
		t.Fatalf("rounds that waited: %v, want %v", waited, want)
	}
	if g.idle != uint64(len(want)) || g.backoff != maxLingerBackoff {
		t.Fatalf("idle waits %d, backoff %d; want %d and %d", g.idle, g.backoff, len(want), maxLingerBackoff)
	}

	// Appenders that join during the wait (after its bound here, before
	// the flusher looked again) halve the backoff at each wait.
	var n int64
	growing := func() int64 { n++; return n }
	g.skip = 0
	for _, backoff := range []int{32, 16, 8, 4, 2, 1, 0, 0} {
		n = 0
		g.wait(3, growing, time.Millisecond, nil)
		if g.backoff != backoff || g.skip != 0 {
			t.Fatalf("after a wait that gained: backoff %d, skip %d; want %d and 0", g.backoff, g.skip, backoff)
		}
	}
}

// TestLingerWokenByAppender: the appender whose registration brings the
// waiters to the number waited for wakes the flusher at once; one that
// does not, does not.
func TestLingerWokenByAppender(t *testing.T) {
	g := newLinger()
	g.want.Store(3)
	g.registered(2)
	if len(g.joined) != 0 {
		t.Fatal("the second of three waiters woke the flusher")
	}
	g.registered(3)
	if len(g.joined) != 1 {
		t.Fatal("the third of three waiters did not wake the flusher")
	}
	g.want.Store(0)
	g.registered(4)
	<-g.joined
	if len(g.joined) != 0 {
		t.Fatal("a waiter woke a flusher that was not waiting")
	}

	// A real wait, with a bound far longer than the test, ended by the
	// appender that registers third, as WaitDurable registers: count
	// first, then the wake-up. A wake-up left over from before is not
	// taken for it.
	g.joined <- struct{}{}
	var n atomic.Int64
	n.Store(1)
	go func() {
		for g.want.Load() != 3 {
			runtime.Gosched()
		}
		g.registered(n.Add(1))
		g.registered(n.Add(1))
	}()
	g.wait(3, n.Load, time.Hour, nil)
	if g.idle != 0 || g.backoff != 0 {
		t.Fatalf("a wait ended by its third appender counted as idle (idle %d, backoff %d)", g.idle, g.backoff)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("the wait ended with %d appenders registered, want 3: the wake-up left over ended it", got)
	}
}

// TestLingerClosing: Close ends a wait.
func TestLingerClosing(t *testing.T) {
	g := newLinger()
	closing := make(chan struct{})
	close(closing)
	g.wait(3, func() int64 { return 1 }, time.Hour, closing)
	if g.waits != 1 {
		t.Fatalf("waits %d, want 1", g.waits)
	}
}

// TestLingerLoneAppender: one appender appending back to back often
// registers again before the flusher has counted the round it released
// it in, so the flusher expects two and waits for a second that never
// comes. Those waits gain nothing, and the backoff keeps them to a few.
func TestLingerLoneAppender(t *testing.T) {
	l, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const appends = 200
	for range appends {
		if _, err := l.Append([]byte("record")); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	// The rounds of TestLingerBacksOff: 9 waits in the first 200 at most.
	if g := l.linger; g.waits > 9 || g.idle != g.waits {
		t.Fatalf("the flusher waited %d times (%d of them for no one) in %d appends by a lone appender; want at most 9, all for no one", g.waits, g.idle, appends)
	}
}

// TestGroupCommitWait: an appender the flusher expects that comes back
// later than a quarter of the last sync, as a raft group does after a
// network round trip, misses the round with the default GroupCommitWait
// and joins it with a longer one. The file system makes every sync take
// slowSync; one appender appends back to back, the other returns one
// slowSync and a half after each of its appends completes, which is after
// the next sync (of the first appender alone) has started with the
// default and well within the bound with a wait of 8 syncs (capped at
// maxGroupCommitLinger).
func TestGroupCommitWait(t *testing.T) {
	const slowSync, rounds = 20 * time.Millisecond, 8
	for _, tc := range []struct {
		wait   float64
		shared bool // every round after the first syncs both appenders
	}{{0, false}, {8, true}} {
		fs := faultfs.New(1)
		m := newFlushTestMetrics()
		l := flushTestOpen(t, fs, Options{SegmentSize: 1 << 20, GroupCommitWait: tc.wait, Metrics: m})
		fs.OnSync(func() { time.Sleep(slowSync) })
		syncs0 := m.counter(MetricSyncs)
		done := make(chan struct{})
		errs := make(chan error, 2)
		go func() { // the appender that comes back late
			defer close(done)
			for range rounds {
				if _, err := l.Append([]byte("late")); err != nil {
					errs <- err
					return
				}
				time.Sleep(slowSync * 3 / 2)
			}
		}()
		for eager := true; eager; {
			select {
			case <-done:
				eager = false
			default:
				if _, err := l.Append([]byte("eager")); err != nil {
					t.Fatal(err)
				}
			}
		}
		fs.OnSync(nil)
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		// Every sync completes the eager appender; with the longer wait
		// each one after the first rounds also completes the late one, so
		// the late appender's rounds take one sync each (9 or 10 syncs
		// in 8 runs under -race). With the default, the eager
		// appender's sync goes alone while the late one is away, at
		// least once per late append after the first (20 to 24 syncs).
		syncs := m.counter(MetricSyncs) - syncs0
		if tc.shared && syncs > rounds+4 {
			t.Errorf("GroupCommitWait %v: %d syncs for %d rounds of the late appender, want at most %d: it did not join the syncs it was waited for", tc.wait, syncs, rounds, rounds+4)
		}
		if !tc.shared && syncs < 2*rounds-2 {
			t.Errorf("default GroupCommitWait: %d syncs for %d rounds of the late appender, want at least %d: the flusher waited longer than a quarter of a sync", syncs, rounds, 2*rounds-2)
		}
		t.Logf("GroupCommitWait %v: %d syncs, %d records", tc.wait, syncs, m.counter(MetricAppends))
	}
}

// TestGroupCommitWaitOption: Open refuses a wait that is negative, not a
// number, or beyond the bound.
func TestGroupCommitWaitOption(t *testing.T) {
	for _, w := range []float64{-1, math.NaN(), maxGroupCommitWait + 1} {
		if l, err := Open(t.TempDir(), &Options{GroupCommitWait: w}); err == nil {
			l.Close()
			t.Errorf("Open with GroupCommitWait %v: no error", w)
		} else if !strings.Contains(err.Error(), "group commit wait") {
			t.Errorf("Open with GroupCommitWait %v: %v, want an error naming the group commit wait", w, err)
		}
	}
}

// TestGroupCommitWaitCapped: the flusher's wait is GroupCommitWait times
// the last sync, and never more than maxGroupCommitLinger, however long
// that sync took: with a wait of 4 syncs, a sync the disk held for 2 s
// would otherwise hold the next round for 8 s, past SyncFlushTimeout.
func TestGroupCommitWaitCapped(t *testing.T) {
	for _, tc := range []struct {
		wait      float64
		last, max time.Duration
	}{
		{0, 2 * time.Millisecond, 500 * time.Microsecond},
		{4, 2 * time.Millisecond, 8 * time.Millisecond},
		{4, 20 * time.Millisecond, 80 * time.Millisecond},
		{4, 50 * time.Millisecond, 100 * time.Millisecond},
		{4, 2 * time.Second, 100 * time.Millisecond},
	} {
		l := flushTestOpen(t, faultfs.New(1), Options{SegmentSize: 1 << 20, GroupCommitWait: tc.wait})
		l.lastSync = tc.last
		if got := l.lingerBound(); got != tc.max {
			t.Errorf("GroupCommitWait %v after a sync of %v: the flusher waits up to %v, want %v", tc.wait, tc.last, got, tc.max)
		}
		l.Close()
	}
}
