package transport

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestRaftTransportCluster runs a three-node hashicorp/raft cluster in one
// process, each node on its own RaftTransport over loopback TCP, and walks
// it through what a transport carries: bootstrap and elections (votes,
// pre-votes), thousands of pipelined appends from concurrent writers in
// batches larger than a frame,
// killing the leader and restarting it at its address, a follower that
// comes back after the others compacted past it (an InstallSnapshot), and
// a leadership transfer (TimeoutNow). At the end every node holds the same
// state machine.
func TestRaftTransportCluster(t *testing.T) {
	c := newTransportCluster(t)
	c.bootstrap()

	// 1. Concurrent writers keep the pipeline full.
	c.apply(2000, 8)
	c.waitConverged()
	if !c.sawLog("pipelining replication") {
		t.Fatal("raft never replicated through a pipeline")
	}

	// 2. A follower's store fails a few appends while the pipeline to it
	// is full: it answers Success false, raft abandons the pipeline and
	// falls back, and replication carries on (raft v1.8.0's own
	// pipeline can park for good here: grafana/pyroscope#5518).
	flaky := c.follower()
	flaky.failAppends.Store(3)
	c.apply(2000, 8)
	c.waitConverged()
	if n := flaky.failAppends.Load(); n != 0 {
		t.Fatalf("%s: %d store failures not injected", flaky.id, n)
	}

	// 3. Kill the leader: a new one takes over; the old one restarts at
	// its address with its state and catches up.
	old := c.waitLeader(nil)
	c.stop(old)
	c.waitLeader(old)
	c.apply(500, 4)
	c.start(old)
	c.waitConverged()

	// 4. A follower misses entries the others compact away: it can only
	// catch up from a snapshot, streamed over the transport.
	f := c.follower()
	c.stop(f)
	c.apply(1000, 4)
	for _, n := range c.running() {
		if err := n.raft.Snapshot().Error(); err != nil {
			t.Fatalf("%s: snapshot: %v", n.id, err)
		}
	}
	c.apply(20, 1)
	c.start(f)
	c.waitConverged()
	if f.fsm.restored() == 0 {
		t.Fatalf("%s caught up without a snapshot install", f.id)
	}

	// 5. Hand leadership over (TimeoutNow), and write through the new
	// leader.
	leader := c.waitLeader(nil)
	to := c.follower()
	for attempt := 1; ; attempt++ {
		err := leader.raft.LeadershipTransferToServer(to.id, to.addr).Error()
		if err == nil || errors.Is(err, raft.ErrNotLeader) {
			break
		}
		if attempt == 3 {
			t.Fatalf("leadership transfer %s -> %s: %v", leader.id, to.id, err)
		}
		c.waitConverged()
	}
	c.waitLeader(leader)
	c.apply(200, 4)
	c.waitConverged()
}

// clusterWait bounds every wait of the cluster test: generous, for a
// loaded machine.
const clusterWait = 60 * time.Second

type transportCluster struct {
	t     *testing.T
	nodes []*clusterNode
	logs  *logSink
}

type clusterNode struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	store *raft.InmemStore        // kept across restarts, like a process's disk
	snaps *raft.FileSnapshotStore // kept across restarts
	fsm   *chainFSM               // new at each start, like a process's memory
	// failAppends is the number of StoreLogs calls still to fail.
	failAppends atomic.Int32
	tr          *RaftTransport
	raft        *raft.Raft
}

func newTransportCluster(t *testing.T) *transportCluster {
	c := &transportCluster{t: t, logs: &logSink{}}
	for i := range 3 {
		ln := listenLoopback(t)
		snaps, err := raft.NewFileSnapshotStore(t.TempDir(), 2, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		n := &clusterNode{
			id: raft.ServerID(fmt.Sprintf("n%d", i+1)), addr: raft.ServerAddress(ln.Addr().String()),
			store: raft.NewInmemStore(), snaps: snaps,
		}
		c.nodes = append(c.nodes, n)
		c.startOn(n, ln)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			if n.raft != nil {
				c.stop(n)
			}
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("raft logs:\n%s", c.logs)
		}
	})
	return c
}

func (c *transportCluster) start(n *clusterNode) {
	c.t.Helper()
	var ln net.Listener
	c.waitFor("listening on "+string(n.addr), func() bool {
		var err error
		ln, err = net.Listen("tcp", string(n.addr))
		return err == nil
	})
	c.startOn(n, ln)
}

func (c *transportCluster) startOn(n *clusterNode, ln net.Listener) {
	t := c.t
	t.Helper()
	logger := hclog.New(&hclog.LoggerOptions{Name: string(n.id), Level: hclog.Info, Output: c.logs})
	// The smallest frames: raft's batches of 64 entries of 1 KiB do not
	// fit, so AppendEntries go out in parts.
	tr, err := NewRaftTransport(tcpLayer{ln}, &RaftTransportConfig{Timeout: 5 * time.Second, MaxFrameSize: minRaftFrameSize, Logger: logger.Named("transport")})
	if err != nil {
		t.Fatal(err)
	}
	conf := raft.DefaultConfig()
	conf.LocalID = n.id
	conf.HeartbeatTimeout = 500 * time.Millisecond
	conf.ElectionTimeout = 500 * time.Millisecond
	conf.LeaderLeaseTimeout = 250 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.SnapshotThreshold = 1 << 40 // snapshots only when the test asks
	conf.TrailingLogs = 10
	conf.Logger = logger
	n.tr = tr
	n.fsm = &chainFSM{}
	logs := &flakyStore{InmemStore: n.store, fail: &n.failAppends}
	n.raft, err = raft.NewRaft(conf, n.fsm, logs, n.store, n.snaps, tr)
	if err != nil {
		tr.Close()
		t.Fatalf("%s: %v", n.id, err)
	}
}

