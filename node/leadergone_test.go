package node

import (
	"fmt"
	"testing"
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
