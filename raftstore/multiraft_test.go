package raftstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/raftstore"
)

// TestMultiRaft runs three raft groups on three nodes in one process, the
// way a multi-raft server does: each node has ONE raftstore DB, and each of
// its raft groups takes db.Store(group) as its log and stable store, so the
// three groups of a node share one commit log and one group commit. Groups
// are joined by in-memory transports, one per node and group.
//
// It elects a leader in every group, applies commands to all three groups
// at once, forces snapshots (so every store compacts its prefix and the
// shared log releases segments), then stops one node entirely (its three
// rafts and its DB), moves every group on past it so that it can only catch
// up from snapshots, reopens its DB and restarts its rafts. Every group
// must converge: the same state machine on every node, and the same last
// index in every store.
func TestMultiRaft(t *testing.T) {
	c := newMRCluster(t)
	for i, g := range mrGroups {
		c.bootstrap(g, c.nodes[i%len(c.nodes)]) // spread the first leaders
	}
	for _, g := range mrGroups {
		c.leader(g)
	}

	// 1. Commands to every group at once, then a snapshot of every group on
	// every node: each store must have dropped a prefix, and each node's
	// log the segments no group needs.
	c.applyAll(700)
	c.waitConvergedAll()
	for _, n := range c.nodes {
		for _, g := range mrGroups {
			c.snapshot(n, g)
		}
	}
	c.applyAll(20) // every store holds entries past its snapshot
	c.waitConvergedAll()
	for _, n := range c.nodes {
		for _, g := range mrGroups {
			if first := mrIndex(t, n.peers[g].store.FirstIndex); first <= 1 {
				t.Fatalf("%s group %d: first index %d after a snapshot at %s: no compaction",
					n.id, g, first, n.peers[g].raft.Stats()["last_snapshot_index"])
			}
		}
		if segs := mrSegments(t, n); len(segs) == 0 || segs[0] == 0 {
			t.Fatalf("%s: segment files %v: the first segment is kept though every group compacted past it", n.id, segs)
		}
	}

	// 2. Stop one node entirely and move every group past everything it
	// holds, so that it can only catch up from snapshots.
	down := c.nodes[1]
	c.stop(down)
	c.applyAll(300)
	c.waitConvergedAll()
	for _, n := range c.running() {
		for _, g := range mrGroups {
			c.snapshot(n, g)
			if first := mrIndex(t, n.peers[g].store.FirstIndex); first <= down.closed[g].last {
				t.Fatalf("%s group %d: first index %d is not past %s's last index %d", n.id, g, first, down.id, down.closed[g].last)
			}
		}
	}
	c.applyAll(30)

	// 3. Reopen its DB and restart its rafts: the DB must hold every group
	// as it was at Close, and raft must then install a snapshot in each.
	c.start(down)
	for _, g := range mrGroups {
		if got, want := down.opened[g], down.closed[g]; got != want {
			t.Fatalf("%s group %d reopened with entries %d..%d, closed with %d..%d", down.id, g, got.first, got.last, want.first, want.last)
		}
	}
	c.waitConvergedAll()
	for _, g := range mrGroups {
		p := down.peers[g]
		if got := p.fsm.restoredIndex(); got <= down.closed[g].last {
			t.Fatalf("%s group %d caught up without a snapshot install (restored up to %d, had %d)", down.id, g, got, down.closed[g].last)
		}
	}
	c.applyAll(50)
	c.waitConvergedAll()
	final := c.describe()

	// Stop raft, so that no snapshot compacts a store while we read it,
	// and compare the stores of each group.
	for _, n := range c.nodes {
		for _, g := range mrGroups {
			if err := n.peers[g].raft.Shutdown().Error(); err != nil {
				t.Fatalf("%s group %d: shutdown: %v", n.id, g, err)
			}
		}
	}
	for _, g := range mrGroups {
		want := mrIndex(t, c.nodes[0].peers[g].store.LastIndex)
		for _, n := range c.nodes {
			if l := mrIndex(t, n.peers[g].store.LastIndex); l != want || l == 0 {
				t.Fatalf("group %d: store last indexes differ: %s", g, final)
			}
		}
		c.checkLogsEqual(g)
	}
	c.checkNoStoreErrors()
	t.Logf("commands applied per group %v; %s", c.sentCounts(), final)
}

// mrGroups are the raft groups every node runs.
var mrGroups = []uint64{10, 20, 30}

// Bounds of the test's waits; each fails the test when it runs out.
const (
	mrWait         = 20 * time.Second // an election, convergence, a batch of commands
	mrApplyTimeout = 10 * time.Second // one Apply
	mrPollEvery    = 5 * time.Millisecond
	mrCommandSize  = 100
)

