package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/commitlog/faultfs"
	"github.com/raftlog/raftlog/commitlog/vfs"
)

// Many raft groups on one commit log: every group of a DB is driven from
// its own goroutine at the same time as the others, the way a node running
// many raft groups drives them, and each is checked against a model of its
// own. One group's writes, compactions, truncations and deletions must never
// change another group's entries or keys; a segment file goes only once no
// group needs it; a crash between calls loses nothing acknowledged, in any
// group; and the groups' appends share the commit log's group commit.

const (
	mgDir         = "/mg"
	mgSegmentSize = 32 << 10 // small, so segments roll and are released every round
	mgRounds      = 12       // crash points per seed
	mgWorkers     = 10       // groups at the start of a seed
	mgLateGroups  = 2        // groups created while the others write
	mgSeedEnv     = "RAFTSTORE_GROUPS_SEED"
)

// mgGroupIDs are the group ids of the randomized test: spread out, with
// Open's group 0 and ids that take all 20 digits of an index directory's
// name. The last mgLateGroups are created during the run.
var mgGroupIDs = []uint64{
	0, 1, 2, 9, 1000, 1 << 16, 1 << 32, 3 * math.MaxUint32, 1<<62 + 5, math.MaxUint64,
	77, 1 << 40,
}

func mgOptions(fs *faultfs.FS, flush FlushMode, checkpointEvery time.Duration) *Options {
	return &Options{Flush: flush, SegmentSize: mgSegmentSize, CheckpointInterval: checkpointEvery, FS: fs}
}

// mgEntry is ctEntry made unique to its group: the data depends on the
// group and the extensions name it, so an entry of one group read through
// another never compares equal.
func mgEntry(group, index, term uint64, size int) *raft.Log {
	l := ctEntry(index, term, 0)
	l.Data = ctData(index, term^(group*0x2545F4914F6CDD1D), size)
	l.Extensions = fmt.Appendf(nil, "group %d index %d term %d", group, index, term)
	return l
}

// mgOnlyKey is a stable key that only one group ever sets.
func mgOnlyKey(group uint64) []byte { return fmt.Appendf(nil, "only-%d", group) }

// mgGroup is one group of the randomized test and its model. During a round
// only the group's goroutine touches it.
type mgGroup struct {
	id  uint64
	s   *Store
	rng *rand.Rand

	// states[0] is the state the round started from, followed by the state
	// after each call of the round that changed the log (or may have: a
	// failed call is in flight). Any of states[durable:] may survive a
	// crash.
	states   []*ctModel
	durable  int
	inflight bool
	term     uint64
	staged   uint64
	u64      map[string]uint64 // SetUint64 calls that returned nil
	vals     map[string][]byte // Set calls that returned nil
	ops      []string          // the calls of this round
}

func (g *mgGroup) model() *ctModel { return g.states[len(g.states)-1] }

// push records a call that left the group in state m. durable says that
// the call, if it wrote anything, returned only once every byte the group
// wrote before was durable. It returns true when the call failed.
func (g *mgGroup) push(m *ctModel, desc string, err error, durable bool) bool {
	if prev := g.model(); prev.first == m.first && prev.last() == m.last() && prev.commitIndex() == m.commitIndex() {
		durable = false // a DeleteRange that deletes nothing writes nothing
	}
	g.states = append(g.states, m)
	if err != nil {
		g.ops = append(g.ops, fmt.Sprintf("%s -> %v (in flight)", desc, err))
		g.inflight = true
		return true
	}
	g.ops = append(g.ops, desc)
	if durable {
		g.durable = len(g.states) - 1
	}
	return false
}

// mgStart picks where an empty group starts, as after a snapshot install.
func mgStart(rng *rand.Rand) uint64 {
	return []uint64{1, 1, 100, indexSlotsPerFile - 3, 5*indexSlotsPerFile + 11, 1 << 33}[rng.IntN(6)]
}

func (g *mgGroup) storeLogs(start uint64, acked bool) bool {
	logs := make([]*raft.Log, 1+g.rng.IntN(16))
	for i := range logs {
		logs[i] = mgEntry(g.id, start+uint64(i), g.term, g.rng.IntN(2049))
	}
	staged := g.staged
	err := g.s.StoreLogs(logs)
	m := g.model().clone()
	m.store(logs, staged)
	if err == nil {
		g.staged = 0
	}
	return g.push(m, fmt.Sprintf("StoreLogs(%d..%d) staged %d", start, m.last(), staged), err, acked)
}

func (g *mgGroup) deleteRange(lo, hi uint64, kind string) bool {
	err := g.s.DeleteRange(lo, hi)
	m := g.model().clone()
	m.deleteRange(lo, hi)
	return g.push(m, fmt.Sprintf("DeleteRange(%d, %d) %s", lo, hi, kind), err, true)
}

