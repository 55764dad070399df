package replica

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog/faultfs"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/raftstore"
)

// dyingFS is a vfs.FS over a faultfs.FS that dies at a chosen operation:
// from the dieAt-th write, sync, creation, rename or removal on (counted
// once armed), every such operation fails with EIO and changes nothing,
// as if the machine had lost power just before it. faultfs.Crash then
// gives what the disk holds. Reads still work, so the program runs on to
// its error paths, which cannot touch the disk either.
type dyingFS struct {
	*faultfs.FS

	mu    sync.Mutex
	armed bool     // guarded by mu
	dieAt int      // guarded by mu; 0 never
	dead  bool     // guarded by mu
	ops   []string // the operations counted, guarded by mu
}

// step counts a mutating operation and fails it once the FS is dead.
func (d *dyingFS) step(op, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return &os.PathError{Op: op, Path: name, Err: syscall.EIO}
	}
	if !d.armed {
		return nil
	}
	d.ops = append(d.ops, op+" "+name)
	if len(d.ops) == d.dieAt {
		d.dead = true
		return &os.PathError{Op: op, Path: name, Err: syscall.EIO}
	}
	return nil
}

func (d *dyingFS) arm(dieAt int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed, d.dieAt, d.ops = true, dieAt, nil
}

// state returns whether the FS died and the operations counted.
func (d *dyingFS) state() (bool, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dead, append([]string(nil), d.ops...)
}

func (d *dyingFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if flag&(os.O_CREATE|os.O_TRUNC) != 0 {
		if err := d.step("create", name); err != nil {
			return nil, err
		}
	}
	f, err := d.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &dyingFile{File: f, d: d}, nil
}

func (d *dyingFS) Remove(name string) error {
	if err := d.step("remove", name); err != nil {
		return err
	}
	return d.FS.Remove(name)
}

func (d *dyingFS) Rename(oldname, newname string) error {
	if err := d.step("rename", oldname+" -> "+newname); err != nil {
		return err
	}
	return d.FS.Rename(oldname, newname)
}

func (d *dyingFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := d.step("mkdir", dir); err != nil {
		return err
	}
	return d.FS.MkdirAll(dir, perm)
}

func (d *dyingFS) SyncDir(dir string) error {
	if err := d.step("syncdir", dir); err != nil {
		return err
	}
	return d.FS.SyncDir(dir)
}

type dyingFile struct {
	vfs.File
	d *dyingFS
}

func (f *dyingFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.d.step("write", f.Name()); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *dyingFile) Sync() error {
	if err := f.d.step("sync", f.Name()); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *dyingFile) Allocate(size int64) error {
	if err := f.d.step("allocate", f.Name()); err != nil {
		return err
	}
	return f.File.Allocate(size)
}

func (f *dyingFile) Truncate(size int64) error {
	if err := f.d.step("truncate", f.Name()); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *dyingFile) Map(size int) (vfs.Mapping, error) {
	m, err := f.File.Map(size)
	if err != nil {
		return nil, err
	}
	return &dyingMapping{Mapping: m, f: f}, nil
}

type dyingMapping struct {
	vfs.Mapping
	f *dyingFile
}

func (m *dyingMapping) Sync(off, n int) error {
	if err := m.f.d.step("msync", m.f.Name()); err != nil {
		return err
	}
	return m.Mapping.Sync(off, n)
}

// storage is a node's storage without raft: the DB, the log view, the
// snapshot store and a state machine, opened as Node.start opens them.
type storage struct {
	db   *raftstore.DB
	view *LogView
	snap *SnapStore
	fsm  *FSM
}

const storageDir = "/data"

func openStorage(fs vfs.FS, flush raftstore.FlushMode) (*storage, error) {
	if err := fs.MkdirAll(storageDir, 0o755); err != nil {
		return nil, err
	}
	db, err := raftstore.OpenDB(storageDir+"/store", &raftstore.Options{
		Flush: flush, SegmentSize: 1 << 20, FS: fs,
		// No background checkpoints, so that a run replays the same calls.
		CheckpointInterval: time.Hour,
	})
	if err != nil {
		return nil, err
	}
	st := &storage{db: db}
	if st.view, err = NewLogView(db, GroupsOf(0)); err == nil {
		st.snap, err = OpenSnapStore(fs, storageDir+"/snapshots", st.view, db, discardLogger())
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	st.fsm = NewFSM(st.view, discardLogger())
	return st, nil
}

// apply stores entries in live and applies them, as raft does.
func (st *storage) apply(logs []*raft.Log) error {
	if err := st.view.Live.StoreLogs(logs); err != nil {
		return err
	}
	st.fsm.ApplyBatch(logs)
	return nil
}

var testConf = raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: "127.0.0.1:1"}}}

