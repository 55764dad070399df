package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/transport"
)

// clusterNaming starts cluster A, one node, whose raft configuration
// names a nonvoter n9 at each of addrs (a member gone for good, whose
// host and port are reused): its leader dials them. It returns A's
// leader once A has its id.
func clusterNaming(t *testing.T, addrs ...string) *Node {
	t.Helper()
	a := newTestCluster(t, 1, nil)
	leader := a.waitLeader()
	for i, addr := range addrs {
		id := raft.ServerID("n9" + strings.Repeat("9", i))
		if err := leader.raft.AddNonvoter(id, raft.ServerAddress(addr), 0, 10*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "cluster A's id", func() bool { return !leader.clusterID().IsZero() })
	return leader
}

// refusedPeers returns how many raft connections n refused for reason.
func refusedPeers(n *Node, reason string) float64 {
	return counterValue(n.metrics.refusedPeers.WithLabelValues(reason))
}

// inConfig reports whether n's raft configuration has node id.
func inConfig(t *testing.T, n *Node, id string) bool {
	t.Helper()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == id })
}

// A node started to join cluster B (Join) at a raft address that cluster
// A's configuration still names: A's leader dials it from its start. The
// node admits no raft connection before it has asked B's status which
// cluster it joins, and then refuses A's leader as a node of another
// cluster: it ends in B, with B's id, kept in its data dir. (It admitted
// A's leader, knowing no id and no members, followed it and took A's id,
// and B's join reported success for a member B could never reach.)
func TestJoinAtAnotherClustersAddress(t *testing.T) {
	addr := freeAddrs(t, 1)[0]
	leaderA := clusterNaming(t, addr)
	b := newTestCluster(t, 1, nil)
	leaderB := b.waitLeader()
	waitFor(t, "cluster B's id", func() bool { return !leaderB.clusterID().IsZero() })
	idA, idB := leaderA.clusterID(), leaderB.clusterID()

	// Start is startNode, then joinCluster; in between, the test waits
	// for A's leader to reach the node, so that it comes first.
	cfg := testConfig(t, b.dir, "n2")
	cfg.RaftAddr = addr
	cfg.Join = []string{leaderB.ClientAddr()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := startNode(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.nodes["n2"] = f
	waitForIn(t, time.Minute, "A's leader reaching the new node", func() bool {
		return refusedPeers(f, refusedJoining)+refusedPeers(f, refusedOtherCluster) > 0 || f.raft.Leader() != ""
	})
	if err := f.joinCluster(ctx, cfg.Join); err != nil {
		t.Fatalf("joining B: %v", err)
	}
	if got := f.clusterID(); got != idB {
		t.Fatalf("B's new node names cluster %s; want B's, %s (A's is %s)", got, idB, idA)
	}
	b.waitVoter(f)
	if got := f.raft.Leader(); got != raft.ServerAddress(leaderB.RaftAddr()) {
		t.Errorf("B's new node follows %s; want B's leader at %s (A's is at %s)", got, leaderB.RaftAddr(), leaderA.RaftAddr())
	}
	if !inConfig(t, leaderB, "n2") {
		t.Error("B's configuration does not have its new node")
	}
	if b, err := os.ReadFile(filepath.Join(cfg.DataDir, clusterIDFile)); err != nil || string(b) != idB.String()+"\n" {
		t.Errorf("the new node's cluster-id file: %q, %v; want B's id %s", b, err, idB)
	}
	waitForIn(t, time.Minute, "the new node refusing A's leader as a node of another cluster", func() bool {
		return refusedPeers(f, refusedOtherCluster) > 0
	})
	if st := f.Status(); st.ClusterID != idB.String() {
		t.Errorf("B's new node's status names cluster %s; want B's, %s", st.ClusterID, idB)
	}
}

// A node joins a cluster that has no id yet (one of an older version, or
// bootstrapped less than a second ago): it joins, admitting meanwhile only
// the members its join target listed (cluster A's leader, whose
// configuration names its raft address, is refused), and takes the id
// once the leader sets it.
func TestJoinClusterWithoutID(t *testing.T) {
	addr := freeAddrs(t, 1)[0]
	clusterNaming(t, addr)
	var hold atomic.Bool
	hold.Store(true)
	b := newTestCluster(t, 1, func(cfg *Config) { cfg.hooks = &testHooks{holdClusterID: &hold} })
	leaderB := b.waitLeader()
	if id := leaderB.clusterID(); !id.IsZero() {
		t.Fatalf("cluster B has the id %s while its leader is held from setting one", id)
	}
	f := b.start("n2", func(cfg *Config) {
		cfg.RaftAddr = addr
		cfg.Join = []string{leaderB.ClientAddr()}
	})
	b.waitVoter(f)
	if id := f.clusterID(); !id.IsZero() {
		t.Fatalf("the new node names cluster %s, which B has not got", id)
	}
	if got := f.raft.Leader(); got != raft.ServerAddress(leaderB.RaftAddr()) {
		t.Errorf("B's new node follows %s; want B's leader at %s", got, leaderB.RaftAddr())
	}
	waitForIn(t, time.Minute, "the new node refusing A's leader", func() bool {
		return refusedPeers(f, refusedOtherCluster) > 0
	})

	hold.Store(false)
	waitFor(t, "the new node taking B's id", func() bool {
		id := leaderB.clusterID()
		return !id.IsZero() && f.clusterID() == id
	})
	waitFor(t, "the new node keeping B's id in its data dir", func() bool {
		b, err := os.ReadFile(filepath.Join(f.cfg.DataDir, clusterIDFile))
		return err == nil && string(b) == leaderB.clusterID().String()+"\n"
	})
}

// An operator adds with 'node join' a node that started with neither a
// join target nor a bootstrap list, at a raft address cluster A's
// configuration names. The node takes the cluster id of the first hello
// it admits, A's leader's. B's leader asks its status before adding it
// and refuses it, naming both clusters, and adds nothing. And a node
// that another cluster reaches only after B's leader checked it is
// removed again once it names that cluster: the join fails.
func TestJoinRefusesNodeOfAnotherCluster(t *testing.T) {
	addrs := freeAddrs(t, 2)
	leaderA := clusterNaming(t, addrs[0])
	idA := leaderA.clusterID()
	var late atomic.Pointer[Node] // the node A reaches after B's check
	b := newTestCluster(t, 1, func(cfg *Config) {
		cfg.hooks = &testHooks{joinChecked: func(r *transport.JoinRequest) {
			if n := late.Load(); n != nil && r.NodeID == n.ID() {
				n.admitPeer(helloMsg{ID: leaderA.ID(), Addr: leaderA.RaftAddr(), Cluster: idA.String()}, helloMsg{})
			}
		}}
	})
	leaderB := b.waitLeader()
	waitFor(t, "cluster B's id", func() bool { return !leaderB.clusterID().IsZero() })
	idB := leaderB.clusterID()
	start := func(id, raftAddr string) *Node {
		cfg := testConfig(t, b.dir, id)
		cfg.RaftAddr = raftAddr
		n, err := Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		b.nodes[id] = n
		return n
	}
	join := func(n *Node) error {
		_, err := call[transport.JoinResponse](t, dial(t, leaderB), transport.OpJoin,
			&transport.JoinRequest{NodeID: n.ID(), RaftAddr: n.RaftAddr(), ClientAddr: n.ClientAddr(), Fresh: true})
		return err
	}

	taken := start("n2", addrs[0])
	waitForIn(t, time.Minute, "A's leader reaching the new node", func() bool { return taken.clusterID() == idA })
	err := join(taken)
	if transport.ErrorCode(err) != transport.CodeFailedPrecondition || !strings.Contains(err.Error(), idA.String()) || !strings.Contains(err.Error(), idB.String()) {
		t.Errorf("B's join of a node that follows A: %v; want FailedPrecondition naming both clusters", err)
	}
	if inConfig(t, leaderB, "n2") {
		t.Error("B added a node that follows A")
	}

	n3 := start("n3", addrs[1])
	late.Store(n3)
	err = join(n3)
	if transport.ErrorCode(err) != transport.CodeFailedPrecondition || !strings.Contains(err.Error(), "follows cluster "+idA.String()) || !strings.Contains(err.Error(), "removed it again") {
		t.Errorf("B's join of a node A reached after B's check: %v; want FailedPrecondition saying it follows A and was removed", err)
	}
	if inConfig(t, leaderB, "n3") {
		t.Error("B's configuration keeps a node that follows A")
	}
}
