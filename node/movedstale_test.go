package node

import (
	"bytes"
	"context"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/catalog"
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

// TestStaleCatalogBootstrapsNoDroppedLog: reconcile starts an empty
// replica (a bootstrap) only from a current catalog. A node restarted from
// a snapshot taken just after a 1-replica log was created there (its
// initial member) reads that snapshot's catalog at once; if the log has
// since been deleted or moved away and its data dropped here, a start from
// that catalog bootstraps a new, empty log of the same id, which elects
// itself and takes appends that no other replica holds, lost when the node
// catches up and drops it. Here the stale catalog is made by applying the
// log's creation to the catalog from before it.
func TestStaleCatalogBootstrapsNoDroppedLog(t *testing.T) {
	// Once armed, every start of a named log's replica is recorded: the
	// node's own reconcile loop, on the current catalog, drops a replica
	// started from the stale one within a second, so its start is what the
	// test looks for.
	var armed atomic.Bool
	started := make(chan string, 16)
	c := newTestCluster(t, 3, func(cfg *Config) {
		id := cfg.ID
		cfg.hooks = &testHooks{logTransport: func(_ uint64, tr raft.Transport) raft.Transport {
			if armed.Load() {
				select {
				case started <- id:
				default:
				}
			}
			return tr
		}}
	})
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, &client.Options{RetryTimeout: time.Minute})
	if _, err := cl.CreateLog(ctx, "first", client.CreateLogOptions{Replicas: 3}); err != nil {
		t.Fatal(err) // the catalog starts with it
	}
	before := leader.catalog.State()
	info, err := cl.CreateLog(ctx, "solo", client.CreateLogOptions{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	appendLog(t, ctx, cl.Log("solo"), "solo", 5)
	l, ok := leader.catalog.State().LogByID(info.ID)
	if !ok || len(l.Members) != 1 {
		t.Fatalf("log solo in the catalog: %+v", l)
	}
	host := c.nodes[l.Members[0]]

	f := catalog.New()
	if err := f.Restore(io.NopCloser(bytes.NewReader(catalog.AppendSnapshot(nil, before)))); err != nil {
		t.Fatal(err)
	}
	if res := f.ApplyCommand(before.Index()+1, &catalog.CreateLog{Name: "solo", Settings: l.Settings, Members: []string{host.ID()}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	stale := f.State()
	if sl, ok := stale.LogByID(info.ID); !ok || !slices.Equal(sl.Initial, []string{host.ID()}) {
		t.Fatalf("the stale catalog's log %d: %+v, want solo created on %s", info.ID, sl, host.ID())
	}

	if _, err := cl.DeleteLog(ctx, "solo"); err != nil {
		t.Fatal(err)
	}
	waitForIn(t, time.Minute, "log solo's data dropped on "+host.ID(), func() bool {
		return host.host.hosted(info.ID) == nil && !slices.Contains(storedLogs(host.db.Groups()), info.ID)
	})
	waitForIn(t, 10*time.Second, host.ID()+"'s current catalog", host.catalogCurrent)
	armed.Store(true)
	// The node's own loop, on the current catalog, may remove the log's
	// directory while a start from the stale one is still on its way (the
	// start then fails before the hook): a few tries.
	for range 5 {
		host.reconcile(stale, true)
		select {
		case id := <-started:
			t.Fatalf("%s started a replica of the deleted log solo from a catalog taken just after its creation", id)
		default:
		}
	}
}
