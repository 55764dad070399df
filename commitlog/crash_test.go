package commitlog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// Crash-recovery tests: the log runs on a faultfs.FS, which is crashed
// between calls (or, in TestCrashInsideOperations, inside them), and the log
// reopened on what the crash left must hold every acknowledged record and
// nothing that was never written. The helpers are in crash_helpers_test.go.

// crashSeeds returns how many seeds TestCrashRandomized runs: 200 by
// default (1,200 crash points), 16 with -short, or COMMITLOG_CRASH_SEEDS.
func crashSeeds(t *testing.T) int {
	if s := os.Getenv("COMMITLOG_CRASH_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("COMMITLOG_CRASH_SEEDS=%q is not a positive number", s)
		}
		return n
	}
	if testing.Short() {
		return 16
	}
	return 200
}

// crashRoundsPerSeed is the number of random crashes of each seed; one more
// follows to check that a log appended to after its last recovery survives
// a crash too.
const crashRoundsPerSeed = 5

// TestCrashRandomized runs random operations on a log (appends with and
// without waiting, syncs, truncations, prefix deletions, checkpoints, clean
// reopens and killed processes), crashes it at random points with random
// outcomes for every unsynced page, and checks after each recovery that
// every acknowledged record is there and nothing else but records written
// and not yet acknowledged. Set COMMITLOG_CRASH_SEED to run a single seed,
// and COMMITLOG_CRASH_TRACE to log its operations.
func TestCrashRandomized(t *testing.T) {
	var seeds []int64
	if s := os.Getenv("COMMITLOG_CRASH_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("COMMITLOG_CRASH_SEED=%q: %v", s, err)
		}
		seeds = append(seeds, seed)
	} else {
		for i := range crashSeeds(t) {
			seeds = append(seeds, int64(i+1))
		}
	}
	var mu sync.Mutex
	crashes := 0
	t.Run("seeds", func(t *testing.T) {
		for _, seed := range seeds {
			t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
				t.Parallel()
				n := crashRandomizedSeed(t, seed)
				mu.Lock()
				crashes += n
				mu.Unlock()
			})
		}
	})
	t.Logf("%d seeds, %d crash points", len(seeds), crashes)
}

