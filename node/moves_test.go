package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
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
// until the spread is even; each node a replica moved from says so once.
func TestJoinedNodeTakesReplicas(t *testing.T) {
	drops := &lineCounter{want: "dropped its replica of a log that moved away"}
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: drops})
	})
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
	// Each replica n4 took was dropped where it was; once the nodes have
	// stopped (nothing logs after), each drop was said once.
	waitForIn(t, time.Minute, "the three moved replicas dropped", func() bool { return drops.count() >= 3 })
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		c.stop(id)
	}
	if got := drops.count(); got != 3 {
		t.Errorf("%d lines say a replica of a log that moved away was dropped, for 3 moves", got)
	}
}

// A move adds the new replica as a nonvoter and promotes it only once it
// has caught up: while it catches up (here: cut off from the other nodes,
// so it takes as long as the test likes), a log of 3 replicas keeps 3
// voters, and one old member failing does not stall it. Had the new
// replica been added as a voter at once, the log would have 4 voters
// (quorum 3), one of which holds nothing, and the failure of an old
// member would stall every append until the new one caught up.
func TestMoveCatchesUpBeforeVoting(t *testing.T) {
	c := newTestCluster(t, 4, func(cfg *Config) { cfg.FaultInjection = true })
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, &client.Options{RetryTimeout: time.Minute})
	info, err := cl.CreateLog(ctx, "big", client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	acked := appendLog(t, ctx, cl.Log("big"), "big", 200)
	logLead := waitLogLeader(t, c, info.Name, info.ID)
	// The new replica goes to the node without one; the member that moves
	// leads neither the cluster nor the log.
	var joining, leaving *Node
	for id, n := range c.nodes {
		if !slices.Contains(info.Members, id) {
			joining = n
		}
	}
	if joining == leader {
		// Cutting it off would stall the catalog: another node leads.
		if err := leader.raft.LeadershipTransfer().Error(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "another leader of the cluster", func() bool {
			leader = nil
			for _, n := range c.nodes {
				if n != joining && n.IsLeader() {
					leader = n
				}
			}
			return leader != nil
		})
	}
	for id, n := range c.nodes {
		if slices.Contains(info.Members, id) && n != leader && n != logLead {
			leaving = n
		}
	}
	heal := c.partitionFrom(joining)
	healed := false
	defer func() {
		if !healed {
			heal()
		}
	}()
	removed := make(chan error, 1)
	go func() {
		_, err := cl.Remove(ctx, leaving.ID())
		removed <- err
	}()
	waitFor(t, joining.ID()+" in log big's configuration", func() bool {
		return slices.ContainsFunc(logServers(logLead, info.ID), func(s raft.Server) bool { return string(s.ID) == joining.ID() })
	})
	for _, s := range logServers(logLead, info.ID) {
		if string(s.ID) == joining.ID() && s.Suffrage == raft.Voter {
			t.Errorf("%s, which holds nothing of log big yet, was added as a voter", joining.ID())
		}
	}
	// An old member fails while the new replica cannot catch up.
	c.stop(leaving.ID())
	actx, acancel := context.WithTimeout(ctx, 20*time.Second)
	for i, r := range appendLog(t, actx, cl.Log("big"), "during", 20) {
		acked[i] = r
	}
	acancel()
	heal()
	healed = true
	select {
	case err := <-removed:
		if err != nil {
			t.Fatalf("remove %s: %v", leaving.ID(), err)
		}
	case <-ctx.Done():
		t.Fatalf("remove %s did not finish", leaving.ID())
	}
	waitForIn(t, time.Minute, "log big's move finished", func() bool {
		l, _ := leader.catalog.State().LogByID(info.ID)
		return !l.Moving() && slices.Contains(l.Members, joining.ID())
	})
	d, err := cl.Log("big").Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var voters []string
	for _, m := range d.Members {
		if voting(m.Role) {
			voters = append(voters, m.NodeID)
		}
	}
	if len(voters) != 3 || !slices.Contains(voters, joining.ID()) || slices.Contains(voters, leaving.ID()) {
		t.Fatalf("log big after the move: %+v", d.Members)
	}
	sameMap(t, "log big after the move", readLog(t, ctx, cl.Log("big")), acked)
}

// Removing a node that holds a replica no other node can take (a log of 3
// replicas on 3 nodes) is refused at once, naming the log and what to do,
// and the node stays an active member: before, it was marked leaving and
// every remove timed out while the drain waited for good.
func TestRemoveRefusedWhenNoNodeCanTakeAReplica(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, &client.Options{RetryTimeout: 20 * time.Second})
	createLogs(t, ctx, cl, "full", 1, 5)
	victim := followerOf(c, leader)
	_, err := cl.Remove(ctx, victim.ID())
	var te *transport.Error
	if !errors.As(err, &te) || te.Code != transport.CodeFailedPrecondition || !strings.Contains(te.Message, `log "full0"`) || !strings.Contains(te.Message, "add a node first") {
		t.Fatalf("remove %s: %v; want FailedPrecondition naming log full0 and what to do", victim.ID(), err)
	}
	if nd, ok := leader.catalog.State().Node(victim.ID()); !ok || nd.State != catalog.NodeActive {
		t.Fatalf("%s after the refused remove: %+v (known %v); want it active", victim.ID(), nd, ok)
	}
}

