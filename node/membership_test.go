package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/internal/testaddr"
	"github.com/raftlog/raftlog/transport"
)

// freeAddrs returns n addresses on 127.0.0.1 whose ports were free a
// moment ago.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs, err := testaddr.Addrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// newBootstrapCluster starts n nodes that all get the same bootstrap list,
// as operators start a cluster.
func newBootstrapCluster(t *testing.T, n int, tweak func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, dir: t.TempDir(), nodes: map[string]*Node{}, cfg: tweak, addrs: map[string][2]string{}}
	t.Cleanup(c.closeAll)
	raftAddrs, clientAddrs := freeAddrs(t, n), freeAddrs(t, n)
	var peers []Peer
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		peers = append(peers, Peer{ID: id, RaftAddr: raftAddrs[i]})
		c.addrs[id] = [2]string{raftAddrs[i], clientAddrs[i]}
	}
	c.cfg = func(cfg *Config) {
		cfg.Bootstrap = peers
		if tweak != nil {
			tweak(cfg)
		}
	}
	for _, p := range peers {
		c.start(p.ID, nil)
	}
	for _, nd := range c.nodes {
		c.waitVoter(nd)
	}
	c.waitLeader()
	return c
}

// Every member of a bootstrap list waits for the others' answers, then
// bootstraps and votes: the cluster forms, and no marker is left behind.
func TestBootstrapListFormsCluster(t *testing.T) {
	c := newBootstrapCluster(t, 3, nil)
	leader := c.waitLeader()
	appendN(t, dial(t, leader), "r", 3)
	if v := leader.voters(); v != 3 {
		t.Fatalf("%d voters, want 3", v)
	}
	for id, n := range c.nodes {
		for _, m := range []string{bootstrapFile, joiningFile} {
			if _, err := os.Stat(filepath.Join(n.cfg.DataDir, m)); !os.IsNotExist(err) {
				t.Errorf("%s: marker %s left after the cluster formed: %v", id, m, err)
			}
		}
	}
}

// bootstrapQuorum: the members that did not answer, with the asking node,
// are fewer than a majority.
func TestBootstrapQuorum(t *testing.T) {
	for _, tc := range []struct{ members, want int }{{2, 1}, {3, 2}, {4, 2}, {5, 3}, {7, 4}} {
		got := bootstrapQuorum(tc.members)
		if got != tc.want {
			t.Errorf("bootstrapQuorum(%d) = %d, want %d", tc.members, got, tc.want)
		}
		silent := tc.members - 1 - got
		if silent+1 >= tc.members/2+1 {
			t.Errorf("%d members: %d silent ones and the asker make a majority", tc.members, silent)
		}
	}
}

// The schedule, in one process: C is stopped while A and B commit
// appends; B loses its data dir and is restarted with its original
// bootstrap list; A is cut off; C comes back. B's vote would be decisive,
// and with an empty log it would grant it to C, whose log lacks the
// appends: C would lead and overwrite them on A. B must not vote: C never
// leads while A is cut off, and every append survives.
func TestWipedNodeWithBootstrapListDoesNotVote(t *testing.T) {
	c := newBootstrapCluster(t, 3, func(cfg *Config) {
		cfg.FaultInjection = true
		cfg.AdminAddr = "127.0.0.1:0"
	})
	leader := c.waitLeader()
	var a, b, cc *Node // a leads; b is wiped; cc misses the appends
	a = leader
	for _, n := range c.nodes {
		switch {
		case n == a:
		case b == nil:
			b = n
		default:
			cc = n
		}
	}
	cID, bID := cc.ID(), b.ID()
	c.stop(cID)
	idx := appendN(t, dial(t, a), "acked", 50)
	want := readAll(t, a, false)
	bDir := b.cfg.DataDir
	c.stop(bID)
	if err := os.RemoveAll(bDir); err != nil {
		t.Fatal(err)
	}
	// Cut A off before the others start: its fault layer refuses their
	// addresses both ways.
	post(t, a, "/fault/partition?peers="+c.addrs[bID][0]+","+c.addrs[cID][0])
	bBack := c.start(bID, nil)
	cBack := c.start(cID, nil)
	if bBack.IsVoter() {
		t.Fatal("a wiped node restarted with its bootstrap list votes at once")
	}
	obs := make(chan raft.Observation, 64)
	cBack.raft.RegisterObserver(raft.NewObserver(obs, false, nil))
	window := time.NewTimer(8 * cBack.cfg.ElectionTimeout)
	defer window.Stop()
watch:
	for {
		select {
		case o := <-obs:
			if st, ok := o.Data.(raft.RaftState); ok && st == raft.Leader {
				t.Fatalf("%s, which lacks the acknowledged appends, won an election with the wiped %s's vote", cID, bID)
			}
		case <-window.C:
			break watch
		}
	}
	if bBack.IsVoter() {
		t.Fatalf("the wiped %s votes while A is cut off", bID)
	}
	if st := bBack.Status(); st.Role != "Deciding" && !bBack.joiningNow.Load() {
		t.Fatalf("the wiped %s is %s, neither deciding nor joining", bID, st.Role)
	}
	post(t, a, "/fault/partition?peers=")
	c.waitVoter(bBack)
	now := c.waitLeader()
	got := readAll(t, now, false)
	if len(got) < len(want) {
		t.Fatalf("%d records after the heal, want at least the %d acknowledged", len(got), len(want))
	}
	sameRecords(t, "acknowledged appends after the heal", got[:len(want)], want)
	waitFor(t, bID+" catches up", func() bool { return bBack.raft.LastIndex() >= idx[len(idx)-1] })
	sameRecords(t, bID+" after the rejoin", readAll(t, bBack, true)[:len(want)], want)
}

