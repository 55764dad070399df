package node

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// A member whose data dir was wiped and that rejoined gets its replicas
// back: the log's leader demotes its old voter (it holds nothing and
// forgot its votes), the node starts an empty replica that catches up as
// a nonvoter, and is promoted. The log ends with 3 voters, each holding
// every acknowledged record, and the wiped node never votes in the log
// before its rebuild began (which waits for its old voter's demotion).
func TestWipedNodeRebuildsItsReplicas(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, &client.Options{RetryTimeout: time.Minute})
	info, err := cl.CreateLog(ctx, "old", client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	acked := appendLog(t, ctx, cl.Log("old"), "old", 100)
	victim := followerOf(c, leader)
	id, dir := victim.ID(), victim.cfg.DataDir
	c.stop(id)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for i, r := range appendLog(t, ctx, cl.Log("old"), "away", 20) {
		acked[i] = r
	}
	back := c.start(id, func(cfg *Config) { cfg.Join = []string{leader.ClientAddr()} })
	c.waitVoter(back)
	for i, r := range appendLog(t, ctx, cl.Log("old"), "back", 20) {
		acked[i] = r
	}
	waitForIn(t, 2*time.Minute, id+"'s replica of log old rebuilt", func() bool {
		var servers []raft.Server
		if ll := logLeader(c, info.ID); ll != nil && ll != back {
			servers = logServers(ll, info.ID)
		}
		// /status shows whether the replica votes (cluster-test waits on
		// it): read before the gate, which stays open once open.
		sts := back.logStatuses()
		i := slices.IndexFunc(sts, func(st logStatus) bool { return st.Name == "old" })
		shown := i >= 0 && sts[i].Voting
		h := back.host.hosted(info.ID)
		votes := h != nil && h.gate.allowed.Load()
		if shown && !votes {
			t.Fatalf("%s's /status shows its replica of log old voting before its vote gate opened", id)
		}
		// It votes from the start of its rebuild, which begins once its
		// old voter's demotion is committed (replicaVotes).
		if bl, _ := back.catalog.State().LogByID(info.ID); votes && bl.Lost(id) && bl.Joining != id {
			t.Fatalf("%s votes in log old before its rebuild began", id)
		}
		l, _ := leader.catalog.State().LogByID(info.ID)
		voters := 0
		for _, s := range servers {
			if s.Suffrage == raft.Voter {
				voters++
			}
		}
		return shown && votes && !l.Moving() && !l.Lost(id) && voters == 3 &&
			slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == id && s.Suffrage == raft.Voter })
	})
	for i, r := range appendLog(t, ctx, cl.Log("old"), "after", 5) {
		acked[i] = r
	}
	for nid, n := range c.nodes {
		waitForIn(t, time.Minute, nid+" holding every acknowledged record of log old", func() bool {
			got := readLogWith(t, ctx, cl.Log("old"), client.ReadOptions{Stale: true, Addr: n.ClientAddr()})
			for i, w := range acked {
				if got[i] != w {
					return false
				}
			}
			return len(got) == len(acked)
		})
	}
}