// crashRandomizedSeed runs one seed and returns the number of crashes it
// recovered from.
func crashRandomizedSeed(t *testing.T, seed int64) int {
	rng := rand.New(rand.NewSource(seed))
	segSize := int64(4096)
	if rng.Intn(2) == 0 {
		segSize = 8192
	}
	wp := WritePath(seed % 2)
	flush := FlushMode(seed / 2 % 2)
	prealloc := Preallocation(seed / 4 % 2)
	fs := faultfs.New(seed)
	opts := crashOptions(fs, segSize, flush, wp)
	opts.Preallocate = prealloc
	setup := fmt.Sprintf("seed %d (segments %d, write path %d, flush mode %d, preallocation %d; rerun with COMMITLOG_CRASH_SEED=%d)",
		seed, segSize, wp, flush, prealloc, seed)

	l, err := Open(crashTestDir, &opts)
	if err != nil {
		t.Fatalf("%s: Open: %v", setup, err)
	}
	var killed []*Log // logs of killed processes, closed after the next crash
	defer func() {
		crashClose(l)
		for _, k := range killed {
			k.Close()
		}
	}()
	m := &crashModel{}
	var id uint64
	var step int
	where := func(op string) string { return fmt.Sprintf("%s, step %d (%s)", setup, step, op) }
	trace := func(format string, args ...any) {}
	if os.Getenv("COMMITLOG_CRASH_TRACE") != "" {
		trace = func(format string, args ...any) {
			t.Logf("step %d: %s (first %d, end %d, durable %d)", step, fmt.Sprintf(format, args...), l.First(), l.End(), l.Durable())
		}
	}

	// batch returns 1 to 8 payloads of 0 to 3000 bytes; sometimes the first
	// leaves less than a header, or just a header or a little more, before
	// the end of the current segment, for short gaps and fillers.
	batch := func() [][]byte {
		n := 1 + rng.Intn(8)
		ps := make([][]byte, n)
		for i := range ps {
			size := rng.Intn(3001)
			if rng.Intn(2) == 0 {
				size = rng.Intn(200)
			}
			if i == 0 && rng.Intn(6) == 0 {
				room := segSize - l.End()%segSize
				if s := room - HeaderSize - int64(rng.Intn(48)); s >= 0 && s <= 3000 {
					size = int(s)
				}
			}
			id++
			ps[i] = crashPayload(rng, id, size)
		}
		return ps
	}

	crashes := 0
	for round := 0; round <= crashRoundsPerSeed; round++ {
		ops := 5 + rng.Intn(30)
		if round == crashRoundsPerSeed {
			ops = 2 // after the last random crash: append, then crash once more
		}
		for range ops {
			step++
			switch r := rng.Intn(100); {
			case r < 35 || round == crashRoundsPerSeed:
				ps := batch()
				pos, err := l.AppendBatch(ps)
				if err != nil {
					t.Fatalf("%s: %v", where("AppendBatch"), err)
				}
				m.add(pos, ps)
				if flush == SyncFlush {
					m.ackAll()
				}
				trace("AppendBatch %d records at %v", len(ps), pos)
			case r < 60:
				ps := batch()
				pos, _, err := l.Write(ps)
				if err != nil {
					t.Fatalf("%s: %v", where("Write"), err)
				}
				m.add(pos, ps)
				trace("Write %d records at %v", len(ps), pos)
			case r < 70:
				if err := l.Sync(); err != nil {
					t.Fatalf("%s: %v", where("Sync"), err)
				}
				m.ackAll()
				trace("Sync")
			case r < 78:
				// Truncate to an acknowledged record, now and then to one
				// not yet acknowledged or to the end.
				n := m.acked()
				if rng.Intn(5) == 0 {
					n = len(m.recs)
				}
				to := l.End()
				if i := rng.Intn(n + 1); i < n {
					to = m.recs[i].pos
				}
				noop := to == l.End()
				if err := l.Truncate(to); err != nil {
					t.Fatalf("%s: %v", where(fmt.Sprint("Truncate(", to, ")")), err)
				}
				if to != l.End() {
					t.Fatalf("%s: End() = %d after Truncate(%d)", where("Truncate"), l.End(), to)
				}
				// A truncation makes everything before its point durable,
				// but one to the end removes nothing and does nothing.
				if !noop {
					m.truncate(to)
				}
				trace("Truncate(%d)", to)
			case r < 84:
				before := m.first + rng.Int63n(l.End()-m.first+1)
				if _, err := l.DeleteBefore(before); err != nil {
					t.Fatalf("%s: %v", where(fmt.Sprint("DeleteBefore(", before, ")")), err)
				}
				m.deleteBefore(l.First())
				trace("DeleteBefore(%d)", before)
			case r < 90:
				if err := l.Checkpoint(); err != nil {
					t.Fatalf("%s: %v", where("Checkpoint"), err)
				}
				trace("Checkpoint")
			case r < 94:
				if err := l.Close(); err != nil {
					t.Fatalf("%s: %v", where("Close"), err)
				}
				m.ackAll()
				if l, err = Open(crashTestDir, &opts); err != nil {
					t.Fatalf("%s: %v", where("reopen after Close"), err)
				}
				if l.Recovery().Crashed {
					t.Fatalf("%s: Recovery().Crashed after a clean Close: %+v", where("reopen"), l.Recovery())
				}
				trace("Close and Open: %+v", l.Recovery())
				m.check(t, l, true, "%s", where("reopen after Close"))
			case r < 97:
				// The process dies; the page cache, and so everything
				// written, survives.
				killed = append(killed, crashKill(l))
				if l, err = Open(crashTestDir, &opts); err != nil {
					t.Fatalf("%s: %v", where("reopen after a kill"), err)
				}
				if !l.Recovery().Crashed {
					t.Fatalf("%s: Recovery().Crashed is false after a kill", where("reopen"))
				}
				trace("kill and Open: %+v", l.Recovery())
				m.check(t, l, true, "%s", where("reopen after a kill"))
			default:
				if len(m.recs) > 0 {
					want := m.recs[rng.Intn(len(m.recs))]
					r, err := l.Read(want.pos)
					if err != nil || !bytes.Equal(r.Payload, want.payload) {
						t.Fatalf("%s: %d bytes, %v", where(fmt.Sprint("Read(", want.pos, ")")), len(r.Payload), err)
					}
				}
			}
		}

		step++
		mode := crashRandom
		switch rng.Intn(10) {
		case 0:
			mode = crashDropAll
		case 1:
			mode = crashKeepAll
		}
		l, fs = crashAndReopen(t, l, fs, mode, opts, where("crash "+mode.name))
		opts.FS = fs
		crashes++
		for _, k := range killed {
			k.Close() // fails on the crashed file system, changing nothing
		}
		killed = nil
		trace("%s crash: %+v", mode.name, l.Recovery())
		m.check(t, l, false, "%s", where("after crash "+mode.name))
	}
	return crashes
}

