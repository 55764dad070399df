package raftstore_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/raftstore"
)

// TestCluster runs a three-node hashicorp/raft cluster in one process, each
// node on a raftstore.Store used as both log and stable store, and walks it
// through the paths a store has to get right under raft: bootstrap,
// thousands of appends, snapshots with prefix compaction, a follower that
// restarts from its directory after the leader compacted past it (and so
// needs a snapshot install, which empties its store), a leadership transfer
// to that follower, and a restart of the leader. At the end every replica
// must hold the same state machine and the same log.
func TestCluster(t *testing.T) {
	c := newCluster(t, 3)
	c.bootstrap()

	// 1. Thousands of commands, then a snapshot on every node: each store
	// must have dropped a prefix (or, if it lagged, had its log replaced by
	// a snapshot install).
	c.apply(3000)
	c.waitConverged()
	for _, n := range c.nodes {
		c.snapshot(n)
	}
	c.fillEmpty()
	for _, n := range c.nodes {
		if first := firstIndex(t, n.store); first <= 1 {
			t.Fatalf("%s: first index %d after a snapshot at %s: no compaction", n.id, first, n.raft.Stats()["last_snapshot_index"])
		}
	}

	// 2. Stop a follower and move every other log past everything the
	// follower has, so that whoever leads, it can only catch up from a
	// snapshot.
	f := c.follower()
	c.stop(f)
	fLast := f.closeLast
	c.apply(1000)
	c.waitConverged()
	for _, n := range c.running() {
		c.snapshot(n)
		if first := firstIndex(t, n.store); first <= fLast {
			t.Fatalf("%s first index %d is not past follower %s last index %d", n.id, first, f.id, fLast)
		}
	}
	c.apply(50) // entries past the snapshot, for the follower to append

	// 3. Restart the follower from its directory. The reopened store must
	// hold what it held at Close; then raft must install a snapshot.
	c.start(f)
	c.checkReopened(f)
	c.waitConverged()
	if got := f.fsm.restoredIndex(); got <= fLast {
		t.Fatalf("%s caught up without a snapshot install (restored up to %d, had %d)", f.id, got, fLast)
	}
	if si, _ := strconv.ParseUint(f.raft.Stats()["last_snapshot_index"], 10, 64); si <= fLast {
		t.Fatalf("%s last snapshot index %d, want past its old last index %d", f.id, si, fLast)
	}
	if ff := firstIndex(t, f.store); ff <= fLast {
		t.Fatalf("%s first index %d after the snapshot install, want past %d", f.id, ff, fLast)
	}

	// 4. Hand leadership to the restarted follower (or, if an election
	// already made it leader, away from it) and write through the new
	// leader. A transfer can time out on a loaded machine: try again.
	old := c.waitLeader(nil)
	to := f
	if old == f {
		to = c.follower()
	}
	for attempt := 1; ; attempt++ {
		err := old.raft.LeadershipTransferToServer(to.id, to.addr).Error()
		if err == nil || errors.Is(err, raft.ErrNotLeader) {
			break
		}
		if attempt == 3 {
			t.Fatalf("leadership transfer %s -> %s: %v", old.id, to.id, err)
		}
		t.Logf("leadership transfer %s -> %s: %v; trying again", old.id, to.id, err)
		c.waitConverged()
	}
	if l := c.waitLeader(old); l != to {
		t.Logf("leadership went to %s, not %s", l.id, to.id)
	}
	c.apply(1000)
	c.waitConverged()

	// 5. Stop the leader, write through its successor, restart it, and
	// write some more so that every store holds the newest entries.
	leader := c.waitLeader(nil)
	c.stop(leader)
	c.waitLeader(leader)
	c.apply(500)
	c.start(leader)
	c.checkReopened(leader)
	c.waitConverged()
	c.apply(50)
	c.waitConverged()
	c.fillEmpty()
	final := c.describe()

	// Stop raft, so that no snapshot compacts a store while we read it.
	for _, n := range c.nodes {
		if err := n.raft.Shutdown().Error(); err != nil {
			t.Fatalf("%s: shutdown: %v", n.id, err)
		}
	}
	want := lastIndex(t, c.nodes[0].store)
	for _, n := range c.nodes {
		if l := lastIndex(t, n.store); l != want || l == 0 {
			t.Fatalf("store last indexes differ: %s", final)
		}
	}
	c.checkLogsEqual()
	c.checkNoStoreErrors()
	t.Logf("%d commands, last index %d: %s", c.sent, want, final)
}

