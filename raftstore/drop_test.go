package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// Dropping groups: DB.DropGroup removes a group durably while the others
// go on, a crash at any step leaves the group whole or gone (never part of
// it, never its entries under a group created again with its id), and the
// segments only it held are released.

// dgEntries returns n entries from first, whose data depends on the
// incarnation, so that an old incarnation's entry read through a new one
// never compares equal.
func dgEntries(first uint64, n int, incarnation uint64) []*raft.Log {
	logs := ctEntries(first, n, incarnation, 300)
	for _, l := range logs {
		l.Extensions = fmt.Appendf(nil, "incarnation %d", incarnation)
	}
	return logs
}

// dgEnv is a DB of groups 1, 2 and 3 on a faultfs, with a model of each.
type dgEnv struct {
	t      *testing.T
	fs     *faultfs.FS
	opts   *Options
	db     *DB
	models map[uint64]*ctModel
	terms  map[uint64]uint64 // CurrentTerm of each group
}

func newDGEnv(t *testing.T, seed int64, flush FlushMode) *dgEnv {
	fs := faultfs.New(seed)
	e := &dgEnv{t: t, fs: fs, opts: crOptions(fs, flush), models: map[uint64]*ctModel{}, terms: map[uint64]uint64{}}
	e.opts.SegmentSize = 32 << 10
	e.open()
	for g := uint64(1); g <= 3; g++ {
		e.models[g] = &ctModel{}
		e.store(g, dgEntries(1, 40, 1))
		e.setTerm(g, 10*g)
	}
	if err := e.db.log.Checkpoint(); err != nil { // records on either side of it
		t.Fatal(err)
	}
	for g := uint64(1); g <= 3; g++ {
		e.store(g, dgEntries(41, 20, 1))
	}
	if flush == AsyncFlush {
		if err := e.db.Sync(); err != nil { // acknowledged
			t.Fatal(err)
		}
	}
	return e
}

func (e *dgEnv) open() {
	e.t.Helper()
	db, err := OpenDB(crDir, e.opts)
	if err != nil {
		e.t.Fatalf("OpenDB: %v", err)
	}
	e.db = db
}

func (e *dgEnv) store(g uint64, logs []*raft.Log) {
	e.t.Helper()
	s, err := e.db.Store(g)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := s.StoreLogs(logs); err != nil {
		e.t.Fatalf("group %d StoreLogs: %v", g, err)
	}
	e.models[g].store(logs, 0)
}

func (e *dgEnv) setTerm(g, term uint64) {
	e.t.Helper()
	s, err := e.db.Store(g)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), term); err != nil {
		e.t.Fatal(err)
	}
	e.terms[g] = term
}

// crash crashes the file system in one of three ways and reopens the DB.
func (e *dgEnv) crash(mode int) {
	e.t.Helper()
	switch mode {
	case 0:
		e.fs = e.fs.Crash()
	case 1:
		e.fs = e.fs.CrashKeepAll()
	default:
		e.fs = e.fs.CrashDropAll()
	}
	e.db.Close() // fails: the old file system is gone
	e.opts.FS = e.fs
	e.open()
}

// check checks every group against its model; a group without one must be
// gone: not listed, no index directory, and empty with no keys when
// created again.
func (e *dgEnv) check(what string) {
	e.t.Helper()
	var want []uint64
	for g, m := range e.models {
		if m != nil {
			want = append(want, g)
		}
	}
	slices.Sort(want)
	if got := e.db.Groups(); !slices.Equal(got, want) {
		e.t.Fatalf("%s: Groups() = %v, want %v", what, got, want)
	}
	for g, m := range e.models {
		if m == nil {
			if _, err := e.fs.ReadDir(e.db.groupDir(g)); !errors.Is(err, os.ErrNotExist) {
				e.t.Fatalf("%s: the index directory of dropped group %d is there: %v", what, g, err)
			}
			continue
		}
		s, err := e.db.Store(g)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := ctCheckStore(s, m); err != nil {
			e.t.Fatalf("%s: %v", what, err)
		}
		if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != e.terms[g] {
			e.t.Fatalf("%s: group %d CurrentTerm = %d, %v; want %d", what, g, v, err, e.terms[g])
		}
	}
}