// stop shuts raft down (which closes the transport), as a killed process.
func (c *transportCluster) stop(n *clusterNode) {
	if err := n.raft.Shutdown().Error(); err != nil {
		c.t.Errorf("%s: shutdown: %v", n.id, err)
	}
	n.raft = nil
}

func (c *transportCluster) running() []*clusterNode {
	var r []*clusterNode
	for _, n := range c.nodes {
		if n.raft != nil {
			r = append(r, n)
		}
	}
	return r
}

func (c *transportCluster) bootstrap() {
	var conf raft.Configuration
	for _, n := range c.nodes {
		conf.Servers = append(conf.Servers, raft.Server{ID: n.id, Address: n.addr})
	}
	if err := c.nodes[0].raft.BootstrapCluster(conf).Error(); err != nil {
		c.t.Fatal(err)
	}
}

func (c *transportCluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(clusterWait)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("still waiting after %v for %s", clusterWait, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitLeader waits for a running node other than not to lead.
func (c *transportCluster) waitLeader(not *clusterNode) *clusterNode {
	c.t.Helper()
	var leader *clusterNode
	c.waitFor("a leader", func() bool {
		for _, n := range c.running() {
			if n != not && n.raft.State() == raft.Leader {
				leader = n
				return true
			}
		}
		return false
	})
	return leader
}

func (c *transportCluster) follower() *clusterNode {
	c.t.Helper()
	leader := c.waitLeader(nil)
	for _, n := range c.running() {
		if n != leader {
			return n
		}
	}
	c.t.Fatal("no follower")
	return nil
}

// apply applies n commands of 1 KiB through the leader from writers
// goroutines, and waits for all of them; a command whose leader lost its
// leadership is applied again through the next one.
func (c *transportCluster) apply(n, writers int) {
	t := c.t
	t.Helper()
	deadline := time.Now().Add(clusterWait)
	for n > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d commands still not applied after %v", n, clusterWait)
		}
		leader := c.waitLeader(nil)
		var mu sync.Mutex
		var failed int
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += writers {
					cmd := bytes.Repeat([]byte{byte(i)}, 1024)
					if err := leader.raft.Apply(cmd, 10*time.Second).Error(); err != nil {
						mu.Lock()
						failed++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		n = failed
	}
}

// waitConverged waits until every running node has applied the leader's
// last index and holds the same state machine.
func (c *transportCluster) waitConverged() {
	c.t.Helper()
	c.waitFor("every node to apply the leader's log", func() bool {
		leader := c.waitLeader(nil)
		want := leader.raft.LastIndex()
		if leader.raft.AppliedIndex() != want {
			return false
		}
		state := leader.fsm.state()
		for _, n := range c.running() {
			if n.raft.AppliedIndex() != want || n.fsm.state() != state {
				return false
			}
		}
		return true
	})
}

func (c *transportCluster) sawLog(s string) bool { return strings.Contains(c.logs.String(), s) }

// flakyStore fails StoreLogs while fail is positive, as a dying disk.
type flakyStore struct {
	*raft.InmemStore
	fail *atomic.Int32
}

var errInjected = errors.New("injected store failure")

func (s *flakyStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *flakyStore) StoreLogs(logs []*raft.Log) error {
	for {
		n := s.fail.Load()
		if n <= 0 {
			return s.InmemStore.StoreLogs(logs)
		}
		if s.fail.CompareAndSwap(n, n-1) {
			return errInjected
		}
	}
}

// chainFSM hashes every command it applies into a chain: two nodes with
// the same state applied the same commands in the same order.
type chainFSM struct {
	mu       sync.Mutex
	count    uint64   // guarded by mu
	hash     [32]byte // guarded by mu
	restores int      // guarded by mu
}

type fsmState struct {
	count uint64
	hash  [32]byte
}

func (f *chainFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := sha256.New()
	h.Write(f.hash[:])
	h.Write(l.Data)
	copy(f.hash[:], h.Sum(nil))
	f.count++
	return nil
}

func (f *chainFSM) state() fsmState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fsmState{f.count, f.hash}
}

// restored returns the number of snapshots restored.
func (f *chainFSM) restored() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restores
}

func (f *chainFSM) Snapshot() (raft.FSMSnapshot, error) { return chainSnapshot(f.state()), nil }

func (f *chainFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [40]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count = binary.BigEndian.Uint64(b[:8])
	copy(f.hash[:], b[8:])
	f.restores++
	return nil
}

type chainSnapshot fsmState

func (s chainSnapshot) Persist(sink raft.SnapshotSink) error {
	var b [40]byte
	binary.BigEndian.PutUint64(b[:8], s.count)
	copy(b[8:], s.hash[:])
	// Pad the snapshot so that it streams in many writes.
	if _, err := sink.Write(append(b[:], make([]byte, 1<<20)...)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (chainSnapshot) Release() {}

// logSink collects raft's log lines.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