// Timeouts of the test; each wait fails the test when it runs out.
const (
	clusterWait  = 20 * time.Second // leader election, convergence
	applyTimeout = 10 * time.Second // one Apply
	pollEvery    = 5 * time.Millisecond
)

// cluster is a set of raft nodes joined by in-memory transports. Only the
// test goroutine uses it.
type cluster struct {
	t     *testing.T
	opts  clusterOptions
	nodes []*node
	logs  *logSink
	sent  int // commands applied successfully
}

// clusterOptions change how a test cluster's nodes run.
type clusterOptions struct {
	// conf, when set, adjusts each node's raft settings.
	conf func(*raft.Config)
	// lossy wraps each node's transport in a lossyTransport.
	lossy bool
}

// node is one member: its directory outlives restarts, the rest is replaced
// by each start.
type node struct {
	id   raft.ServerID
	addr raft.ServerAddress
	dir  string

	store *raftstore.Store
	snaps raft.SnapshotStore
	trans *raft.InmemTransport
	lossy *lossyTransport // wraps trans when the cluster is lossy, else nil
	fsm   *hashFSM
	raft  *raft.Raft // nil while stopped

	openFirst, openLast   uint64 // the store's indexes when start opened it
	closeFirst, closeLast uint64 // and when stop closed it
}

func newCluster(t *testing.T, size int) *cluster {
	return newClusterWith(t, size, clusterOptions{})
}

func newClusterWith(t *testing.T, size int, opts clusterOptions) *cluster {
	c := &cluster{t: t, opts: opts, logs: &logSink{}}
	base := t.TempDir() // before the Cleanup below, so removed after it
	t.Cleanup(func() {
		for _, n := range c.nodes {
			if n.raft != nil {
				c.stop(n)
			}
		}
		if t.Failed() {
			t.Logf("raft error log (tail):\n%s", c.logs.String())
		}
	})
	for i := range size {
		id := fmt.Sprintf("node%d", i)
		n := &node{id: raft.ServerID(id), addr: raft.ServerAddress(id), dir: filepath.Join(base, id)}
		c.nodes = append(c.nodes, n)
		c.start(n)
	}
	return c
}

func (c *cluster) config(n *node) *raft.Config {
	conf := testRaftConfig(n.id, c.logs, 128, 500)
	if c.opts.conf != nil {
		c.opts.conf(conf)
	}
	return conf
}

// testRaftConfig returns raft settings for tests: short timeouts, frequent
// snapshots and few trailing logs, so that elections, snapshots and
// compaction all happen within a second or two; errors go to logs.
func testRaftConfig(id raft.ServerID, logs io.Writer, maxAppend int, snapshotThreshold uint64) *raft.Config {
	conf := raft.DefaultConfig()
	conf.LocalID = id
	conf.HeartbeatTimeout = 200 * time.Millisecond
	conf.ElectionTimeout = 200 * time.Millisecond
	conf.LeaderLeaseTimeout = 100 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.MaxAppendEntries = maxAppend
	conf.BatchApplyCh = true
	conf.SnapshotThreshold = snapshotThreshold
	conf.SnapshotInterval = 100 * time.Millisecond
	conf.TrailingLogs = 100
	conf.LogOutput = logs
	conf.LogLevel = "ERROR"
	return conf
}