// A node that joins as a new member acts on the catalog only once it is a
// voter (reconcileLoop). Logs the catalog placed on it meanwhile are ones
// it never held: once promoted it must run them, voting, like logs
// created later. (It used to take every log older than its first look at
// the catalog for one it might have lost and never started them, so each
// ran on two of its three replicas for good: cluster-test's 5-node run
// with named logs, a node slow to start.)
func TestLogsPlacedOnANodeStillJoining(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.FaultInjection = true })
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// n4's raft address is known before it starts, so that the others can
	// be cut off from it first: it joins (over the client port) but
	// cannot catch up, so it stays a nonvoter.
	raftAddr := freeAddrs(t, 1)[0]
	c.addrs["n4"] = [2]string{raftAddr, "127.0.0.1:0"}
	others := map[string]*Node{}
	for id, n := range c.nodes {
		others[id] = n
		n.faults.layer.partition([]string{raftAddr})
	}
	n4 := c.start("n4", func(cfg *Config) { cfg.Join = []string{leader.ClientAddr()} })
	cl := clusterClient(t, c, nil)
	var onN4 []*transport.LogInfo
	for _, name := range []string{"a", "b", "c"} {
		info, err := cl.CreateLog(ctx, name, client.CreateLogOptions{Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(info.Members, "n4") {
			onN4 = append(onN4, info)
		}
	}
	if len(onN4) == 0 {
		t.Fatal("no log placed on n4")
	}
	select {
	case <-n4.Voting():
		t.Fatal("n4 was promoted while cut off")
	default:
	}
	for _, n := range others {
		n.faults.layer.partition(nil)
	}
	c.waitVoter(n4)
	for _, info := range onN4 {
		waitFor(t, "n4 runs log "+info.Name+", voting", func() bool {
			h := n4.host.hosted(info.ID)
			return h != nil && h.gate.votes()
		})
		appendLog(t, ctx, cl.Log(info.Name), info.Name, 5)
		lead := waitLogLeader(t, c, info.Name, info.ID)
		applied := lead.host.hosted(info.ID).r.FSM().Applied.Load()
		waitFor(t, "n4 applies what log "+info.Name+"'s leader did", func() bool {
			return n4.host.hosted(info.ID).r.FSM().Applied.Load() >= applied
		})
	}
}

// A node that rejoined without its data must not start a replica empty
// from a catalog older than its losses: the old catalog shows the node a
// member whose replica is whole, and the replica would vote. A restart
// shows one, restored from a snapshot taken
// before the loss was recorded, until the node catches up; reconcile is
// given such a state here directly. Of the log's three replicas, two are
// down or lost, so its leader cannot demote the lost one and its rebuild
// cannot begin: the node must run no replica of the log, whatever the
// catalog it reads.
func TestRejoinedNodeStartsNoReplicaFromAnOldCatalog(t *testing.T) {
	c := newTestCluster(t, 5, nil)
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, &client.Options{RetryTimeout: time.Minute})
	info, err := cl.CreateLog(ctx, "old", client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	appendLog(t, ctx, cl.Log("old"), "old", 10)
	var victim, other *Node
	for _, id := range info.Members {
		switch n := c.nodes[id]; {
		case n == leader:
		case victim == nil:
			victim = n
		case other == nil:
			other = n
		}
	}
	if other == nil {
		t.Fatalf("log old is on %v: no two members other than the default log's leader %s", info.Members, leader.ID())
	}
	// Before the loss: the victim is a member whose replica is whole.
	waitApplied(t, c.nodes, 10*time.Second)
	staleApplied := victim.fsm.Applied.Load()
	stale := victim.catalog.State()
	if l, _ := stale.LogByID(info.ID); l.Lost(victim.ID()) || !slices.Contains(l.Members, victim.ID()) {
		t.Fatalf("log old before the wipe: %+v", l)
	}

	id, dir := victim.ID(), victim.cfg.DataDir
	c.stop(other.ID())
	c.stop(id)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	back := c.start(id, func(cfg *Config) { cfg.Join = []string{leader.ClientAddr()} })
	c.waitVoter(back)
	if back.joinedAt.Load() <= staleApplied {
		t.Fatalf("rejoined at index %d, not after the old catalog's %d", back.joinedAt.Load(), staleApplied)
	}
	waitForIn(t, 30*time.Second, id+" reads its replica of log old lost", func() bool {
		l, _ := back.catalog.State().LogByID(info.ID)
		return l.Lost(id)
	})
	back.reconcile(stale, staleApplied >= back.joinedAt.Load())
	if h := back.host.hosted(info.ID); h != nil {
		t.Fatalf("%s started a replica of log old (voting: %v) from a catalog that predates its loss", id, h.gate.votes())
	}
	// The index survives a restart: a restarted node's catalog is its
	// last snapshot's until it catches up.
	rejoined := back.joinedAt.Load()
	c.stop(id)
	if again := c.start(id, nil); again.joinedAt.Load() != rejoined {
		t.Fatalf("%s restarted knowing it rejoined at index %d, not %d", id, again.joinedAt.Load(), rejoined)
	}
}