// snapshot takes a snapshot of the state machine at index, as raft does.
func (st *storage) snapshot(index, term uint64) (string, error) {
	fs, err := st.fsm.Snapshot()
	if err != nil {
		return "", err
	}
	sink, err := st.snap.Create(raft.SnapshotVersionMax, index, term, testConf, 1, nil)
	if err != nil {
		return "", err
	}
	return sink.ID(), fs.Persist(sink)
}

// sent is a snapshot as a leader sends it.
type sent struct {
	meta   *raft.SnapshotMeta
	stream []byte
}

// send reads snapshot id of st as raft's leader does to send it.
func (st *storage) send(id string) (sent, error) {
	meta, rc, err := st.snap.Open(id)
	if err != nil {
		return sent{}, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err == nil && int64(len(b)) != meta.Size {
		err = fmt.Errorf("snapshot stream of %d bytes, its size says %d", len(b), meta.Size)
	}
	return sent{meta, b}, err
}

// install installs a snapshot a leader sent, as raft's follower does, and
// restores st's state machine from it.
func (st *storage) install(snap sent) (string, error) {
	meta := snap.meta
	sink, err := st.snap.Create(meta.Version, meta.Index, meta.Term, meta.Configuration, meta.ConfigurationIndex, nil)
	if err != nil {
		return "", err
	}
	n, err := io.Copy(sink, bytes.NewReader(snap.stream))
	if err == nil && n != meta.Size {
		err = fmt.Errorf("copied %d bytes of a snapshot of %d", n, meta.Size)
	}
	if err != nil {
		sink.Cancel()
		return "", err
	}
	if err := sink.Close(); err != nil {
		return "", err
	}
	_, rc, err := st.snap.Open(sink.ID())
	if err != nil {
		return "", err
	}
	return sink.ID(), st.fsm.Restore(rc)
}

// installLog is the committed log of the crash test's leader: records,
// no-ops and member entries, term 1 up to index 400, then term 2.
func installLog(from, to uint64) []*raft.Log {
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		l := &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, AppendedAt: time.Unix(0, int64(i))}
		if i > 400 {
			l.Term = 2
		}
		switch {
		case i%37 == 0:
			l.Type = raft.LogNoop
		case i%50 == 0:
			l.Data = EncodeMemberCmd(fmt.Sprintf("n%d", i), "127.0.0.1:1")
		case i%3 == 0:
			l.Data = AppendRecordCmd(nil, "c", i, 0, 1, 0, 0, []byte(fmt.Sprintf("rec-%d", i)))
		default:
			l.Data = AppendRecordCmd(nil, "", 0, 0, 0, 0, 0, bytes.Repeat([]byte{byte(i)}, int(i%200)))
		}
		logs = append(logs, l)
	}
	return logs
}

func trimEntry(index, term, below uint64) []*raft.Log {
	return []*raft.Log{{Index: index, Term: term, Type: raft.LogCommand, Data: EncodeTrimCmd(below), AppendedAt: time.Unix(0, int64(index))}}
}

// installScene is the crash test's cluster: a leader whose log and
// snapshots are fixed, and the node under test, built the same way for
// every crash point.
type installScene struct {
	t      *testing.T
	flush  raftstore.FlushMode
	leader *storage
	want   map[uint64]*raft.Log // the leader's committed log
	s1, s2 sent                 // the leader's snapshots, as sent
}

// The indexes of the scene.
const (
	sceneTrim1 = 150  // the first trim, below 120
	sceneS1    = 300  // the first snapshot the node receives
	sceneOld   = 360  // the node's own snapshot, after it applied up to here
	sceneTrim2 = 500  // the second trim, below 260
	sceneS2    = 1400 // the snapshot installed under crashes (1,141 entries, three batches)
	sceneStale = 1420 // the node's uncommitted entries reach here
)

