package node

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// TestGracefulStopCallsNoElection stops the leader on purpose, again and
// again: it hands its leadership to a survivor, then its raft port closes.
// The other survivor sees the port refuse; it must not take that for a
// death and call an election over the leader just elected (an append sent
// to that leader then failed, and the log lost a commit round). Each
// round appends through the new leader, which must keep its term, and no
// survivor may have called an election.
func TestGracefulStopCallsNoElection(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	for round := range 6 {
		leader := c.waitLeader()
		appendN(t, dial(t, leader), fmt.Sprintf("a%d", round), 3)
		c.stop(leader.ID())
		next := c.waitLeader()
		term := next.raft.CurrentTerm()
		idx := appendN(t, dial(t, next), fmt.Sprintf("b%d", round), 20)
		if got := next.raft.CurrentTerm(); got != term || !next.IsLeader() {
			t.Fatalf("round %d: %s led in term %d, then term %d, leader %v", round, next.ID(), term, got, next.IsLeader())
		}
		for id, n := range c.nodes {
			for _, after := range []string{goneAfterLost, goneAfterSilence} {
				if v := counterValue(n.metrics.leaderGoneElections.WithLabelValues(after)); v != 0 {
					t.Fatalf("round %d: %s called %v elections after %s, over a leader that handed over", round, id, v, after)
				}
			}
		}
		back := c.start(leader.ID(), nil)
		waitCaughtUp(t, back, idx[len(idx)-1])
	}
}

// TestSurvivorRank checks the survivors' turns after a leader's death:
// from the end of the configuration, whatever the ids, nonvoters and the
// dead leader left out, so that the first to call is the one whose
// hashicorp/raft candidate asks the others for their votes before it
// writes its own.
func TestSurvivorRank(t *testing.T) {
	conf := func(servers ...string) raft.Configuration {
		var c raft.Configuration
		for _, s := range servers {
			suffrage := raft.Voter
			if s[0] == '-' {
				suffrage, s = raft.Nonvoter, s[1:]
			}
			c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(s), Address: raft.ServerAddress(s + ":1"), Suffrage: suffrage})
		}
		return c
	}
	for _, c := range []struct {
		conf   raft.Configuration
		leader raft.ServerID
		self   string
		rank   int
		voters int
		ok     bool
	}{
		{conf("n1", "n2", "n3"), "n1", "n3", 0, 3, true},
		{conf("n1", "n2", "n3"), "n1", "n2", 1, 3, true},
		{conf("n1", "n2", "n3"), "n3", "n2", 0, 3, true},
		{conf("n1", "n2", "n3"), "n3", "n1", 1, 3, true},
		{conf("n3", "n1", "n2"), "n2", "n1", 0, 3, true}, // the configuration's order, not the ids'
		{conf("n3", "n1", "n2"), "n2", "n3", 1, 3, true},
		{conf("a", "b", "-x", "c", "d", "e"), "c", "e", 0, 5, true},
		{conf("a", "b", "-x", "c", "d", "e"), "c", "a", 3, 5, true},
		{conf("a", "b", "-x", "c", "d", "e"), "c", "x", 0, 0, false}, // a nonvoter has no turn
		{conf("a", "b", "c"), "a", "z", 0, 0, false},                 // nor does a node outside
	} {
		rank, voters, ok := survivorRank(c.conf, c.self, c.leader)
		if ok != c.ok || ok && (rank != c.rank || voters != c.voters) {
			t.Errorf("survivorRank(%v, %s, leader %s) = %d, %d, %v; want %d, %d, %v",
				c.conf.Servers, c.self, c.leader, rank, voters, ok, c.rank, c.voters, c.ok)
		}
	}
}