// TestCrashRecoveryTable checks recovery after crashes whose outcome is
// fixed: every unsynced byte lost, or every one kept, or no crash at all.
func TestCrashRecoveryTable(t *testing.T) {
	tests := []struct {
		name string
		// crash is nil for a clean Close.
		crash *crashMode
		// wantAll: the records written without a sync survive.
		wantAll     bool
		wantCrashed bool
	}{
		{"torn tail dropped", &crashDropAll, false, true},
		{"torn tail kept", &crashKeepAll, true, true},
		{"clean close", nil, true, false},
	}
	for _, tt := range tests {
		for _, v := range crashVariants {
			t.Run(tt.name+"/"+v.name, func(t *testing.T) {
				rng := rand.New(rand.NewSource(1))
				fs := faultfs.New(1)
				opts := crashOptions(fs, 8192, SyncFlush, v.wp)
				opts.Preallocate = v.prealloc
				l, err := Open(crashTestDir, &opts)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { crashClose(l) }()
				m := &crashModel{}
				crashAppend(t, l, m, rng, true, 5, 300)
				crashAppend(t, l, m, rng, true, 3, 200)
				syncedEnd := l.End()
				// Unsynced records, running into the next segment.
				crashAppend(t, l, m, rng, false, 6, 1500)
				writtenEnd := l.End()
				if writtenEnd <= 8192 {
					t.Fatalf("the unsynced records end at %d, inside the first segment", writtenEnd)
				}

				if tt.crash == nil {
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
					if l, err = Open(crashTestDir, &opts); err != nil {
						t.Fatal(err)
					}
				} else {
					l, fs = crashAndReopen(t, l, fs, *tt.crash, opts, tt.crash.name)
					opts.FS = fs
				}
				info := l.Recovery()
				if info.Crashed != tt.wantCrashed {
					t.Errorf("Recovery().Crashed = %v, want %v", info.Crashed, tt.wantCrashed)
				}
				wantEnd := syncedEnd
				if tt.wantAll {
					wantEnd = writtenEnd
				}
				if l.End() != wantEnd || info.End != wantEnd {
					t.Errorf("End() = %d, Recovery().End = %d, want %d (synced end %d, written end %d)", l.End(), info.End, wantEnd, syncedEnd, writtenEnd)
				}
				if tt.wantAll {
					m.ackAll()
				} else {
					m.truncate(syncedEnd)
				}
				m.check(t, l, true, "after reopen")

				// The log goes on: append, crash again, find it all.
				crashAppend(t, l, m, rng, true, 4, 700)
				l, fs = crashAndReopen(t, l, fs, crashDropAll, opts, "second crash")
				opts.FS = fs
				m.check(t, l, true, "after the second crash")
			})
		}
	}
}

