package node

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// probe reads path from n and reports whether it answered want and its
// body contains every one of subs; the body, for a failure message.
func probe(t *testing.T, n *Node, path string, want int, subs ...string) (bool, string) {
	t.Helper()
	code, body := get(t, n, path)
	ok := code == want
	for _, s := range subs {
		ok = ok && strings.Contains(body, s)
	}
	return ok, fmt.Sprintf("%s: %d %q", path, code, body)
}

// mustProbe fails the test unless path answers want with every one of
// subs in its body.
func mustProbe(t *testing.T, n *Node, path string, want int, subs ...string) {
	t.Helper()
	if ok, got := probe(t, n, path, want, subs...); !ok {
		t.Fatalf("%s %s, want %d with %q", n.ID(), got, want, subs)
	}
}

// A node whose disk fails while it is idle has its store fail in the
// background (the periodic checkpoint syncs the index slots the last
// entry dirtied), and nothing it does writes, so nothing stops it: /health
// must say so, and /ready too, and raftlog_store_failed is 1.
func TestHealthFailsWithTheStore(t *testing.T) {
	c := faultCluster(t)
	leader := c.waitLeader()
	f := followerOf(c, leader)
	mustProbe(t, f, "/health", http.StatusOK, "ok")
	conn := dial(t, leader)
	latched := false
	for attempt := 0; attempt < 5 && !latched; attempt++ {
		idx := appendN(t, conn, "r", 1)[0]
		waitFor(t, "the follower stores the entry", func() bool { return f.raft.LastIndex() >= idx })
		f.faults.fs.fail()
		// A checkpoint comes within a second. One that ran between the
		// store and the failure left nothing to sync: try again.
		deadline := time.Now().Add(3 * time.Second)
		for !latched && time.Now().Before(deadline) {
			latched = f.db.Err() != nil
			waitApplied(t, c.nodes, 20*time.Millisecond)
		}
		if !latched {
			f.faults.fs.failed.Store(false)
		}
	}
	if !latched {
		t.Fatal("the follower's store did not fail in the background in 5 attempts")
	}
	// The node stops by itself within a tick of the space loop, however
	// idle: it does not wait for a write, nor for raft to panic failing
	// to store a vote.
	waitStoppedOnEIO(t, f, 10*time.Second, "the follower with a failed store", "did not stop")
	mustProbe(t, leader, "/metrics", http.StatusOK, "\nraftlog_store_failed 0\n")
	delete(c.nodes, f.ID())
}

// A leader is ready once the first entry of its term has committed, not
// before: until then it cannot tell what is committed. Its followers,
// which hear its heartbeats, are ready meanwhile.
func TestReadyLeaderAfterItsFirstEntry(t *testing.T) {
	hooks := map[string]*reelectHooks{}
	c := newTestCluster(t, 3, func(cfg *Config) {
		h := newReelectHooks()
		hooks[cfg.ID] = h
		cfg.hooks = h.testHooks()
		cfg.AdminAddr = "127.0.0.1:0"
	})
	l := c.waitLeader()
	mustProbe(t, l, "/ready", http.StatusOK, "ready: the leader in term ")
	m := followerOf(c, l)
	// M's requests with entries are lost: once it leads, its first entry
	// cannot commit, while its heartbeats keep it leading.
	hooks[m.ID()].setDrop(func(_ raft.ServerID, req *raft.AppendEntriesRequest) bool { return len(req.Entries) > 0 })
	if err := l.raft.LeadershipTransferToServer(raft.ServerID(m.ID()), raft.ServerAddress(m.RaftAddr())).Error(); err != nil {
		t.Fatalf("transfer to %s: %v", m.ID(), err)
	}
	waitFor(t, m.ID()+" leads", func() bool { return m.raft.State() == raft.Leader })
	term := m.raft.CurrentTerm()
	mustProbe(t, m, "/ready", http.StatusServiceUnavailable,
		fmt.Sprintf("not ready: leading in term %d, but no entry of this term has committed yet", term))
	waitUntil(t, 10*time.Second, l.ID()+" ready as "+m.ID()+"'s follower", func() (bool, string) {
		return probe(t, l, "/ready", http.StatusOK, "ready: a follower of "+m.ID())
	})
	if m.IsLeader() || m.raft.CommitIndex() >= m.raft.LastIndex() {
		t.Fatalf("%s's first entry committed: the test did not test", m.ID())
	}
	hooks[m.ID()].setDrop(nil)
	waitFor(t, m.ID()+"'s first entry commits", m.IsLeader)
	mustProbe(t, m, "/ready", http.StatusOK, fmt.Sprintf("ready: the leader in term %d", term))
}

