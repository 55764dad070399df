package raftstore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// Crash tests: a DB on a faultfs.FS is crashed (power loss) between calls,
// with and without injected I/O errors, and reopened on what the crash
// left. Every acknowledged write must survive, a batch is all or nothing,
// and nothing else may appear.

const crDir = "/db"

// crGroups is the number of raft groups in the randomized DB.
const crGroups = 3

func crOptions(fs *faultfs.FS, flush FlushMode) *Options {
	return &Options{
		Flush:       flush,
		SegmentSize: 128 << 10,
		// Checkpoints only when the test (or a segment release) asks, so
		// that a seed replays the same calls.
		CheckpointInterval: time.Hour,
		FS:                 fs,
	}
}

func crFlushName(f FlushMode) string {
	if f == AsyncFlush {
		return "async"
	}
	return "sync"
}

// crState is the model of every group after some prefix of the calls.
// Models are never changed once in a state; a step clones the one group it
// changes.
type crState [crGroups]*ctModel

// crRun is one seeded run of TestCrashRandomized.
type crRun struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	flush FlushMode
	fs    *faultfs.FS
	db    *DB
	st    [crGroups]*Store

	// states[i] is the state after the i-th call of the round that changed
	// (or may have changed) the log; states[0] is the state the round
	// started from. Any of states[durable:] may survive a crash.
	states   []crState
	durable  int
	inflight bool // the last state is that of a call that failed
	// inflightStates is how many of the last states the failed call added.
	inflightStates int
	staged         [crGroups]uint64
	term           [crGroups]uint64
	stable         [crGroups]map[string]uint64

	round int
	ops   []string // this round's calls, for failure messages
	stats *crStats
}

type crStats struct {
	crashes, faults, failedCalls, older, partialBatches, batches int
}

func (r *crRun) fatalf(format string, args ...any) {
	r.t.Helper()
	ops := r.ops
	if len(ops) > 60 {
		ops = append([]string{"..."}, ops[len(ops)-60:]...)
	}
	r.t.Fatalf("seed %d (%s flush; rerun with RAFTSTORE_CRASH_SEED=%d), round %d: %s\ncalls of the round:\n  %s",
		r.seed, crFlushName(r.flush), r.seed, r.round, fmt.Sprintf(format, args...), strings.Join(ops, "\n  "))
}

func (r *crRun) open() {
	r.t.Helper()
	db, err := OpenDB(crDir, crOptions(r.fs, r.flush))
	if err != nil {
		r.fatalf("OpenDB: %v", err)
	}
	r.db = db
	for g := range r.st {
		s, err := db.Store(uint64(g + 1))
		if err != nil {
			r.fatalf("Store(%d): %v", g+1, err)
		}
		r.st[g] = s
	}
}

// verify finds the state the reopened DB holds among the possible ones,
// checking every entry, and makes it the start of the next round.
func (r *crRun) verify() {
	r.t.Helper()
	if got := r.db.Groups(); len(got) != crGroups {
		r.fatalf("Groups() = %v", got)
	}
	if rec := r.db.log.Recovery(); r.db.log.End() < rec.End {
		r.stats.partialBatches++ // recovery cut an incomplete batch
	}
	cands := r.states[r.durable:]
	var why []string
	for k := len(cands) - 1; k >= 0; k-- {
		err := crMatch(r.st, cands[k])
		if err == nil {
			if k < len(cands)-1 {
				r.stats.older++
			}
			r.states = []crState{cands[k]}
			r.durable = 0
			r.checkStable()
			return
		}
		why = append(why, fmt.Sprintf("state after call %d: %v", r.durable+k, err))
	}
	r.fatalf("the recovered DB matches none of the %d states that may survive (newest first):\n  %s",
		len(cands), strings.Join(why, "\n  "))
}

// crMatch compares every group with a state: the bounds first, cheaply.
func crMatch(st [crGroups]*Store, want crState) error {
	for g, s := range st {
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		if first != want[g].first || last != want[g].last() {
			return fmt.Errorf("group %d holds %d..%d, want %v", g+1, first, last, want[g])
		}
	}
	for g, s := range st {
		if err := ctCheckStore(s, want[g]); err != nil {
			return err
		}
	}
	return nil
}

func (r *crRun) checkStable() {
	r.t.Helper()
	for g, s := range r.st {
		for k, v := range r.stable[g] {
			got, err := s.GetUint64([]byte(k))
			if err != nil || got != v {
				r.fatalf("group %d: GetUint64(%q) = %d, %v; want %d (Set returned nil)", g+1, k, got, err, v)
			}
		}
		if v, err := s.GetUint64([]byte("never-set")); err != nil || v != 0 {
			r.fatalf("group %d: a key never set reads %d, %v", g+1, v, err)
		}
	}
}