// start opens n's store and snapshot store from its directory, connects a
// fresh transport to every running node and starts raft with a fresh FSM.
func (c *cluster) start(n *node) {
	t := c.t
	t.Helper()
	store, err := raftstore.Open(filepath.Join(n.dir, "raft"), &raftstore.Options{
		SegmentSize:        64 << 10, // small, so compaction releases segments
		CheckpointInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("%s: open store: %v", n.id, err)
	}
	n.store = store
	n.openFirst, n.openLast = firstIndex(t, store), lastIndex(t, store)
	n.snaps, err = raft.NewFileSnapshotStore(filepath.Join(n.dir, "snapshots"), 2, io.Discard)
	if err != nil {
		store.Close()
		t.Fatalf("%s: snapshot store: %v", n.id, err)
	}
	_, n.trans = raft.NewInmemTransport(n.addr)
	for _, o := range c.nodes {
		if o != n && o.raft != nil {
			n.trans.Connect(o.addr, o.trans)
			o.trans.Connect(n.addr, n.trans)
		}
	}
	var trans raft.Transport = n.trans
	n.lossy = nil
	if c.opts.lossy {
		n.lossy = &lossyTransport{InmemTransport: n.trans}
		trans = n.lossy
	}
	n.fsm = &hashFSM{}
	n.raft, err = raft.NewRaft(c.config(n), n.fsm, store, store, n.snaps, trans)
	if err != nil {
		store.Close()
		t.Fatalf("%s: new raft: %v", n.id, err)
	}
}

// stop shuts n's raft down, cuts it off from the others and closes its store.
func (c *cluster) stop(n *node) {
	t := c.t
	t.Helper()
	if err := n.raft.Shutdown().Error(); err != nil {
		t.Errorf("%s: shutdown: %v", n.id, err)
	}
	n.raft = nil
	for _, o := range c.nodes {
		if o != n && o.trans != nil {
			o.trans.Disconnect(n.addr)
		}
	}
	n.closeFirst, n.closeLast = firstIndex(t, n.store), lastIndex(t, n.store)
	if err := n.store.Close(); err != nil {
		t.Errorf("%s: close store: %v", n.id, err)
	}
}

// checkReopened checks that n's store reopened with the entries it held
// when it was closed.
func (c *cluster) checkReopened(n *node) {
	c.t.Helper()
	if n.openFirst != n.closeFirst || n.openLast != n.closeLast {
		c.t.Fatalf("%s reopened with entries %d..%d, closed with %d..%d", n.id, n.openFirst, n.openLast, n.closeFirst, n.closeLast)
	}
}

func (c *cluster) running() []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.raft != nil {
			out = append(out, n)
		}
	}
	return out
}

func (c *cluster) bootstrap() {
	var conf raft.Configuration
	for _, n := range c.nodes {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: n.id, Address: n.addr})
	}
	if err := c.nodes[0].raft.BootstrapCluster(conf).Error(); err != nil {
		c.t.Fatalf("bootstrap: %v", err)
	}
}

// waitFor polls cond until it holds or clusterWait runs out.
func (c *cluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(clusterWait)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %v waiting for %s; stores: %s", clusterWait, what, c.describe())
		}
		<-tick.C
	}
}

// waitLeader returns the running node that is leader, other than not, once
// it has confirmed its leadership with a quorum.
func (c *cluster) waitLeader(not *node) *node {
	c.t.Helper()
	var leader *node
	c.waitFor("a leader", func() bool {
		for _, n := range c.running() {
			if n != not && n.raft.State() == raft.Leader && n.raft.VerifyLeader().Error() == nil {
				leader = n
				return true
			}
		}
		return false
	})
	return leader
}

// follower returns a running node that is not the leader.
func (c *cluster) follower() *node {
	leader := c.waitLeader(nil)
	for _, n := range c.running() {
		if n != leader {
			return n
		}
	}
	c.t.Fatal("no follower")
	return nil
}