func newInstallScene(t *testing.T, flush raftstore.FlushMode) *installScene {
	t.Helper()
	leader, err := openStorage(faultfs.New(1), flush)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leader.db.Close() })
	sc := &installScene{t: t, flush: flush, leader: leader, want: map[uint64]*raft.Log{}}
	add := func(logs []*raft.Log) {
		t.Helper()
		for _, l := range logs {
			sc.want[l.Index] = l
		}
		if err := leader.apply(logs); err != nil {
			t.Fatal(err)
		}
	}
	add(installLog(1, sceneTrim1-1))
	add(trimEntry(sceneTrim1, 1, 120))
	add(installLog(sceneTrim1+1, sceneS1))
	id, err := leader.snapshot(sceneS1, 1)
	if err == nil {
		sc.s1, err = leader.send(id)
	}
	if err != nil {
		t.Fatal(err)
	}
	add(installLog(sceneS1+1, sceneTrim2-1))
	add(trimEntry(sceneTrim2, 2, 260))
	add(installLog(sceneTrim2+1, sceneS2))
	if id, err = leader.snapshot(sceneS2, 2); err == nil {
		sc.s2, err = leader.send(id)
	}
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// node builds the node under test on fs: it received the first snapshot,
// applied the committed log up to sceneOld and took a snapshot there, and
// holds uncommitted entries of its own after it, up to past the second
// snapshot (a deposed leader's).
func (sc *installScene) node(fs vfs.FS) *storage {
	t := sc.t
	t.Helper()
	st, err := openStorage(fs, sc.flush)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.install(sc.s1); err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(sceneS1 + 1); i <= sceneOld; i++ {
		logs = append(logs, sc.want[i])
	}
	if err := st.apply(logs); err != nil {
		t.Fatal(err)
	}
	if _, err := st.snapshot(sceneOld, 1); err != nil {
		t.Fatal(err)
	}
	var stale []*raft.Log
	for i := uint64(sceneOld + 1); i <= sceneStale; i++ {
		stale = append(stale, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand,
			Data: AppendRecordCmd(nil, "", 0, 0, 0, 0, 0, []byte(fmt.Sprintf("stale-%d", i)))})
	}
	if err := st.view.Live.StoreLogs(stale); err != nil {
		t.Fatal(err)
	}
	return st
}

// check verifies a node's storage after a crash and reopen: its newest
// snapshot is the old one or the new one, its state machine restores from
// it, every index the snapshot retains reads as the leader's entry, the
// byte ledger matches those entries, no record of the other snapshot is
// left, and the snapshot can be sent to a new follower. It returns the
// newest snapshot's index.
func (sc *installScene) check(st *storage) (uint64, error) {
	metas, err := st.snap.List()
	if err != nil {
		return 0, err
	}
	if len(metas) == 0 {
		return 0, errors.New("no snapshot")
	}
	meta := metas[0]
	var floor uint64
	switch meta.Index {
	case sceneOld:
		floor = 120
	case sceneS2:
		floor = 260
	default:
		return 0, fmt.Errorf("newest snapshot at %d: neither the old (%d) nor the new (%d)", meta.Index, sceneOld, sceneS2)
	}
	_, rc, err := st.snap.Open(meta.ID)
	if err != nil {
		return 0, err
	}
	f := NewFSM(st.view, discardLogger())
	if err := f.Restore(rc); err != nil {
		return 0, err
	}
	if got := f.ReadView().Floor; got != floor {
		return 0, fmt.Errorf("snapshot at %d restores floor %d, want %d", meta.Index, got, floor)
	}
	if err := sc.checkReads(st.view, floor, meta.Index); err != nil {
		return 0, fmt.Errorf("snapshot at %d: %w", meta.Index, err)
	}
	var ledger uint64
	for i := floor; i <= meta.Index; i++ {
		if w := sc.want[i]; w.Type == raft.LogCommand {
			ledger += StreamRecordSize(len(w.Data))
		}
	}
	f.mu.RLock()
	got := f.total - f.floorCum
	f.mu.RUnlock()
	if got != ledger {
		return 0, fmt.Errorf("snapshot at %d: byte ledger %d, the records add up to %d", meta.Index, got, ledger)
	}
	// The archive holds the snapshot's records and nothing else; the
	// other archive group is empty.
	wantFirst, wantLast := uint64(120), uint64(sceneS1)
	if meta.Index == sceneS2 {
		wantFirst, wantLast = floor, sceneS2
		if first, _ := Bounds(st.view.Live); first <= sceneS2 {
			return 0, fmt.Errorf("live still holds %d, below the received snapshot", first)
		}
	}
	ar := st.view.Archive.Load()
	if first, last := Bounds(ar); first != wantFirst || last != wantLast {
		return 0, fmt.Errorf("snapshot at %d: archive (group %d) holds [%d, %d], want [%d, %d]", meta.Index, ar.Group(), first, last, wantFirst, wantLast)
	}
	for _, a := range st.view.Archives {
		if a != ar {
			if first, last := Bounds(a); last != 0 {
				return 0, fmt.Errorf("snapshot at %d: group %d, not the archive, holds [%d, %d]", meta.Index, a.Group(), first, last)
			}
		}
	}
	// A follower that needs the snapshot gets it, with every record.
	follower, err := openStorage(faultfs.New(2), sc.flush)
	if err != nil {
		return 0, err
	}
	defer follower.db.Close()
	snap, err := st.send(meta.ID)
	if err == nil {
		_, err = follower.install(snap)
	}
	if err != nil {
		return 0, fmt.Errorf("sending the snapshot at %d to a follower: %w", meta.Index, err)
	}
	if err := sc.checkReads(follower.view, floor, meta.Index); err != nil {
		return 0, fmt.Errorf("follower sent the snapshot at %d: %w", meta.Index, err)
	}
	return meta.Index, nil
}