// push records a call that changed group g's model to m. durable says
// that the call, had it changed anything, waited for every byte written
// before it to be durable.
func (r *crRun) push(g int, m *ctModel, desc string, err error, durable bool) (stop bool) {
	next := r.states[len(r.states)-1]
	if prev := next[g]; prev.first == m.first && prev.last() == m.last() && prev.commitIndex() == m.commitIndex() {
		durable = false // a DeleteRange that deletes nothing writes nothing
	}
	next[g] = m
	r.states = append(r.states, next)
	if err != nil {
		r.ops = append(r.ops, fmt.Sprintf("%s -> %v (in flight)", desc, err))
		r.stats.failedCalls++
		r.inflight = true
		r.inflightStates = 1
		return true
	}
	r.ops = append(r.ops, desc)
	if durable {
		r.durable = len(r.states) - 1
	}
	return false
}

// crStart picks where a group that holds nothing starts: anywhere, as
// after a snapshot install.
func crStart(rng *rand.Rand) uint64 {
	return []uint64{1, 1, 500, indexSlotsPerFile - 5, 3*indexSlotsPerFile + 17, 1 << 30}[rng.IntN(6)]
}

// step makes one random call. It returns true when the call failed: the
// round then ends with it in flight.
func (r *crRun) step() bool {
	r.t.Helper()
	g := r.rng.IntN(crGroups)
	s := r.st[g]
	m := r.states[len(r.states)-1][g]
	first, last := m.first, m.last()
	acked := r.flush == SyncFlush // an acknowledged StoreLogs is durable
	p := r.rng.IntN(100)
	if last == 0 && p >= 45 && p < 70 {
		p = 0 // nothing to delete: append instead
	}
	if len(m.logs) > 600 && p < 45 && r.rng.IntN(2) == 0 {
		p = 50 // keep the log short: compact
	}
	switch {
	case p < 45:
		start := last + 1
		if last == 0 {
			start = crStart(r.rng)
		}
		n := m.clone()
		dropped := -1 // the state after a gap's deletion, if any
		if last != 0 && r.rng.IntN(8) == 0 {
			// A gap, as after a snapshot install: the store first
			// deletes everything, durably, then stores the batch.
			start += 1 + r.rng.Uint64N(2*indexSlotsPerFile)
			n.deleteRange(first, last)
			r.states = append(r.states, r.states[len(r.states)-1])
			r.states[len(r.states)-1][g] = n.clone()
			dropped = len(r.states) - 1
			r.ops = append(r.ops, fmt.Sprintf("group %d gap after %d: delete %d..%d", g+1, last, first, last))
		}
		logs := ctRandomBatch(r.rng, start, r.term[g])
		staged := r.staged[g]
		err := s.StoreLogs(logs)
		if err == nil && dropped > r.durable {
			r.durable = dropped
		}
		n.store(logs, staged)
		if err == nil {
			r.staged[g] = 0
		}
		r.stats.batches++
		stop := r.push(g, n, fmt.Sprintf("group %d StoreLogs(%d..%d) staged %d", g+1, start, n.last(), staged), err, acked)
		if stop && dropped >= 0 {
			r.inflightStates = 2
		}
		return stop
	case p < 60: // prefix, as raft compacts
		hi := first + r.rng.Uint64N(last-first+1)
		if r.rng.IntN(2) == 0 && last > first+200 {
			hi = last - 200 + r.rng.Uint64N(100)
		}
		err := s.DeleteRange(first, hi)
		n := m.clone()
		n.deleteRange(first, hi)
		return r.push(g, n, fmt.Sprintf("group %d DeleteRange(%d, %d) prefix", g+1, first, hi), err, true)
	case p < 67: // suffix, as a follower drops a conflicting tail
		lo := last - r.rng.Uint64N(min(last-first+1, 40))
		hi := last + r.rng.Uint64N(3)
		err := s.DeleteRange(lo, hi)
		n := m.clone()
		n.deleteRange(lo, hi)
		r.term[g]++
		return r.push(g, n, fmt.Sprintf("group %d DeleteRange(%d, %d) suffix", g+1, lo, hi), err, true)
	case p < 70: // everything, as after a snapshot install
		lo, hi := first, last
		if r.rng.IntN(2) == 0 {
			lo, hi = 0, math.MaxUint64
		}
		err := s.DeleteRange(lo, hi)
		n := m.clone()
		n.deleteRange(lo, hi)
		r.term[g]++
		return r.push(g, n, fmt.Sprintf("group %d DeleteRange(%d, %d) everything", g+1, lo, hi), err, true)
	case p < 82:
		k := []string{"CurrentTerm", "LastVoteTerm", "k"}[r.rng.IntN(3)]
		v := r.rng.Uint64()
		if err := s.SetUint64([]byte(k), v); err != nil {
			r.fatalf("group %d SetUint64(%q): %v", g+1, k, err)
		}
		r.stable[g][k] = v
		r.ops = append(r.ops, fmt.Sprintf("group %d SetUint64(%q, %d)", g+1, k, v))
	case p < 89:
		v := first + r.rng.Uint64N(last-first+10)
		if err := s.StageCommitIndex(v); err != nil {
			r.fatalf("StageCommitIndex: %v", err)
		}
		r.staged[g] = v
		r.ops = append(r.ops, fmt.Sprintf("group %d StageCommitIndex(%d)", g+1, v))
	case p < 94:
		err := r.db.log.Checkpoint()
		if err != nil {
			r.ops = append(r.ops, fmt.Sprintf("checkpoint -> %v", err))
			r.stats.failedCalls++
			return true
		}
		r.ops = append(r.ops, "checkpoint")
		r.durable = len(r.states) - 1 // it waits for every byte written
	default:
		if last == 0 {
			return false
		}
		i := first + r.rng.Uint64N(last-first+1)
		var out raft.Log
		if err := s.GetLog(i, &out); err != nil {
			r.fatalf("group %d GetLog(%d): %v", g+1, i, err)
		}
		if err := ctLogsEqual(&out, m.get(i)); err != nil {
			r.fatalf("group %d GetLog(%d): %v", g+1, i, err)
		}
	}
	return false
}

