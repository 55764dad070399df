package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
)

// TestStaleCatalogDropsNoMovedLog: reconcile drops the replica of a log
// that moved away only from a current catalog, and the catalog it acts on
// must be the current one, not one read before the node caught up.
//
// reconcileLoop reads the catalog, then reconcile asks catalogCurrent
// about the node's state at that later moment. A node restarted from a
// snapshot older than a move that brought it a log reads the snapshot's
// catalog (the log on its old node) at once, starts the replicas that
// catalog places on it, and meanwhile the leader's first AppendEntries
// brings the commit index, which the node applies: catalogCurrent is then
// true, and reconcile drops the data of the log that moved to it, as moved
// away, from the snapshot's catalog. Here the interleaving is forced: a
// catalog from before the move, a node that holds the moved log (its
// replica stopped, as after a restart) and whose catalog is current.
func TestStaleCatalogDropsNoMovedLog(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, &client.Options{RetryTimeout: time.Minute})
	info, err := cl.CreateLog(ctx, "solo", client.CreateLogOptions{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	acked := appendLog(t, ctx, cl.Log("solo"), "solo", 20)
	waitForIn(t, 10*time.Second, "the leader's catalog listing log solo", func() bool {
		l, ok := leader.catalog.State().LogByID(info.ID)
		return ok && len(l.Members) == 1 && !l.Moving()
	})
	stale := leader.catalog.State()
	l, _ := stale.LogByID(info.ID)
	from := l.Members[0]

	// Move solo away from its node: remove that node.
	if _, err := cl.Remove(ctx, from); err != nil {
		t.Fatalf("remove %s: %v", from, err)
	}
	var to *Node
	waitForIn(t, time.Minute, "log solo moved to another node", func() bool {
		for id, n := range c.nodes {
			if id == from || n.host.hosted(info.ID) == nil {
				continue
			}
			if l, ok := n.catalog.State().LogByID(info.ID); ok && !l.Moving() && slices.Equal(l.Members, []string{id}) {
				to = n
				return true
			}
		}
		return false
	})
	waitForIn(t, 10*time.Second, to.ID()+"'s current catalog", to.catalogCurrent)

	// Stop solo's replica on its new node, keeping its data, as a restart
	// does until reconcile starts it again.
	to.host.mu.Lock()
	h := to.host.logs[info.ID]
	delete(to.host.logs, info.ID)
	to.host.mu.Unlock()
	if err := h.r.Shutdown(); err != nil {
		t.Fatal(err)
	}
	h.gate.Close()

	to.reconcile(stale, true)
	if !slices.Contains(storedLogs(to.db.Groups()), info.ID) {
		t.Fatalf("%s dropped the data of log solo, moved to it, acting on a catalog from before the move (solo on %s) because its catalog is current now",
			to.ID(), from)
	}
	// reconcile, from the current catalog, starts the replica again.
	waitForIn(t, 30*time.Second, "log solo's replica running again on "+to.ID(), func() bool { return to.host.hosted(info.ID) != nil })
	sameMap(t, "log solo on "+to.ID(), readLog(t, ctx, cl.Log("solo")), acked)
}