// apply applies n commands through the leader and waits for all of them. A
// command whose leader lost its leadership is applied again through the
// next leader: it may then be applied twice, which every replica does alike.
func (c *cluster) apply(n int) {
	t := c.t
	t.Helper()
	cmds := make([][]byte, n)
	for i := range cmds {
		cmds[i] = fmt.Appendf(nil, "set k%d=%d", (c.sent+i)%101, c.sent+i)
	}
	deadline := time.Now().Add(clusterWait)
	for len(cmds) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d commands still not applied after %v", len(cmds), clusterWait)
		}
		leader := c.waitLeader(nil)
		futures := make([]raft.ApplyFuture, len(cmds))
		for i, cmd := range cmds {
			futures[i] = leader.raft.Apply(cmd, applyTimeout)
		}
		var retry [][]byte
		for i, f := range futures {
			err := f.Error()
			switch {
			case err == nil:
				c.sent++
			case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrNotLeader),
				errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrLeadershipTransferInProgress):
				retry = append(retry, cmds[i])
			default:
				t.Fatalf("apply through %s: %v", leader.id, err)
			}
		}
		if len(retry) > 0 {
			t.Logf("%d of %d commands retried after the leader %s lost its leadership", len(retry), len(cmds), leader.id)
		}
		cmds = retry
	}
}

// fillEmpty applies a few commands until every store holds the leader's
// last entry: a node that lagged and installed a snapshot of everything
// holds no entries after it (and perhaps some below it, until the next
// append drops them).
func (c *cluster) fillEmpty() {
	c.t.Helper()
	for range 5 {
		want := c.waitLeader(nil).raft.LastIndex()
		behind := false
		for _, n := range c.running() {
			behind = behind || lastIndex(c.t, n.store) != want
		}
		if !behind {
			return
		}
		c.apply(10)
		c.waitConverged()
	}
	c.t.Fatalf("a store still lacks the leader's last entry: %s", c.describe())
}

// snapshot forces a snapshot on n.
func (c *cluster) snapshot(n *node) {
	c.t.Helper()
	if err := n.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		c.t.Fatalf("%s: snapshot: %v", n.id, err)
	}
}

// waitConverged waits until every running node has applied everything the
// leader has and holds the leader's last entry, or a snapshot of it (a
// node that installed a snapshot of everything holds no entries after it;
// the ones below it that raft's TrailingLogs kept go with the next
// append), and then checks the FSMs.
func (c *cluster) waitConverged() {
	t := c.t
	t.Helper()
	leader := c.waitLeader(nil)
	c.waitFor("every node to apply the leader's log", func() bool {
		want := leader.raft.LastIndex()
		state := leader.fsm.snapshotState()
		for _, n := range c.running() {
			if n.raft.AppliedIndex() != want || n.fsm.snapshotState() != state {
				return false
			}
		}
		for _, n := range c.running() {
			last := lastIndex(t, n.store)
			if last == want {
				continue
			}
			snap, _ := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
			if last > want || snap != want {
				return false
			}
		}
		return true
	})
	for _, n := range c.running() {
		if err := n.fsm.failure(); err != nil {
			t.Fatalf("%s: %v", n.id, err)
		}
	}
	if s := leader.fsm.snapshotState(); s.Count < uint64(c.sent) {
		t.Fatalf("FSM applied %d commands, %d were acknowledged", s.Count, c.sent)
	}
}

// checkLogsEqual reads every entry of every store and checks that stores
// agree wherever their ranges overlap.
func (c *cluster) checkLogsEqual() {
	t := c.t
	t.Helper()
	ref := c.nodes[0]
	var a, b raft.Log
	for _, n := range c.nodes {
		first, last := firstIndex(t, n.store), lastIndex(t, n.store)
		for i := first; i <= last && last != 0; i++ {
			if err := n.store.GetLog(i, &a); err != nil {
				t.Fatalf("%s: GetLog(%d) in %d..%d: %v", n.id, i, first, last, err)
			}
			if a.Index != i {
				t.Fatalf("%s: GetLog(%d) returned index %d", n.id, i, a.Index)
			}
			if n == ref {
				continue
			}
			if err := ref.store.GetLog(i, &b); errors.Is(err, raft.ErrLogNotFound) {
				continue
			} else if err != nil {
				t.Fatalf("%s: GetLog(%d): %v", ref.id, i, err)
			}
			if a.Term != b.Term || a.Type != b.Type || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("entry %d differs: %s has term %d type %v %q, %s has term %d type %v %q",
					i, n.id, a.Term, a.Type, a.Data, ref.id, b.Term, b.Type, b.Data)
			}
		}
	}
}