// step makes one random call. It returns stop when the call failed, and an
// error when the store broke its contract.
func (g *mgGroup) step(flush FlushMode, others []uint64) (stop bool, err error) {
	m := g.model()
	first, last := m.first, m.last()
	acked := flush == SyncFlush // an acknowledged StoreLogs is durable
	p := g.rng.IntN(100)
	if last == 0 && p >= 45 && p < 68 {
		p = 0 // nothing to delete: append instead
	}
	if len(m.logs) > 300 && p < 45 && g.rng.IntN(2) == 0 {
		p = 45 // keep the log short: compact
	}
	switch {
	case p < 45:
		start := last + 1
		if last == 0 {
			start = mgStart(g.rng)
		}
		stop = g.storeLogs(start, acked)
	case p < 57: // prefix, as raft compacts after a snapshot
		hi := first + g.rng.Uint64N(last-first+1)
		if g.rng.IntN(3) > 0 && last > first+100 {
			hi = last - 50 - g.rng.Uint64N(50) // keep trailing logs
		}
		stop = g.deleteRange(first, hi, "prefix")
	case p < 64: // suffix, as a follower drops a conflicting tail
		lo := last - g.rng.Uint64N(min(last-first+1, 40))
		hi := last + g.rng.Uint64N(3)
		g.term++
		stop = g.deleteRange(lo, hi, "suffix")
	case p < 68: // everything, as after a snapshot install, then go on far ahead
		lo, hi := first, last
		if g.rng.IntN(2) == 0 {
			lo, hi = 0, math.MaxUint64
		}
		g.term++
		if stop = g.deleteRange(lo, hi, "everything"); !stop {
			gap := []uint64{1, 2, 1000, indexSlotsPerFile, 3*indexSlotsPerFile + 7}[g.rng.IntN(5)]
			stop = g.storeLogs(last+gap, acked)
		}
	case p < 76:
		v := first + g.rng.Uint64N(last-first+10)
		if err := g.s.StageCommitIndex(v); err != nil {
			return true, fmt.Errorf("StageCommitIndex(%d): %v", v, err)
		}
		g.staged = v
		g.ops = append(g.ops, fmt.Sprintf("StageCommitIndex(%d)", v))
	case p < 86:
		k := []string{"CurrentTerm", "LastVoteTerm", string(mgOnlyKey(g.id))}[g.rng.IntN(3)]
		v := g.rng.Uint64()
		if err := g.s.SetUint64([]byte(k), v); err != nil {
			return g.stableFailed(fmt.Sprintf("SetUint64(%q, %d)", k, v), err)
		}
		g.u64[k] = v
		g.ops = append(g.ops, fmt.Sprintf("SetUint64(%q, %d)", k, v))
	case p < 90:
		v := fmt.Appendf(nil, "node-of-group-%d-%d", g.id, g.rng.IntN(1000))
		if err := g.s.Set([]byte("LastVoteCand"), v); err != nil {
			return g.stableFailed(fmt.Sprintf("Set(LastVoteCand, %q)", v), err)
		}
		g.vals["LastVoteCand"] = v
		g.ops = append(g.ops, fmt.Sprintf("Set(LastVoteCand, %q)", v))
	default: // read an entry of its own, and probe another group's key
		var out raft.Log
		if last != 0 {
			i := first + g.rng.Uint64N(last-first+1)
			if err := g.s.GetLog(i, &out); err != nil {
				return true, fmt.Errorf("GetLog(%d): %v", i, err)
			}
			if err := ctLogsEqual(&out, m.get(i)); err != nil {
				return true, fmt.Errorf("GetLog(%d): %v", i, err)
			}
		}
		o := others[g.rng.IntN(len(others))]
		if v, err := g.s.Get(mgOnlyKey(o)); err != nil || len(v) != 0 {
			return true, fmt.Errorf("Get(%q), a key only group %d sets, = %x, %v", mgOnlyKey(o), o, v, err)
		}
	}
	if stop {
		return true, nil
	}
	if err := ctCheckBounds(g.s, g.model()); err != nil {
		return true, fmt.Errorf("after %s: %v", g.ops[len(g.ops)-1], err)
	}
	if c, _ := g.s.GetCommitIndex(); c > g.model().last() {
		return true, fmt.Errorf("GetCommitIndex %d above LastIndex %d", c, g.model().last())
	}
	return false, nil
}

// work runs calls random calls, or fewer if one fails. A failed call is an
// error unless a fault was injected this round.
func (g *mgGroup) work(calls int, flush FlushMode, faulty bool, others []uint64) error {
	for i := 0; i < calls; i++ {
		stop, err := g.step(flush, others)
		if err != nil {
			return err
		}
		if stop {
			if !faulty {
				return fmt.Errorf("a call failed with no fault injected: %s", g.ops[len(g.ops)-1])
			}
			return nil
		}
	}
	return nil
}

