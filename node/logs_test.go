package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// clusterClient dials a Go client to every node of c.
func clusterClient(t *testing.T, c *testCluster, opts *client.Options) *client.Client {
	t.Helper()
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.ClientAddr())
	}
	slices.Sort(addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, addrs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// appendLog appends n records to log g, tagged with prefix, and returns the
// indexes the cluster acknowledged with the records.
func appendLog(t *testing.T, ctx context.Context, g *client.Log, prefix string, n int) map[uint64]string {
	t.Helper()
	acked := map[uint64]string{}
	for i := range n {
		rec := fmt.Sprintf("%s-%d", prefix, i)
		idx, err := g.Append(ctx, []byte(rec))
		if err != nil {
			t.Fatalf("append %s to log %s: %v", rec, g.Name(), err)
		}
		acked[idx[0]] = rec
	}
	return acked
}

// readLog reads every record of log g.
func readLog(t *testing.T, ctx context.Context, g *client.Log) map[uint64]string {
	t.Helper()
	return readLogWith(t, ctx, g, client.ReadOptions{})
}

// readLogWith reads every record of log g with read options o.
func readLogWith(t *testing.T, ctx context.Context, g *client.Log, o client.ReadOptions) map[uint64]string {
	t.Helper()
	got := map[uint64]string{}
	var from uint64
	for {
		recs, next, err := g.Read(ctx, from, o)
		if err != nil {
			t.Fatalf("read log %s from %d: %v", g.Name(), from, err)
		}
		for _, r := range recs {
			got[r.Index] = string(r.Data)
		}
		if len(recs) == 0 {
			return got
		}
		from = next
	}
}

// sameMap fails unless got holds exactly want.
func sameMap(t *testing.T, what string, got, want map[uint64]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i, w := range want {
		if got[i] != w {
			t.Fatalf("%s: index %d holds %q, want %q", what, i, got[i], w)
		}
	}
}

// Named logs on 3 nodes: each log its own raft group, records kept apart
// from the default log's and each other's, listed and described; and they
// survive a restart of every node.
func TestNamedLogs(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	for _, l := range []struct {
		name     string
		replicas uint32
	}{{"orders", 3}, {"audit", 1}} {
		info, err := cl.CreateLog(ctx, l.name, client.CreateLogOptions{Replicas: int(l.replicas)})
		if err != nil {
			t.Fatalf("create %s: %v", l.name, err)
		}
		if info.ID == 0 || len(info.Members) != int(l.replicas) {
			t.Fatalf("created %+v", info)
		}
	}
	if _, err := cl.CreateLog(ctx, "orders", client.CreateLogOptions{}); !isCode(err, transport.CodeFailedPrecondition) {
		t.Fatalf("second create of orders: %v, want FailedPrecondition", err)
	}
	def := appendLog(t, ctx, cl.Log(transport.DefaultLog), "default", 20)
	orders := appendLog(t, ctx, cl.Log("orders"), "orders", 50)
	audit := appendLog(t, ctx, cl.Log("audit"), "audit", 30)
	sameMap(t, "default", readLog(t, ctx, cl.Log(transport.DefaultLog)), def)
	sameMap(t, "orders", readLog(t, ctx, cl.Log("orders")), orders)
	sameMap(t, "audit", readLog(t, ctx, cl.Log("audit")), audit)
	if _, err := cl.Log("nosuch").Append(ctx, []byte("x")); !isCode(err, transport.CodeNotFound) {
		t.Fatalf("append to an unknown log: %v, want NotFound", err)
	}

	logs, err := cl.ListLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range logs {
		names = append(names, l.Name)
	}
	if fmt.Sprint(names) != "[audit default orders]" {
		t.Fatalf("ListLogs: %v", names)
	}
	// The default log is in the catalog too, but its replica is the
	// node's own: the reconciler never opens a second one over its groups
	// (whose snapshot store's recovery would empty an archive group).
	for id, n := range c.nodes {
		if _, err := os.Stat(n.logDir(0)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s made a directory for a second replica of the default log: %v", id, err)
		}
	}
	d, err := cl.Log("orders").Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Log.LeaderID == "" || len(d.Members) != 3 || d.LastIndex < 50 || d.Bytes == 0 {
		t.Fatalf("DescribeLog orders: %+v", d)
	}

	for _, id := range []string{"n1", "n2", "n3"} {
		c.stop(id)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		c.start(id, nil)
	}
	cl2 := clusterClient(t, c, nil)
	sameMap(t, "orders after a restart", readLog(t, ctx, cl2.Log("orders")), orders)
	sameMap(t, "audit after a restart", readLog(t, ctx, cl2.Log("audit")), audit)
	sameMap(t, "default after a restart", readLog(t, ctx, cl2.Log(transport.DefaultLog)), def)
	more := appendLog(t, ctx, cl2.Log("orders"), "more", 5)
	for i, r := range more {
		orders[i] = r
	}
	sameMap(t, "orders, appended after a restart", readLog(t, ctx, cl2.Log("orders")), orders)
}

// Deleting a log removes its data from every member: its raftstore groups
// and its snapshot directory; the name can then be created again, empty,
// with a new id.
func TestDeleteLogDropsData(t *testing.T) {
	c, ctx, cl, info := withLog(t, "temp", 40)
	gs := replica.GroupsOf(info.ID)
	for id, n := range c.nodes {
		if !slices.Contains(n.db.Groups(), gs.Live) {
			t.Fatalf("%s does not hold log temp's group %d before the delete: %v", id, gs.Live, n.db.Groups())
		}
	}
	if _, err := cl.DeleteLog(ctx, "temp"); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		waitDropped(t, c, n, info.ID)
	}
	if _, err := cl.Log("temp").Append(ctx, []byte("x")); !isCode(err, transport.CodeNotFound) {
		t.Fatalf("append to a deleted log: %v, want NotFound", err)
	}
	again, err := cl.CreateLog(ctx, "temp", client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if again.ID == info.ID {
		t.Fatalf("temp created again with the deleted log's id %d", info.ID)
	}
	if got := readLog(t, ctx, cl.Log("temp")); len(got) != 0 {
		t.Fatalf("temp created again holds %d records of the deleted one", len(got))
	}
}

// withLog starts a 3-node cluster with a log name of 3 replicas holding
// records appended records, and returns a context bounding the test and a
// client of the cluster.
func withLog(t *testing.T, name string, records int) (*testCluster, context.Context, *client.Client, *transport.LogInfo) {
	t.Helper()
	c := newTestCluster(t, 3, nil)
	c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cl := clusterClient(t, c, nil)
	info, err := cl.CreateLog(ctx, name, client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	appendLog(t, ctx, cl.Log(name), name, records)
	return c, ctx, cl, info
}

// waitDropped waits until node n holds nothing of log id: no replica, no
// raftstore group, no directory.
func waitDropped(t *testing.T, c *testCluster, n *Node, id uint64) {
	t.Helper()
	gs := replica.GroupsOf(id)
	deadline := time.Now().Add(30 * time.Second)
	for {
		held := slices.ContainsFunc(n.db.Groups(), func(g uint64) bool { return g == gs.Live || g == gs.ArchiveA || g == gs.ArchiveB })
		_, statErr := os.Stat(n.logDir(id))
		if _, err := os.Stat(n.logDir(id) + droppingSuffix); !errors.Is(err, os.ErrNotExist) {
			statErr = fmt.Errorf("%s%s: %v", n.logDir(id), droppingSuffix, err)
		}
		if !held && errors.Is(statErr, os.ErrNotExist) && n.host.hosted(id) == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds deleted log %d (groups %v, dir: %v)", n.ID(), id, n.db.Groups(), statErr)
		}
		waitApplied(t, c.nodes, 100*time.Millisecond)
	}
}

// TestDeleteLogAfterACrashMidDrop: a node stopped while it dropped a
// deleted log's data drops the rest when it starts again: after it marked
// the directory dropping (and still held the groups), and after it had
// dropped the groups and kept the directory, as the order before did. That
// node kept the directory for good: the reconciler found logs to drop by
// their groups only.
func TestDeleteLogAfterACrashMidDrop(t *testing.T) {
	c, ctx, cl, info := withLog(t, "temp", 20)
	followers := []*Node{}
	for _, n := range c.nodes {
		if !n.IsLeader() {
			followers = append(followers, n)
		}
	}
	groupsFirst, dirFirst := followers[0], followers[1]

	// dirFirst stops with the directory marked dropping and the groups
	// still held, as a node does between the steps of a drop.
	waitForIn(t, 30*time.Second, "temp's replica on "+dirFirst.ID(), func() bool { return dirFirst.host.hosted(info.ID) != nil })
	c.stop(dirFirst.ID())
	if err := os.Rename(dirFirst.logDir(info.ID), dirFirst.logDir(info.ID)+droppingSuffix); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.DeleteLog(ctx, "temp"); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		waitDropped(t, c, n, info.ID)
	}
	restarted := c.start(dirFirst.ID(), nil)
	c.waitVoter(restarted)
	waitDropped(t, c, restarted, info.ID)

	// groupsFirst stops with the groups dropped and the directory left, as
	// the order before did; then dirFirst with the groups dropped and the
	// directory marked dropping left, as a stop before its removal leaves
	// it.
	for _, left := range []struct {
		n   *Node
		dir string
	}{{groupsFirst, groupsFirst.logDir(info.ID)}, {restarted, restarted.logDir(info.ID) + droppingSuffix}} {
		c.stop(left.n.ID())
		err := os.MkdirAll(filepath.Join(left.dir, "snapshots", "2-40-1"), 0o755)
		if err == nil {
			err = recordLogName(left.dir, "temp")
		}
		if err != nil {
			t.Fatal(err)
		}
		again := c.start(left.n.ID(), nil)
		c.waitVoter(again)
		waitDropped(t, c, again, info.ID)
	}
}

