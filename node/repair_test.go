package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/internal/testdamage"
	"github.com/raftlog/raftlog/raftstore"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// recordOf returns the segment file and offset of the commit-log record
// holding entry index of group g in a stopped node's data dir.
func recordOf(t *testing.T, dataDir string, g, index uint64) (string, int64) {
	t.Helper()
	pos := int64(-1)
	in, err := raftstore.Inspect(filepath.Join(dataDir, "store"), nil, func(group uint64, p int64, l *raft.Log) {
		if group == g && l.Index == index {
			pos = p
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if pos < 0 {
		t.Fatalf("%s holds no entry %d of group %d", dataDir, index, g)
	}
	return in.Log.Locate(pos)
}

// startErr starts node id of c as c.start does and returns the error,
// failing the test if the node starts.
func (c *testCluster) startErr(id string) error {
	c.t.Helper()
	cfg := testConfig(c.t, c.dir, id)
	a := c.addrs[id]
	cfg.RaftAddr, cfg.ClientAddr = a[0], a[1]
	if c.cfg != nil {
		c.cfg(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg)
	if err == nil {
		n.Close()
		c.t.Fatalf("%s started", id)
	}
	return err
}

// prepareRepair runs PrepareRepair and closes the repair at the end of
// the test.
func prepareRepair(t *testing.T, dir string) *Repair {
	t.Helper()
	r, err := PrepareRepair(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// A node refuses a data dir a running node holds, and so does repair;
// a stopped node's clean dir needs no repair, and preparing one changes
// nothing.
func TestRepairGuardAndCleanDir(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	n := c.nodes["n1"]
	appendN(t, dial(t, n), "r", 10)
	dir := n.cfg.DataDir
	if _, err := PrepareRepair(dir); !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("PrepareRepair of a running node's dir: %v, want ErrDataDirInUse", err)
	}
	cfg := testConfig(t, t.TempDir(), "other")
	cfg.DataDir = dir
	if _, err := Start(context.Background(), cfg); !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("a second node on the same dir: %v, want ErrDataDirInUse", err)
	}
	// Started twice with the same flags, its ports are taken too: the
	// error still says why (the ports are bound before the dir is locked).
	same := n.cfg
	same.ClientAddr = n.clientAddr
	if _, err := Start(context.Background(), same); !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("the same node started twice: %v, want ErrDataDirInUse naming the port in use", err)
	}
	c.stop("n1")

	before := testdamage.TreeDigest(t, dir)
	r := prepareRepair(t, dir)
	var report strings.Builder
	r.WriteReport(&report)
	if r.Needed() || r.Damage != nil || r.Cut != -1 || !strings.Contains(report.String(), "nothing to repair") {
		t.Fatalf("clean dir: needed %v, damage %v, cut %d\n%s", r.Needed(), r.Damage, r.Cut, report.String())
	}
	if r.Term == 0 || r.Log.Last < 10 || len(r.Voters) != 1 {
		t.Fatalf("clean dir: term %d, log %v, voters %v", r.Term, r.Log, r.Voters)
	}
	if err := r.Apply(false); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if testdamage.TreeDigest(t, dir) != before {
		t.Fatal("preparing (and applying) a repair of a clean dir changed it")
	}
	c.start("n1", nil)
}

// A follower whose raft log holds a damaged record refuses to start,
// naming the file and offset; the repair cuts its log before the damage
// and it catches up from the leader, every record readable on it.
func TestRepairFollowerCatchesUp(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	conn := dial(t, leader)
	idx := appendN(t, conn, "r", 60)
	f := c.follower()
	waitCaughtUp(t, f, idx[59])
	id, dir := f.ID(), f.cfg.DataDir
	c.stop(id)
	path, off := recordOf(t, dir, logGroups.Live, idx[40])
	testdamage.FlipLastPayloadByte(t, path, off)

	err := c.startErr(id)
	if !errors.Is(err, ErrDamaged) || !errors.Is(err, commitlog.ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("%s at offset %d", path, off)) {
		t.Fatalf("start with a damaged record: %v, want ErrDamaged naming %s offset %d", err, path, off)
	}
	// The others go on without it: what it loses is on both of them.
	more := appendN(t, conn, "s", 20)

	r := prepareRepair(t, dir)
	var report strings.Builder
	r.WriteReport(&report)
	t.Logf("repair report:\n%s", report.String())
	if !r.Needed() || r.Damage == nil || r.Damage.Path != path || r.Damage.Offset != off || r.Harmless || r.EmptyLog {
		t.Fatalf("repair: needed %v, damage %+v, harmless %v, empty %v", r.Needed(), r.Damage, r.Harmless, r.EmptyLog)
	}
	if r.KeptLog.Last >= idx[40] || r.KeptLog.First != 1 || r.Log.Last < idx[59] || r.CutEntries == 0 {
		t.Fatalf("repair keeps %v of %v, cutting %d entries: want the log up to before %d", r.KeptLog, r.Log, r.CutEntries, idx[40])
	}
	if err := r.Apply(false); err != nil {
		t.Fatal(err)
	}
	r.Close()

	back := c.start(id, nil)
	waitCaughtUp(t, back, more[len(more)-1])
	sameRecords(t, id+" after repair", readAll(t, back, true), readAll(t, c.waitLeader(), false))
	c.waitVoter(back)
}

// Damage below the node's newest snapshot, after a trim: the snapshot does
// not fit the cut log. When the trimmed entries are still on disk (their
// segment holds later ones) the cut brings them back, the log begins at
// index 1 again, and the node starts without a snapshot; when their
// segments were removed, the repair empties the log. Either way the node
// catches up, the second time through a snapshot with every retained
// record.
func TestRepairBelowSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		segment int64 // the nodes' segment size; 0: the default
		empty   bool
	}{
		{"log from index 1", 0, false},
		{"empty log", 4096, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, 3, func(cfg *Config) { cfg.SegmentSize = tc.segment })
			leader := c.waitLeader()
			conn := dial(t, leader)
			idx := appendN(t, conn, "r", 400)
			below := idx[250]
			tr, err := call[transport.TrimResponse](t, conn, transport.OpTrim, &transport.TrimRequest{Below: below})
			if err != nil {
				t.Fatal(err)
			}
			f := c.follower()
			waitCaughtUp(t, f, tr.Index)
			waitFor(t, "the follower's snapshot after the trim", func() bool {
				p := f.snap.Latest.Load()
				return p != nil && p.Index >= tr.Index && f.view.First() >= below
			})
			id, dir := f.ID(), f.cfg.DataDir
			c.stop(id)
			path, off := recordOf(t, dir, logGroups.Live, idx[300])
			testdamage.FlipLastPayloadByte(t, path, off)
			more := appendN(t, conn, "s", 10)

			r := prepareRepair(t, dir)
			var report strings.Builder
			r.WriteReport(&report)
			t.Logf("repair report:\n%s", report.String())
			if !r.Needed() || r.Damage == nil || r.Damage.Path != path || r.Damage.Offset != off || r.KeptSnapshot != 0 || len(r.RemovedSnapshots) == 0 {
				t.Fatal("want a cut at the damage and no snapshot kept")
			}
			if r.EmptyLog != tc.empty || (!tc.empty && (r.KeptLog.First != 1 || r.KeptLog.Last >= idx[300])) {
				t.Fatalf("empty log %v, kept %v; want empty %v", r.EmptyLog, r.KeptLog, tc.empty)
			}
			if !strings.Contains(report.String(), "WARNING: the cut reaches below the newest snapshot") {
				t.Fatal("the report does not warn that committed records are cut")
			}
			if err := r.Apply(false); err != nil {
				t.Fatal(err)
			}
			r.Close()
			back := c.start(id, nil)
			waitCaughtUp(t, back, more[len(more)-1])
			want := readAll(t, c.waitLeader(), false)
			if want[0].Index != below {
				t.Fatalf("the leader's log starts at %d, want %d", want[0].Index, below)
			}
			waitFor(t, id+" deletes below the floor again", func() bool { return back.view.First() >= below })
			sameRecords(t, id+" after repair", readAll(t, back, true), want)
		})
	}
}