// mgRun is one seeded run of TestGroupsCrashRandomized.
type mgRun struct {
	t          *testing.T
	seed       uint64
	rng        *rand.Rand // the driver's: rounds, faults, crashes
	flush      FlushMode
	checkpoint time.Duration
	fs         *faultfs.FS
	db         *DB
	groups     []*mgGroup
	round      int
	log        []string // this round's driver events
	stats      *mgStats
}

type mgStats struct {
	crashes, faults, failedCalls, older, released, batches, maxSegments, dropped int
}

func (r *mgRun) fatalf(format string, args ...any) {
	r.t.Helper()
	var b strings.Builder
	for _, g := range r.groups {
		ops := g.ops
		if len(ops) > 25 {
			ops = append([]string{"..."}, ops[len(ops)-25:]...)
		}
		fmt.Fprintf(&b, "\n  group %d: %s", g.id, strings.Join(ops, "; "))
	}
	r.t.Fatalf("seed %d (%s flush, checkpoint every %v; rerun with %s=%d), round %d: %s\ndriver: %s\ncalls of the round:%s",
		r.seed, crFlushName(r.flush), r.checkpoint, mgSeedEnv, r.seed, r.round, fmt.Sprintf(format, args...),
		strings.Join(r.log, "; "), b.String())
}

func (r *mgRun) ids() []uint64 {
	ids := make([]uint64, len(r.groups))
	for i, g := range r.groups {
		ids[i] = g.id
	}
	slices.Sort(ids)
	return ids
}

// open opens the DB, checks that it remembers every group created (unless
// it is new), and takes each group's store.
func (r *mgRun) open(fresh bool) {
	r.t.Helper()
	db, err := OpenDB(mgDir, mgOptions(r.fs, r.flush, r.checkpoint))
	if err != nil {
		r.fatalf("OpenDB: %v", err)
	}
	r.db = db
	if got, want := db.Groups(), r.ids(); !fresh && !slices.Equal(got, want) {
		r.fatalf("Groups() = %v after reopening, want %v", got, want)
	}
	for _, g := range r.groups {
		if g.s, err = db.Store(g.id); err != nil {
			r.fatalf("Store(%d): %v", g.id, err)
		}
	}
}

func (r *mgRun) newGroup(id uint64) *mgGroup {
	return &mgGroup{
		id:     id,
		rng:    rand.New(rand.NewPCG(r.seed, id)),
		states: []*ctModel{{}},
		term:   1,
		u64:    map[string]uint64{},
		vals:   map[string][]byte{},
	}
}

// injectFault injects one fault that some call of the round runs into.
func (r *mgRun) injectFault() {
	var f faultfs.Fault
	switch r.rng.IntN(5) {
	case 0, 1: // an fdatasync of a segment fails
		f = faultfs.Fault{Op: faultfs.OpSync, Path: mgDir + "/log/0", After: r.rng.IntN(20)}
	case 2, 3: // a write of a segment fails, perhaps in the middle of a batch
		f = faultfs.Fault{Op: faultfs.OpWrite, Path: mgDir + "/log/0", After: r.rng.IntN(60)}
	case 4: // syncing an index file for a checkpoint fails
		f = faultfs.Fault{Op: faultfs.OpMsync, Path: mgDir + "/" + indexDirName + "/", After: r.rng.IntN(10)}
	}
	r.fs.Inject(f)
	r.stats.faults++
	r.log = append(r.log, fmt.Sprintf("inject %v fault on %q after %d", f.Op, f.Path, f.After))
}