// TestDropGroup drops a group of three while the others write: every call
// to its Store fails with ErrGroupDropped, the others keep their entries
// and keys, its index directory is gone, and the same id created again is
// an empty group whose entries never mix with the old ones, across a
// clean reopen and a crash.
func TestDropGroup(t *testing.T) {
	for _, flush := range []FlushMode{SyncFlush, AsyncFlush} {
		t.Run(crFlushName(flush), func(t *testing.T) {
			e := newDGEnv(t, 1, flush)
			old, _ := e.db.Store(2)
			if err := old.StageCommitIndex(30); err != nil {
				t.Fatal(err)
			}
			if err := e.db.DropGroup(2); err != nil {
				t.Fatalf("DropGroup: %v", err)
			}
			e.models[2] = nil
			delete(e.terms, 2)
			var out raft.Log
			calls := map[string]error{
				"StoreLogs":         old.StoreLogs(dgEntries(61, 1, 1)),
				"DeleteRange":       old.DeleteRange(1, 10),
				"GetLog":            old.GetLog(5, &out),
				"Set":               old.Set([]byte("k"), []byte("v")),
				"SetUint64":         old.SetUint64([]byte("CurrentTerm"), 99),
				"StageCommitIndex":  old.StageCommitIndex(5),
				"Close (of a DB's)": old.Close(),
			}
			_, calls["FirstIndex"] = old.FirstIndex()
			_, calls["LastIndex"] = old.LastIndex()
			_, calls["GetCommitIndex"] = old.GetCommitIndex()
			_, calls["Get"] = old.Get([]byte("CurrentTerm"))
			_, calls["GetUint64"] = old.GetUint64([]byte("CurrentTerm"))
			_, calls["Size"] = old.Size()
			for name, err := range calls {
				if !errors.Is(err, ErrGroupDropped) {
					t.Errorf("%s of the dropped group's Store = %v, want ErrGroupDropped", name, err)
				}
			}
			if err := e.db.Err(); err != nil {
				t.Fatalf("the calls to the dropped group failed the DB: %v", err)
			}
			if old.PinnedBytes() != 0 {
				t.Errorf("PinnedBytes of the dropped group = %d", old.PinnedBytes())
			}
			if err := e.db.DropGroup(2); err != nil {
				t.Fatalf("DropGroup of a group already dropped = %v, want nil", err)
			}
			// The others go on.
			e.store(1, dgEntries(61, 5, 1))
			e.store(3, dgEntries(61, 5, 1))
			e.check("after the drop")

			// The same id again: empty, no keys.
			s, err := e.db.Store(2)
			if err != nil {
				t.Fatal(err)
			}
			e.models[2] = &ctModel{}
			if err := ctCheckStore(s, e.models[2]); err != nil {
				t.Fatalf("group 2 created again: %v", err)
			}
			if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 0 {
				t.Fatalf("group 2 created again has CurrentTerm %d, %v", v, err)
			}
			if keys := e.db.stable.keys(2); len(keys) != 0 {
				t.Fatalf("group 2 created again has keys %q", keys)
			}
			// Entries inside the old incarnation's range, so that a
			// replay mixing the two shows.
			e.store(2, dgEntries(5, 10, 2))
			e.setTerm(2, 7)
			e.check("group 2 created again")
			if err := e.db.Close(); err != nil {
				t.Fatal(err)
			}
			e.open()
			e.check("after a clean reopen")
			e.store(2, dgEntries(15, 3, 2))
			if flush == AsyncFlush {
				if err := e.db.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			e.crash(0)
			e.check("after a crash")
			e.db.Close()

			in, err := Inspect(crDir, e.opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if g := in.Group(2); g.First != 5 || g.Last != 17 {
				t.Errorf("Inspect sees group 2 as %d..%d, want the new incarnation's 5..17", g.First, g.Last)
			}
		})
	}
}

// dgStep is a point in a DropGroup at which TestDropGroupCrash stops it:
// a fault injected on one of its file-system calls (nil: none), and
// whether the drop is durable once that call failed.
type dgStep struct {
	name    string
	fault   *faultfs.Fault
	durable bool // the drop must have happened (DropGroup got past its stable write)
	either  bool // the drop may or may not have happened
	failed  bool // DropGroup must return an error
	dirLeft bool // the index directory must still be there before the crash
}

// TestDropGroupCrash crashes at every step of a DropGroup: before it, at
// each of its file-system calls (by failing the call and crashing with
// each kind of crash), and after it, before and after the group is created
// again and stores entries at the indexes the old one had. The reopened DB
// must hold the group whole or not at all (whole only if the drop failed
// before its stable write), the other groups untouched, and a group
// created again only its own entries, also after a second crash.
func TestDropGroupCrash(t *testing.T) {
	idx := "/" + indexDirName + "/"
	steps := []dgStep{
		{name: "before"},
		{name: "log sync fails", fault: &faultfs.Fault{Op: faultfs.OpSync, Path: "/log/"}, failed: true, dirLeft: true},
		{name: "stable write fails", fault: &faultfs.Fault{Op: faultfs.OpWrite, Path: "/stable."}, failed: true, dirLeft: true},
		{name: "stable sync fails", fault: &faultfs.Fault{Op: faultfs.OpSync, Path: "/stable."}, either: true, failed: true, dirLeft: true},
		{name: "index file removal fails", fault: &faultfs.Fault{Op: faultfs.OpRemove, Path: idx + fmt.Sprintf("%020d/", 2)}, durable: true, dirLeft: true},
		{name: "index directory removal fails", fault: &faultfs.Fault{Op: faultfs.OpRemove, Path: idx + fmt.Sprintf("%020d", 2), After: 1}, durable: true, dirLeft: true},
		{name: "index directory sync fails", fault: &faultfs.Fault{Op: faultfs.OpSyncDir, Path: "/" + indexDirName}, durable: true},
		{name: "checkpoint of the segment release fails", fault: &faultfs.Fault{Op: faultfs.OpMsync, Path: idx}, durable: true, failed: true},
		{name: "after", durable: true},
	}
	crashes := 0
	for _, flush := range []FlushMode{SyncFlush, AsyncFlush} {
		for _, st := range steps {
			if flush == SyncFlush && st.fault != nil && st.fault.Path == "/log/" {
				continue // every entry is durable already: the drop syncs nothing
			}
			for mode := 0; mode < 3; mode++ {
				name := fmt.Sprintf("%s/%s/%s", crFlushName(flush), st.name, []string{"random", "keep all", "drop all"}[mode])
				t.Run(name, func(t *testing.T) {
					for seed := int64(1); seed <= 3; seed++ {
						crashes += dgCrashOnce(t, seed, flush, st, mode)
					}
				})
			}
		}
	}
	if crashes == 0 {
		t.Fatal("no crash was tested")
	}
}

// dgCrashOnce runs one case of TestDropGroupCrash; it returns the crashes
// it made.
func dgCrashOnce(t *testing.T, seed int64, flush FlushMode, st dgStep, mode int) int {
	e := newDGEnv(t, seed, flush)
	if flush == AsyncFlush {
		// Unsynced entries of the group to drop, and of another: the
		// drop must make them durable before its floor.
		e.store(2, dgEntries(61, 4, 1))
		e.store(3, dgEntries(61, 4, 1))
	}
	// Groups 1 and 3 compact, so that group 2 pins the log and the drop
	// releases segments (with a checkpoint); group 1 gets dirty index
	// slots, which that checkpoint msyncs.
	for _, g := range []uint64{1, 3} {
		s, _ := e.db.Store(g)
		if err := s.DeleteRange(1, 55); err != nil {
			t.Fatal(err)
		}
		e.models[g].deleteRange(1, 55)
	}
	e.store(1, dgEntries(e.models[1].last()+1, 4, 1))
	oldModel := e.models[2].clone()
	if flush == AsyncFlush {
		if err := e.db.Sync(); err != nil {
			t.Fatal(err)
		}
		e.store(2, dgEntries(65, 2, 1)) // unsynced, for the drop's log sync
		oldModel = e.models[2].clone()
	}
	var err error
	if st.name != "before" {
		if st.fault != nil {
			e.fs.Inject(*st.fault)
		}
		err = e.db.DropGroup(2)
		if st.fault == nil && err != nil {
			t.Fatalf("seed %d: DropGroup: %v", seed, err)
		}
		if st.failed != (err != nil) {
			t.Fatalf("seed %d: DropGroup with a %v fault = %v", seed, st.fault.Op, err)
		}
		_, derr := e.fs.ReadDir(e.db.groupDir(2))
		if st.dirLeft != (derr == nil) {
			t.Fatalf("seed %d: after DropGroup (%v), the index directory is there: %v", seed, err, derr == nil)
		}
	}
	if flush == AsyncFlush && st.name == "before" {
		if err := e.db.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	e.crash(mode)
	if st.durable || st.either && !e.db.stable.hasGroup(2) {
		e.models[2] = nil
		delete(e.terms, 2)
	} else if !slices.Contains(e.db.Groups(), 2) {
		t.Fatalf("seed %d: group 2 is gone after a drop that failed before its stable write (%v)", seed, err)
	} else {
		e.models[2] = oldModel
		// The last batch of the async case was never synced: a crash may
		// lose it.
		if flush == AsyncFlush {
			if s, _ := e.db.Store(2); s != nil {
				if last, _ := s.LastIndex(); last == 64 {
					e.models[2].deleteRange(65, 66)
				}
			}
		}
	}
	e.check(fmt.Sprintf("seed %d: after the crash", seed))

	// Drop it (again), create it again, crash, and again.
	if err := e.db.DropGroup(2); err != nil {
		t.Fatalf("seed %d: DropGroup after the crash: %v", seed, err)
	}
	e.models[2] = &ctModel{}
	delete(e.terms, 2)
	// Inside the old incarnation's range: a replay that mixed the two
	// would give it the old entries below.
	e.store(2, dgEntries(5, 10, 2))
	e.setTerm(2, 5)
	if seed == 2 {
		if err := e.db.log.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		e.store(2, dgEntries(15, 2, 2))
	}
	if flush == AsyncFlush {
		if err := e.db.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	e.crash(mode)
	e.check(fmt.Sprintf("seed %d: group 2 created again, after a crash", seed))
	e.store(2, dgEntries(e.models[2].last()+1, 3, 2))
	if err := e.db.Close(); err != nil {
		t.Fatal(err)
	}
	e.open()
	e.check(fmt.Sprintf("seed %d: after a clean reopen", seed))
	e.db.Close()
	return 2
}

// TestDropGroupCreatedAgainBeforeCheckpoint drops a group and creates it
// again with nothing written, so that a checkpoint describes the new
// incarnation with the replay position of the drop, and crashes: the group
// must come back empty, not with the old incarnation's indexes.
func TestDropGroupCreatedAgainBeforeCheckpoint(t *testing.T) {
	e := newDGEnv(t, 1, SyncFlush)
	if err := e.db.log.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := e.db.DropGroup(2); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Store(2); err != nil {
		t.Fatal(err)
	}
	e.models[2] = &ctModel{}
	delete(e.terms, 2)
	if err := e.db.log.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	e.crash(1)
	e.check("after the crash")
	e.store(2, dgEntries(5, 5, 2))
	e.crash(0)
	e.check("after a second crash")
	e.db.Close()
}

// TestDropGroupReleasesSegments fills the log with two groups, one of which
// compacts as raft does and one of which does not; dropping the one that
// pins the log must release every segment only it held, at once, and the
// floor the drop left is forgotten once those segments are gone.
func TestDropGroupReleasesSegments(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentSize: 64 << 10}
	db, err := OpenDB(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	a, _ := db.Store(1)
	b, _ := db.Store(2)
	ma := &ctModel{}
	for i := 0; i < 40; i++ {
		logs := ctEntries(ma.last()+1, 16, 1, 500)
		if err := a.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		ma.store(logs, 0)
		if err := b.StoreLogs(ctEntries(uint64(16*i+1), 16, 1, 500)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.DeleteRange(1, ma.last()-10); err != nil {
		t.Fatal(err)
	}
	ma.deleteRange(1, ma.last()-10)
	before := ctSegmentFiles(t, dir)
	if len(before) < 10 {
		t.Fatalf("only %d segment files with group 2 pinning 640 KB", len(before))
	}
	if p := b.PinnedBytes(); p < int64(len(before)-2)*opts.SegmentSize {
		t.Fatalf("group 2 pins %d bytes of %d segments", p, len(before))
	}
	if err := db.DropGroup(2); err != nil {
		t.Fatal(err)
	}
	after := ctSegmentFiles(t, dir)
	if len(after) > 2 {
		t.Fatalf("segments %v after dropping the group that pinned them, were %v", after, before)
	}
	if err := ctCheckStore(a, ma); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, indexDirName, fmt.Sprintf("%020d", 2))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("index directory of the dropped group: %v", err)
	}
	// The drop's floor (the end of the log when it began) is in the
	// last segment: kept until group 1 compacts past that segment too.
	if fl := db.stable.floorsCopy(); len(fl) != 1 {
		t.Fatalf("floors %v after the drop, want group 2's", fl)
	}
	for len(ctSegmentFiles(t, dir)) < 3 {
		logs := ctEntries(ma.last()+1, 16, 1, 500)
		if err := a.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		ma.store(logs, 0)
	}
	if err := a.DeleteRange(ma.first, ma.last()-1); err != nil {
		t.Fatal(err)
	}
	ma.deleteRange(ma.first, ma.last()-1)
	if fl := db.stable.floorsCopy(); len(fl) != 0 {
		t.Fatalf("floors %v after the segments below them were released (segments %v)", fl, ctSegmentFiles(t, dir))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = OpenDB(dir, opts); err != nil {
		t.Fatal(err)
	}
	if got := db.Groups(); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("Groups() after reopen = %v", got)
	}
	a, _ = db.Store(1)
	if err := ctCheckStore(a, ma); err != nil {
		t.Fatal(err)
	}
}

// TestDropGroupFloorAfterCut drops a group, creates it again, and has a
// repair cut the whole log (CutLog at its first position), so that the
// end of the log falls below the group's floor: the group's next entries
// are written below the floor and must survive a crash all the same.
func TestDropGroupFloorAfterCut(t *testing.T) {
	e := newDGEnv(t, 1, SyncFlush)
	if err := e.db.DropGroup(2); err != nil {
		t.Fatal(err)
	}
	delete(e.terms, 2)
	e.models[2] = &ctModel{}
	e.store(2, dgEntries(5, 3, 2))
	if err := e.db.Close(); err != nil {
		t.Fatal(err)
	}
	in, err := Inspect(crDir, e.opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := CutLog(crDir, e.opts, in.Log.First); err != nil {
		t.Fatal(err)
	}
	for g := range e.models {
		e.models[g] = &ctModel{}
	}
	e.open()
	e.check("after the cut")
	e.store(2, dgEntries(20, 4, 3))
	e.crash(0)
	e.check("after a crash")
	e.db.Close()
}

// TestDropGroupWhileReading drops a group while goroutines read it, write
// and read another group and take checkpoints: every read of the dropped
// group returns its entry or ErrGroupDropped, and only the latter once
// DropGroup has returned; the other group is untouched.
func TestDropGroupWhileReading(t *testing.T) {
	db, err := OpenDB(t.TempDir(), &Options{SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a, _ := db.Store(1)
	b, _ := db.Store(2)
	logs := ctEntries(1, 600, 1, 100)
	if err := b.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	ma := &ctModel{}
	var dropped atomic.Bool
	stop := make(chan struct{})
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			var out raft.Log
			for i := 0; ; i++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				idx := uint64(1 + (i*7+r)%600)
				after := dropped.Load()
				err := b.GetLog(idx, &out)
				switch {
				case errors.Is(err, ErrGroupDropped):
				case err != nil:
					errs <- fmt.Errorf("GetLog(%d) while dropping: %v", idx, err)
					return
				case after:
					errs <- fmt.Errorf("GetLog(%d) after DropGroup returned an entry", idx)
					return
				default:
					if err := ctLogsEqual(&out, logs[idx-1]); err != nil {
						errs <- fmt.Errorf("GetLog(%d) while dropping: %v", idx, err)
						return
					}
				}
			}
		}(r)
	}
	wg.Add(1)
	go func() { // another group writes, and checkpoints run
		defer wg.Done()
		for i := 0; i < 200; i++ {
			l := ctEntries(uint64(i+1), 1, 1, 50)
			if err := a.StoreLogs(l); err != nil {
				errs <- err
				return
			}
			ma.store(l, 0)
			if i%20 == 0 {
				if err := db.log.Checkpoint(); err != nil {
					errs <- err
					return
				}
			}
		}
		errs <- nil
	}()
	if err := db.DropGroup(2); err != nil {
		t.Fatal(err)
	}
	dropped.Store(true)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := ctCheckStore(a, ma); err != nil {
		t.Fatal(err)
	}
}