// checkReads reads every index in [from, to] and compares it with the
// leader's entry: a record must be the same record, another entry must
// not read as a record.
func (sc *installScene) checkReads(v *LogView, from, to uint64) error {
	var l raft.Log
	for i := from; i <= to; i++ {
		if err := v.GetLog(i, &l); err != nil {
			return fmt.Errorf("read %d: %w", i, err)
		}
		w := sc.want[i]
		if w.Type != raft.LogCommand {
			if l.Type == raft.LogCommand {
				return fmt.Errorf("index %d reads as a command, the leader's is %v", i, w.Type)
			}
			continue
		}
		if l.Type != raft.LogCommand || l.Term != w.Term || !bytes.Equal(l.Data, w.Data) || !l.AppendedAt.Equal(w.AppendedAt) {
			return fmt.Errorf("index %d reads as %v term %d %q, the leader's is term %d %q", i, l.Type, l.Term, l.Data, w.Term, w.Data)
		}
	}
	return nil
}

// A crash at any step of a snapshot install leaves the node with the old
// snapshot and all its records, or the new one and all of its: never a
// mix, never a retained index it cannot read, never a byte ledger that
// disagrees with the records, and always a snapshot it can send. The
// install runs once for every write, sync, creation, rename and removal it
// makes, the file system dying at that one, and the disk is then crashed
// three ways (random outcome of unsynced pages, all lost, all kept).
func TestSnapshotInstallCrashAtEveryStep(t *testing.T) {
	for _, flush := range []raftstore.FlushMode{raftstore.SyncFlush, raftstore.AsyncFlush} {
		name := map[raftstore.FlushMode]string{raftstore.SyncFlush: "sync", raftstore.AsyncFlush: "async"}[flush]
		t.Run(name, func(t *testing.T) {
			sc := newInstallScene(t, flush)
			outcomes := map[uint64]int{}
			const maxSteps = 1000
			for step := 1; ; step++ {
				if step > maxSteps {
					t.Fatalf("the install still runs after %d steps", maxSteps)
				}
				var died bool
				var ops []string
				for _, mode := range []string{"random", "drop-all", "keep-all"} {
					var index uint64
					index, died, ops = sc.crashAt(step, mode)
					outcomes[index]++
					if !died && index != sceneS2 {
						t.Fatalf("a complete install left the snapshot at %d", index)
					}
				}
				if !died {
					t.Logf("%d crash points, 3 crashes each: %d left the old snapshot, %d the new one; the install's steps:\n  %s",
						step-1, outcomes[sceneOld], outcomes[sceneS2]-3, strings.Join(ops, "\n  "))
					break
				}
			}
			if outcomes[sceneOld] == 0 || outcomes[sceneS2] <= 3 {
				t.Fatalf("outcomes %v: the crashes did not fall on both sides of the switch", outcomes)
			}
		})
	}
}

