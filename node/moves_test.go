package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/client"
)

// replicaCounts counts the replicas of named logs the catalog places on
// each node, and whether a move is under way.
func replicaCounts(n *Node) (map[string]int, bool) {
	counts := map[string]int{}
	moving := false
	for _, l := range n.catalog.State().Logs() {
		if l.ID == catalog.DefaultID {
			continue
		}
		moving = moving || l.Moving() || l.Initial != nil
		for _, m := range l.Members {
			counts[m]++
		}
	}
	return counts, moving
}

// createLogs creates logs prefix0..prefix<n-1> of 3 replicas and appends
// records to each; it returns what each log acknowledged.
func createLogs(t *testing.T, ctx context.Context, cl *client.Client, prefix string, n, records int) map[string]map[uint64]string {
	t.Helper()
	acked := map[string]map[uint64]string{}
	for i := range n {
		name := fmt.Sprintf("%s%d", prefix, i)
		if _, err := cl.CreateLog(ctx, name, client.CreateLogOptions{Replicas: 3}); err != nil {
			t.Fatal(err)
		}
		acked[name] = appendLog(t, ctx, cl.Log(name), name, records)
	}
	return acked
}

// Removing a node that holds replicas of named logs moves each of them to
// another node first (the new replica added before the old one goes), then
// takes the node out: no acknowledged record is lost, and every log keeps
// three voters, none of them the removed node.
func TestRemoveNodeMovesReplicas(t *testing.T) {
	c := newTestCluster(t, 4, nil)
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, &client.Options{RetryTimeout: time.Minute})
	acked := createLogs(t, ctx, cl, "m", 4, 30)
	victim := followerOf(c, leader)
	id := victim.ID()
	if counts, _ := replicaCounts(leader); counts[id] == 0 {
		t.Fatalf("%s holds no replica to move: %v", id, counts)
	}
	if _, err := cl.Remove(ctx, id); err != nil {
		t.Fatalf("remove %s: %v", id, err)
	}
	waitFor(t, id+" learns it was removed", func() bool { return victim.Status().Role == "Removed" })
	counts, moving := replicaCounts(leader)
	if counts[id] != 0 || moving {
		t.Fatalf("after the remove: replicas %v, moving %v", counts, moving)
	}
	for name, want := range acked {
		d, err := cl.Log(name).Describe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var voters []string
		for _, m := range d.Members {
			if m.Role == "Leader" || m.Role == "Follower" {
				voters = append(voters, m.NodeID)
			}
		}
		if len(voters) != 3 || slices.Contains(voters, id) {
			t.Fatalf("log %s after the remove: %+v", name, d.Members)
		}
		for i, r := range appendLog(t, ctx, cl.Log(name), name+"-after", 3) {
			want[i] = r
		}
		sameMap(t, "log "+name+" after its replica moved", readLog(t, ctx, cl.Log(name)), want)
	}
	waitFor(t, "the catalog forgetting "+id, func() bool {
		_, ok := leader.catalog.State().Node(id)
		return !ok
	})
}

// A node that joins takes replicas of existing logs, one move at a time,
// until the spread is even.
func TestJoinedNodeTakesReplicas(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, &client.Options{RetryTimeout: time.Minute})
	acked := createLogs(t, ctx, cl, "j", 4, 20)
	n4 := c.start("n4", func(cfg *Config) { cfg.Join = []string{leader.ClientAddr()} })
	c.waitVoter(n4)
	// 12 replicas over 4 nodes: 3 each.
	// Three moves, one at a time: generous under -race on a busy machine.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		counts, moving := replicaCounts(leader)
		if !moving && counts["n1"] == 3 && counts["n2"] == 3 && counts["n3"] == 3 && counts["n4"] == 3 && len(n4.host.all()) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no even spread with n4: replicas %v, moving %v, n4 runs %d", counts, moving, len(n4.host.all()))
		}
		waitApplied(t, c.nodes, 100*time.Millisecond)
	}
	for name, want := range acked {
		sameMap(t, "log "+name+" after the rebalance", readLog(t, ctx, cl.Log(name)), want)
	}
}