// A follower cut off from its leader is not ready once it has not heard
// from it for the leader lease, although it still takes it for the leader
// (the heartbeat timeout is longer); a leader cut off from its followers
// is not ready as soon as a quorum does not confirm it. Both stay healthy,
// and ready again once the partition heals.
func TestReadyNeedsTheQuorum(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.FaultInjection = true
		cfg.AdminAddr = "127.0.0.1:0"
		cfg.HeartbeatTimeout = 3 * time.Second
		cfg.ElectionTimeout = 3 * time.Second
		cfg.LeaderLeaseTimeout = time.Second
	})
	leader := c.waitLeader()
	f := followerOf(c, leader)
	waitUntil(t, 10*time.Second, f.ID()+" ready", func() (bool, string) {
		return probe(t, f, "/ready", http.StatusOK, "ready: a follower of "+leader.ID())
	})

	isolate(t, c, f)
	var notReady string
	waitUntil(t, 10*time.Second, f.ID()+" not ready", func() (bool, string) {
		code, body := get(t, f, "/ready")
		notReady = body
		return code == http.StatusServiceUnavailable, body
	})
	if want := fmt.Sprintf("not ready: a follower of %s that last heard from it ", leader.ID()); !strings.HasPrefix(notReady, want) ||
		!strings.Contains(notReady, "longer than the leader lease (1s)") {
		t.Fatalf("%s cut off: %q, want %q... longer than the leader lease", f.ID(), notReady, want)
	}
	mustProbe(t, f, "/health", http.StatusOK, "ok")
	heal(t, c)
	waitUntil(t, 20*time.Second, f.ID()+" ready again", func() (bool, string) {
		return probe(t, f, "/ready", http.StatusOK, "ready: a follower of ")
	})

	leader = c.waitLeader()
	isolate(t, c, leader)
	mustProbe(t, leader, "/ready", http.StatusServiceUnavailable, "not ready: leading in term ", "but a quorum of voters did not confirm it")
	mustProbe(t, leader, "/health", http.StatusOK, "ok")
	heal(t, c)
	waitUntil(t, 20*time.Second, "the cluster ready again", func() (bool, string) {
		for _, n := range c.nodes {
			if ok, got := probe(t, n, "/ready", http.StatusOK); !ok {
				return false, n.ID() + " " + got
			}
		}
		return true, ""
	})
}

// A new member is not ready while it catches up, although it hears from
// the leader; it is once promoted to voter.
func TestReadyNotWhileCatchingUp(t *testing.T) {
	hooks := map[string]*reelectHooks{}
	c := newTestCluster(t, 1, func(cfg *Config) {
		h := newReelectHooks()
		hooks[cfg.ID] = h
		cfg.hooks = h.testHooks()
		cfg.AdminAddr = "127.0.0.1:0"
	})
	leader := c.waitLeader()
	appendN(t, dial(t, leader), "r", 3)
	// n2 gets the leader's heartbeats but no entries.
	hooks[leader.ID()].setDrop(func(peer raft.ServerID, req *raft.AppendEntriesRequest) bool {
		return peer == "n2" && len(req.Entries) > 0
	})
	n2 := c.start("n2", func(cfg *Config) { cfg.Join = []string{leader.ClientAddr()} })
	waitFor(t, "n2 hears from the leader", func() bool {
		_, id := n2.raft.LeaderWithID()
		return string(id) == leader.ID() && time.Since(n2.raft.LastContact()) < time.Second
	})
	mustProbe(t, n2, "/ready", http.StatusServiceUnavailable, "not ready: ", "a new member catching up with the leader")
	mustProbe(t, n2, "/health", http.StatusOK, "ok")
	if n2.IsVoter() {
		t.Fatal("n2 votes: the test did not test")
	}
	hooks[leader.ID()].setDrop(nil)
	c.waitVoter(n2)
	waitUntil(t, 10*time.Second, "n2 ready", func() (bool, string) {
		return probe(t, n2, "/ready", http.StatusOK, "ready: a follower of "+leader.ID())
	})
}

// A removed node is neither healthy nor ready, and says why.
func TestProbesOfARemovedNode(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.AdminAddr = "127.0.0.1:0" })
	leader := c.waitLeader()
	f := followerOf(c, leader)
	removeNode(t, leader, f.ID())
	// The leader no longer sends it heartbeats: it is not ready once the
	// lease has passed, long before it learns it was removed.
	waitUntil(t, 10*time.Second, f.ID()+" not ready", func() (bool, string) {
		return probe(t, f, "/ready", http.StatusServiceUnavailable)
	})
	waitFor(t, f.ID()+" learns it was removed", f.removed.Load)
	mustProbe(t, f, "/health", http.StatusServiceUnavailable, "unhealthy: removed from the cluster")
	mustProbe(t, f, "/ready", http.StatusServiceUnavailable, "not ready: removed from the cluster")
}