// crashAt builds the node, installs the second snapshot on a file system
// that dies at the step-th operation, crashes it (mode: what becomes of
// unsynced writes), reopens and checks it. It returns the index of the
// snapshot the node then holds, whether the file system died (false: the
// install completed first) and the operations counted.
func (sc *installScene) crashAt(step int, mode string) (uint64, bool, []string) {
	t := sc.t
	t.Helper()
	base := faultfs.New(int64(step))
	fs := &dyingFS{FS: base}
	st := sc.node(fs)
	fs.arm(step)
	_, installErr := st.install(sc.s2)
	died, ops := fs.state()
	if !died && installErr != nil {
		t.Fatalf("step %d: install failed without a fault: %v", step, installErr)
	}
	st.db.Close() // fails once the FS died
	var after *faultfs.FS
	switch mode {
	case "random":
		after = base.Crash()
	case "drop-all":
		after = base.CrashDropAll()
	default:
		after = base.CrashKeepAll()
	}
	fail := func(err error) {
		t.Helper()
		t.Fatalf("crash at step %d (%s), install error %v: %v\noperations up to the crash:\n  %s",
			step, mode, installErr, err, strings.Join(ops, "\n  "))
	}
	reopened, err := openStorage(after, sc.flush)
	if err != nil {
		fail(fmt.Errorf("reopen: %w", err))
	}
	defer reopened.db.Close()
	index, err := sc.check(reopened)
	if err != nil {
		fail(err)
	}
	return index, died, ops
}

// A snapshot whose stream breaks off is cancelled, as raft does: the node
// keeps its snapshot and every record of it, before and after a restart.
func TestSnapshotInstallCancelKeepsArchive(t *testing.T) {
	sc := newInstallScene(t, raftstore.SyncFlush)
	base := faultfs.New(1)
	st := sc.node(base)
	short := sent{meta: sc.s2.meta, stream: sc.s2.stream[:len(sc.s2.stream)*2/3]}
	if _, err := st.install(short); err == nil {
		t.Fatal("a snapshot whose stream broke off installed")
	}
	if index, err := sc.check(st); err != nil || index != sceneOld {
		t.Fatalf("after a cancelled install: snapshot at %d, %v; want the old one at %d", index, err, sceneOld)
	}
	if err := st.db.Close(); err != nil {
		t.Fatal(err)
	}
	reopened, err := openStorage(base.CrashDropAll(), raftstore.SyncFlush)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.db.Close()
	if index, err := sc.check(reopened); err != nil || index != sceneOld {
		t.Fatalf("after a cancelled install and a crash: snapshot at %d, %v; want the old one at %d", index, err, sceneOld)
	}
	// The next install goes through.
	if _, err := reopened.install(sc.s2); err != nil {
		t.Fatal(err)
	}
	if index, err := sc.check(reopened); err != nil || index != sceneS2 {
		t.Fatalf("after installing again: snapshot at %d, %v; want %d", index, err, sceneS2)
	}
}

// A snapshot file that does not read is damage (files are renamed into
// place whole): opening the store refuses, naming the file, and changes
// nothing, rather than guess which archive group holds the records.
func TestSnapshotStoreRefusesDamagedFile(t *testing.T) {
	sc := newInstallScene(t, raftstore.SyncFlush)
	base := faultfs.New(1)
	st := sc.node(base)
	if _, err := st.install(sc.s2); err != nil {
		t.Fatal(err)
	}
	metas, err := st.snap.List()
	if err != nil {
		t.Fatal(err)
	}
	path := st.snap.path(metas[0].ID)
	if err := st.db.Close(); err != nil {
		t.Fatal(err)
	}
	fs := base.CrashKeepAll()
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var orig [1]byte
	if _, err := f.ReadAt(orig[:], 20); err != nil {
		t.Fatal(err)
	}
	setByte := func(b byte) {
		t.Helper()
		if _, err := f.WriteAt([]byte{b}, 20); err != nil {
			t.Fatal(err)
		}
	}
	setByte(^orig[0])
	if _, err := openStorage(fs, raftstore.SyncFlush); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("opening a store with a damaged snapshot file: %v; want an error naming %s", err, path)
	}
	// Nothing was deleted: with the file repaired, the store holds the
	// snapshot and all its records.
	setByte(orig[0])
	reopened, err := openStorage(fs, raftstore.SyncFlush)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.db.Close()
	if index, err := sc.check(reopened); err != nil || index != sceneS2 {
		t.Fatalf("after repairing the file: snapshot at %d, %v; want %d", index, err, sceneS2)
	}
}