// injectFault injects one fault the next calls will run into.
func (r *crRun) injectFault() {
	var f faultfs.Fault
	switch r.rng.IntN(4) {
	case 0, 1: // an fdatasync of a segment fails
		f = faultfs.Fault{Op: faultfs.OpSync, Path: crDir + "/log/0"}
	case 2: // a write of a segment fails, perhaps after part of a batch
		f = faultfs.Fault{Op: faultfs.OpWrite, Path: crDir + "/log/0", After: r.rng.IntN(3)}
	case 3: // syncing an index file for a checkpoint fails
		f = faultfs.Fault{Op: faultfs.OpMsync, Path: crDir + "/" + indexDirName + "/"}
	}
	r.fs.Inject(f)
	r.stats.faults++
	r.ops = append(r.ops, fmt.Sprintf("inject %v fault on %q after %d", f.Op, f.Path, f.After))
}

// crash crashes the FS between calls and closes the old DB.
func (r *crRun) crash() {
	var next *faultfs.FS
	switch x := r.rng.IntN(10); {
	case x < 7:
		next = r.fs.Crash()
		r.ops = append(r.ops, "crash")
	case x < 9:
		next = r.fs.CrashKeepAll()
		r.ops = append(r.ops, "crash keeping every write")
		// A crash of the process alone loses nothing: everything but a
		// call in flight survives, in either flush mode.
		if r.inflight {
			r.durable = max(r.durable, len(r.states)-1-r.inflightStates)
		} else {
			r.durable = len(r.states) - 1
		}
	default:
		next = r.fs.CrashDropAll()
		r.ops = append(r.ops, "crash dropping every unsynced write")
	}
	r.db.Close() // fails: the old FS is gone
	r.fs = next
	r.stats.crashes++
}

// crSeeds returns TestCrashRandomized's seeds.
func crSeeds(t *testing.T) []uint64 { return testSeeds(t, "RAFTSTORE_CRASH_SEED", 12) }

