package node

import "testing"

// After the whole cluster stops, two of three nodes restarted form a
// quorum, elect a leader and serve every acknowledged record; a node
// restarted alone serves what it knew committed as stale reads.
func TestRestartQuorum(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	idx := appendN(t, dial(t, leader), "r", 20)
	want := readAll(t, leader, false)
	for _, n := range c.nodes {
		waitCaughtUp(t, n, idx[len(idx)-1])
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		c.stop(id)
	}
	alone := c.start("n1", nil)
	// Alone, it has applied nothing yet (raft replays committed entries
	// once a leader tells it the commit index); a stale read returns a
	// prefix of the log, possibly empty, and nothing else.
	stale := readAll(t, alone, true)
	if len(stale) > len(want) {
		t.Fatalf("n1 restarted alone serves %d records, want up to %d", len(stale), len(want))
	}
	sameRecords(t, "n1 restarted alone, stale", stale, want[:len(stale)])
	c.start("n2", nil)
	now := c.waitLeader()
	sameRecords(t, "after restart", readAll(t, now, false), want)
}