// TestHalfDoneDeleteFinishes: a default-log leader that fails between a
// delete's two catalog commands leaves the log deleting; the planner
// finishes it, so the name is free again and no host keeps its data,
// without the client asking again.
func TestHalfDoneDeleteFinishes(t *testing.T) {
	c, ctx, cl, info := withLog(t, "half", 10)
	lead := c.waitLeader()
	// The first of the two commands, as a leader that died right after it
	// had committed it.
	res, err := lead.proposeCatalog(ctx, &catalog.DeleteLog{ID: info.ID})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		waitForIn(t, 30*time.Second, "log half gone from "+n.ID()+"'s catalog", func() bool {
			_, ok := n.catalog.State().LogByID(info.ID)
			return !ok
		})
		waitDropped(t, c, n, info.ID)
	}
	if _, err := cl.CreateLog(ctx, "half", client.CreateLogOptions{Replicas: 3}); err != nil {
		t.Fatalf("creating half again after its delete finished: %v", err)
	}
}

// isCode reports whether err is a transport error of code c.
func isCode(err error, c transport.Code) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.Code == c
}

// /status and /metrics show each log a node holds, by name.
func TestNamedLogsStatusAndMetrics(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) { cfg.AdminAddr = "127.0.0.1:0" })
	n := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	if _, err := cl.CreateLog(ctx, "m1", client.CreateLogOptions{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	appendLog(t, ctx, cl.Log("m1"), "m1", 7)
	var st adminStatus
	if code, body := get(t, n, "/status"); code != 200 || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("/status: %d %s", code, body)
	}
	var names []string
	for _, l := range st.Logs {
		names = append(names, l.Name)
		if l.Name == "m1" && (l.Role != "Leader" || l.LastIndex < 7 || l.Bytes == 0) {
			t.Fatalf("/status of log m1: %+v", l)
		}
	}
	if fmt.Sprint(names) != "[default m1]" {
		t.Fatalf("/status logs: %v", names)
	}
	_, body := get(t, n, "/metrics")
	for _, want := range []string{`raftlog_log_leader{log="m1"} 1`, `raftlog_log_leader{log="default"} 1`, "raftlog_logs_held 2"} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
}