// testSeeds returns the seeds 1..n, or only the one the environment
// variable env names, to rerun a failure.
func testSeeds(t *testing.T, env string, n int) []uint64 {
	if v := os.Getenv(env); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		return []uint64{seed}
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

// TestCrashRandomized runs random calls on a DB of three groups and
// crashes it between calls, 14 times for each of 12 seeds, sometimes after
// injecting an I/O error. After every crash the reopened DB must hold
// exactly the state after some call between the last one known durable
// and the last one made: in sync mode the last acknowledged call (or a
// failed call in flight), in async mode possibly less, but always whole
// batches. Stable values that were set must all survive.
func TestCrashRandomized(t *testing.T) {
	const rounds = 14
	stats := &crStats{}
	for _, seed := range crSeeds(t) {
		flush := SyncFlush
		if seed%2 == 0 {
			flush = AsyncFlush
		}
		t.Run(fmt.Sprintf("seed%d-%s", seed, crFlushName(flush)), func(t *testing.T) {
			r := &crRun{
				t:      t,
				seed:   seed,
				rng:    rand.New(rand.NewPCG(seed, 0x5eed)),
				flush:  flush,
				fs:     faultfs.New(int64(seed)),
				states: []crState{{&ctModel{}, &ctModel{}, &ctModel{}}},
				stats:  stats,
			}
			for g := range r.stable {
				r.stable[g] = map[string]uint64{}
				r.term[g] = 1
			}
			r.open()
			for r.round = 0; r.round < rounds; r.round++ {
				r.ops = r.ops[:0]
				calls := 5 + r.rng.IntN(40)
				faultAt := -1
				if r.rng.IntN(3) == 0 {
					faultAt = r.rng.IntN(calls)
				}
				for i := 0; i < calls; i++ {
					if i == faultAt {
						r.injectFault()
					}
					if r.step() {
						break
					}
				}
				r.crash()
				r.staged = [crGroups]uint64{}
				r.inflight = false
				r.open()
				r.verify()
			}
			// A clean close and reopen at the end.
			if err := r.db.Close(); err != nil {
				r.fatalf("clean Close: %v", err)
			}
			r.open()
			r.verify()
			r.db.Close()
		})
	}
	t.Logf("%d crashes, %d faults injected, %d calls failed, %d batches; %d recoveries found an older state than the last call's (unsynced async writes lost, or a failed call), %d cut an incomplete batch",
		stats.crashes, stats.faults, stats.failedCalls, stats.batches, stats.older, stats.partialBatches)
	if !t.Failed() && len(crSeeds(t)) > 1 && stats.crashes < 100 {
		t.Fatalf("only %d crash points", stats.crashes)
	}
}

// crWaitForFile waits until the background preparation of a segment has
// renamed it into place.
func crWaitForFile(t *testing.T, fs *faultfs.FS, path string) {
	t.Helper()
	dir, name := path[:strings.LastIndex(path, "/")], path[strings.LastIndex(path, "/")+1:]
	for i := 0; i < 1_000_000; i++ {
		names, err := fs.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if n == name {
				return
			}
		}
		runtime.Gosched()
	}
	t.Fatalf("%s never appeared", path)
}