// checkNoStoreErrors fails the test if raft logged an error from a store.
func (c *cluster) checkNoStoreErrors() {
	c.t.Helper()
	for _, line := range strings.Split(c.logs.String(), "\n") {
		if strings.Contains(line, "raftstore") {
			c.t.Errorf("raft logged a store error: %s", line)
		}
	}
}

func (c *cluster) describe() string {
	var b strings.Builder
	for _, n := range c.nodes {
		if n.raft == nil {
			fmt.Fprintf(&b, "[%s stopped] ", n.id)
			continue
		}
		f, _ := n.store.FirstIndex()
		l, _ := n.store.LastIndex()
		fmt.Fprintf(&b, "[%s %v entries %d..%d snapshot %s applied %d] ", n.id, n.raft.State(), f, l, n.raft.Stats()["last_snapshot_index"], n.raft.AppliedIndex())
	}
	return b.String()
}

func firstIndex(t *testing.T, s *raftstore.Store) uint64 {
	t.Helper()
	i, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func lastIndex(t *testing.T, s *raftstore.Store) uint64 {
	t.Helper()
	i, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// hashFSM folds every command into a running SHA-256, so two replicas with
// equal states applied the same commands in the same order. Raft calls
// Apply, Snapshot and Restore from its FSM goroutine; the test reads the
// state from its own, hence mu.
type hashFSM struct {
	mu       sync.Mutex
	state    fsmState // mu
	restored uint64   // mu: the highest state.Index Restore loaded
	err      error    // mu: the first entry applied out of order
}

// fsmState is the whole state machine; a snapshot is its fixed-size
// encoding.
type fsmState struct {
	Index uint64 // raft index of the last command applied
	Count uint64 // commands applied
	Hash  [sha256.Size]byte
}

const fsmStateSize = 8 + 8 + sha256.Size

func (f *hashFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.Index <= f.state.Index && f.err == nil {
		f.err = fmt.Errorf("applied entry %d after entry %d", l.Index, f.state.Index)
	}
	h := sha256.New()
	h.Write(f.state.Hash[:])
	h.Write(l.Data)
	h.Sum(f.state.Hash[:0])
	f.state.Index = l.Index
	f.state.Count++
	return f.state.Count
}

func (f *hashFSM) Snapshot() (raft.FSMSnapshot, error) {
	return fsmSnapshot(f.snapshotState()), nil
}

func (f *hashFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [fsmStateSize]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state.Index = binary.BigEndian.Uint64(b[0:])
	f.state.Count = binary.BigEndian.Uint64(b[8:])
	copy(f.state.Hash[:], b[16:])
	f.restored = max(f.restored, f.state.Index)
	return nil
}

func (f *hashFSM) snapshotState() fsmState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

func (f *hashFSM) restoredIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restored
}

func (f *hashFSM) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

type fsmSnapshot fsmState

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	b := binary.BigEndian.AppendUint64(nil, s.Index)
	b = binary.BigEndian.AppendUint64(b, s.Count)
	b = append(b, s.Hash[:]...)
	if _, err := sink.Write(b); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}

// logSink keeps the last logSinkMax bytes raft logs, to print when the test
// fails.
type logSink struct {
	mu sync.Mutex
	b  []byte // mu
}

const logSinkMax = 64 << 10

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	if len(s.b) > 2*logSinkMax {
		s.b = append(s.b[:0], s.b[len(s.b)-logSinkMax:]...)
	}
	return len(p), nil
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}
