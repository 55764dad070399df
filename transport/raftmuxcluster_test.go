package transport

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestRaftMuxCluster runs hashicorp/raft groups over three muxes, one per
// node, all groups of a node sharing its listener and its connections:
// every group elects a leader and replicates; a group added while the
// others run joins; a group removed from one node gets errors there while
// the others go on; and a group whose follower is stuck (its raft does not
// read its Consumer) holds up no other group.
func TestRaftMuxCluster(t *testing.T) {
	const groups = 8
	c := newMuxCluster(t, 3, RaftTransportConfig{Timeout: 5 * time.Second}, muxTestRaftConfig)
	for g := range uint64(groups) {
		c.addGroup(g + 1)
	}
	for g := range uint64(groups) {
		c.apply(g+1, 50)
	}
	for g := range uint64(groups) {
		c.waitConverged(g + 1)
	}
	leaders := map[raft.ServerID]int{}
	for g := range uint64(groups) {
		leaders[c.waitLeader(g+1, nil).node.id]++
	}
	t.Logf("%d groups on 3 nodes, leaders per node: %v", groups, leaders)

	// A group added later, while the others run and replicate.
	writing := make(chan struct{})
	go func() {
		defer close(writing)
		c.apply(1, 100)
	}()
	const late = 1 << 40
	c.addGroup(late)
	c.apply(late, 50)
	c.waitConverged(late)
	<-writing
	c.waitConverged(1)

	// Group 2 removed from one node: its peers' calls there get errors,
	// counted by that node's mux; the group goes on with the other two
	// nodes, and so does every other group.
	gone := c.follower(2)
	before := gone.node.mux.Stats().UnknownGroup
	c.removeReplica(2, gone.node)
	c.waitFor("requests for the removed group answered with errors", func() bool {
		return gone.node.mux.Stats().UnknownGroup > before+10
	})
	for g := range uint64(groups) {
		c.apply(g+1, 20)
	}
	for g := range uint64(groups) {
		c.waitConverged(g + 1)
	}

	// A stuck follower in group 3: its store blocks, so its raft stops
	// reading its Consumer, and the leader's calls to it wait. Every other
	// group, on the same nodes and connections, replicates to that node.
	stuck := c.follower(3)
	stuck.gate.close()
	c.apply(3, 5) // a quorum without the stuck node
	for g := range uint64(groups) {
		if g+1 == 3 {
			continue
		}
		c.apply(g+1, 20)
	}
	for g := range uint64(groups) {
		if g+1 != 3 {
			c.waitConverged(g + 1) // the stuck node's other groups too
		}
	}
	if stuck.gate.blocked.Load() == 0 {
		t.Fatal("the stuck follower's store was never called while closed")
	}
	stuck.gate.open()
	c.waitConverged(3)
}

// muxTestRaftConfig is raft's configuration for the functional tests:
// short timeouts, but not so short that a loaded machine keeps electing.
func muxTestRaftConfig(c *raft.Config) {
	c.HeartbeatTimeout = 1 * time.Second
	c.ElectionTimeout = 1 * time.Second
	c.LeaderLeaseTimeout = 500 * time.Millisecond
	c.CommitTimeout = 20 * time.Millisecond
}

// muxCluster is a cluster of nodes, each a RaftMux, running raft groups.
type muxCluster struct {
	t     testing.TB
	nodes []*muxNode
	conf  func(*raft.Config)
	logs  *logSink

	mu     sync.Mutex
	groups map[uint64][]*muxReplica // guarded by mu
}

type muxNode struct {
	id  raft.ServerID
	mux *RaftMux
}

// muxReplica is one node's replica of a group.
type muxReplica struct {
	node  *muxNode
	group uint64
	fsm   *chainFSM
	gate  *storeGate
	tr    *RaftTransport
	raft  *raft.Raft
}

// newMuxCluster starts n muxes with tc (Logger set here), whose groups
// get raft's default configuration changed by conf.
func newMuxCluster(t testing.TB, n int, tc RaftTransportConfig, conf func(*raft.Config)) *muxCluster {
	c := &muxCluster{t: t, conf: conf, logs: &logSink{}, groups: map[uint64][]*muxReplica{}}
	for i := range n {
		id := raft.ServerID(fmt.Sprintf("n%d", i+1))
		logger := hclog.New(&hclog.LoggerOptions{Name: string(id), Level: hclog.Info, Output: c.logs})
		tc.Logger = logger.Named("transport")
		m, err := NewRaftMux(tcpLayer{listenLoopback(t)}, &tc)
		if err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, &muxNode{id: id, mux: m})
	}
	t.Cleanup(func() {
		c.mu.Lock()
		var all []*muxReplica
		for _, rs := range c.groups {
			all = append(all, rs...)
		}
		c.mu.Unlock()
		var wg sync.WaitGroup
		for _, r := range all {
			r.gate.open()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.raft.Shutdown().Error()
			}()
		}
		wg.Wait()
		for _, n := range c.nodes {
			n.mux.Close()
		}
		if t.Failed() {
			t.Logf("raft logs:\n%s", c.logs)
		}
	})
	return c
}