// runRound runs every group's goroutine and, while they run, creates a
// late group from a goroutine of its own.
func (r *mgRun) runRound(faulty bool) {
	r.t.Helper()
	var late *mgGroup
	if n := len(r.groups); n < len(mgGroupIDs) && (r.round == 3 || r.round == 7) {
		late = r.newGroup(mgGroupIDs[n])
	}
	all := r.ids()
	if late != nil {
		all = append(all, late.id)
	}
	others := func(id uint64) []uint64 {
		var out []uint64
		for _, o := range all {
			if o != id {
				out = append(out, o)
			}
		}
		return out
	}
	// In two rounds without faults one group is dropped while the others
	// write, and created again: its successor starts empty, with a term
	// of its own, so that an entry of the dropped incarnation read
	// through it never compares equal.
	dropAt, successor := -1, (*mgGroup)(nil)
	if !faulty && (r.round == 5 || r.round == 9) {
		dropAt = r.rng.IntN(len(r.groups))
		old := r.groups[dropAt]
		successor = r.newGroup(old.id)
		successor.rng = rand.New(rand.NewPCG(r.seed, old.id^uint64(r.round)<<56))
		successor.term = 1<<20 + uint64(r.round)
	}
	errs := make([]error, len(r.groups)+1)
	var wg sync.WaitGroup
	for i, g := range r.groups {
		g.ops = g.ops[:0]
		calls := 5 + r.rng.IntN(25)
		wg.Add(1)
		if i == dropAt {
			go func() {
				defer wg.Done()
				errs[i] = r.dropAndCreate(g, successor, calls, others(g.id))
			}()
			continue
		}
		go func() {
			defer wg.Done()
			errs[i] = g.work(calls, r.flush, faulty, others(g.id))
		}()
	}
	if late != nil {
		calls := 5 + r.rng.IntN(25)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := r.db.Store(late.id)
			if err != nil {
				if failure := r.db.Err(); !faulty || failure == nil || err.Error() != failure.Error() {
					errs[len(errs)-1] = fmt.Errorf("Store(%d) while the others write: %v", late.id, err)
				}
				return // refused: the DB failed, the group is not created
			}
			late.s = s
			late.ops = append(late.ops, "created")
			errs[len(errs)-1] = late.work(calls, r.flush, faulty, others(late.id))
		}()
	}
	wg.Wait()
	if successor != nil && successor.s != nil {
		r.groups[dropAt] = successor
		r.stats.dropped++
		r.log = append(r.log, fmt.Sprintf("dropped group %d and created it again", successor.id))
	}
	if late != nil && late.s != nil {
		r.groups = append(r.groups, late)
		r.log = append(r.log, fmt.Sprintf("created group %d", late.id))
	}
	for i, err := range errs {
		if err != nil {
			var id uint64
			if i < len(r.groups) {
				id = r.groups[i].id
			} else if late != nil {
				id = late.id
			}
			r.fatalf("group %d: %v", id, err)
		}
	}
	for _, g := range r.groups {
		if g.inflight {
			r.stats.failedCalls++
		}
		for _, op := range g.ops {
			if strings.HasPrefix(op, "StoreLogs") {
				r.stats.batches++
			}
		}
	}
}

// dropAndCreate drops g while the other groups write, checks that its
// Store fails and that the group created again with its id is empty and
// holds none of its keys, and runs calls random calls on that successor.
func (r *mgRun) dropAndCreate(g, successor *mgGroup, calls int, others []uint64) error {
	if err := r.db.DropGroup(g.id); err != nil {
		return fmt.Errorf("DropGroup while the others write: %v", err)
	}
	if _, err := g.s.LastIndex(); !errors.Is(err, ErrGroupDropped) {
		return fmt.Errorf("LastIndex of the dropped group's Store = %v, want ErrGroupDropped", err)
	}
	s, err := r.db.Store(g.id)
	if err != nil {
		return fmt.Errorf("Store after DropGroup: %v", err)
	}
	successor.s = s
	successor.ops = append(successor.ops, "dropped and created again")
	if err := ctCheckStore(s, &ctModel{}); err != nil {
		return fmt.Errorf("created again after DropGroup: %v", err)
	}
	for _, k := range []string{"CurrentTerm", "LastVoteTerm", "LastVoteCand", string(mgOnlyKey(g.id))} {
		if v, err := s.Get([]byte(k)); err != nil || len(v) != 0 {
			return fmt.Errorf("created again after DropGroup: Get(%q) = %x, %v; want nothing", k, v, err)
		}
	}
	return successor.work(calls, r.flush, false, others)
}

// checkQuiet checks, with nothing in flight, that every group holds its
// model and that the log keeps no segment that no group needs. A DeleteRange
// that deletes nothing still releases segments; it makes the check exact.
func (r *mgRun) checkQuiet() {
	r.t.Helper()
	for _, g := range r.groups {
		if err := ctCheckStore(g.s, g.model()); err != nil {
			r.fatalf("before the crash: %v", err)
		}
	}
	r.checkIsolation("before the crash")
	g := r.groups[r.rng.IntN(len(r.groups))]
	if err := g.s.DeleteRange(0, 0); err != nil {
		r.fatalf("group %d: DeleteRange(0, 0): %v", g.id, err)
	}
	keep := r.db.log.End()
	for _, g := range r.groups {
		if pos, ok := g.s.firstPosition(); ok && pos < keep {
			keep = pos
		}
	}
	segs := r.db.log.Segments()
	r.stats.maxSegments = max(r.stats.maxSegments, len(segs))
	if segs[0].Base > 0 {
		r.stats.released++
	}
	for _, sg := range segs[:len(segs)-1] {
		if sg.Base+sg.Size <= keep {
			r.fatalf("segment %s (%d..%d) is kept, but every group starts at or after %d: %v",
				sg.Path, sg.Base, sg.Base+sg.Size, keep, segs)
		}
	}
}

