package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// TestCatalogLeaderCrash SIGKILLs the default log's leader, which leads
// the catalog, at the moments where a catalog change is half done, on a
// 4-node cluster, and checks the end state from every node: its catalog
// (ListLogs asked of the node itself), the named logs its /status lists
// and the logs' directories in its data dir.
//
//   - create: right after a log create is acknowledged. The log must then
//     exist in every node's catalog and run on each of its members, take
//     appends, and hold every acknowledged record on every member.
//   - delete: as soon as the leader's catalog shows the log deleting,
//     while its delete is answered. The delete was committed then, so
//     afterwards the log is gone from every node's catalog and data dir,
//     whether or not the delete was acknowledged: a half-done delete is
//     finished by the next leader.
//   - move: while a node remove drains a node, once one of its replicas
//     is moving. The removal must finish (retried as an operator would)
//     and every log then has its full replica count on the nodes left.
func TestCatalogLeaderCrash(t *testing.T) {
	skipShort(t)
	c := newCluster(t, clusterConfig{nodes: 4})
	defer c.keepLogsIfFailed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := newRecorder()

	t.Run("create", func(t *testing.T) {
		const name = "crash-create"
		lead, err := c.leader(ctx, healthyTimeout)
		if err != nil {
			t.Fatal(err)
		}
		info, err := cl.CreateLog(ctx, name, client.CreateLogOptions{Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := lead.kill(); err != nil {
			t.Fatal(err)
		}
		t.Logf("created %s (id %d) on %v; SIGKILLed the leader %s", name, info.ID, info.Members, lead.id)
		g := cl.Log(name)
		for i := range 10 {
			actx, cancel := context.WithTimeout(ctx, opTimeout)
			_, err := appendRecordedLog(actx, g, rec, name, 0, fmt.Sprintf("%s/%d", name, i))
			cancel()
			if err != nil {
				t.Fatalf("append %d to %s after the leader's SIGKILL: %v", i, name, err)
			}
		}
		if err := lead.restart(); err != nil {
			t.Fatal(err)
		}
		if err := c.addLog(ctx, name); err != nil {
			t.Fatal(err)
		}
		if err := c.waitLogEverywhere(ctx, name, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, opTimeout)
		_, err = appendRecordedLog(actx, g, rec, name, 0, name+"/after")
		cancel()
		if err != nil {
			t.Fatalf("append to %s after the restart: %v", name, err)
		}
		c.checkLog(t, rec, name)
	})

	t.Run("delete", func(t *testing.T) {
		const name = "crash-delete"
		info, err := cl.CreateLog(ctx, name, client.CreateLogOptions{Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.addLog(ctx, name); err != nil {
			t.Fatal(err)
		}
		if _, err := c.waitLogHealthy(ctx, name, healthyTimeout); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Log(name).Append(ctx, []byte(name+"/1"), []byte(name+"/2")); err != nil {
			t.Fatal(err)
		}
		lead, err := c.leader(ctx, healthyTimeout)
		if err != nil {
			t.Fatal(err)
		}
		deleted := make(chan error, 1)
		go func() {
			dcl, err := client.Dial(ctx, c.clientAddrs(), &client.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 20 * time.Second})
			if err != nil {
				deleted <- err
				return
			}
			defer dcl.Close()
			_, err = dcl.DeleteLog(ctx, name)
			deleted <- err
		}()
		// Kill the leader the moment its catalog no longer has the log
		// active: between the catalog's two commands of a delete, if
		// the timing allows.
		seen, err := lead.awaitLogState(ctx, name, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := lead.kill(); err != nil {
			t.Fatal(err)
		}
		derr := <-deleted
		t.Logf("SIGKILLed the leader %s once its catalog had %s %s; the delete returned %v", lead.id, name, seen, derr)
		if err := lead.restart(); err != nil {
			t.Fatal(err)
		}
		gone, err := c.waitWholeOrGone(ctx, name, info.ID, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// The leader's catalog applies only what is committed: the delete
		// was, whatever its client heard, and a half-done one is finished
		// by the next leader.
		if !gone {
			t.Fatalf("the leader's catalog had %s %s before its SIGKILL, but the log is still there (the delete returned %v)", name, seen, derr)
		}
		c.dropLog(name)
	})

	t.Run("move", func(t *testing.T) {
		for _, name := range []string{"crash-move-1", "crash-move-2"} {
			if _, err := cl.CreateLog(ctx, name, client.CreateLogOptions{Replicas: 3}); err != nil {
				t.Fatal(err)
			}
			if err := c.addLog(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.waitHealthy(ctx, healthyTimeout); err != nil {
			t.Fatal(err)
		}
		lead, err := c.leader(ctx, healthyTimeout)
		if err != nil {
			t.Fatal(err)
		}
		var victim *member
		for _, l := range c.logs {
			for _, m := range l.members {
				if m != lead && victim == nil {
					victim = m
				}
			}
		}
		removed := make(chan error, 1)
		go func() {
			_, err := c.removeNode(ctx, victim.id)
			removed <- err
		}()
		moving := c.waitMoving(ctx, t, victim.id)
		lead, err = c.leader(ctx, healthyTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if lead == victim {
			t.Fatalf("the node being removed, %s, leads the cluster", victim.id)
		}
		if err := lead.kill(); err != nil {
			t.Fatal(err)
		}
		t.Logf("removing %s: SIGKILLed the leader %s while log %s moved", victim.id, lead.id, moving)
		if err := lead.restart(); err != nil {
			t.Fatal(err)
		}
		if err := <-removed; err != nil {
			t.Fatal(err)
		}
		victim.removed.Store(true)
		c.retire(ctx, t, victim)
		for _, l := range c.logs {
			if err := c.waitLogEverywhere(ctx, l.name, 30*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		c.checkLog(t, rec, "crash-create")
	})
	if p := append(c.takeProblems(), c.scanLogs()...); len(p) > 0 {
		t.Errorf("%s", strings.Join(p, "\n"))
	}
}

// removeNode removes node id with node remove (the CLI), as an operator
// does: it runs the command again (within two minutes) when its outcome
// is unknown (the leader that served it died) or the node is still being
// drained, and a run again that finds the node no longer a member finds
// it removed. It returns the output of the run that removed the node.
func (c *cluster) removeNode(ctx context.Context, id string) (string, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for again := false; ; again = true {
		out, err := c.cli(ctx, "remove", "--id", id, "--timeout", "30s")
		switch {
		case err == nil:
			return out, nil
		case again && strings.Contains(err.Error(), fmt.Sprintf("%q is not a member", id)):
			return out, nil
		case time.Now().After(deadline) || ctx.Err() != nil,
			!strings.Contains(err.Error(), "outcome unknown") && !strings.Contains(err.Error(), "is being drained"):
			return out, err
		}
	}
}

// addLog adds the log name to c.logs with the members the catalog has it
// on. Call it only while no nemesis runs.
func (c *cluster) addLog(ctx context.Context, name string) error {
	c.logs = append(c.logs, namedLog{name: name})
	return c.refreshLogs(ctx)
}

// dropLog removes the log name from c.logs. Call it only while no
// nemesis runs.
func (c *cluster) dropLog(name string) {
	c.logs = slices.DeleteFunc(c.logs, func(l namedLog) bool { return l.name == name })
}

// listLogs asks m itself for its catalog's logs (ListLogs), not following
// it anywhere.
func (m *member) listLogs(ctx context.Context) ([]transport.LogInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := transport.Dial(ctx, m.clientAddr, nil)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var resp transport.ListLogsResponse
	if err := conn.Call(ctx, transport.OpListLogs, &transport.ListLogsRequest{Local: true}, &resp); err != nil {
		return nil, fmt.Errorf("%s: list logs: %w", m.id, err)
	}
	return resp.Logs, nil
}

// logDir is the directory of log id in m's data dir (node.logDir).
func (m *member) logDir(id uint64) string {
	return filepath.Join(m.dataDir, "logs", strconv.FormatUint(id, 10))
}

// awaitLogState asks m's catalog, as fast as it answers, until the log
// name is no longer active there, and returns what it saw: "deleting" or
// "gone".
func (m *member) awaitLogState(ctx context.Context, name string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := transport.Dial(ctx, m.clientAddr, nil)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	for {
		var resp transport.ListLogsResponse
		if err := conn.Call(ctx, transport.OpListLogs, &transport.ListLogsRequest{Local: true}, &resp); err != nil {
			return "", fmt.Errorf("%s: list logs: %w", m.id, err)
		}
		i := slices.IndexFunc(resp.Logs, func(l transport.LogInfo) bool { return l.Name == name })
		switch {
		case i < 0:
			return "gone", nil
		case resp.Logs[i].State != transport.LogActive:
			return resp.Logs[i].State, nil
		}
	}
}

// logView is how the nodes of the cluster hold a log: per node, whether
// its catalog lists it active, deleting or not at all, whether its
// /status lists it running and whether its data dir holds its directory.
type logView struct {
	catalog map[string]string // node -> "active", "deleting" or "" (absent)
	members []string          // the catalog's members, by the first node that lists it
	runs    map[string]bool   // node -> its /status lists the log
	dir     map[string]bool   // node -> its data dir holds the log's directory
}

// viewLog reads how every member not removed holds the log name of id id.
func (c *cluster) viewLog(ctx context.Context, name string, id uint64) (logView, error) {
	v := logView{catalog: map[string]string{}, runs: map[string]bool{}, dir: map[string]bool{}}
	for _, m := range c.logMembers("") {
		logs, err := m.listLogs(ctx)
		if err != nil {
			return v, err
		}
		if i := slices.IndexFunc(logs, func(l transport.LogInfo) bool { return l.Name == name }); i >= 0 {
			v.catalog[m.id] = logs[i].State
			if v.members == nil {
				v.members = logs[i].Members
			}
		}
		runs, err := m.namedLogs()
		if err != nil {
			return v, err
		}
		v.runs[m.id] = slices.Contains(runs, name)
		_, err = os.Stat(m.logDir(id))
		v.dir[m.id] = err == nil
	}
	return v, nil
}

// whole reports whether v is a log present everywhere: active in every
// node's catalog, running with its directory on each of its members and
// on no other node.
func (v logView) whole() bool {
	for node, st := range v.catalog {
		on := slices.Contains(v.members, node)
		if st != transport.LogActive || v.runs[node] != on || v.dir[node] != on {
			return false
		}
	}
	return len(v.members) > 0 && len(v.catalog) == len(v.runs)
}

// gone reports whether v is a log gone everywhere: in no node's catalog,
// running nowhere, with no directory left.
func (v logView) gone() bool {
	for node := range v.runs {
		if v.catalog[node] != "" || v.runs[node] || v.dir[node] {
			return false
		}
	}
	return true
}

func (v logView) String() string {
	var parts []string
	for node := range v.runs {
		parts = append(parts, fmt.Sprintf("%s: catalog %q, running %v, dir %v", node, v.catalog[node], v.runs[node], v.dir[node]))
	}
	slices.Sort(parts)
	return fmt.Sprintf("members %v; %s", v.members, strings.Join(parts, "; "))
}

// waitWholeOrGone waits until the log name of id id is whole on every
// node or gone from every node, and reports which.
func (c *cluster) waitWholeOrGone(ctx context.Context, name string, id uint64, timeout time.Duration) (gone bool, err error) {
	var v logView
	var why error
	err = poll(ctx, timeout, func() (bool, error) {
		v, why = c.viewLog(ctx, name, id)
		return why == nil && (v.whole() || v.gone()), nil
	})
	if err != nil {
		return false, fmt.Errorf("log %s is neither whole nor gone after %v (%v; %v): %w", name, timeout, v, why, err)
	}
	return v.gone(), nil
}

// waitLogEverywhere waits until the log name is whole (logView.whole):
// in every node's catalog, running with its directory on its members.
func (c *cluster) waitLogEverywhere(ctx context.Context, name string, timeout time.Duration) error {
	var v logView
	var why error
	err := poll(ctx, timeout, func() (bool, error) {
		logs, err := c.logMembers("")[0].listLogs(ctx)
		if err != nil {
			why = err
			return false, nil
		}
		i := slices.IndexFunc(logs, func(l transport.LogInfo) bool { return l.Name == name })
		if i < 0 {
			why = errors.New("not in the catalog")
			return false, nil
		}
		v, why = c.viewLog(ctx, name, logs[i].ID)
		return why == nil && v.whole(), nil
	})
	if err != nil {
		return fmt.Errorf("log %s is not whole on every node after %v (%v; %v): %w", name, timeout, v, why, err)
	}
	return nil
}

// checkLog reads the log name from each of its members and checks the
// history rec holds of it: every acknowledged append there at its index,
// the same log on every member, and linearizable.
func (c *cluster) checkLog(t *testing.T, rec *recorder, name string) {
	t.Helper()
	logs, err := c.finalLogs(context.Background(), name)
	if err != nil {
		t.Fatalf("log %s: reading the final logs: %v", name, err)
	}
	h := rec.snapshot().forLog(name)
	res := checkRun(h, logs, time.Minute)
	if len(res.violations) > 0 {
		t.Fatalf("log %s: %s\n%s", name, describeOps(h), strings.Join(res.violations, "\n"))
	}
	t.Logf("log %s: %s; %d members agree", name, describeOps(h), len(logs))
}