// mrCluster is the set of nodes. Only the test goroutine changes it; the
// goroutines of applyAll only read it.
type mrCluster struct {
	t     *testing.T
	base  string
	nodes []*mrNode
	logs  *logSink
	sent  map[uint64]*atomic.Int64 // commands applied per group
}

// mrNode is one server: a directory, one DB and a raft per group.
type mrNode struct {
	id    raft.ServerID
	dir   string
	db    *raftstore.DB // nil while stopped
	peers map[uint64]*mrPeer

	opened, closed map[uint64]mrRange // each store's range at the last start and stop
}

type mrRange struct{ first, last uint64 }

// mrPeer is a node's member of one group.
type mrPeer struct {
	addr  raft.ServerAddress
	store *raftstore.Store
	snaps raft.SnapshotStore
	trans *raft.InmemTransport
	fsm   *hashFSM
	raft  *raft.Raft
}

func newMRCluster(t *testing.T) *mrCluster {
	c := &mrCluster{t: t, base: t.TempDir(), logs: &logSink{}, sent: map[uint64]*atomic.Int64{}}
	for _, g := range mrGroups {
		c.sent[g] = &atomic.Int64{}
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			if n.db != nil {
				for _, p := range n.peers {
					p.raft.Shutdown().Error()
				}
				n.db.Close()
			}
		}
		if t.Failed() {
			t.Logf("raft error log (tail):\n%s", c.logs.String())
		}
	})
	for i := range 3 {
		id := fmt.Sprintf("node%d", i)
		n := &mrNode{id: raft.ServerID(id), dir: filepath.Join(c.base, id)}
		c.nodes = append(c.nodes, n)
		c.start(n)
	}
	return c
}

func (c *mrCluster) config(n *mrNode) *raft.Config {
	return testRaftConfig(n.id, c.logs, 64, 200)
}

// start opens n's DB from its directory and starts a raft for every group
// on the group's store, connecting a fresh transport to the group's other
// running members.
func (c *mrCluster) start(n *mrNode) {
	t := c.t
	t.Helper()
	db, err := raftstore.OpenDB(filepath.Join(n.dir, "db"), &raftstore.Options{
		SegmentSize:        64 << 10, // small, so compaction releases segments
		CheckpointInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("%s: OpenDB: %v", n.id, err)
	}
	n.db = db
	if n.peers != nil { // a restart: the DB must remember every group
		if got := db.Groups(); !slices.Equal(got, mrGroups) {
			t.Fatalf("%s: Groups() = %v after reopening, want %v", n.id, got, mrGroups)
		}
	}
	n.peers = map[uint64]*mrPeer{}
	n.opened = map[uint64]mrRange{}
	for _, g := range mrGroups {
		store, err := db.Store(g)
		if err != nil {
			t.Fatalf("%s: Store(%d): %v", n.id, g, err)
		}
		n.opened[g] = mrRange{mrIndex(t, store.FirstIndex), mrIndex(t, store.LastIndex)}
		snaps, err := raft.NewFileSnapshotStore(filepath.Join(n.dir, fmt.Sprintf("snapshots-%d", g)), 2, io.Discard)
		if err != nil {
			t.Fatalf("%s group %d: snapshot store: %v", n.id, g, err)
		}
		p := &mrPeer{addr: raft.ServerAddress(fmt.Sprintf("%s/group%d", n.id, g)), store: store, snaps: snaps, fsm: &hashFSM{}}
		_, p.trans = raft.NewInmemTransport(p.addr)
		for _, o := range c.nodes {
			if o != n && o.db != nil {
				op := o.peers[g]
				p.trans.Connect(op.addr, op.trans)
				op.trans.Connect(p.addr, p.trans)
			}
		}
		if p.raft, err = raft.NewRaft(c.config(n), p.fsm, store, store, snaps, p.trans); err != nil {
			t.Fatalf("%s group %d: NewRaft: %v", n.id, g, err)
		}
		n.peers[g] = p
	}
}

// stop shuts down every raft of n, cuts it off and closes its DB.
func (c *mrCluster) stop(n *mrNode) {
	t := c.t
	t.Helper()
	n.closed = map[uint64]mrRange{}
	for _, g := range mrGroups {
		p := n.peers[g]
		if err := p.raft.Shutdown().Error(); err != nil {
			t.Fatalf("%s group %d: shutdown: %v", n.id, g, err)
		}
		for _, o := range c.nodes {
			if o != n && o.db != nil {
				o.peers[g].trans.Disconnect(p.addr)
			}
		}
		p.trans.Close()
		n.closed[g] = mrRange{mrIndex(t, p.store.FirstIndex), mrIndex(t, p.store.LastIndex)}
	}
	if err := n.db.Close(); err != nil {
		t.Fatalf("%s: DB.Close: %v", n.id, err)
	}
	n.db = nil
}

func (c *mrCluster) running() []*mrNode {
	var out []*mrNode
	for _, n := range c.nodes {
		if n.db != nil {
			out = append(out, n)
		}
	}
	return out
}

func (c *mrCluster) bootstrap(g uint64, on *mrNode) {
	var conf raft.Configuration
	for _, n := range c.nodes {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: n.id, Address: n.peers[g].addr})
	}
	if err := on.peers[g].raft.BootstrapCluster(conf).Error(); err != nil {
		c.t.Fatalf("group %d: bootstrap on %s: %v", g, on.id, err)
	}
}