// TestCrashPartialBatchInvisible writes batches that span several segments
// and crashes in the middle of one: by failing the write of its second
// segment, by failing its sync, or in async mode by crashing with its pages
// only in the page cache. The reopened store must end on a batch boundary,
// and a store that cut a batch must take the next one at the right index.
func TestCrashPartialBatchInvisible(t *testing.T) {
	const (
		writeNext = iota + 1 // the write into the batch's second segment fails
		syncFirst            // the sync of the batch's first segment fails
	)
	const (
		batch = 48
		size  = 5000 // a batch spans two or three 128 KiB segments
	)
	cases := []struct {
		name  string
		flush FlushMode
		fault int
		crash func(*faultfs.FS) *faultfs.FS
		last  uint64 // the LastIndex it must recover, or 0 for either
	}{
		// The first part of the batch is in the page cache and survives:
		// recovery must cut it.
		{"sync/write fails midway/keep all", SyncFlush, writeNext, (*faultfs.FS).CrashKeepAll, batch},
		{"sync/write fails midway/random", SyncFlush, writeNext, (*faultfs.FS).Crash, 0},
		// The whole batch is in the page cache: a process crash keeps it.
		{"sync/sync fails/keep all", SyncFlush, syncFirst, (*faultfs.FS).CrashKeepAll, 2 * batch},
		{"sync/sync fails/random", SyncFlush, syncFirst, (*faultfs.FS).Crash, 0},
		{"async/unsynced/random", AsyncFlush, 0, (*faultfs.FS).Crash, 0},
		{"async/unsynced/keep all", AsyncFlush, 0, (*faultfs.FS).CrashKeepAll, 2 * batch},
		{"async/unsynced/drop all", AsyncFlush, 0, (*faultfs.FS).CrashDropAll, 0},
		{"async/write fails midway/keep all", AsyncFlush, writeNext, (*faultfs.FS).CrashKeepAll, batch},
	}
	cut := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for seed := int64(1); seed <= 6; seed++ {
				fs := faultfs.New(seed)
				db, err := OpenDB(crDir, crOptions(fs, c.flush))
				if err != nil {
					t.Fatal(err)
				}
				s, _ := db.Store(1)
				good := ctEntries(1, batch, 1, size)
				if err := s.StoreLogs(good); err != nil {
					t.Fatal(err)
				}
				if err := db.log.Sync(); err != nil {
					t.Fatal(err)
				}
				segs := db.log.Segments()
				active := segs[len(segs)-1]
				next := fmt.Sprintf("%s/%s/%020d", crDir, logDirName, active.Base+active.Size)
				crWaitForFile(t, fs, next)
				switch c.fault {
				case writeNext:
					fs.Inject(faultfs.Fault{Op: faultfs.OpWrite, Path: next})
				case syncFirst:
					fs.Inject(faultfs.Fault{Op: faultfs.OpSync, Path: active.Path})
				}
				torn := ctEntries(batch+1, batch, 1, size)
				err = s.StoreLogs(torn)
				if (err != nil) != (c.fault == writeNext || c.fault == syncFirst && c.flush == SyncFlush) {
					t.Fatalf("seed %d: StoreLogs of the batch in the middle = %v", seed, err)
				}
				fs2 := c.crash(fs)
				db.Close()
				db, err = OpenDB(crDir, crOptions(fs2, c.flush))
				if err != nil {
					t.Fatalf("seed %d: reopen: %v", seed, err)
				}
				if db.log.End() < db.log.Recovery().End {
					cut++
				}
				s, _ = db.Store(1)
				model := &ctModel{}
				model.store(good, 0)
				if last, _ := s.LastIndex(); last == 2*batch {
					model.store(torn, 0)
				}
				if err := ctCheckStore(s, model); err != nil {
					t.Fatalf("seed %d: LastIndex must be %d or %d: %v", seed, batch, 2*batch, err)
				}
				if c.last != 0 && model.last() != c.last {
					t.Fatalf("seed %d: LastIndex %d after the crash, want %d", seed, model.last(), c.last)
				}
				// The store goes on from there, also after another reopen.
				more := ctEntries(model.last()+1, 3, 2, 10)
				if err := s.StoreLogs(more); err != nil {
					t.Fatalf("seed %d: StoreLogs after recovery: %v", seed, err)
				}
				model.store(more, 0)
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				db, err = OpenDB(crDir, crOptions(fs2, c.flush))
				if err != nil {
					t.Fatalf("seed %d: second reopen: %v", seed, err)
				}
				s, _ = db.Store(1)
				if err := ctCheckStore(s, model); err != nil {
					t.Fatalf("seed %d: after the second reopen: %v", seed, err)
				}
				db.Close()
			}
		})
	}
	t.Logf("%d recoveries cut an incomplete batch", cut)
	if cut == 0 {
		t.Fatal("no recovery ever found an incomplete batch: the test does not test what it says")
	}
}