// checkIsolation checks that no group sees another's entries or keys:
// every index another group holds (its ends and middle) that is not in this
// group's own range reads as raft.ErrLogNotFound, and the key only the other
// group sets reads as missing. (ctCheckStore already compares each entry of
// a group byte for byte with entries that name their group.)
func (r *mgRun) checkIsolation(when string) {
	r.t.Helper()
	var out raft.Log
	for _, g := range r.groups {
		m := g.model()
		for _, h := range r.groups {
			if h == g {
				continue
			}
			hm := h.model()
			for _, i := range []uint64{hm.first, hm.first + (hm.last()-hm.first)/2, hm.last()} {
				if i == 0 || m.get(i) != nil {
					continue
				}
				if err := g.s.GetLog(i, &out); err != raft.ErrLogNotFound {
					r.fatalf("%s: group %d (%v) GetLog(%d), an index only group %d holds, = %v (entry %d of group %q), want raft.ErrLogNotFound",
						when, g.id, m, i, h.id, err, out.Index, out.Extensions)
				}
			}
			if v, err := g.s.Get(mgOnlyKey(h.id)); err != nil || len(v) != 0 {
				r.fatalf("%s: group %d Get(%q), a key only group %d sets, = %x, %v", when, g.id, mgOnlyKey(h.id), h.id, v, err)
			}
			if v, err := g.s.GetUint64(mgOnlyKey(h.id)); err != nil || v != 0 {
				r.fatalf("%s: group %d GetUint64(%q), a key only group %d sets, = %d, %v", when, g.id, mgOnlyKey(h.id), h.id, v, err)
			}
		}
	}
}

// crash crashes the FS with nothing in flight and closes the old DB.
func (r *mgRun) crash() {
	var next *faultfs.FS
	switch x := r.rng.IntN(10); {
	case x < 6:
		next = r.fs.Crash()
		r.log = append(r.log, "crash")
	case x < 8:
		next = r.fs.CrashKeepAll()
		r.log = append(r.log, "crash keeping every write")
		// A crash of the process alone loses nothing acknowledged, in
		// either flush mode; a call in flight may or may not survive.
		for _, g := range r.groups {
			if g.inflight {
				g.durable = max(g.durable, len(g.states)-2)
			} else {
				g.durable = len(g.states) - 1
			}
		}
	default:
		next = r.fs.CrashDropAll()
		r.log = append(r.log, "crash dropping every unsynced write")
	}
	r.db.Close() // fails: the old FS is gone
	r.fs = next
	r.stats.crashes++
}

// verify finds, for every group, the state the reopened DB holds among
// those that may survive, and makes it the start of the next round.
func (r *mgRun) verify(when string) {
	r.t.Helper()
	for _, g := range r.groups {
		cands := g.states[g.durable:]
		var why []string
		found := -1
		for k := len(cands) - 1; k >= 0; k-- {
			err := ctCheckStore(g.s, cands[k])
			if err == nil {
				found = k
				break
			}
			why = append(why, fmt.Sprintf("state after call %d: %v", g.durable+k, err))
		}
		if found < 0 {
			r.fatalf("%s: group %d matches none of the %d states that may survive (newest first):\n  %s",
				when, g.id, len(cands), strings.Join(why, "\n  "))
		}
		if found < len(cands)-1 {
			r.stats.older++
		}
		g.states = []*ctModel{cands[found]}
		g.durable = 0
		g.inflight = false
		g.staged = 0
		if c, _ := g.s.GetCommitIndex(); c > g.model().last() {
			r.fatalf("%s: group %d GetCommitIndex %d above LastIndex %d", when, g.id, c, g.model().last())
		}
		for k, v := range g.u64 {
			if got, err := g.s.GetUint64([]byte(k)); err != nil || got != v {
				r.fatalf("%s: group %d GetUint64(%q) = %d, %v; want %d (SetUint64 returned nil)", when, g.id, k, got, err, v)
			}
		}
		for k, v := range g.vals {
			if got, err := g.s.Get([]byte(k)); err != nil || !bytes.Equal(got, v) {
				r.fatalf("%s: group %d Get(%q) = %q, %v; want %q (Set returned nil)", when, g.id, k, got, err, v)
			}
		}
	}
	r.checkIsolation(when)
}

// mgSeeds returns TestGroupsCrashRandomized's seeds.
func mgSeeds(t *testing.T) []uint64 { return testSeeds(t, mgSeedEnv, 10) }

