package node

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/client"
)

// A member whose data dir was wiped and that rejoined gets its replicas
// back: the log's leader demotes its old voter (it holds nothing and
// forgot its votes), the node starts an empty replica that catches up as
// a nonvoter, and is promoted. The log ends with 3 voters, each holding
// every acknowledged record, and the wiped node never votes in the log
// before its old voter was demoted and it was added again.
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
	// out: the log's leader has been seen with the wiped node's old voter
	// demoted (or gone).
	out := false
	waitForIn(t, 2*time.Minute, id+"'s replica of log old rebuilt", func() bool {
		var servers []raft.Server
		if ll := logLeader(c, info.ID); ll != nil && ll != back {
			servers = logServers(ll, info.ID)
			i := slices.IndexFunc(servers, func(s raft.Server) bool { return string(s.ID) == id })
			out = out || i < 0 || servers[i].Suffrage == raft.Nonvoter
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
		if votes && !out {
			t.Fatalf("%s votes in log old before its old voter was demoted and it was added again", id)
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