// A restarted node that still has its data dir starts at once with its
// bootstrap list, as before: no probing, no waiting.
func TestRestartWithBootstrapListKeepsVoting(t *testing.T) {
	c := newBootstrapCluster(t, 3, nil)
	leader := c.waitLeader()
	f := followerOf(c, leader)
	id := f.ID()
	c.stop(id)
	back := c.start(id, nil)
	if !back.IsVoter() {
		t.Fatal("a member restarted with its data dir does not vote at once")
	}
	if back.deciding.Load() {
		t.Fatal("a member restarted with its data dir is deciding whether to bootstrap")
	}
}

// A bootstrap list naming this node at another address than it advertises
// is refused at start: peers would dial the wrong address.
func TestBootstrapEntryMustMatchAdvertised(t *testing.T) {
	addrs := freeAddrs(t, 3)
	cfg := testConfig(t, t.TempDir(), "n1")
	cfg.RaftAddr = addrs[0]
	cfg.Bootstrap = []Peer{{ID: "n1", RaftAddr: addrs[1]}, {ID: "n2", RaftAddr: addrs[2]}}
	_, err := Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "the bootstrap list names n1 at raft address "+addrs[1]) {
		t.Fatalf("Start with a mismatched bootstrap entry: %v", err)
	}
	cfg.RaftAdvertise = addrs[2]
	cfg.DataDir = filepath.Join(t.TempDir(), "n1")
	_, err = Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "advertises "+addrs[2]) {
		t.Fatalf("Start with an advertised address not in the bootstrap list: %v", err)
	}
}

// The raft configuration keeps the addresses nodes advertise, through the
// bootstrap and every node's registration of its client address: peers
// dial what --raft-advertise says, not what the listener bound.
func TestRaftAdvertiseKept(t *testing.T) {
	addrs := freeAddrs(t, 3)
	advertise := map[string]string{}
	for i, a := range addrs {
		_, port, _ := net.SplitHostPort(a)
		advertise[fmt.Sprintf("n%d", i+1)] = "localhost:" + port
	}
	c := &testCluster{t: t, dir: t.TempDir(), nodes: map[string]*Node{}, addrs: map[string][2]string{}}
	t.Cleanup(c.closeAll)
	c.cfg = func(cfg *Config) { cfg.RaftAdvertise = advertise[cfg.ID] }
	for i, id := range []string{"n1", "n2", "n3"} {
		c.addrs[id] = [2]string{addrs[i], "127.0.0.1:0"}
	}
	first := c.start("n1", func(cfg *Config) { cfg.Bootstrap = []Peer{{ID: "n1", RaftAddr: advertise["n1"]}} })
	c.waitLeader()
	for _, id := range []string{"n2", "n3"} {
		c.start(id, func(cfg *Config) { cfg.Join = []string{first.ClientAddr()} })
	}
	for _, n := range c.nodes {
		c.waitVoter(n)
	}
	leader := c.waitLeader()
	// Every node has registered its client address with the leader: the
	// register loop's joins are done.
	waitFor(t, "every member's client address recorded", func() bool {
		for _, n := range c.nodes {
			if leader.fsm.Member(n.ID()) != n.ClientAddr() {
				return false
			}
		}
		return true
	})
	for _, n := range c.nodes {
		if n.RaftAddr() != advertise[n.ID()] {
			t.Errorf("%s reports raft address %s, want the advertised %s", n.ID(), n.RaftAddr(), advertise[n.ID()])
		}
	}
	f := leader.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Configuration().Servers {
		if string(s.Address) != advertise[string(s.ID)] {
			t.Errorf("the configuration names %s at %s, want the advertised %s", s.ID, s.Address, advertise[string(s.ID)])
		}
	}
}

// removeNode asks the leader to remove id.
func removeNode(t *testing.T, leader *Node, id string) {
	t.Helper()
	if _, err := call[transport.RemoveResponse](t, dial(t, leader), transport.OpRemove, &transport.RemoveRequest{NodeID: id}); err != nil {
		t.Fatalf("remove %s: %v", id, err)
	}
}

