package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// clusterIDOf waits until every node of nodes reports one cluster id in
// status --json, and returns it.
func clusterIDOf(t *testing.T, h *serveHarness, nodes []*procNode) string {
	t.Helper()
	var id string
	waitUntil(t, time.Minute, "the cluster's id on every node", func() bool {
		id = ""
		for _, p := range nodes {
			var rows []statusJSON
			out, _, code := h.cli("status", "--addrs", p.client, "--json", "--timeout", "2s")
			if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || rows[0].NodeID != p.id || rows[0].ClusterID == "" {
				return false
			}
			if id != "" && rows[0].ClusterID != id {
				t.Fatalf("%s names cluster %s, another node %s", p.id, rows[0].ClusterID, id)
			}
			id = rows[0].ClusterID
		}
		return true
	})
	return id
}

// logHas reports whether p's log holds a line containing all of want.
func logHas(p *procNode, want ...string) bool {
	b, _ := os.ReadFile(p.log)
	for line := range strings.Lines(string(b)) {
		all := true
		for _, w := range want {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}

// TestNodeOfAnotherClusterRefused: cluster A's node n3 is gone for good,
// and a new cluster B's node n3 listens at its raft address (both clusters
// name their nodes n1, n2, n3). A's leader still dials that address to
// replicate to its n3; raft alone would let it make B's n3 follow it and
// cut B's log to A's. B's n3 refuses the connections, saying why; A's
// leader's dials fail naming both clusters; B's n3 keeps B's records and
// term; "node status" over addresses of both clusters says they are two.
func TestNodeOfAnotherClusterRefused(t *testing.T) {
	h := newServeHarness(t)
	a, aAddrs := startProcCluster(t, h, 3, "a", "")
	ackedA := h.appendBatches(aAddrs, "", "a", 10)
	idA := clusterIDOf(t, h, a)
	gone := a[2]
	h.stop(gone)

	addrs := freeAddrs(t, 5)
	b := []*procNode{
		h.procNode("n1", "b1", addrs[0], addrs[1]),
		h.procNode("n2", "b2", addrs[2], addrs[3]),
		h.procNode("n3", "b3", gone.raft, addrs[4]),
	}
	bAddrs := startProcNodes(t, h, b, "")
	ackedB := h.appendBatches(bAddrs, "", "b", 10)
	idB := clusterIDOf(t, h, b)
	if idA == idB {
		t.Fatalf("two clusters bootstrapped apart have one id, %s", idA)
	}

	waitUntil(t, 2*time.Minute, "B's n3 refusing a raft connection of cluster A", func() bool {
		return logHas(b[2], "refused a raft connection from a node of another cluster", idA, idB)
	})
	waitUntil(t, time.Minute, "A's leader told that the node at its n3's address is of cluster B", func() bool {
		return logHas(a[0], gone.raft, "belongs to cluster "+idB) || logHas(a[1], gone.raft, "belongs to cluster "+idB)
	})

	// B's n3 serves B alone: B's term, and B's records.
	var rows []statusJSON
	out := h.mustCLI("status", "--addrs", bAddrs, "--json")
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 3 {
		t.Fatalf("status of cluster B: %v: %s", err, out)
	}
	for _, r := range rows {
		if r.Term != rows[0].Term {
			t.Errorf("cluster B's nodes are in terms %d (%s) and %d (%s)", rows[0].Term, rows[0].NodeID, r.Term, r.NodeID)
		}
	}
	onB3 := readRecords(t, h, b[2].client, 1, "--stale")
	for _, idx := range ackedB {
		if !strings.HasPrefix(onB3[idx], "b-") {
			t.Errorf("B's n3 holds %q at index %d, where B acknowledged a record of its own", onB3[idx], idx)
		}
	}
	onA := readRecords(t, h, a[0].client+","+a[1].client, 1)
	for _, idx := range ackedA {
		if !strings.HasPrefix(onA[idx], "a-") {
			t.Errorf("cluster A holds %q at index %d, where it acknowledged a record of its own", onA[idx], idx)
		}
	}

	_, errOut, code := h.cli("status", "--addrs", a[0].client+","+b[2].client, "--timeout", "5s")
	if code != 1 || !strings.Contains(errOut, "answer for 2 clusters") || !strings.Contains(errOut, idA) || !strings.Contains(errOut, idB) {
		t.Errorf("status over a node of each cluster: exit status %d, stderr %q; want 1 naming both clusters", code, errOut)
	}
}