// Damage in the archive (the records a snapshot install brought): the cut
// leaves the snapshot unsupported, the repair drops it, and the node gets
// the records again.
func TestRepairArchive(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	conn := dial(t, leader)
	idx := appendN(t, conn, "r", 120)
	tr, err := call[transport.TrimResponse](t, conn, transport.OpTrim, &transport.TrimRequest{Below: idx[20]})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		waitCaughtUp(t, n, tr.Index)
		waitFor(t, n.ID()+" deletes below the floor", func() bool { return n.view.First() >= idx[20] })
	}
	n4 := c.start("n4", func(cfg *Config) { cfg.Join = []string{leader.ClientAddr()} })
	more := appendN(t, conn, "s", 10)
	waitCaughtUp(t, n4, more[9])
	c.waitVoter(n4)
	ar := n4.view.Archive.Load()
	if first, _ := replica.Bounds(ar); first != idx[20] {
		t.Fatalf("n4's archive starts at %d, want %d", first, idx[20])
	}
	dir, group := n4.cfg.DataDir, ar.Group()
	c.stop("n4")
	path, off := recordOf(t, dir, group, idx[60])
	testdamage.FlipLastPayloadByte(t, path, off)
	last := appendN(t, conn, "u", 5)

	r := prepareRepair(t, dir)
	var report strings.Builder
	r.WriteReport(&report)
	t.Logf("repair report:\n%s", report.String())
	if !r.Needed() || r.Damage == nil || r.Damage.Offset != off || r.KeptSnapshot != 0 || len(r.RemovedSnapshots) == 0 {
		t.Fatalf("repair of the archive: needed %v, damage %+v, kept snapshot %d, removed %v", r.Needed(), r.Damage, r.KeptSnapshot, r.RemovedSnapshots)
	}
	if err := r.Apply(false); err != nil {
		t.Fatal(err)
	}
	r.Close()
	back := c.start("n4", nil)
	waitCaughtUp(t, back, last[4])
	sameRecords(t, "n4 after repair", readAll(t, back, true), readAll(t, c.waitLeader(), false))
}

