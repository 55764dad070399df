package node

import (
	"testing"
	"time"
)

// TestCatalogCurrentNeedsTheLeadersCommit: a follower's catalog is current
// only once it has applied the commit index its leader last sent, not
// raft's own commit index, which a node restarted from an older snapshot
// holds at the snapshot's index until the leader's first AppendEntries
// with a commit index (a heartbeat carries none). Here the follower is
// told of a commit index far ahead of what it applied: its catalog must
// not count as current (it then dropped a log moved to it after the
// snapshot, as moved away), and becomes current again at the leader's
// next commit index.
func TestCatalogCurrentNeedsTheLeadersCommit(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.waitLeader()
	f := c.follower()
	waitForIn(t, 10*time.Second, "a follower's current catalog", f.catalogCurrent)
	applied := f.fsm.Applied.Load()
	if ci := f.raft.CommitIndex(); ci > applied {
		t.Fatalf("raft's commit index %d ahead of the applied %d on an idle cluster", ci, applied)
	}
	f.gate.commit.Store(&leaderCommit{term: f.raft.CurrentTerm(), index: applied + 1000, at: time.Now()})
	if f.catalogCurrent() {
		t.Fatal("the catalog counts as current with the leader's commit index 1000 entries ahead of the applied index")
	}
	waitForIn(t, 10*time.Second, "the leader's next commit index", f.catalogCurrent)
}