// leadersByNode counts the named logs each node leads.
func leadersByNode(c *testCluster) map[string]int {
	out := map[string]int{}
	for id, n := range c.nodes {
		for _, h := range n.host.all() {
			if h.r.IsLeader() {
				out[id]++
			}
		}
	}
	return out
}

// Six logs on three nodes: each node leads two; after a node stops, the
// others lead its logs, and once it returns it leads two again.
func TestLeadersSpread(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	for i := range 6 {
		if _, err := cl.CreateLog(ctx, fmt.Sprintf("l%d", i), client.CreateLogOptions{Replicas: 3}); err != nil {
			t.Fatal(err)
		}
	}
	spread := func(what string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			got := leadersByNode(c)
			if got["n1"] == 2 && got["n2"] == 2 && got["n3"] == 2 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: leaders by node %v, want 2 each", what, got)
			}
			waitApplied(t, c.nodes, 100*time.Millisecond)
		}
	}
	spread("after create")
	c.stop("n2")
	deadline := time.Now().Add(time.Minute)
	for got := leadersByNode(c); got["n1"]+got["n3"] != 6; got = leadersByNode(c) {
		if time.Now().After(deadline) {
			t.Fatalf("with n2 stopped, leaders by node %v: not every log led", got)
		}
		waitApplied(t, c.nodes, 100*time.Millisecond)
	}
	c.start("n2", nil)
	spread("after n2 returned")
}