// On a single-node cluster the repair refuses unless told that the records
// after the cut may be lost; then the node starts with the records before
// the damage and new appends take the lost indexes.
func TestRepairSingleNode(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	n := c.nodes["n1"]
	idx := appendN(t, dial(t, n), "r", 30)
	dir := n.cfg.DataDir
	c.stop("n1")
	path, off := recordOf(t, dir, logGroups.Live, idx[20])
	testdamage.FlipLastPayloadByte(t, path, off)

	r := prepareRepair(t, dir)
	before := testdamage.TreeDigest(t, dir)
	if !r.SingleVoter() {
		t.Fatalf("voters %v, want the single voter n1", r.Voters)
	}
	if err := r.Apply(false); !errors.Is(err, ErrSingleVoter) {
		t.Fatalf("Apply on the only voter: %v, want ErrSingleVoter", err)
	}
	if testdamage.TreeDigest(t, dir) != before {
		t.Fatal("a refused repair changed the data dir")
	}
	var report strings.Builder
	r.WriteReport(&report)
	if !strings.Contains(report.String(), "single-node cluster") {
		t.Fatalf("the report does not warn of a single-node cluster:\n%s", report.String())
	}
	if err := r.Apply(true); err != nil {
		t.Fatal(err)
	}
	r.Close()
	back := c.start("n1", nil)
	c.waitLeader()
	got := readAll(t, back, false)
	if len(got) == 0 || got[len(got)-1].Index >= idx[20] {
		t.Fatalf("after the repair the log holds %d records, the last at %d; want them all below %d", len(got), got[len(got)-1].Index, idx[20])
	}
	again := appendN(t, dial(t, back), "new", 1)
	if again[0] >= idx[29] {
		t.Fatalf("a new append took index %d; the cut freed the indexes from %d", again[0], got[len(got)-1].Index+1)
	}
}