// TestGroupsCrashRandomized runs ten, later twelve, groups of one DB from
// one goroutine each: random batches, prefix compactions, suffix
// truncations, deletions of everything followed by appends far ahead,
// staged commit indexes and stable keys, with 32 KiB segments so that
// segments roll and are released all the time. After every round, with
// nothing in flight, it checks every group and that no segment is kept that
// no group needs, crashes the file system (power loss with random page
// outcomes, dropping every unsynced write, or a process crash keeping them
// all), reopens the DB and checks every group against its own model: with
// SyncFlush every call that returned nil survives (a call that failed after
// an injected fault may or may not); with AsyncFlush a process crash loses
// nothing acknowledged, and a power loss loses only batches the group wrote
// after its last DeleteRange. Stable keys always survive, no group ever sees
// another's entries or keys, and the DB remembers every group created.
//
// Each group's calls depend only on the seed; how they interleave, and so
// the exact bytes a crash leaves, does not. Set RAFTSTORE_GROUPS_SEED to
// run one seed.
func TestGroupsCrashRandomized(t *testing.T) {
	stats := &mgStats{}
	seeds := mgSeeds(t)
	for _, seed := range seeds {
		flush := SyncFlush
		if seed%5 == 0 {
			flush = AsyncFlush
		}
		checkpoint := time.Hour // only when a release or Close asks
		if seed%3 == 0 {
			checkpoint = 3 * time.Millisecond // also in the background, while groups write
		}
		t.Run(fmt.Sprintf("seed%d-%s", seed, crFlushName(flush)), func(t *testing.T) {
			r := &mgRun{
				t:          t,
				seed:       seed,
				rng:        rand.New(rand.NewPCG(seed, 0x6d67)),
				flush:      flush,
				checkpoint: checkpoint,
				fs:         faultfs.New(int64(seed)),
				stats:      stats,
			}
			for _, id := range mgGroupIDs[:mgWorkers] {
				r.groups = append(r.groups, r.newGroup(id))
			}
			r.open(true)
			for r.round = 0; r.round < mgRounds; r.round++ {
				r.log = r.log[:0]
				faulty := r.rng.IntN(5) == 0
				if faulty {
					r.injectFault()
				}
				r.runRound(faulty)
				if !faulty {
					r.checkQuiet()
				}
				r.crash()
				r.open(false)
				r.verify("after the crash")
			}
			// A clean close and reopen at the end.
			r.log = append(r.log[:0], "clean close")
			if err := r.db.Close(); err != nil {
				r.fatalf("clean Close: %v", err)
			}
			r.open(false)
			r.verify("after a clean close")
			if err := r.db.Close(); err != nil {
				r.fatalf("Close: %v", err)
			}
		})
	}
	t.Logf("%d crash points, %d faults injected, %d calls failed in flight, %d batches, %d groups dropped and created again; %d recoveries of a group found an older state than its last call's; %d rounds ended with the log's first segment released; at most %d segments",
		stats.crashes, stats.faults, stats.failedCalls, stats.batches, stats.dropped, stats.older, stats.released, stats.maxSegments)
	if !t.Failed() && len(seeds) > 1 {
		if stats.crashes < 100 {
			t.Fatalf("only %d crash points", stats.crashes)
		}
		if stats.released == 0 {
			t.Fatal("no segment was ever released: the test does not test what it says")
		}
		if stats.dropped < 5 {
			t.Fatalf("only %d groups dropped", stats.dropped)
		}
	}
}

// mgCountingFS is the operating system's file system, counting the data
// syncs of commit-log segments. Before each one it waits, briefly, until
// every writer still running is inside StoreLogs: a disk slower than the
// writers, so that the test does not depend on how fast the machine's
// fdatasync is. A log that synced for each StoreLogs would still sync once
// per call.
type mgCountingFS struct {
	vfs.FS
	logDir  string
	ready   sync.Map     // names, as opened, of the segment files in place
	syncs   atomic.Int64 // data syncs of segments in place
	inCall  atomic.Int64 // writers inside StoreLogs
	running atomic.Int64 // writers not finished
}

// OpenFile wraps the files of the log directory: segments are created
// under a temporary name and renamed into place once prepared.
func (fs *mgCountingFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Dir(name) != fs.logDir {
		return f, err
	}
	if mgIsSegmentName(filepath.Base(name)) {
		fs.ready.Store(name, true)
	}
	return &mgCountingFile{File: f, fs: fs, name: name}, nil
}

func (fs *mgCountingFS) Rename(oldname, newname string) error {
	if err := fs.FS.Rename(oldname, newname); err != nil {
		return err
	}
	if filepath.Dir(newname) == fs.logDir && mgIsSegmentName(filepath.Base(newname)) {
		fs.ready.Store(oldname, true)
	}
	return nil
}