// poll calls cond until it holds, or fails after mrWait. It may run on any
// goroutine.
func (c *mrCluster) poll(what string, cond func() bool) error {
	deadline := time.Now().Add(mrWait)
	tick := time.NewTicker(mrPollEvery)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", mrWait, what)
		}
		<-tick.C
	}
	return nil
}

// findLeader returns the running member of group g that is leader and has
// confirmed it with a quorum.
func (c *mrCluster) findLeader(g uint64) (*mrNode, error) {
	var leader *mrNode
	err := c.poll(fmt.Sprintf("a leader of group %d", g), func() bool {
		for _, n := range c.running() {
			p := n.peers[g]
			if p.raft.State() == raft.Leader && p.raft.VerifyLeader().Error() == nil {
				leader = n
				return true
			}
		}
		return false
	})
	return leader, err
}

func (c *mrCluster) leader(g uint64) *mrNode {
	c.t.Helper()
	n, err := c.findLeader(g)
	if err != nil {
		c.t.Fatalf("%v: %s", err, c.describe())
	}
	return n
}

// apply applies n commands to group g through its leader. A command whose
// leader lost its leadership is applied again through the next one: it may
// then be applied twice, which every replica does alike.
func (c *mrCluster) apply(g uint64, n int) error {
	sent := c.sent[g]
	cmds := make([][]byte, n)
	base := int(sent.Load())
	for i := range cmds {
		cmd := fmt.Appendf(nil, "g%d set k%d=%d ", g, (base+i)%101, base+i)
		cmds[i] = append(cmd, bytes.Repeat([]byte{'.'}, mrCommandSize-len(cmd))...)
	}
	deadline := time.Now().Add(mrWait)
	for len(cmds) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("group %d: %d commands still not applied after %v", g, len(cmds), mrWait)
		}
		leader, err := c.findLeader(g)
		if err != nil {
			return err
		}
		r := leader.peers[g].raft
		futures := make([]raft.ApplyFuture, len(cmds))
		for i, cmd := range cmds {
			futures[i] = r.Apply(cmd, mrApplyTimeout)
		}
		var retry [][]byte
		for i, f := range futures {
			err := f.Error()
			switch {
			case err == nil:
				sent.Add(1)
			case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrNotLeader),
				errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrLeadershipTransferInProgress):
				retry = append(retry, cmds[i])
			default:
				return fmt.Errorf("group %d: apply through %s: %v", g, leader.id, err)
			}
		}
		cmds = retry
	}
	return nil
}

// applyAll applies n commands to every group at once, one goroutine per
// group.
func (c *mrCluster) applyAll(n int) {
	c.t.Helper()
	errs := make([]error, len(mrGroups))
	var wg sync.WaitGroup
	for i, g := range mrGroups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.apply(g, n)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatalf("%v\n%s", err, c.describe())
	}
}

// snapshot forces a snapshot of group g on n.
func (c *mrCluster) snapshot(n *mrNode, g uint64) {
	c.t.Helper()
	if err := n.peers[g].raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		c.t.Fatalf("%s group %d: snapshot: %v", n.id, g, err)
	}
}

