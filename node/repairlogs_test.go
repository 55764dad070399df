package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/internal/testdamage"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// readLogOn reads every record of the named log from node n alone (stale
// reads: n answers from its own copy).
func readLogOn(t *testing.T, n *Node, log string) map[uint64]string {
	t.Helper()
	conn := dial(t, n)
	got := map[uint64]string{}
	var from uint64
	for range 1000 {
		rr, err := call[transport.ReadResponse](t, conn, transport.OpRead, &transport.ReadRequest{From: from, Stale: true, Log: log})
		if err != nil {
			t.Fatalf("read log %s on %s from %d: %v", log, n.ID(), from, err)
		}
		for _, r := range rr.Records {
			got[r.Index] = string(r.Data)
		}
		if len(rr.Records) == 0 {
			return got
		}
		from = rr.Next
	}
	t.Fatal("read did not end")
	return nil
}

// holdsAll fails unless got holds every record of want.
func holdsAll(t *testing.T, what string, got, want map[uint64]string) {
	t.Helper()
	for i, w := range want {
		if got[i] != w {
			t.Fatalf("%s: acknowledged index %d holds %q, want %q (%d records read)", what, i, got[i], w, len(got))
		}
	}
}

// logRepairOf returns the part of r about the named log id.
func logRepairOf(t *testing.T, r *Repair, id uint64) *LogRepair {
	t.Helper()
	for _, l := range r.Logs {
		if l.ID == id {
			return l
		}
	}
	t.Fatalf("the repair does not plan log id %d (it plans %d named logs)", id, len(r.Logs))
	return nil
}

// lastOf returns the highest index of m.
func lastOf(m map[uint64]string) uint64 {
	var last uint64
	for i := range m {
		last = max(last, i)
	}
	return last
}

// A node whose copy of a named log holds a damaged record below that
// log's newest snapshot: the repair cuts the commit log there, and so must
// drop that log's snapshots the cut leaves unsupported, not only the
// default log's. Damage between its two snapshots keeps the older one;
// damage at its first entry leaves none, and the log starts empty (kept,
// the newest snapshot would claim records the node no longer holds, and
// the leader would send only what follows it). Restarted, the node catches
// up, and every acknowledged record of the named log and of the default
// log reads back from it alone.
func TestRepairNamedLogBelowSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first bool // damage the log's first entry, not one between its snapshots
	}{
		{"between its snapshots", false},
		{"at its first entry", true},
	} {
		t.Run(tc.name, func(t *testing.T) { testRepairNamedLog(t, tc.first) })
	}
}

