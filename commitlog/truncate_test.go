package commitlog

import (
	"errors"
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"

	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// TestTruncateRacesSyncers runs a syncer inside Truncate: the faultfs hook
// that follows every data sync calls Sync or WaitDurable from within the
// truncation's own syncs, whichever step of it they fall in. Whatever a
// syncer sees, the log must never count bytes as durable that are past its
// end: appends after the truncation must be synced before they are
// acknowledged, and the truncated records must stay gone after a power
// loss, whether a checkpoint was written after the appends or not.
func TestTruncateRacesSyncers(t *testing.T) {
	syncers := []struct {
		name string
		// call runs in the hook; oldEnd is the end before the truncation.
		call func(l *Log, oldEnd int64) error
	}{
		{"Sync", func(l *Log, _ int64) error {
			if err := l.Sync(); err != nil {
				return fmt.Errorf("Sync within a truncation: %w", err)
			}
			return nil
		}},
		// A writer that wrote up to the old end and now waits for it.
		// It is told its bytes were truncated: not nil, not ErrClosed.
		{"WaitDurable", func(l *Log, oldEnd int64) error {
			if err := l.WaitDurable(oldEnd); !errors.Is(err, ErrTruncated) {
				return fmt.Errorf("WaitDurable(%d) across a truncation: %v, want ErrTruncated", oldEnd, err)
			}
			return nil
		}},
	}
	for _, wp := range []WritePath{WritePwrite, WriteMmap} {
		for _, syncer := range syncers {
			for _, checkpoint := range []bool{false, true} {
				name := fmt.Sprintf("writepath=%d/%s/checkpoint=%v", wp, syncer.name, checkpoint)
				t.Run(name, func(t *testing.T) {
					truncateRaceCase(t, wp, syncer.call, checkpoint)
				})
			}
		}
	}
}

func truncateRaceCase(t *testing.T, wp WritePath, call func(*Log, int64) error, checkpoint bool) {
	rng := rand.New(rand.NewSource(11))
	fs := faultfs.New(11)
	opts := crashOptions(fs, 1<<16, SyncFlush, wp)
	l, err := Open(crashTestDir, &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { crashClose(l) }()
	m := &crashModel{}
	crashAppend(t, l, m, rng, true, 6, 300)
	to, oldEnd := m.recs[2].pos, l.End()

	// The hook fires after every sync of the truncation and of the syncer
	// it starts; only the first call runs the syncer.
	var fired atomic.Bool
	var callErr error
	fs.OnSync(func() {
		if fired.CompareAndSwap(false, true) {
			callErr = call(l, oldEnd)
		}
	})
	if err := l.Truncate(to); err != nil {
		t.Fatal(err)
	}
	fs.OnSync(nil)
	if !fired.Load() {
		t.Fatal("Truncate made no sync for the hook to run in")
	}
	if callErr != nil {
		t.Error(callErr)
	}
	m.truncate(to)
	if d, e := l.Durable(), l.End(); d > e {
		t.Errorf("after Truncate(%d): Durable() = %d, past End() = %d", to, d, e)
	}

	// Appends that fill the truncated range, acknowledged as durable.
	before := fs.SyncCount()
	crashAppend(t, l, m, rng, true, 2, 300)
	if l.End() > oldEnd {
		t.Fatalf("the new records end at %d, past the old end %d", l.End(), oldEnd)
	}
	if fs.SyncCount() == before {
		t.Errorf("AppendBatch after Truncate returned with no sync (durable %d, end %d)", l.Durable(), l.End())
	}
	if checkpoint {
		if err := l.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	l, _ = crashAndReopen(t, l, fs, crashDropAll, opts, "after the appends")
	m.check(t, l, true, "after a crash")
}

// TestSyncStopsAtWrote checks that a sync never counts bytes past the end
// of the written log as durable, even when it is asked to: here a tail is
// published ahead of wrote, as Write does for a moment between its two
// stores, and a sync runs in that moment.
func TestSyncStopsAtWrote(t *testing.T) {
	fs := faultfs.New(12)
	opts := crashOptions(fs, 1<<16, SyncFlush, WritePwrite)
	l, err := Open(crashTestDir, &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.AppendBatch([][]byte{[]byte("one"), []byte("two")}); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	real := l.tail.Load()
	ahead := *real
	ahead.end += 4096
	ahead.lastRecord = real.end
	l.tail.Store(&ahead)
	err = l.syncAll()
	l.tail.Store(real)
	l.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if d, e := l.Durable(), l.End(); d > e {
		t.Fatalf("Durable() = %d after a sync, past End() = %d", d, e)
	}
	if _, err := l.Append([]byte("three")); err != nil {
		t.Fatal(err)
	}
	if d, e := l.Durable(), l.End(); d != e {
		t.Fatalf("after a synchronous append: Durable() = %d, End() = %d", d, e)
	}
}