// waitConverged waits until every running member of group g has applied
// everything its leader has and holds the leader's last entry, or a
// snapshot of it (a member that installed a snapshot of everything holds no
// entries), and then checks the state machines.
func (c *mrCluster) waitConverged(g uint64) {
	t := c.t
	t.Helper()
	leader := c.leader(g)
	lp := leader.peers[g]
	err := c.poll(fmt.Sprintf("every member of group %d to apply the leader's log", g), func() bool {
		want := lp.raft.LastIndex()
		state := lp.fsm.snapshotState()
		for _, n := range c.running() {
			p := n.peers[g]
			if p.raft.AppliedIndex() != want || p.fsm.snapshotState() != state {
				return false
			}
		}
		for _, n := range c.running() {
			p := n.peers[g]
			last, _ := p.store.LastIndex()
			if last == want {
				continue
			}
			snap, _ := strconv.ParseUint(p.raft.Stats()["last_snapshot_index"], 10, 64)
			if last > want || snap != want { // entries below a snapshot go with the next append
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("%v: %s", err, c.describe())
	}
	for _, n := range c.running() {
		if err := n.peers[g].fsm.failure(); err != nil {
			t.Fatalf("%s group %d: %v", n.id, g, err)
		}
	}
	if s := lp.fsm.snapshotState(); s.Count < uint64(c.sent[g].Load()) {
		t.Fatalf("group %d: the FSM applied %d commands, %d were acknowledged", g, s.Count, c.sent[g].Load())
	}
}

func (c *mrCluster) waitConvergedAll() {
	c.t.Helper()
	for _, g := range mrGroups {
		c.waitConverged(g)
	}
}

// checkLogsEqual reads every entry of group g's stores and checks that they
// agree wherever their ranges overlap, and that every command in them is
// one of group g's.
func (c *mrCluster) checkLogsEqual(g uint64) {
	t := c.t
	t.Helper()
	ref := c.nodes[0].peers[g].store
	prefix := fmt.Appendf(nil, "g%d ", g)
	var a, b raft.Log
	for _, n := range c.nodes {
		s := n.peers[g].store
		first, last := mrIndex(t, s.FirstIndex), mrIndex(t, s.LastIndex)
		for i := first; i <= last && last != 0; i++ {
			if err := s.GetLog(i, &a); err != nil {
				t.Fatalf("%s group %d: GetLog(%d) in %d..%d: %v", n.id, g, i, first, last, err)
			}
			if a.Index != i {
				t.Fatalf("%s group %d: GetLog(%d) returned index %d", n.id, g, i, a.Index)
			}
			if a.Type == raft.LogCommand && !bytes.HasPrefix(a.Data, prefix) {
				t.Fatalf("%s group %d: entry %d holds %q, not a command of the group", n.id, g, i, a.Data)
			}
			if s == ref {
				continue
			}
			if err := ref.GetLog(i, &b); errors.Is(err, raft.ErrLogNotFound) {
				continue
			} else if err != nil {
				t.Fatalf("%s group %d: GetLog(%d): %v", c.nodes[0].id, g, i, err)
			}
			if a.Term != b.Term || a.Type != b.Type || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("group %d entry %d differs: %s has term %d type %v %q, %s has term %d type %v %q",
					g, i, n.id, a.Term, a.Type, a.Data, c.nodes[0].id, b.Term, b.Type, b.Data)
			}
		}
	}
}

// checkNoStoreErrors fails the test if raft logged an error from a store.
func (c *mrCluster) checkNoStoreErrors() {
	c.t.Helper()
	for _, line := range strings.Split(c.logs.String(), "\n") {
		if strings.Contains(line, "raftstore") {
			c.t.Errorf("raft logged a store error: %s", line)
		}
	}
}

func (c *mrCluster) sentCounts() map[uint64]int64 {
	out := map[uint64]int64{}
	for g, n := range c.sent {
		out[g] = n.Load()
	}
	return out
}

func (c *mrCluster) describe() string {
	var b strings.Builder
	for _, n := range c.nodes {
		if n.db == nil {
			fmt.Fprintf(&b, "\n[%s stopped]", n.id)
			continue
		}
		fmt.Fprintf(&b, "\n[%s", n.id)
		for _, g := range mrGroups {
			p := n.peers[g]
			f, _ := p.store.FirstIndex()
			l, _ := p.store.LastIndex()
			fmt.Fprintf(&b, " group %d: %v entries %d..%d snapshot %s applied %d;", g, p.raft.State(), f, l,
				p.raft.Stats()["last_snapshot_index"], p.raft.AppliedIndex())
		}
		b.WriteString("]")
	}
	return b.String()
}

// mrIndex calls FirstIndex or LastIndex.
func mrIndex(t *testing.T, f func() (uint64, error)) uint64 {
	t.Helper()
	i, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// mrSegments returns the bases of the segment files of n's commit log.
func mrSegments(t *testing.T, n *mrNode) []int64 {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(n.dir, "db", "log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, e := range ents {
		if len(e.Name()) != 20 {
			continue
		}
		if v, err := strconv.ParseInt(e.Name(), 10, 64); err == nil {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}