// TestCrashStableSurvives checks that Set and SetUint64 are durable when
// they return, in both flush modes, across a crash that drops every
// unsynced byte.
func TestCrashStableSurvives(t *testing.T) {
	for _, flush := range []FlushMode{SyncFlush, AsyncFlush} {
		fs := faultfs.New(1)
		db, err := OpenDB(crDir, crOptions(fs, flush))
		if err != nil {
			t.Fatal(err)
		}
		want := map[uint64]uint64{}
		for g := uint64(1); g <= 3; g++ {
			s, _ := db.Store(g)
			for i := uint64(0); i < 5; i++ {
				if err := s.SetUint64([]byte("CurrentTerm"), g*100+i); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Set([]byte("LastVoteCand"), []byte(fmt.Sprint("node", g))); err != nil {
				t.Fatal(err)
			}
			want[g] = g*100 + 4
			// Entries written after the values do not matter to them.
			if err := s.StoreLogs(ctEntries(1, 3, 1, 10)); err != nil {
				t.Fatal(err)
			}
		}
		fs = fs.CrashDropAll()
		db.Close()
		if db, err = OpenDB(crDir, crOptions(fs, flush)); err != nil {
			t.Fatalf("%s: reopen: %v", crFlushName(flush), err)
		}
		for g, v := range want {
			s, _ := db.Store(g)
			if got, err := s.GetUint64([]byte("CurrentTerm")); err != nil || got != v {
				t.Fatalf("%s: group %d CurrentTerm = %d, %v; want %d", crFlushName(flush), g, got, err, v)
			}
			if got, _ := s.Get([]byte("LastVoteCand")); string(got) != fmt.Sprint("node", g) {
				t.Fatalf("%s: group %d LastVoteCand = %q", crFlushName(flush), g, got)
			}
		}
		if got := db.Groups(); len(got) != 3 {
			t.Fatalf("%s: Groups() = %v", crFlushName(flush), got)
		}
		db.Close()
	}
}

// TestCrashNewDirectoryTree opens a DB for the first time in a directory
// tree that does not exist yet (store, its log and index directories and a
// directory per group), stores entries and stable values and crashes soon
// after, dropping everything unsynced: the directories must survive, and
// with them every acknowledged entry and value; a DB that came back empty
// would make a raft node bootstrap a new cluster.
func TestCrashNewDirectoryTree(t *testing.T) {
	const dir = "/data/node1/store"
	for _, flush := range []FlushMode{SyncFlush, AsyncFlush} {
		t.Run(crFlushName(flush), func(t *testing.T) {
			fs := faultfs.New(15)
			db, err := OpenDB(dir, crOptions(fs, flush))
			if err != nil {
				t.Fatal(err)
			}
			models := map[uint64]*ctModel{}
			for g := uint64(1); g <= 2; g++ {
				s, err := db.Store(g)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.SetUint64([]byte("CurrentTerm"), 10+g); err != nil {
					t.Fatal(err)
				}
				m := &ctModel{}
				crStore(t, s, m, ctEntries(1, 5, 1, 100))
				models[g] = m
			}
			if flush == AsyncFlush {
				// Entries are acknowledged only once synced.
				if err := db.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			fs = fs.CrashDropAll()
			db.Close() // fails: the file system is gone
			if db, err = OpenDB(dir, crOptions(fs, flush)); err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer db.Close()
			if got := db.Groups(); !slices.Equal(got, []uint64{1, 2}) {
				t.Fatalf("Groups() after the crash = %v, want [1 2]", got)
			}
			for g, m := range models {
				s, err := db.Store(g)
				if err != nil {
					t.Fatal(err)
				}
				if err := ctCheckStore(s, m); err != nil {
					t.Fatalf("after the crash: %v", err)
				}
				if got, err := s.GetUint64([]byte("CurrentTerm")); err != nil || got != 10+g {
					t.Fatalf("group %d CurrentTerm after the crash = %d, %v; want %d", g, got, err, 10+g)
				}
			}
		})
	}
}

// TestCrashCheckpointReplaysTail checks that opening after a crash replays
// only what was written after the last checkpoint.
func TestCrashCheckpointReplaysTail(t *testing.T) {
	fs := faultfs.New(3)
	db, err := OpenDB(crDir, crOptions(fs, SyncFlush))
	if err != nil {
		t.Fatal(err)
	}
	models := make([]*ctModel, 3)
	stores := make([]*Store, 3)
	for g := range stores {
		stores[g], _ = db.Store(uint64(g + 1))
		models[g] = &ctModel{}
	}
	write := func(batches int) {
		for b := 0; b < batches; b++ {
			for g, s := range stores {
				logs := ctEntries(models[g].last()+1, 32, 1, 200)
				if err := s.StoreLogs(logs); err != nil {
					t.Fatal(err)
				}
				models[g].store(logs, 0)
			}
		}
	}
	write(30) // 2880 records, about 700 KB
	if err := db.log.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	atCheckpoint := db.log.End()
	write(2) // 192 records after the checkpoint
	end := db.log.End()
	fs = fs.Crash()
	db.Close()
	if db, err = OpenDB(crDir, crOptions(fs, SyncFlush)); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rec := db.log.Recovery()
	t.Logf("checkpoint at %d, end %d, recovery %+v", atCheckpoint, end, rec)
	if !rec.Crashed {
		t.Error("Recovery().Crashed is false after a crash")
	}
	if rec.ScannedFrom < atCheckpoint || rec.ScannedFrom > end {
		t.Errorf("recovery scanned from %d; the checkpoint was at %d and the log ends at %d", rec.ScannedFrom, atCheckpoint, end)
	}
	if end-rec.ScannedFrom > end/10 {
		t.Errorf("recovery scanned %d of %d bytes: more than the tail", end-rec.ScannedFrom, end)
	}
	if rec.Records > 192 || rec.End != end {
		t.Errorf("recovery scanned %d records up to %d; want at most 192 up to %d", rec.Records, rec.End, end)
	}
	from, states, err := decodeMeta(db.log.Meta())
	if err != nil || from != atCheckpoint || len(states) != 3 {
		t.Errorf("checkpoint meta: replay from %d (want %d), %d groups, %v", from, atCheckpoint, len(states), err)
	}
	for g := range stores {
		s, _ := db.Store(uint64(g + 1))
		if err := ctCheckStore(s, models[g]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCrashReplayAcrossIndexFiles crashes after a group moved to other
// index files since the last checkpoint: by installing a snapshot far
// ahead (DeleteRange of everything, then StoreLogs 200,000 entries later),
// or by compacting past the end of an index file. Recovery replays the
// records written since the checkpoint, the first of them into the index
// file the group left; the reopened DB must hold what the group holds.
func TestCrashReplayAcrossIndexFiles(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, s *Store, m *ctModel, checkpoint func())
	}{
		{"snapshot install far ahead", func(t *testing.T, s *Store, m *ctModel, checkpoint func()) {
			crStore(t, s, m, ctEntries(1, 10, 1, 20))
			checkpoint()
			crStore(t, s, m, ctEntries(11, 10, 1, 20))
			crDelete(t, s, m, 1, 20)
			crStore(t, s, m, ctEntries(200_001, 10, 2, 20))
		}},
		{"compaction past an index file", func(t *testing.T, s *Store, m *ctModel, checkpoint func()) {
			crStore(t, s, m, ctEntries(indexSlotsPerFile-536, 500, 1, 1))
			checkpoint()
			crStore(t, s, m, ctEntries(m.last()+1, 100, 1, 1)) // into the second file
			crDelete(t, s, m, 0, m.last()-10)                  // drops the first file
			for m.last() < 2*indexSlotsPerFile+10 {            // creates the third
				crStore(t, s, m, ctEntries(m.last()+1, 2048, 1, 1))
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := faultfs.New(1)
			db, err := OpenDB(crDir, crOptions(fs, SyncFlush))
			if err != nil {
				t.Fatal(err)
			}
			s, _ := db.Store(1)
			m := &ctModel{}
			c.run(t, s, m, func() {
				if err := db.log.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			})
			if err := ctCheckStore(s, m); err != nil {
				t.Fatal(err)
			}
			fs = fs.Crash()
			db.Close()
			db, err = OpenDB(crDir, crOptions(fs, SyncFlush))
			if err != nil {
				t.Fatalf("reopen after the crash: %v", err)
			}
			defer db.Close()
			s, _ = db.Store(1)
			if err := ctCheckStore(s, m); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func crStore(t *testing.T, s *Store, m *ctModel, logs []*raft.Log) {
	t.Helper()
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	m.store(logs, 0)
}

func crDelete(t *testing.T, s *Store, m *ctModel, lo, hi uint64) {
	t.Helper()
	if err := s.DeleteRange(lo, hi); err != nil {
		t.Fatal(err)
	}
	m.deleteRange(lo, hi)
}

// crHook is an OnSync hook that holds one sync: the first sync after arm
// made by a goroutine whose stack holds frame blocks until release, and
// entered is closed when it starts waiting. Other syncs pass.
type crHook struct {
	mu      sync.Mutex
	armed   bool
	frame   string
	entered chan struct{}
	release chan struct{}
}

func (h *crHook) arm(frame string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.frame = true, frame
	h.entered = make(chan struct{})
	h.release = make(chan struct{})
}

func (h *crHook) hook() {
	buf := make([]byte, 64<<10)
	stack := string(buf[:runtime.Stack(buf, false)])
	h.mu.Lock()
	hold := h.armed && strings.Contains(stack, h.frame)
	if hold {
		h.armed = false
	}
	entered, release := h.entered, h.release
	h.mu.Unlock()
	if hold {
		close(entered)
		<-release
	}
}

// crWaitForStack waits until some goroutine's stack holds every one of
// frames, so that a test can tell a goroutine is blocked where it wants
// it without sleeping.
func crWaitForStack(t *testing.T, frames ...string) {
	t.Helper()
	if !crWaitForStackOr(nil, frames...) {
		t.Fatalf("no goroutine reached %v", frames)
	}
}

// crWaitForStackOr waits like crWaitForStack, or until done is closed, and
// reports whether the frames were found.
func crWaitForStackOr(done <-chan struct{}, frames ...string) bool {
	buf := make([]byte, 1<<20)
	for i := 0; i < 20_000; i++ {
		select {
		case <-done:
			return false
		default:
		}
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			all := true
			for _, f := range frames {
				if !strings.Contains(g, f) {
					all = false
					break
				}
			}
			if all {
				return true
			}
		}
		runtime.Gosched()
	}
	return false
}

// TestCrashCheckpointConcurrentWithSnapshotInstall takes a checkpoint while
// another group installs a snapshot: the checkpoint hook reads the replay
// position, then waits for group 1's lock, and meanwhile group 2 appends
// an entry, deletes everything and appends far ahead (what raft does when
// a follower installs a snapshot). Recovery replays those records on top
// of the indexes the checkpoint recorded for group 2, which are newer than
// the replay position; the reopened DB must still hold group 2's entries.
func TestCrashCheckpointConcurrentWithSnapshotInstall(t *testing.T) {
	fs := faultfs.New(1)
	db, err := OpenDB(crDir, crOptions(fs, SyncFlush))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := db.Store(1)
	b, _ := db.Store(2)
	if err := b.StoreLogs(ctEntries(1, 100, 1, 20)); err != nil {
		t.Fatal(err)
	}
	if err := a.StoreLogs(ctEntries(1, 10, 1, 20)); err != nil { // dirty index slots
		t.Fatal(err)
	}
	h := &crHook{}
	fs.OnSync(h.hook)
	h.arm("(*indexFile).sync")
	cpErr := make(chan error, 1)
	go func() { cpErr <- db.log.Checkpoint() }()
	// The checkpoint has read the replay position and is syncing group 1's
	// index (a msync, which the hook holds).
	<-h.entered
	crWaitForStack(t, "(*DB).checkpointMeta", "(*indexFile).sync")
	model := &ctModel{}
	model.store(ctEntries(1, 100, 1, 20), 0)
	more := ctEntries(101, 10, 1, 20)
	if err := b.StoreLogs(more); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteRange(1, 110); err != nil {
		t.Fatal(err)
	}
	far := ctEntries(10*indexSlotsPerFile+1, 10, 2, 20)
	if err := b.StoreLogs(far); err != nil {
		t.Fatal(err)
	}
	model = &ctModel{}
	model.store(far, 0)
	close(h.release)
	if err := <-cpErr; err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	fs.OnSync(nil)
	fs = fs.CrashKeepAll()
	db.Close()
	db, err = OpenDB(crDir, crOptions(fs, SyncFlush))
	if err != nil {
		t.Fatalf("reopen after a checkpoint taken while group 2 installed a snapshot: %v", err)
	}
	defer db.Close()
	b, _ = db.Store(2)
	if err := ctCheckStore(b, model); err != nil {
		t.Fatal(err)
	}
}

// TestCrashReleaseWhileFirstBatchInFlight stores the first batch of an
// empty group, spanning segments, and while its sync is in flight another
// group's DeleteRange releases segments. The segments that hold the batch
// must stay: StoreLogs returns nil, so the entries must be readable, and
// readable after a reopen.
func TestCrashReleaseWhileFirstBatchInFlight(t *testing.T) {
	fs := faultfs.New(1)
	opts := crOptions(fs, SyncFlush)
	opts.SegmentSize = 64 << 10
	db, err := OpenDB(crDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := db.Store(1)
	b, _ := db.Store(2)
	h := &crHook{}
	fs.OnSync(h.hook)
	h.arm("(*Log).groupCommit")
	logs := ctEntries(1, 40, 1, 4000) // 160 KB: three segments
	storeErr := make(chan error, 1)
	go func() { storeErr <- b.StoreLogs(logs) }()
	<-h.entered // the batch is written; its sync is held
	var delErr error
	delDone := make(chan struct{})
	go func() { // a no-op DeleteRange (group 1 is empty) releases segments
		defer close(delDone)
		delErr = a.DeleteRange(1, 10)
	}()
	// Either the release finds nothing to release and returns, or it
	// decided what to release and waits for group 2's lock to write its
	// checkpoint first.
	if !crWaitForStackOr(delDone, "(*DB).releaseSegments", "(*Store).syncIndex") {
		select {
		case <-delDone:
		default:
			t.Fatal("DeleteRange neither returned nor reached the checkpoint of the segment release")
		}
	}
	close(h.release)
	if err := <-storeErr; err != nil {
		t.Fatalf("StoreLogs: %v", err)
	}
	<-delDone
	if delErr != nil {
		t.Fatalf("DeleteRange: %v", delErr)
	}
	fs.OnSync(nil)
	model := &ctModel{}
	model.store(logs, 0)
	if err := ctCheckStore(b, model); err != nil {
		t.Errorf("after the release: %v (segments %v)", err, db.log.Segments())
	}
	if err := db.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	db, err = OpenDB(crDir, opts)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer db.Close()
	b, _ = db.Store(2)
	if err := ctCheckStore(b, model); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
}