// TestCrashStaleRecordsPastTruncation checks that the records removed by a
// truncation never come back, although their bytes stay in the segment and
// new, shorter records end exactly where the header of a removed record
// still sits: the epoch must reject it.
func TestCrashStaleRecordsPastTruncation(t *testing.T) {
	for _, wp := range []WritePath{WritePwrite, WriteMmap} {
		t.Run(fmt.Sprint("writepath=", wp), func(t *testing.T) {
			rng := rand.New(rand.NewSource(7))
			fs := faultfs.New(7)
			opts := crashOptions(fs, 8192, SyncFlush, wp)
			l, err := Open(crashTestDir, &opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { crashClose(l) }()
			m := &crashModel{}
			crashAppend(t, l, m, rng, true, 3, 100)
			base := len(m.recs)
			// The records to remove: 1000, 200 and 50 bytes of payload.
			for _, size := range []int{1000, 200, 50} {
				crashAppend(t, l, m, rng, true, 1, size)
			}
			trunc := m.recs[base].pos
			stale := []int64{m.recs[base+1].pos, m.recs[base+2].pos} // headers left behind
			if err := l.Checkpoint(); err != nil {
				t.Fatal(err)
			}

			rounds := []struct {
				sizes []int // payloads appended at the truncation point
				sync  bool
				// checkpoint after the appends, so that the scan starts
				// exactly at the stale header.
				checkpoint bool
				mode       crashMode
				endsAt     int64 // where the new records must end
			}{
				// 532 + 500 bytes end at the header of the 200-byte record.
				{[]int{500, 468}, true, false, crashDropAll, stale[0]},
				// 532 bytes end where the 468-byte record of the first round was.
				{[]int{500}, false, false, crashKeepAll, trunc + 532},
				// 1032 + 232 bytes end at the header of the 50-byte record.
				{[]int{1000, 200}, true, true, crashRandom, stale[1]},
				// Nothing appended: a crash right after the truncation.
				{nil, false, false, crashKeepAll, trunc},
				// 1032 bytes end at the 200-byte record's header again.
				{[]int{1000}, false, true, crashRandom, stale[0]},
			}
			for i, rd := range rounds {
				where := fmt.Sprintf("round %d (%s crash)", i, rd.mode.name)
				if l.End() != trunc {
					if err := l.Truncate(trunc); err != nil {
						t.Fatalf("%s: Truncate(%d): %v", where, trunc, err)
					}
					m.truncate(trunc)
				}
				for _, size := range rd.sizes {
					crashAppend(t, l, m, rng, false, 1, size)
				}
				if l.End() != rd.endsAt {
					t.Fatalf("%s: the new records end at %d, want %d", where, l.End(), rd.endsAt)
				}
				if rd.sync {
					if err := l.Sync(); err != nil {
						t.Fatal(err)
					}
					m.ackAll()
				}
				if rd.checkpoint {
					if err := l.Checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
				l, fs = crashAndReopen(t, l, fs, rd.mode, opts, where)
				opts.FS = fs
				m.check(t, l, rd.mode.keepsAll || rd.sync, "%s", where)
				if end := l.End(); end > rd.endsAt {
					t.Fatalf("%s: End() = %d, past the end %d of the new records", where, end, rd.endsAt)
				}
				if _, err := l.Read(rd.endsAt); !errors.Is(err, ErrNotFound) {
					t.Fatalf("%s: Read(%d) of a removed record: %v, want ErrNotFound", where, rd.endsAt, err)
				}
			}
		})
	}
}

// TestCrashStaleRecordsPastTornTail checks that records which survived a
// crash past a torn one, and so past the recovered end, never come back,
// although new records end exactly where the header of one still sits:
// recovery must begin a new epoch.
func TestCrashStaleRecordsPastTornTail(t *testing.T) {
	for _, v := range crashVariants {
		for _, checkpoint := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/checkpoint=%v", v.name, checkpoint), func(t *testing.T) {
				rng := rand.New(rand.NewSource(9))
				fs := faultfs.New(9)
				opts := crashOptions(fs, 8192, SyncFlush, v.wp)
				opts.Preallocate = v.prealloc
				l, err := Open(crashTestDir, &opts)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { crashClose(l) }()
				m := &crashModel{}
				crashAppend(t, l, m, rng, true, 3, 100)
				synced := len(m.recs)
				for _, size := range []int{300, 200, 100} {
					crashAppend(t, l, m, rng, false, 1, size)
				}
				torn, stale := m.recs[synced], m.recs[synced+2]

				// Every unsynced byte reaches the disk but for one byte of
				// the first unsynced record: the two after it are intact.
				crashSettle(l)
				nfs := fs.CrashKeepAll()
				l.Close()
				fs, opts.FS = nfs, nfs
				crashFlipByte(t, fs, crashSegmentPath(0), torn.pos+HeaderSize+10)
				if l, err = Open(crashTestDir, &opts); err != nil {
					t.Fatalf("Open after a torn write: %v", err)
				}
				if l.End() != torn.pos {
					t.Fatalf("End() = %d after a torn write, want %d where the torn record begins", l.End(), torn.pos)
				}
				m.truncate(torn.pos)
				m.check(t, l, true, "after the torn write")

				// One new record that ends where the intact stale one
				// begins.
				crashAppend(t, l, m, rng, true, 1, int(stale.pos-torn.pos-HeaderSize))
				if l.End() != stale.pos {
					t.Fatalf("the new record ends at %d, want %d", l.End(), stale.pos)
				}
				if checkpoint {
					if err := l.Checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
				for i, mode := range []crashMode{crashDropAll, crashKeepAll} {
					l, fs = crashAndReopen(t, l, fs, mode, opts, mode.name)
					opts.FS = fs
					m.check(t, l, true, "crash %d (%s)", i, mode.name)
					if l.End() != stale.pos {
						t.Fatalf("crash %d (%s): End() = %d, want %d: the stale record came back", i, mode.name, l.End(), stale.pos)
					}
				}
			})
		}
	}
}

