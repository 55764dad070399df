package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// TestLogsRemoveNode runs a 5-node cluster serving three named logs of
// three replicas beside the default log, with clients appending to and
// reading every log, and removes a node that holds replicas with `node
// remove` (the CLI, run again as an operator would when the leader that
// served it died) while the load runs; while its
// replicas move, it SIGKILLs the leader of a log being moved, and starts
// it again. The removal must finish; afterwards every log has its full
// replica count, all voters of its raft group, on nodes still in the
// cluster (by its leader's description and by every node's /status), and
// each log's history passes every check of a run (no acknowledged record
// lost, linearizable).
//
// A log of five replicas is left out: on five nodes it has no node to
// move to, so the removal would be refused (FailedPrecondition: add a node first).
func TestLogsRemoveNode(t *testing.T) {
	skipShort(t)
	const seed = 67
	c := newCluster(t, clusterConfig{nodes: 5})
	defer c.keepLogsIfFailed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.createLogs(ctx, 3, logReplicas); err != nil {
		t.Fatal(err)
	}
	lead, err := c.leader(ctx, healthyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	// The victim: the node other than the default log's leader that holds
	// the most replicas of named logs.
	var victim *member
	held := map[*member][]string{}
	for _, l := range c.logs {
		for _, m := range l.members {
			held[m] = append(held[m], l.name)
		}
	}
	for _, m := range c.members {
		if m != lead && (victim == nil || len(held[m]) > len(held[victim])) {
			victim = m
		}
	}
	if len(held[victim]) == 0 {
		t.Fatalf("no node but the leader %s holds a named log: %v", lead.id, held)
	}

	rec := newRecorder()
	w, named := startLightWorkloads(ctx, t, c, rec, seed)
	// Let every log take appends before the removal.
	if err := poll(ctx, 30*time.Second, func() (bool, error) {
		h := rec.snapshot()
		for _, name := range append([]string{""}, logNames(c.logs)...) {
			if !ackedAfter(h.forLog(name), 0) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("not every log took an append: %v", err)
	}

	t.Logf("%s: node remove --id %s (holding %v)", fmtNanos(rec.now()), victim.id, held[victim])
	type result struct {
		out string
		err error
	}
	removed := make(chan result, 1)
	go func() {
		out, err := c.removeNode(ctx, victim.id)
		removed <- result{out, err}
	}()

	// Once a replica of the victim is moving, SIGKILL the leader of a log
	// being moved (not the victim), and start it again once the log has
	// another leader.
	moving := c.waitMoving(ctx, t, victim.id)
	ll, err := c.logLeaderAmong(ctx, moving, c.members, healthyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if ll == victim {
		// It hands leadership over before it leaves: kill the leader of
		// another of its logs, or of any log.
		for _, name := range logNames(c.logs) {
			if m, err := c.logLeaderAmong(ctx, name, c.members, healthyTimeout); err == nil && m != victim {
				moving, ll = name, m
				break
			}
		}
	}
	if ll == victim {
		t.Fatalf("%s leads every log", victim.id)
	}
	leads, _, _ := ll.leads()
	t.Logf("%s: SIGKILL %s, leader of %s (leading %v)", fmtNanos(rec.now()), ll.id, moving, leads)
	if err := ll.kill(); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, healthyTimeout, func() (bool, error) {
		m, err := c.logLeaderAmong(ctx, moving, c.members, pollInterval)
		return err == nil && m != ll, nil
	}); err != nil {
		t.Fatalf("log %s: no new leader after its leader's SIGKILL: %v\n%s", moving, err, c.describeLogState(moving))
	}
	if err := ll.restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: restarted %s", fmtNanos(rec.now()), ll.id)

	var res result
	select {
	case res = <-removed:
	case <-ctx.Done():
		t.Fatalf("node remove --id %s did not end: %v", victim.id, ctx.Err())
	}
	if res.err != nil || res.out != "" && !strings.HasPrefix(res.out, "removed "+victim.id) {
		t.Fatalf("node remove --id %s: %v\n%s", victim.id, res.err, res.out)
	}
	t.Logf("%s: %s", fmtNanos(rec.now()), strings.TrimSpace(res.out))
	victim.removed.Store(true)
	if err := poll(ctx, 30*time.Second, func() (bool, error) {
		st, err := victim.status()
		return err == nil && st.Role == "Removed", nil
	}); err != nil {
		t.Fatalf("%s never reported itself removed: %v", victim.id, err)
	}
	c.retire(ctx, t, victim)
	verify(t, verification{c: c, rec: rec, w: w, named: named, seed: seed, faults: map[faultKind]int{faultKillLogLeader: 1},
		what:   fmt.Sprintf("remove %s, holding %v, under load; SIGKILL %s, leader of %s, during the moves", victim.id, held[victim], ll.id, moving),
		replay: "go test -run TestLogsRemoveNode -v ./cluster-test/", checkTimeout: time.Minute})
}

// cli runs the node binary's client command args against every member
// (--addrs) and returns its stdout, or an error with its stderr.
func (c *cluster) cli(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bin, append(args, "--addrs", strings.Join(c.clientAddrs(), ","))...)
	cmd.Env = childEnv()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("node %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// movingLog returns the name of a named log that node id holds and that
// is moving a replica, as its leader describes it: a member joins or
// leaves; "" when none is.
func (c *cluster) movingLog(ctx context.Context, id string) string {
	cl, err := client.Dial(ctx, c.clientAddrs(), &client.Options{RequestTimeout: time.Second, RetryTimeout: 2 * time.Second})
	if err != nil {
		return ""
	}
	defer cl.Close()
	for _, l := range c.logs {
		d, err := cl.DescribeLog(ctx, l.name)
		if err != nil || !slices.ContainsFunc(d.Members, func(m transport.LogMember) bool { return m.NodeID == id }) {
			continue
		}
		for _, m := range d.Members {
			if m.Role != transport.RoleLeader && m.Role != transport.RoleFollower {
				return l.name // Pending or Nonvoter: joining; Leaving
			}
		}
	}
	return ""
}

// waitMoving waits until a replica of node id is moving and returns its
// log's name.
func (c *cluster) waitMoving(ctx context.Context, t *testing.T, id string) string {
	t.Helper()
	var moving string
	if err := poll(ctx, 30*time.Second, func() (bool, error) {
		moving = c.movingLog(ctx, id)
		return moving != "", nil
	}); err != nil {
		t.Fatalf("no replica of %s began to move: %v", id, err)
	}
	return moving
}

// retire stops removed node victim's process, waits until every named
// log has its full replica count on the nodes left, and reads the logs'
// members again.
func (c *cluster) retire(ctx context.Context, t *testing.T, victim *member) {
	t.Helper()
	if err := victim.stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.waitFullReplicas(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.refreshLogs(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitFullReplicas waits until every named log of the cluster (the
// catalog's, by ListLogs) has its replica count of members, all voters of
// its raft group (Leader or Follower), all nodes of the cluster that the
// test has not removed, and until every such node runs exactly the named
// logs the catalog places on it.
func (c *cluster) waitFullReplicas(ctx context.Context, timeout time.Duration) error {
	cl, err := client.Dial(ctx, c.clientAddrs(), &client.Options{RequestTimeout: 2 * time.Second, RetryTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cl.Close()
	in := map[string]bool{}
	for _, m := range c.logMembers("") {
		in[m.id] = true
	}
	var why string
	err = poll(ctx, timeout, func() (bool, error) {
		logs, err := cl.ListLogs(ctx)
		if err != nil {
			why = err.Error()
			return false, nil
		}
		want := map[string][]string{} // node -> logs placed on it
		for _, l := range logs {
			if l.Name == transport.DefaultLog {
				continue
			}
			if l.State != transport.LogActive {
				why = fmt.Sprintf("log %s is %s", l.Name, l.State)
				return false, nil
			}
			d, err := cl.DescribeLog(ctx, l.Name)
			if err != nil {
				why = fmt.Sprintf("log %s: %v", l.Name, err)
				return false, nil
			}
			if len(d.Members) != int(d.Log.Replicas) || len(d.Log.Members) != int(d.Log.Replicas) {
				why = fmt.Sprintf("log %s: members %v, raft members %v, want %d", l.Name, d.Log.Members, d.Members, d.Log.Replicas)
				return false, nil
			}
			for _, m := range d.Members {
				if m.Role != transport.RoleLeader && m.Role != transport.RoleFollower || !in[m.NodeID] {
					why = fmt.Sprintf("log %s: member %s is %s (in the cluster: %v)", l.Name, m.NodeID, m.Role, in[m.NodeID])
					return false, nil
				}
				want[m.NodeID] = append(want[m.NodeID], l.Name)
			}
		}
		for _, m := range c.logMembers("") {
			runs, err := m.namedLogs()
			if err != nil {
				why = err.Error()
				return false, nil
			}
			slices.Sort(want[m.id])
			if !slices.Equal(runs, want[m.id]) {
				why = fmt.Sprintf("%s runs %v, the catalog places %v on it", m.id, runs, want[m.id])
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the named logs did not all get their full replica count on the cluster's nodes within %v (%s): %w", timeout, why, err)
	}
	return nil
}

// namedLogs returns the named logs m's /status lists, sorted.
func (m *member) namedLogs() ([]string, error) {
	body, err := m.admin(http.MethodGet, "/status")
	if err != nil {
		return nil, err
	}
	var st struct {
		Logs []struct {
			Name string `json:"name"`
		} `json:"logs"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("%s: /status: %w", m.id, err)
	}
	var out []string
	for _, l := range st.Logs {
		if l.Name != transport.DefaultLog {
			out = append(out, l.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// refreshLogs sets the members of each of c.logs to those the catalog
// has it on now (after moves). The member that answers ListLogs may be
// behind (it restarted a moment ago and replays its catalog): it asks
// again until the catalog holds every log of c.logs, for healthyTimeout.
// Call it only while no nemesis runs.
func (c *cluster) refreshLogs(ctx context.Context) error {
	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	var logs []transport.LogInfo
	var missing error
	if err := poll(ctx, healthyTimeout, func() (bool, error) {
		logs, missing = cl.ListLogs(ctx)
		if missing != nil {
			return false, nil
		}
		for _, l := range c.logs {
			if !slices.ContainsFunc(logs, func(x transport.LogInfo) bool { return x.Name == l.name }) {
				missing = fmt.Errorf("log %s is not in the catalog", l.name)
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("%v within %v: %w", missing, healthyTimeout, err)
	}
	var errs []error
	for i, l := range c.logs {
		j := slices.IndexFunc(logs, func(x transport.LogInfo) bool { return x.Name == l.name })
		var ms []*member
		for _, id := range logs[j].Members {
			m := c.member(id)
			if m == nil {
				errs = append(errs, fmt.Errorf("log %s placed on %q, no member of the cluster", l.name, id))
				continue
			}
			ms = append(ms, m)
		}
		c.logs[i].members = ms
	}
	return errors.Join(errs...)
}

// describeLogState says, for a failure's report, how each member that is
// up sees the log name, with the end of its node log.
func (c *cluster) describeLogState(name string) string {
	var b strings.Builder
	for _, m := range c.members {
		if !m.isUp() {
			fmt.Fprintf(&b, "%s: down\n", m.id)
			continue
		}
		st, err := m.logStatus(name)
		fmt.Fprintf(&b, "%s: %+v %v; log ends:\n%s\n", m.id, st, err, m.logTail(3000))
	}
	return b.String()
}