func testRepairNamedLog(t *testing.T, first bool) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.SnapshotThreshold = 64 })
	c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	info, err := cl.CreateLog(ctx, "orders", client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	orders := appendLog(t, ctx, cl.Log("orders"), "a", 100)
	def := appendLog(t, ctx, cl.Log(transport.DefaultLog), "d", 20)

	// A node that leads neither log (two leaders at most among three).
	var f *Node
	waitFor(t, "a node following both logs", func() bool {
		for _, n := range c.nodes {
			h := n.host.hosted(info.ID)
			if h != nil && h.r.Raft().State() == raft.Follower && n.raft.State() == raft.Follower {
				f = n
				return true
			}
		}
		return false
	})
	h := f.host.hosted(info.ID)
	snapshot := func(last uint64) {
		t.Helper()
		waitFor(t, f.ID()+" applies orders", func() bool { return h.r.FSM().Applied.Load() >= last })
		if err := h.r.Raft().Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			t.Fatal(err)
		}
	}
	snapshot(lastOf(orders))
	for i, r := range appendLog(t, ctx, cl.Log("orders"), "b", 100) {
		orders[i] = r
	}
	snapshot(lastOf(orders))
	id, dir := f.ID(), f.cfg.DataDir
	waitCaughtUp(t, f, lastOf(def))
	c.stop(id)

	snapDir := filepath.Join(dir, "logs", strconv.FormatUint(info.ID, 10), "snapshots")
	snaps, err := replica.ReadSnapFiles(vfs.Default, snapDir, replica.GroupsOf(info.ID))
	if err != nil || len(snaps) < 2 {
		t.Fatalf("%s holds %d snapshots of orders (%v), want 2", id, len(snaps), err)
	}
	newest, older := snaps[0].Meta.Index, snaps[1].Meta.Index
	at := older + (newest-older)/2 + 1
	if first {
		at = 1
	}
	path, off := recordOf(t, dir, replica.GroupsOf(info.ID).Live, at)
	testdamage.FlipLastPayloadByte(t, path, off)

	// The others go on without it.
	cl2 := clusterClient(t, c, nil)
	for i, r := range appendLog(t, ctx, cl2.Log("orders"), "c", 20) {
		orders[i] = r
	}
	for i, r := range appendLog(t, ctx, cl2.Log(transport.DefaultLog), "e", 10) {
		def[i] = r
	}

	r := prepareRepair(t, dir)
	var report strings.Builder
	r.WriteReport(&report)
	t.Logf("repair report (damage at orders index %d, snapshots %d and %d):\n%s", at, older, newest, report.String())
	l := logRepairOf(t, r, info.ID)
	if !r.Needed() || r.Damage == nil || r.Damage.Offset != off || !l.Changes() || l.Name != "orders" {
		t.Fatalf("repair: needed %v, damage %+v, orders changes %v, name %q", r.Needed(), r.Damage, l.Changes(), l.Name)
	}
	if !slices.Contains(l.RemovedSnapshots, newest) || l.KeptSnapshot >= at || l.KeptLog.Last >= at || l.Snapshot != newest {
		t.Fatalf("orders: removes snapshots %v, keeps %d and raft's log %v; want the snapshot at %d removed and nothing kept from %d",
			l.RemovedSnapshots, l.KeptSnapshot, l.KeptLog, newest, at)
	}
	if !strings.Contains(report.String(), `log "orders" (id `+strconv.FormatUint(info.ID, 10)+`)`) ||
		!strings.Contains(report.String(), "removes the snapshots at indexes "+strconv.FormatUint(newest, 10)) {
		t.Fatalf("the report does not say what happens to orders:\n%s", report.String())
	}
	if err := r.Apply(false); err != nil {
		t.Fatal(err)
	}
	r.Close()

	back := c.start(id, nil)
	waitCaughtUp(t, back, lastOf(def))
	waitFor(t, id+" catches up on orders", func() bool {
		h := back.host.hosted(info.ID)
		return h != nil && h.r.FSM().Applied.Load() >= lastOf(orders)
	})
	holdsAll(t, "orders on "+id+" after the repair", readLogOn(t, back, "orders"), orders)
	holdsAll(t, "default on "+id+" after the repair", readLogOn(t, back, ""), def)
	sameRecords(t, id+" default log after repair", readAll(t, back, true), readAll(t, c.waitLeader(), false))
}