// A member that lost its data dir and rejoined does not start the named
// logs it held from nothing (a replica that forgot its votes must not
// vote): only as the rebuild of its lost replica (lost_test.go); a log
// created after it rejoined starts on it; the others keep serving the old
// log.
func TestWipedNodeKeepsOutOfItsOldLogs(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	old, err := cl.CreateLog(ctx, "old", client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	acked := appendLog(t, ctx, cl.Log("old"), "old", 20)
	victim := followerOf(c, leader)
	id, dir := victim.ID(), victim.cfg.DataDir
	c.stop(id)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	back := c.start(id, func(cfg *Config) { cfg.Join = []string{leader.ClientAddr()} })
	c.waitVoter(back)
	deadline := time.Now().Add(30 * time.Second)
	for {
		back.host.mu.Lock()
		warned := back.host.warned[old.ID]
		back.host.mu.Unlock()
		if warned {
			break
		}
		if back.host.hosted(old.ID) != nil {
			if l, _ := back.catalog.State().LogByID(old.ID); l.Lost(id) && !l.Rebuilding() {
				t.Fatalf("%s, wiped, started log old again from nothing", id)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not decide about log old", id)
		}
		waitApplied(t, c.nodes, 100*time.Millisecond)
	}
	for i, r := range appendLog(t, ctx, cl.Log("old"), "more", 5) {
		acked[i] = r
	}
	sameMap(t, "log old on its other replicas", readLog(t, ctx, cl.Log("old")), acked)
	fresh, err := cl.CreateLog(ctx, "fresh", client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	appendLog(t, ctx, cl.Log("fresh"), "fresh", 5)
	for deadline := time.Now().Add(30 * time.Second); back.host.hosted(fresh.ID) == nil; {
		if time.Now().After(deadline) {
			t.Fatalf("%s does not run log fresh, created after it rejoined", id)
		}
		waitApplied(t, c.nodes, 100*time.Millisecond)
	}
}

// A list of the logs is answered by the default log's leader: a follower
// that hears from it answers NotLeader naming it, since the follower may
// not yet have applied a create the leader acknowledged (CI: "node log
// list" right after "node log create" missed the new log). A client given
// only the follower's address follows, and lists the new log.
func TestListLogsAnsweredByTheLeader(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	f := c.follower()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := clusterClient(t, c, nil).CreateLog(ctx, "fresh", client.CreateLogOptions{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	waitForIn(t, 10*time.Second, f.ID()+" hearing from the leader", f.log.FollowsLiveLeader)
	_, err := call[transport.ListLogsResponse](t, dial(t, f), transport.OpListLogs, &transport.ListLogsRequest{})
	var te *transport.Error
	if !errors.As(err, &te) || te.Code != transport.CodeNotLeader || te.LeaderAddr != leader.ClientAddr() {
		t.Fatalf("ListLogs on follower %s: %v; want NotLeader naming the leader at %s", f.ID(), err, leader.ClientAddr())
	}
	// Asked for its own copy, the follower answers.
	if local, err := call[transport.ListLogsResponse](t, dial(t, f), transport.OpListLogs, &transport.ListLogsRequest{Local: true}); err != nil || len(local.Logs) == 0 {
		t.Errorf("ListLogs of %s's own copy: %+v, %v", f.ID(), local, err)
	}
	cl, err := client.Dial(ctx, []string{f.ClientAddr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	logs, err := cl.ListLogs(ctx)
	if err != nil || !slices.ContainsFunc(logs, func(l transport.LogInfo) bool { return l.Name == "fresh" }) {
		t.Fatalf("ListLogs through %s: %+v, %v; want log fresh listed", f.ID(), logs, err)
	}
}