// TestCrashKillThenPowerLoss checks that a record written before the
// process died survives it (the page cache does), and that the recovery
// makes it durable: a power loss right after Open returns loses nothing.
func TestCrashKillThenPowerLoss(t *testing.T) {
	for _, v := range crashVariants {
		for _, flush := range []FlushMode{SyncFlush, AsyncFlushUnsafe} {
			t.Run(fmt.Sprintf("%s/flush=%d", v.name, flush), func(t *testing.T) {
				rng := rand.New(rand.NewSource(10))
				fs := faultfs.New(10)
				opts := crashOptions(fs, 4096, flush, v.wp)
				opts.Preallocate = v.prealloc
				l, err := Open(crashTestDir, &opts)
				if err != nil {
					t.Fatal(err)
				}
				m := &crashModel{}
				crashAppend(t, l, m, rng, true, 4, 700)
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				m.ackAll()
				if err := l.Checkpoint(); err != nil {
					t.Fatal(err)
				}
				// Acknowledged by an asynchronous append, or only written:
				// in the page cache either way.
				crashAppend(t, l, m, rng, true, 5, 900)
				crashAppend(t, l, m, rng, false, 3, 500)

				old := crashKill(l)
				defer func() { old.Close() }()
				if l, err = Open(crashTestDir, &opts); err != nil {
					t.Fatalf("Open after a kill: %v", err)
				}
				defer func() { crashClose(l) }()
				if !l.Recovery().Crashed {
					t.Error("Recovery().Crashed is false after a kill")
				}
				m.check(t, l, true, "after the kill")
				l, fs = crashAndReopen(t, l, fs, crashDropAll, opts, "power loss after the kill")
				opts.FS = fs
				m.check(t, l, true, "after the power loss")
			})
		}
	}
}