// DescribeLog's ConfigIndex bounds the index of the configuration the
// members' roles come from, so that ConfigIndex <= CommitIndex proves them
// committed, which the planner relies on (plan, beginRebuild). It was
// always 0 (hashicorp/raft v1.8.0's ConfigurationFuture.Index is), so a
// configuration the log's leader had only appended passed for committed.
func TestDescribeLogConfigIndex(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.FaultInjection = true })
	c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, &client.Options{RetryTimeout: time.Minute})
	info, err := cl.CreateLog(ctx, "conf", client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	appendLog(t, ctx, cl.Log("conf"), "conf", 20)
	lead := waitLogLeader(t, c, info.Name, info.ID)
	h := lead.host.hosted(info.ID)
	d := describe(logInfo(mustLog(t, lead, info.ID)), info.Members, h.r, lead.catalog.State())
	newest := newestConfigEntry(t, h)
	if d.ConfigIndex < newest || d.ConfigIndex > d.CommitIndex {
		t.Fatalf("described with ConfigIndex %d, CommitIndex %d; the newest configuration entry is at %d and committed", d.ConfigIndex, d.CommitIndex, newest)
	}

	// Cut the leader off, and have it append a configuration that cannot
	// commit: ConfigIndex must say so.
	heal := c.partitionFrom(lead)
	defer heal()
	f := h.r.Raft().AddNonvoter("ghost", "127.0.0.1:1", 0, 0)
	failed := errCh(f)
	waitFor(t, "the ghost's configuration appended", func() bool {
		select {
		case <-failed:
			t.Fatalf("adding a nonvoter on the cut-off leader: %v (it stepped down first)", f.Error())
		default:
		}
		return newestConfigEntry(t, h) > d.CommitIndex
	})
	d = describe(logInfo(mustLog(t, lead, info.ID)), info.Members, h.r, lead.catalog.State())
	if newest := newestConfigEntry(t, h); d.ConfigIndex < newest || d.ConfigIndex <= d.CommitIndex {
		t.Fatalf("described with ConfigIndex %d, CommitIndex %d; the newest configuration entry is at %d, not committed", d.ConfigIndex, d.CommitIndex, newest)
	}
}

// errCh returns a channel closed once f has completed.
func errCh(f raft.Future) <-chan struct{} {
	done := make(chan struct{})
	go func() { f.Error(); close(done) }()
	return done
}

// mustLog returns log id from n's catalog.
func mustLog(t *testing.T, n *Node, id uint64) catalog.Log {
	t.Helper()
	l, ok := n.catalog.State().LogByID(id)
	if !ok {
		t.Fatalf("log %d not in %s's catalog", id, n.ID())
	}
	return l
}

// newestConfigEntry returns the index of the newest configuration entry
// in h's raft log (0: none, the configuration came from a snapshot).
func newestConfigEntry(t *testing.T, h *hostedLog) uint64 {
	t.Helper()
	v := h.r.View()
	first, err := v.Live.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := v.Live.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	for i := last; i >= first && i > 0; i-- {
		var l raft.Log
		if err := v.Live.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if l.Type == raft.LogConfiguration {
			return i
		}
	}
	return 0
}

// A log's leader cut off from its followers leads on, unaware, until its
// lease runs out. It must not describe the log meanwhile as its leader:
// the replica planner acts on the configuration a description shows
// committed, and this one's may be stale. Asked at once, over the client
// port (which the cut leaves open), it answers NotLeader, and the planner's
// describeAnywhere on it does not return its own description.
func TestCutOffLeaderDoesNotDescribe(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.FaultInjection = true })
	c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	info, err := cl.CreateLog(ctx, "x", client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	appendLog(t, ctx, cl.Log("x"), "x", 5)
	lead := waitLogLeader(t, c, info.Name, info.ID)
	l, _ := lead.catalog.State().LogByID(info.ID)
	heal := c.partitionFrom(lead)
	defer heal()
	// Both at once, while it still believes it leads.
	var (
		wg                sync.WaitGroup
		direct, anywhere  *transport.DescribeLogResponse
		directErr, anyErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		direct, directErr = lead.describeLog(ctx, &transport.DescribeLogRequest{Name: "x"})
	}()
	go func() {
		defer wg.Done()
		anywhere, anyErr = lead.describeAnywhere(ctx, l)
	}()
	wg.Wait()
	if directErr == nil {
		t.Errorf("%s, cut off, described log x as its leader: leader %s, members %+v", lead.ID(), direct.Log.LeaderID, direct.Members)
	}
	if anyErr == nil && anywhere.Log.LeaderID == lead.ID() {
		t.Errorf("%s, cut off, planned from its own description of log x: members %+v", lead.ID(), anywhere.Members)
	}
}