// mgIsSegmentName reports a commit-log segment's name: 20 digits.
func mgIsSegmentName(name string) bool {
	if len(name) != 20 {
		return false
	}
	for _, c := range name {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

type mgCountingFile struct {
	vfs.File
	fs   *mgCountingFS
	name string // as opened
}

func (f *mgCountingFile) Sync() error {
	if _, ok := f.fs.ready.Load(f.name); !ok {
		return f.File.Sync() // a segment being prepared, or another file
	}
	deadline := time.Now().Add(20 * time.Millisecond)
	for f.fs.inCall.Load() < f.fs.running.Load() && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	err := f.File.Sync()
	if err == nil {
		f.fs.syncs.Add(1)
	}
	return err
}

// TestGroupsShareGroupCommit has eight groups of one DB, on the real file
// system, each store batches from its own goroutine, and counts the data
// syncs of the commit log. Each goroutine waits for one StoreLogs before
// it makes the next, so if there are fewer syncs than calls, some sync
// completed the calls of several groups: their appends share one group
// commit.
func TestGroupsShareGroupCommit(t *testing.T) {
	const (
		groups = 8
		calls  = 100 // StoreLogs per group
		batch  = 4
	)
	dir := t.TempDir()
	fs := &mgCountingFS{FS: vfs.Default, logDir: filepath.Join(dir, logDirName)}
	opts := &Options{SegmentSize: 4 << 20, CheckpointInterval: time.Hour, FS: fs}
	db, err := OpenDB(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	stores := make([]*Store, groups)
	for g := range stores {
		if stores[g], err = db.Store(uint64(g + 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.log.Sync(); err != nil {
		t.Fatal(err)
	}
	before := fs.syncs.Load()
	models := make([]*ctModel, groups)
	errs := make([]error, groups)
	start := make(chan struct{})
	var wg sync.WaitGroup
	fs.running.Store(groups)
	for g, s := range stores {
		models[g] = &ctModel{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer fs.running.Add(-1)
			<-start
			for c := 0; c < calls; c++ {
				logs := make([]*raft.Log, batch)
				for i := range logs {
					logs[i] = mgEntry(s.Group(), uint64(c*batch+i+1), 1, 100)
				}
				fs.inCall.Add(1)
				err := s.StoreLogs(logs)
				fs.inCall.Add(-1)
				if err != nil {
					errs[g] = fmt.Errorf("group %d StoreLogs %d: %v", s.Group(), c, err)
					return
				}
				models[g].store(logs, 0)
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	syncs := fs.syncs.Load() - before
	total := int64(groups * calls)
	t.Logf("%d StoreLogs calls of %d groups took %d data syncs (%.1f calls per sync)", total, groups, syncs, float64(total)/float64(max(syncs, 1)))
	if syncs == 0 {
		t.Fatal("no data sync counted: the counting file system does not see the commit log's syncs")
	}
	if float64(syncs) >= 0.6*float64(total) {
		t.Fatalf("%d data syncs for %d StoreLogs calls from %d groups: the groups do not share a group commit", syncs, total, groups)
	}
	for g, s := range stores {
		if err := ctCheckStore(s, models[g]); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = OpenDB(dir, opts); err != nil {
		t.Fatal(err)
	}
	for g := range stores {
		s, err := db.Store(uint64(g + 1))
		if err != nil {
			t.Fatal(err)
		}
		if err := ctCheckStore(s, models[g]); err != nil {
			t.Fatalf("after reopen: %v", err)
		}
	}
}

// TestGroupsPinnedSegments has a slow group pin the shared log: group A
// stores a few entries and idles while group B stores many and compacts
// after each batch, as raft does after snapshots. No segment may go while A
// still holds its first entries, however far B compacts: A's PinnedBytes
// grows with every batch B writes, and B's stays small. Once A catches up
// and compacts its prefix, the segments are released and neither group
// pins more than a couple of segments.
func TestGroupsPinnedSegments(t *testing.T) {
	const (
		segSize = 32 << 10
		keepB   = 20 // entries B keeps after each compaction
	)
	dir := t.TempDir()
	opts := &Options{SegmentSize: segSize}
	db, err := OpenDB(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	a, _ := db.Store(1)
	b, _ := db.Store(2)
	if p := a.PinnedBytes(); p != 0 {
		t.Fatalf("empty group A pins %d bytes", p)
	}
	ma, mb := &ctModel{}, &ctModel{}
	store := func(s *Store, m *ctModel, n, size int) {
		t.Helper()
		logs := make([]*raft.Log, n)
		for i := range logs {
			logs[i] = mgEntry(s.Group(), m.last()+1+uint64(i), 1, size)
		}
		if m.last() == 0 {
			for i := range logs {
				logs[i] = mgEntry(s.Group(), uint64(i+1), 1, size)
			}
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		m.store(logs, 0)
	}
	compact := func(s *Store, m *ctModel, hi uint64) {
		t.Helper()
		if err := s.DeleteRange(m.first, hi); err != nil {
			t.Fatal(err)
		}
		m.deleteRange(m.first, hi)
	}
	store(a, ma, 5, 100)
	initial := ctSegmentFiles(t, dir)
	pinnedA := a.PinnedBytes()
	for i := 0; i < 40; i++ { // about 360 KB: a dozen segments
		store(b, mb, 8, 1000)
		if mb.last()-mb.first+1 > keepB {
			compact(b, mb, mb.last()-keepB)
		}
		segs := ctSegmentFiles(t, dir)
		for _, base := range initial {
			if !slices.Contains(segs, base) {
				t.Fatalf("batch %d: segment %d, which holds group A's first entries, was removed: %v", i, base, segs)
			}
		}
		if p := a.PinnedBytes(); p <= pinnedA {
			t.Fatalf("batch %d: A pins %d bytes, %d before B's batch: PinnedBytes does not grow with the log", i, p, pinnedA)
		} else {
			pinnedA = p
		}
		if p := b.PinnedBytes(); p <= 0 || p > segSize {
			t.Fatalf("batch %d: B pins %d bytes after keeping %d entries of 1 KB", i, p, keepB)
		}
	}
	held := ctSegmentFiles(t, dir)
	if len(held) < 10 || held[0] != 0 {
		t.Fatalf("segments %v while A holds its first entries: want every one since the start", held)
	}
	if pinnedA < int64(len(held)-2)*segSize {
		t.Fatalf("A pins %d bytes, but the %d segments it holds are %d bytes", pinnedA, len(held), int64(len(held))*segSize)
	}
	if err := ctCheckStore(a, ma); err != nil {
		t.Fatal(err)
	}

	// A catches up and compacts everything but its newest entries.
	store(a, ma, 3, 100)
	compact(a, ma, ma.last()-2)
	released := ctSegmentFiles(t, dir)
	pa, pb := a.PinnedBytes(), b.PinnedBytes()
	t.Logf("A pinned %d bytes over %d segments; after A compacted, %d segments, A pins %d, B %d", pinnedA, len(held), len(released), pa, pb)
	if released[0] == 0 || len(released) > 3 {
		t.Fatalf("segments %v after both groups compacted, were %v", released, held)
	}
	if pa <= 0 || pa > segSize || pb <= 0 || pb > segSize || pa >= pinnedA {
		t.Fatalf("after A compacted, A pins %d bytes (was %d) and B %d: want both within a segment", pa, pinnedA, pb)
	}
	for _, x := range []struct {
		s *Store
		m *ctModel
	}{{a, ma}, {b, mb}} {
		if err := ctCheckStore(x.s, x.m); err != nil {
			t.Fatal(err)
		}
	}

	// The figures survive a reopen.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = OpenDB(dir, opts); err != nil {
		t.Fatal(err)
	}
	a, _ = db.Store(1)
	b, _ = db.Store(2)
	if got := a.PinnedBytes(); got != pa {
		t.Errorf("A pins %d bytes after reopen, %d before", got, pa)
	}
	if got := b.PinnedBytes(); got != pb {
		t.Errorf("B pins %d bytes after reopen, %d before", got, pb)
	}
	if err := ctCheckStore(a, ma); err != nil {
		t.Fatal(err)
	}
	if err := ctCheckStore(b, mb); err != nil {
		t.Fatal(err)
	}
}

// TestGroupsCheckpointNewerThanReplayKeepsCommitIndex takes a checkpoint
// while group 2 stages a commit index, stores a batch, truncates a suffix
// below the staged index, deletes everything and goes on far ahead: the
// checkpoint hook reads the replay position, waits for group 1's index sync,
// and records group 2's state after all of that. After a crash, recovery
// replays those records on top of that newer state; group 2 must come back
// with the commit index it had, which the suffix truncation lowered.
// (TestGroupsCrashRandomized runs into the same interleaving with
// background checkpoints, e.g. RAFTSTORE_GROUPS_SEED=24, but only now and
// then.)
func TestGroupsCheckpointNewerThanReplayKeepsCommitIndex(t *testing.T) {
	fs := faultfs.New(1)
	db, err := OpenDB(crDir, crOptions(fs, SyncFlush))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := db.Store(1)
	b, _ := db.Store(2)
	mb := &ctModel{}
	store := func(logs []*raft.Log, staged uint64) {
		t.Helper()
		if err := b.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		mb.store(logs, staged)
	}
	entries := func(first uint64, n int, term uint64) []*raft.Log {
		logs := make([]*raft.Log, n)
		for i := range logs {
			logs[i] = mgEntry(2, first+uint64(i), term, 30)
		}
		return logs
	}
	store(entries(1, 10, 1), 0)
	if err := a.StoreLogs(ctEntries(1, 3, 1, 20)); err != nil { // dirty index slots
		t.Fatal(err)
	}
	h := &crHook{}
	fs.OnSync(h.hook)
	h.arm("(*indexFile).sync")
	cpErr := make(chan error, 1)
	go func() { cpErr <- db.log.Checkpoint() }()
	<-h.entered
	crWaitForStack(t, "(*DB).checkpointMeta", "(*indexFile).sync")

	if err := b.StageCommitIndex(15); err != nil {
		t.Fatal(err)
	}
	store(entries(11, 6, 1), 15)
	for _, d := range [][2]uint64{{11, 16}, {1, 10}} { // a suffix, then everything
		if err := b.DeleteRange(d[0], d[1]); err != nil {
			t.Fatal(err)
		}
		mb.deleteRange(d[0], d[1])
	}
	store(entries(100, 6, 2), 0)
	if err := ctCheckStore(b, mb); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	if err := <-cpErr; err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	fs.OnSync(nil)
	fs = fs.CrashKeepAll()
	db.Close()
	if db, err = OpenDB(crDir, crOptions(fs, SyncFlush)); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer db.Close()
	b, _ = db.Store(2)
	if err := ctCheckStore(b, mb); err != nil {
		t.Fatalf("after the crash (%v before it): %v", mb, err)
	}
}