// assertRemoved checks what a removed node and the cluster say of it.
func assertRemoved(t *testing.T, c *testCluster, leader *Node, removed *Node) {
	t.Helper()
	id := removed.ID()
	waitFor(t, id+" learns it was removed", func() bool { return removed.Status().Role == "Removed" })
	for _, m := range leader.Status().Members {
		if m.NodeID == id {
			t.Fatalf("the leader's status lists the removed %s", id)
		}
	}
	err := dial(t, removed).Call(context.Background(), transport.OpAppend, &transport.AppendRequest{Records: [][]byte{[]byte("x")}}, &transport.AppendResponse{})
	if transport.ErrorCode(err) != transport.CodeUnavailable || !strings.Contains(err.Error(), "was removed") {
		t.Fatalf("append to a removed node: %v, want Unavailable naming the removal", err)
	}
	// The cluster goes on without it.
	appendN(t, dial(t, leader), "after-remove", 3)
	if v := leader.voters(); v != 2 {
		t.Fatalf("%d voters after the removal, want 2", v)
	}
	c.stop(id)
	cfg := testConfig(t, c.dir, id)
	cfg.RaftAddr, cfg.ClientAddr = c.addrs[id][0], c.addrs[id][1]
	if _, err := Start(context.Background(), cfg); !errors.Is(err, ErrRemoved) {
		t.Fatalf("restart of a removed node: %v, want ErrRemoved", err)
	}
}

// A running member that is removed stays removed: it learns it, stops
// campaigning and serving, the cluster's status no longer lists it, and it
// refuses to start again.
func TestRemovedNodeStaysRemoved(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	appendN(t, dial(t, leader), "r", 3)
	victim := followerOf(c, leader)
	removeNode(t, leader, victim.ID())
	assertRemoved(t, c, leader, victim)
}

// A member removed while it was down learns it when it comes back: it
// hears from no leader, and the leader answers its probes that it is not a
// member.
func TestNodeRemovedWhileDownLearnsIt(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	victim := followerOf(c, leader)
	id := victim.ID()
	c.stop(id)
	removeNode(t, leader, id)
	back := c.start(id, nil)
	assertRemoved(t, c, leader, back)
}

// A leader that removes itself steps down, learns that it was removed (the
// new leader answers its probes), records it, and the others elect a new
// leader.
func TestLeaderRemovesItself(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	id := leader.ID()
	_, err := call[transport.RemoveResponse](t, dial(t, leader), transport.OpRemove, &transport.RemoveRequest{NodeID: id})
	if err != nil {
		t.Fatalf("remove the leader itself: %v", err)
	}
	waitFor(t, id+" learns it was removed", func() bool { return leader.Status().Role == "Removed" })
	now := waitNewLeader(t, c, leader)
	assertRemoved(t, c, now, leader)
}

// Marker writes from several goroutines (a join in progress and
// promoteLoop both record the joining state) never trip over each other's
// temporary file.
func TestMarkersConcurrentWrites(t *testing.T) {
	m := &markers{dir: t.TempDir()}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if err := m.markJoining(uint64(g*1000 + i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent marker writes: %v", err)
	}
	if ok, idx, err := m.joiningIndex(); err != nil || !ok || (idx != 199 && idx != 1199) {
		t.Fatalf("joining state after the writes: %v %d %v", ok, idx, err)
	}
}

// A new node whose bootstrap list names a running node of another cluster,
// and which has the id of one of that cluster's members (clusters name
// their nodes alike), stops naming the mistake: it neither joins that
// cluster nor replaces its member of the same id, which is at another
// address. (Before, the running node's probe answer said the id was in its
// configuration, and the new node rejoined as that member.)
func TestBootstrapListNamingAnotherCluster(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	// The new node has a follower's id (a leader's would be refused by
	// the join anyway); its list names the leader, at its address, and the
	// third id at an address where nothing runs.
	same := c.follower().ID()
	var third string
	for id := range c.nodes {
		if id != same && id != leader.ID() {
			third = id
		}
	}
	addrs := freeAddrs(t, 2)
	cfg := testConfig(t, t.TempDir(), same)
	cfg.RaftAddr = addrs[0]
	cfg.Bootstrap = []Peer{{ID: same, RaftAddr: addrs[0]}, {ID: leader.ID(), RaftAddr: leader.RaftAddr()}, {ID: third, RaftAddr: addrs[1]}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	select {
	case <-n.Done():
	case <-ctx.Done():
		t.Fatalf("a node whose bootstrap list names another cluster's node did not stop: it is a %s there, in place of that cluster's %s", n.Status().Role, same)
	}
	if err := n.Err(); !strings.Contains(err.Error(), "not in the configuration of the running cluster") || !strings.Contains(err.Error(), addrs[0]) {
		t.Errorf("the node stopped with %v; want it to say it is not in the running cluster's configuration at %s", err, addrs[0])
	}
	f := leader.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Configuration().Servers {
		if id := string(s.ID); string(s.Address) != c.nodes[id].RaftAddr() {
			t.Errorf("the cluster's configuration has %s at %s, its node runs at %s", id, s.Address, c.nodes[id].RaftAddr())
		}
	}
}