// A repair that did not finish stops the node from starting, and running
// the repair again finishes it.
func TestRepairUnfinished(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	appendN(t, dial(t, c.nodes["n1"]), "r", 5)
	dir := c.nodes["n1"].cfg.DataDir
	c.stop("n1")
	if err := replica.WriteFileSync(filepath.Join(dir, repairingFile), []byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.startErr("n1"); !errors.Is(err, ErrRepairUnfinished) {
		t.Fatalf("start after an unfinished repair: %v, want ErrRepairUnfinished", err)
	}
	r := prepareRepair(t, dir)
	if !r.Interrupted || !r.Needed() || r.Cut != -1 {
		t.Fatalf("interrupted %v, needed %v, cut %d", r.Interrupted, r.Needed(), r.Cut)
	}
	r.WriteReport(io.Discard)
	if err := r.Apply(false); err != nil {
		t.Fatal(err)
	}
	r.Close()
	c.start("n1", nil)
}

// The newest durable record is checked when the store opens: damage there
// stops the start before raft's log is read, with the same error.
func TestRepairNewestRecord(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	appendN(t, dial(t, c.nodes["n1"]), "r", 10)
	dir := c.nodes["n1"].cfg.DataDir
	c.stop("n1")
	newest, pos := uint64(0), int64(-1)
	if _, err := raftstore.Inspect(filepath.Join(dir, "store"), nil, func(g uint64, p int64, l *raft.Log) {
		if p > pos {
			newest, pos = l.Index, p
		}
	}); err != nil {
		t.Fatal(err)
	}
	path, off := recordOf(t, dir, logGroups.Live, newest)
	testdamage.FlipLastPayloadByte(t, path, off)
	err := c.startErr("n1")
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), fmt.Sprintf("%s at offset %d", path, off)) {
		t.Fatalf("start: %v, want ErrDamaged naming %s offset %d", err, path, off)
	}
	r := prepareRepair(t, dir)
	if r.Damage == nil || r.Damage.Offset != off || r.KeptLog.Last >= newest {
		t.Fatalf("damage %+v, kept %v", r.Damage, r.KeptLog)
	}
	if err := r.Apply(true); err != nil {
		t.Fatal(err)
	}
	r.Close()
	c.start("n1", nil)
}

// A damaged record that holds an entry the node had deleted below its
// floor is harmless: the node starts and serves every record, and repair
// has nothing to do.
func TestRepairHarmlessBelowFloor(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	n := c.nodes["n1"]
	conn := dial(t, n)
	idx := appendN(t, conn, "r", 50)
	tr, err := call[transport.TrimResponse](t, conn, transport.OpTrim, &transport.TrimRequest{Below: idx[30]})
	if err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, n, tr.Index)
	waitFor(t, "deletion below the floor", func() bool { return n.view.First() >= idx[30] })
	want := readAll(t, n, false)
	dir := n.cfg.DataDir
	c.stop("n1")
	// The entry is deleted, but its record stays in the one segment.
	path, off := recordOf(t, dir, logGroups.Live, idx[10])
	testdamage.FlipLastPayloadByte(t, path, off)
	before := testdamage.TreeDigest(t, dir)
	r := prepareRepair(t, dir)
	var report strings.Builder
	r.WriteReport(&report)
	if r.Damage == nil || r.Damage.Offset != off || !r.Harmless || r.Needed() || !strings.Contains(report.String(), "nothing to repair") {
		t.Fatalf("damage below the floor: harmless %v, needed %v\n%s", r.Harmless, r.Needed(), report.String())
	}
	r.Close()
	if testdamage.TreeDigest(t, dir) != before {
		t.Fatal("PrepareRepair changed the data dir")
	}
	back := c.start("n1", nil)
	c.waitLeader()
	sameRecords(t, "after restart", readAll(t, back, false), want)
}

// A data dir whose stable state (term and vote) is lost: the node refuses
// to start, and so does repair, which cannot bring it back, each saying
// what to do instead. Repair used to report term 0 and offer a cut after
// which the node still refused to start.
func TestRepairRefusesLostStableState(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	n := c.nodes["n1"]
	appendN(t, dial(t, n), "r", 5)
	dir := n.cfg.DataDir
	c.stop("n1")
	for _, name := range []string{"stable.0", "stable.1"} {
		if err := os.Remove(filepath.Join(dir, "store", name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Start(context.Background(), n.cfg); !errors.Is(err, raftstore.ErrStableLost) {
		t.Fatalf("Start with the stable files gone: %v, want ErrStableLost", err)
	}
	before := testdamage.TreeDigest(t, dir)
	_, err := PrepareRepair(dir)
	if !errors.Is(err, raftstore.ErrStableLost) || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("PrepareRepair with the stable files gone: %v, want ErrStableLost and what to do", err)
	}
	if testdamage.TreeDigest(t, dir) != before {
		t.Fatal("a refused repair changed the data dir")
	}
}