// addGroup starts group g on every node and bootstraps it.
func (c *muxCluster) addGroup(g uint64) {
	t := c.t
	t.Helper()
	var conf raft.Configuration
	for _, n := range c.nodes {
		conf.Servers = append(conf.Servers, raft.Server{ID: n.id, Address: n.mux.LocalAddr()})
	}
	var rs []*muxReplica
	for _, n := range c.nodes {
		tr, err := n.mux.Group(g)
		if err != nil {
			t.Fatal(err)
		}
		rc := raft.DefaultConfig()
		rc.LocalID = n.id
		rc.Logger = hclog.New(&hclog.LoggerOptions{Name: fmt.Sprintf("%s/%d", n.id, g), Level: hclog.Warn, Output: c.logs})
		rc.SnapshotThreshold = 1 << 40
		if c.conf != nil {
			c.conf(rc)
		}
		store := raft.NewInmemStore()
		r := &muxReplica{node: n, group: g, fsm: &chainFSM{}, gate: newStoreGate(), tr: tr}
		r.raft, err = raft.NewRaft(rc, r.fsm, &gatedStore{InmemStore: store, gate: r.gate}, store, raft.NewDiscardSnapshotStore(), tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.raft.BootstrapCluster(conf).Error(); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	c.mu.Lock()
	c.groups[g] = rs
	c.mu.Unlock()
}

// removeReplica shuts n's replica of group g down, which removes the
// group from n's mux.
func (c *muxCluster) removeReplica(g uint64, n *muxNode) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := c.groups[g]
	for i, r := range rs {
		if r.node == n {
			r.raft.Shutdown().Error()
			c.groups[g] = append(rs[:i:i], rs[i+1:]...)
			return
		}
	}
	c.t.Fatalf("group %d has no replica on %s", g, n.id)
}

func (c *muxCluster) replicas(g uint64) []*muxReplica {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups[g]
}

func (c *muxCluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(clusterWait)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("still waiting after %v for %s", clusterWait, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitLeader waits for a replica of g other than not to lead.
func (c *muxCluster) waitLeader(g uint64, not *muxReplica) *muxReplica {
	c.t.Helper()
	var leader *muxReplica
	c.waitFor(fmt.Sprintf("a leader of group %d", g), func() bool {
		for _, r := range c.replicas(g) {
			if r != not && r.raft.State() == raft.Leader {
				leader = r
				return true
			}
		}
		return false
	})
	return leader
}

func (c *muxCluster) follower(g uint64) *muxReplica {
	c.t.Helper()
	leader := c.waitLeader(g, nil)
	for _, r := range c.replicas(g) {
		if r != leader {
			return r
		}
	}
	c.t.Fatalf("group %d has no follower", g)
	return nil
}

// apply applies n commands to group g through its leader, one at a time,
// again through the next leader when one fails.
func (c *muxCluster) apply(g uint64, n int) {
	c.t.Helper()
	deadline := time.Now().Add(clusterWait)
	for i := 0; i < n; {
		if time.Now().After(deadline) {
			c.t.Errorf("group %d: %d of %d commands applied after %v", g, i, n, clusterWait)
			return
		}
		leader := c.waitLeader(g, nil)
		cmd := bytes.Repeat([]byte{byte(g), byte(i)}, 64)
		if err := leader.raft.Apply(cmd, 10*time.Second).Error(); err == nil {
			i++
		}
	}
}

// waitConverged waits until every replica of g has applied its leader's
// last index and holds the same state machine.
func (c *muxCluster) waitConverged(g uint64) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("group %d to converge", g), func() bool {
		leader := c.waitLeader(g, nil)
		want := leader.raft.LastIndex()
		state := leader.fsm.state()
		if leader.raft.AppliedIndex() != want {
			return false
		}
		for _, r := range c.replicas(g) {
			if r.raft.AppliedIndex() != want || r.fsm.state() != state {
				return false
			}
		}
		return true
	})
}

// storeGate blocks a replica's log writes while it is closed.
type storeGate struct {
	mu      sync.Mutex
	ch      chan struct{} // closed while the gate is open; guarded by mu
	blocked atomic.Int64  // writes that found the gate closed
}

func newStoreGate() *storeGate {
	g := &storeGate{ch: make(chan struct{})}
	close(g.ch)
	return g
}

func (g *storeGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
		g.ch = make(chan struct{})
	default:
	}
}

func (g *storeGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
	default:
		close(g.ch)
	}
}

func (g *storeGate) wait() {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	select {
	case <-ch:
	default:
		g.blocked.Add(1)
		<-ch
	}
}

// gatedStore is an InmemStore whose log writes wait for its gate.
type gatedStore struct {
	*raft.InmemStore
	gate *storeGate
}

func (s *gatedStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *gatedStore) StoreLogs(logs []*raft.Log) error {
	s.gate.wait()
	return s.InmemStore.StoreLogs(logs)
}