// A named log with one replica: the node is its only voter, so a repair
// that cuts it refuses without allowLoss, naming the log, and changes
// nothing; allowed, the log keeps the records before the damage.
func TestRepairNamedLogSingleVoter(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	info, err := cl.CreateLog(ctx, "solo", client.CreateLogOptions{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	solo := appendLog(t, ctx, cl.Log("solo"), "s", 30)
	idx := slices.Sorted(maps.Keys(solo))
	host := info.Members[0]
	dir := c.nodes[host].cfg.DataDir
	c.stop(host)
	at := idx[20]
	path, off := recordOf(t, dir, replica.GroupsOf(info.ID).Live, at)
	testdamage.FlipLastPayloadByte(t, path, off)

	r := prepareRepair(t, dir)
	before := testdamage.TreeDigest(t, dir)
	l := logRepairOf(t, r, info.ID)
	if r.SingleVoter() || !l.SingleVoter() || !l.Changes() || !r.LosesOnlyCopy() {
		t.Fatalf("default single voter %v; solo: voters %v, changes %v; loses only copy %v", r.SingleVoter(), l.Voters, l.Changes(), r.LosesOnlyCopy())
	}
	err = r.Apply(false)
	if !errors.Is(err, ErrSingleVoter) || !strings.Contains(err.Error(), `"solo"`) {
		t.Fatalf("Apply on the only voter of solo: %v, want ErrSingleVoter naming solo", err)
	}
	if testdamage.TreeDigest(t, dir) != before {
		t.Fatal("a refused repair changed the data dir")
	}
	var report strings.Builder
	r.WriteReport(&report)
	if !strings.Contains(report.String(), `WARNING: log "solo"`) || !strings.Contains(report.String(), "has one replica") {
		t.Fatalf("the report does not warn that solo has one replica:\n%s", report.String())
	}
	if err := r.Apply(true); err != nil {
		t.Fatal(err)
	}
	r.Close()

	back := c.start(host, nil)
	waitFor(t, host+" runs solo", func() bool {
		h := back.host.hosted(info.ID)
		return h != nil && h.r.Raft().State() == raft.Leader && h.r.FSM().Applied.Load() >= idx[19]
	})
	got := readLogOn(t, back, "solo")
	want := map[uint64]string{}
	for _, i := range idx[:20] {
		want[i] = solo[i]
	}
	holdsAll(t, "solo after the repair", got, want)
	if lastOf(got) >= at {
		t.Fatalf("solo holds index %d after a cut at %d", lastOf(got), at)
	}
}

// lineCounter is a log output that counts the lines holding want.
type lineCounter struct {
	want string
	mu   sync.Mutex
	n    int // lines holding want; guarded by mu
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.n += strings.Count(string(p), c.want)
	c.mu.Unlock()
	return len(p), nil
}

func (c *lineCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// A named log's record that the node reads at start (raft's entries after
// the newest snapshot) is damaged: the node runs on with its other logs,
// logs the damage once rather than trying the replica again every second,
// and /status shows the log Damaged, naming the record and 'node repair';
// the log runs on its other replicas, and once repaired the node holds it
// again.
func TestNamedLogDamagedAtStart(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	info, err := cl.CreateLog(ctx, "orders", client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	orders := appendLog(t, ctx, cl.Log("orders"), "a", 50)
	idx := slices.Sorted(maps.Keys(orders))
	var f *Node
	waitFor(t, "a node following both logs", func() bool {
		for _, n := range c.nodes {
			h := n.host.hosted(info.ID)
			if h != nil && h.r.Raft().State() == raft.Follower && n.raft.State() == raft.Follower && h.r.FSM().Applied.Load() >= idx[49] {
				f = n
				return true
			}
		}
		return false
	})
	id, dir := f.ID(), f.cfg.DataDir
	c.stop(id)
	path, off := recordOf(t, dir, replica.GroupsOf(info.ID).Live, idx[25])
	testdamage.FlipLastPayloadByte(t, path, off)
	where := fmt.Sprintf("%s at offset %d", path, off)

	logged := &lineCounter{want: where}
	back := c.start(id, func(cfg *Config) {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: io.MultiWriter(testWriter{t}, logged)})
	})
	status := func() (logStatus, bool) {
		for _, st := range back.logStatuses() {
			if st.ID == info.ID {
				return st, true
			}
		}
		return logStatus{}, false
	}
	waitFor(t, id+" reports orders damaged", func() bool { st, _ := status(); return st.Role == roleDamaged })
	if st, _ := status(); st.Name != "orders" || !strings.Contains(st.Error, where) || !strings.Contains(st.Error, "node repair") {
		t.Fatalf("/status of orders on %s: %+v; want Damaged naming %s and node repair", id, st, where)
	}
	// The node and its default log run on; a catalog change makes the
	// reconciler run again, and a later log starts here.
	def := appendLog(t, ctx, cl.Log(transport.DefaultLog), "d", 5)
	waitCaughtUp(t, back, lastOf(def))
	other, err := cl.CreateLog(ctx, "other", client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, id+" starts the later log", func() bool { return back.host.hosted(other.ID) != nil })
	if n := logged.count(); n != 1 {
		t.Fatalf("%s logged the damaged record %d times, want once", id, n)
	}
	if back.host.hosted(info.ID) != nil {
		t.Fatalf("%s runs orders' replica over damaged data", id)
	}
	// The log runs on its other replicas.
	for i, r := range appendLog(t, ctx, cl.Log("orders"), "b", 10) {
		orders[i] = r
	}

	c.stop(id)
	r := prepareRepair(t, dir)
	if l := logRepairOf(t, r, info.ID); r.Damage == nil || r.Damage.Offset != off || !l.Changes() {
		t.Fatalf("repair: damage %+v, orders changes %v", r.Damage, l.Changes())
	}
	if err := r.Apply(false); err != nil {
		t.Fatal(err)
	}
	r.Close()
	back = c.start(id, nil)
	waitFor(t, id+" catches up on orders", func() bool {
		h := back.host.hosted(info.ID)
		return h != nil && h.r.FSM().Applied.Load() >= lastOf(orders)
	})
	holdsAll(t, "orders on "+id+" after the repair", readLogOn(t, back, "orders"), orders)
}