// TestCrashCorruptDurableRecord checks that a damaged record below the
// checkpoint's watermark is reported, never dropped or returned.
func TestCrashCorruptDurableRecord(t *testing.T) {
	tests := []struct {
		name string
		last bool // damage the last record, the one the checkpoint names
		at   int  // byte of the record to flip
	}{
		{"payload of a middle record", false, HeaderSize + 17},
		{"checksum of a middle record", false, 1},
		{"position of a middle record", false, 13},
		{"payload of the last durable record", true, HeaderSize + 3},
		{"magic of the last durable record", true, 8},
	}
	for _, tt := range tests {
		for _, wp := range []WritePath{WritePwrite, WriteMmap} {
			t.Run(fmt.Sprintf("%s/writepath=%d", tt.name, wp), func(t *testing.T) {
				rng := rand.New(rand.NewSource(3))
				fs := faultfs.New(3)
				opts := crashOptions(fs, 4096, SyncFlush, wp)
				l, err := Open(crashTestDir, &opts)
				if err != nil {
					t.Fatal(err)
				}
				m := &crashModel{}
				for range 12 {
					crashAppend(t, l, m, rng, true, 1, 500)
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				bad := m.recs[9]
				if tt.last {
					bad = m.recs[len(m.recs)-1]
				}
				base := bad.pos / 4096 * 4096
				path, off := crashSegmentPath(base), bad.pos-base
				crashFlipByte(t, fs, path, off+int64(tt.at))

				l, err = Open(crashTestDir, &opts)
				if tt.last {
					if err == nil {
						l.Close()
						t.Fatal("Open succeeded with the checkpoint's last record damaged")
					}
					crashWantCorrupt(t, "Open", err, path, off)
					return
				}
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer l.Close()
				_, err = l.Read(bad.pos)
				crashWantCorrupt(t, fmt.Sprintf("Read(%d)", bad.pos), err, path, off)
				crashWantCorrupt(t, "Verify", l.Verify(), path, off)
				if _, err := crashReadAll(l); err == nil {
					t.Fatal("iterating over the damaged record succeeded")
				} else {
					crashWantCorrupt(t, "Next", err, path, off)
				}
				for i, r := range m.recs {
					if r.pos == bad.pos {
						continue
					}
					got, err := l.Read(r.pos)
					if err != nil || !bytes.Equal(got.Payload, r.payload) {
						t.Fatalf("Read of intact record %d at %d: %v", i, r.pos, err)
					}
				}
			})
		}
	}
}

// TestCrashMissingSegment checks that a hole in the segments is corruption.
func TestCrashMissingSegment(t *testing.T) {
	for _, mode := range []*crashMode{nil, &crashDropAll} {
		name := "close"
		if mode != nil {
			name = mode.name
		}
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(4))
			fs := faultfs.New(4)
			opts := crashOptions(fs, 4096, SyncFlush, WritePwrite)
			l, err := Open(crashTestDir, &opts)
			if err != nil {
				t.Fatal(err)
			}
			m := &crashModel{}
			for range 5 {
				crashAppend(t, l, m, rng, true, 1, 3000)
			}
			if mode == nil {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				crashSettle(l)
				fs = mode.crash(fs)
				l.Close()
				opts.FS = fs
			}
			if err := fs.Remove(crashSegmentPath(2 * 4096)); err != nil {
				t.Fatal(err)
			}
			if err := fs.SyncDir(crashTestDir); err != nil {
				t.Fatal(err)
			}
			l, err = Open(crashTestDir, &opts)
			if err == nil {
				l.Close()
				t.Fatal("Open succeeded with a segment missing")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestCrashRecoveryScansOnlyTheTail checks that recovery of a log of many
// segments starts at the checkpoint.
func TestCrashRecoveryScansOnlyTheTail(t *testing.T) {
	for _, mode := range []crashMode{crashRandom, crashDropAll, crashKeepAll} {
		t.Run(mode.name, func(t *testing.T) {
			const segments = 300
			rng := rand.New(rand.NewSource(5))
			fs := faultfs.New(5)
			opts := crashOptions(fs, 4096, SyncFlush, WritePwrite)
			l, err := Open(crashTestDir, &opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { crashClose(l) }()
			m := &crashModel{}
			// One record of 4000 bytes and a filler per segment.
			crashAppend(t, l, m, rng, true, segments, 4000)
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := l.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			cp := l.End()
			if cp < segments*4096-4096 {
				t.Fatalf("%d segments written end at %d", segments, cp)
			}
			crashAppend(t, l, m, rng, true, 3, 100)
			crashAppend(t, l, m, rng, false, 2, 100)

			l, fs = crashAndReopen(t, l, fs, mode, opts, mode.name)
			opts.FS = fs
			info := l.Recovery()
			if info.ScannedFrom < cp {
				t.Errorf("Recovery().ScannedFrom = %d, before the checkpoint at %d", info.ScannedFrom, cp)
			}
			if info.Records > 5 {
				t.Errorf("Recovery().Records = %d, want at most the 5 written after the checkpoint", info.Records)
			}
			m.check(t, l, mode.keepsAll, "after the crash")
		})
	}
}

// TestCrashFreshLog checks that a log that crashes before its first append
// opens empty.
func TestCrashFreshLog(t *testing.T) {
	for _, mode := range []crashMode{crashRandom, crashDropAll, crashKeepAll} {
		for _, v := range crashVariants {
			t.Run(mode.name+"/"+v.name, func(t *testing.T) {
				rng := rand.New(rand.NewSource(6))
				fs := faultfs.New(6)
				opts := crashOptions(fs, 4096, SyncFlush, v.wp)
				opts.Preallocate = v.prealloc
				l, err := Open(crashTestDir, &opts)
				if err != nil {
					t.Fatal(err)
				}
				l, fs = crashAndReopen(t, l, fs, mode, opts, mode.name)
				opts.FS = fs
				defer func() { crashClose(l) }()
				if l.First() != 0 || l.End() != 0 {
					t.Fatalf("First() = %d, End() = %d, want an empty log", l.First(), l.End())
				}
				m := &crashModel{}
				m.check(t, l, true, "after the crash")
				crashAppend(t, l, m, rng, true, 3, 2000)
				l, fs = crashAndReopen(t, l, fs, mode, opts, "second "+mode.name)
				opts.FS = fs
				m.check(t, l, true, "after the second crash")
			})
		}
	}
}

// TestCrashNewDirectoryTree opens a log for the first time in a directory
// tree that does not exist yet, acknowledges records and crashes soon
// after: the directories must survive with the records in them, so that the
// log reopens with every acknowledged record, not empty.
func TestCrashNewDirectoryTree(t *testing.T) {
	const dir = "/data/node1/store/log"
	for _, mode := range []crashMode{crashRandom, crashDropAll, crashKeepAll} {
		for _, v := range crashVariants {
			t.Run(mode.name+"/"+v.name, func(t *testing.T) {
				rng := rand.New(rand.NewSource(14))
				fs := faultfs.New(14)
				opts := crashOptions(fs, 4096, SyncFlush, v.wp)
				opts.Preallocate = v.prealloc
				l, err := Open(dir, &opts)
				if err != nil {
					t.Fatal(err)
				}
				m := &crashModel{}
				crashAppend(t, l, m, rng, true, 3, 2000)
				crashSettle(l)
				opts.FS = mode.crash(fs)
				l.Close() // fails: the file system is gone
				if l, err = Open(dir, &opts); err != nil {
					t.Fatalf("Open after a %s crash: %v", mode.name, err)
				}
				defer l.Close()
				if !l.Recovery().Crashed {
					t.Errorf("Recovery().Crashed is false after a %s crash", mode.name)
				}
				m.check(t, l, true, "after the crash")
			})
		}
	}
}

// TestCrashCheckpointMeta checks that the blob of Options.CheckpointMeta
// comes back from Meta after a clean Close and after a crash.
func TestCrashCheckpointMeta(t *testing.T) {
	for _, mode := range []crashMode{crashRandom, crashDropAll, crashKeepAll} {
		t.Run(mode.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(8))
			fs := faultfs.New(8)
			var mu sync.Mutex
			var blobs [][]byte // every blob the hook returned
			var fail bool
			hook := func() ([]byte, error) {
				mu.Lock()
				defer mu.Unlock()
				if fail {
					return nil, errors.New("no meta this time")
				}
				b := fmt.Appendf(nil, "meta %d of the layer above", len(blobs))
				blobs = append(blobs, b)
				return b, nil
			}
			last := func() []byte {
				mu.Lock()
				defer mu.Unlock()
				return blobs[len(blobs)-1]
			}
			opts := crashOptions(fs, 4096, SyncFlush, WritePwrite)
			opts.CheckpointMeta = hook
			l, err := Open(crashTestDir, &opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { crashClose(l) }()
			if l.Meta() != nil {
				t.Fatalf("Meta() of a new log = %q", l.Meta())
			}
			m := &crashModel{}
			for range 3 {
				crashAppend(t, l, m, rng, true, 2, 1000)
				if err := l.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			want := last()
			if l, err = Open(crashTestDir, &opts); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(l.Meta(), want) {
				t.Fatalf("Meta() after Close and Open = %q, want %q", l.Meta(), want)
			}

			for range 3 {
				crashAppend(t, l, m, rng, true, 2, 1000)
				if err := l.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			}
			want = last()
			// A failing hook skips the checkpoint: the meta stays.
			mu.Lock()
			fail = true
			mu.Unlock()
			if err := l.Checkpoint(); err == nil {
				t.Fatal("Checkpoint succeeded although the meta hook failed")
			}
			crashAppend(t, l, m, rng, false, 2, 1000)
			l, fs = crashAndReopen(t, l, fs, mode, opts, mode.name)
			opts.FS = fs
			got := l.Meta()
			mu.Lock()
			known := false
			for _, b := range blobs {
				known = known || bytes.Equal(b, got)
			}
			fail = false
			mu.Unlock()
			if !known {
				t.Fatalf("Meta() after a crash = %q, which no checkpoint returned", got)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Meta() after a crash = %q, want %q of the last checkpoint", got, want)
			}
			m.check(t, l, mode.keepsAll, "after the crash")
			// The recovery's own checkpoint keeps the meta for the next
			// crash.
			l, fs = crashAndReopen(t, l, fs, crashDropAll, opts, "second crash")
			opts.FS = fs
			if !bytes.Equal(l.Meta(), want) {
				t.Fatalf("Meta() after a second crash = %q, want %q", l.Meta(), want)
			}
		})
	}
}

// TestCrashInsideOperations crashes the file system from inside the log's
// own syncs: at the k-th successful data sync, whichever goroutine makes
// it, so that crashes fall between the steps of Truncate, Close, segment
// creation and Open's recovery, not only between calls. An operation that
// fails because of the crash is in doubt: its records may or may not be
// there, and a truncation may or may not have taken effect. Only the
// pwrite path runs here: a crash from another goroutine would race with
// stores through the mapping. Which goroutine syncs first is up to the
// scheduler, so a seed does not always crash at the same instant.
func TestCrashInsideOperations(t *testing.T) {
	seeds := max(crashSeeds(t)/4, 1) // 50 by default
	for seed := int64(1); seed <= int64(seeds); seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			crashInsideOperationsSeed(t, seed)
		})
	}
}

func crashInsideOperationsSeed(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	flush := FlushMode(seed % 2)
	prealloc := Preallocation(seed / 2 % 2)
	fs := faultfs.New(seed)
	opts := crashOptions(fs, 4096, flush, WritePwrite)
	opts.Preallocate = prealloc
	setup := fmt.Sprintf("seed %d (flush mode %d, preallocation %d)", seed, flush, prealloc)
	trig := &crashTrigger{}

	l, err := Open(crashTestDir, &opts)
	if err != nil {
		t.Fatalf("%s: Open: %v", setup, err)
	}
	defer func() { crashClose(l) }()
	m := &crashModel{}
	var id uint64
	step := 0
	where := func(op string) string { return fmt.Sprintf("%s, step %d (%s)", setup, step, op) }
	batch := func() [][]byte {
		ps := make([][]byte, 1+rng.Intn(6))
		for i := range ps {
			id++
			ps[i] = crashPayload(rng, id, rng.Intn(2500))
		}
		return ps
	}

	for round := range 6 {
		trig.arm(fs, 1+rng.Intn(25))
		// alt is the model if an operation in doubt took effect.
		var alt *crashModel
		var crashed *faultfs.FS
		for crashed == nil {
			step++
			var err error
			op := ""
			switch r := rng.Intn(100); {
			case r < 40:
				op = "AppendBatch"
				ps := batch()
				var pos []int64
				pos, err = l.AppendBatch(ps)
				if pos != nil {
					m.add(pos, ps)
					if err == nil && flush == SyncFlush {
						m.ackAll()
					}
				}
			case r < 60:
				op = "Write"
				ps := batch()
				var pos []int64
				if pos, _, err = l.Write(ps); err == nil {
					m.add(pos, ps)
				}
			case r < 72:
				op = "Sync"
				if err = l.Sync(); err == nil {
					m.ackAll()
				}
			case r < 84:
				n := m.acked()
				if n == 0 {
					continue
				}
				to := m.recs[rng.Intn(n)].pos
				op = fmt.Sprint("Truncate(", to, ")")
				after := m.clone()
				after.truncate(to)
				if err = l.Truncate(to); err == nil {
					m = after
				} else {
					alt = after
				}
			case r < 90:
				op = "Checkpoint"
				err = l.Checkpoint()
			default:
				op = "Close"
				if err = l.Close(); err == nil {
					m.ackAll()
					if l, err = Open(crashTestDir, &opts); err != nil {
						l = nil
					}
				}
			}
			crashed = trig.take()
			if crashed == nil && err != nil {
				t.Fatalf("%s: %v without a crash", where(op), err)
			}
			if crashed == nil && rng.Intn(40) == 0 {
				// A crash between calls, as in TestCrashRandomized.
				crashSettle(l)
				trig.crash(fs)
				crashed = trig.take()
			}
		}

		// Reopen, perhaps crashing again inside the recovery, until an
		// Open succeeds on a file system that is still alive.
		for attempt := 0; ; attempt++ {
			crashClose(l)
			l, fs = nil, crashed
			opts.FS = fs
			if attempt < 3 && rng.Intn(3) == 0 {
				trig.arm(fs, 1+rng.Intn(4))
			} else {
				fs.OnSync(nil)
			}
			l, err = Open(crashTestDir, &opts)
			if crashed = trig.take(); crashed != nil {
				continue // crashed inside Open
			}
			if err != nil {
				t.Fatalf("%s: Open after crash %d (attempt %d): %v", setup, round, attempt, err)
			}
			break
		}
		fs.OnSync(nil)
		m.checkEither(t, l, false, alt, "%s: after crash %d", where("crash"), round)
	}
}
