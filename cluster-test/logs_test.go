package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// logReplicas is the replication of the named logs a run creates.
const logReplicas = 3

// logKinds are the nemeses of TestLogs: the kills and the pause of a
// leader, which in a run with named logs strike a node leading some logs
// and not others, a random kill, and a partition.
var logKinds = []faultKind{faultKillLeader, faultKillRandom, faultPartition, faultPauseLeader, faultKillLogLeader}

// dataLossLogKinds are the nemeses of TestLogs/5-nodes-data-loss: the
// three that lose a node's data dir, and kills.
var dataLossLogKinds = []faultKind{faultWipe, faultWipeBootstrap, faultDisk, faultKillLogLeader, faultKillRandom}

// TestLogs runs two clusters at once, each serving three named logs of
// three replicas (log-1, log-2, log-3) beside the default log, each log
// with a workload of its own that trims too, one fault at a time or a
// second one while the first holds. Every operation names its log; each
// log's history is checked on its own, as a single log's is (durability,
// agreement, reads, tail, linearizability against a model of that log
// alone), and no record may appear in a log it was not appended to.
//
//   - 3-nodes: 3 nodes under logKinds. Leaders spread over the nodes, so
//     the run fails unless some SIGKILL hit a node that led some of its
//     logs and not others.
//   - 5-nodes-data-loss: 5 nodes under dataLossLogKinds. A node whose data
//     dir is lost rejoins as a new member and gets its replicas of the
//     named logs back, rebuilt (README, "Named logs"): each fault lasts
//     until every one of them votes again and holds what was committed
//     (cluster.waitRebuilt), and the run fails unless some replica was
//     rebuilt so.
//
// RAFTLOG_SEED sets both runs' seed.
func TestLogs(t *testing.T) {
	skipShort(t)
	nodeBinary(t) // once, before the runs start in parallel
	const duration = 20 * time.Second
	seed, replay := uint64(0), false
	if s, ok := envSeed(t); ok {
		seed, replay = s, true
	}
	base := func(name string, defaultSeed uint64, nodes int, kinds []faultKind) runConfig {
		rc := runConfig{
			seed:     defaultSeed,
			nodes:    nodes,
			kinds:    kinds,
			overlap:  0.3,
			duration: duration,
			quiet:    2 * time.Second,
			hold:     [2]time.Duration{time.Second, 2 * time.Second},
			gap:      300 * time.Millisecond,
			workload: workloadConfig{
				duration:       duration,
				retryAppenders: 2,
				onceAppenders:  1,
				batchAppenders: 1,
				readers:        1,
				staleReaders:   1,
				tail:           true,
				opsPerWorker:   150,
				think:          duration / 150,
				trimEvery:      time.Second,
			},
			checkTimeout: time.Minute,
			logs:         3,
		}
		if replay {
			rc.seed = seed
		}
		rc.replay = fmt.Sprintf("RAFTLOG_SEED=%d go test -run '^TestLogs$/^%s$' -v ./cluster-test/", rc.seed, name)
		return rc
	}
	t.Run("3-nodes", func(t *testing.T) {
		t.Parallel()
		rc := base("3-nodes", 61, 3, logKinds)
		rc.wantPartialLeaderKill = true
		runCluster(t, rc)
	})
	t.Run("5-nodes-data-loss", func(t *testing.T) {
		t.Parallel()
		rc := base("5-nodes-data-loss", 62, 5, dataLossLogKinds)
		rc.wantRebuild = true
		runCluster(t, rc)
	})
}

// namedLog is a named log a run created: its name and the members the
// catalog placed it on.
type namedLog struct {
	name    string
	members []*member
}

// logNames returns the names of the named logs.
func logNames(logs []namedLog) []string {
	var out []string
	for _, l := range logs {
		out = append(out, l.name)
	}
	return out
}

// createLogs creates n named logs, log-1 to log-n, with replicas
// replicas each, records them in c.logs and waits until each has a
// leader that its members follow. It must run before the workload and
// the nemesis start: c.logs is read-only from then on (but refreshLogs).
func (c *cluster) createLogs(ctx context.Context, n, replicas int) error {
	if err := c.addLogs(ctx, n, replicas); err != nil {
		return err
	}
	for _, l := range c.logs {
		if _, err := c.waitLogHealthy(ctx, l.name, healthyTimeout); err != nil {
			return err
		}
	}
	return nil
}

// addLogs creates n named logs, log-1 to log-n, with replicas replicas
// each, and records them in c.logs, as createLogs does, but does not wait
// for them to have a leader.
func (c *cluster) addLogs(ctx context.Context, n, replicas int) error {
	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("log-%d", i)
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		info, err := cl.CreateLog(cctx, name, client.CreateLogOptions{Replicas: replicas})
		cancel()
		if err != nil {
			return fmt.Errorf("creating log %s: %w", name, err)
		}
		l := namedLog{name: name}
		for _, id := range info.Members {
			m := c.member(id)
			if m == nil {
				return fmt.Errorf("log %s placed on %q, no member of the cluster", name, id)
			}
			l.members = append(l.members, m)
		}
		if len(l.members) != replicas {
			return fmt.Errorf("log %s placed on %v, want %d members", name, info.Members, replicas)
		}
		c.logs = append(c.logs, l)
	}
	return nil
}

// member returns the member with id id, nil when none has it.
func (c *cluster) member(id string) *member {
	for _, m := range c.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

// logMembers returns the members that hold the log name: every member
// the test has not removed for the default log ("").
func (c *cluster) logMembers(name string) []*member {
	if name == "" {
		var ms []*member
		for _, m := range c.members {
			if !m.removed.Load() && !m.late.Load() {
				ms = append(ms, m)
			}
		}
		return ms
	}
	for _, l := range c.logs {
		if l.name == name {
			return l.members
		}
	}
	return nil
}

// logStatus returns m's status of the log name, from the "logs" of its
// /status; the node's own status (m.status) for the default log ("").
// Its ID is m's id.
func (m *member) logStatus(name string) (nodeStatus, error) {
	if name == "" {
		return m.status()
	}
	body, err := m.admin(http.MethodGet, "/status")
	if err != nil {
		return nodeStatus{}, err
	}
	var st struct {
		Logs []struct {
			Name         string `json:"name"`
			Role         string `json:"role"`
			Voting       bool   `json:"voting"`
			LeaderID     string `json:"leader_id"`
			Term         uint64 `json:"term"`
			FirstIndex   uint64 `json:"first_index"`
			LastIndex    uint64 `json:"last_index"`
			CommitIndex  uint64 `json:"commit_index"`
			AppliedIndex uint64 `json:"applied_index"`
		} `json:"logs"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return nodeStatus{}, fmt.Errorf("%s: /status: %w", m.id, err)
	}
	for _, l := range st.Logs {
		if l.Name == name {
			return nodeStatus{ID: m.id, Role: l.Role, Voting: l.Voting, LeaderID: l.LeaderID, Term: l.Term, LastIndex: l.LastIndex,
				CommitIndex: l.CommitIndex, AppliedIndex: l.AppliedIndex, FirstIndex: l.FirstIndex}, nil
		}
	}
	return nodeStatus{}, fmt.Errorf("%s does not hold log %s (yet)", m.id, name)
}

// waitRebuilt waits until m, which came back without its data dir, has
// its replica of every named log it is a member of back, and returns how
// many: m runs the log's replica again (it can only have started it empty,
// to be rebuilt, since its data dir went), the log's leader has a
// committed configuration in which m votes, m's replica votes (its node
// opens the vote gate once the rebuild is finished) and it has applied
// what the leader had committed by then.
func (c *cluster) waitRebuilt(ctx context.Context, m *member, timeout time.Duration) (int, error) {
	var names []string
	for _, l := range c.logs {
		if slices.Contains(l.members, m) {
			names = append(names, l.name)
		}
	}
	if len(names) == 0 {
		return 0, nil
	}
	deadline := time.Now().Add(timeout)
	cl, err := client.Dial(ctx, c.clientAddrs(), &client.Options{RetryTimeout: 5 * time.Second})
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	for _, name := range names {
		var why string
		var commit uint64
		err := poll(ctx, time.Until(deadline), func() (bool, error) {
			st, err := m.logStatus(name)
			if err != nil {
				why = err.Error()
				return false, nil
			}
			if !st.Voting {
				why = fmt.Sprintf("%s's replica (%s) does not vote yet", m.id, st.Role)
				return false, nil
			}
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			d, err := cl.Log(name).Describe(dctx)
			cancel()
			if err != nil {
				why = "describing the log: " + err.Error()
				return false, nil
			}
			var ok bool
			ok, why = committedVoter(d, m.id)
			commit = d.CommitIndex
			return ok, nil
		})
		if err != nil {
			return 0, fmt.Errorf("%s's replica of log %s not rebuilt within %v (%s): %w", m.id, name, timeout, why, err)
		}
		if err := c.waitLogApplied(ctx, name, commit, max(time.Until(deadline), pollInterval), m); err != nil {
			return 0, fmt.Errorf("%s's rebuilt replica: %w", m.id, err)
		}
	}
	return len(names), nil
}

// committedVoter reports whether d, a log leader's description, shows
// node id a voter in a committed configuration, and if not, why.
func committedVoter(d *transport.DescribeLogResponse, id string) (bool, string) {
	if d.ConfigIndex == 0 || d.ConfigIndex > d.CommitIndex {
		return false, fmt.Sprintf("the leader's configuration (index %d) is not committed (commit index %d)", d.ConfigIndex, d.CommitIndex)
	}
	for _, dm := range d.Members {
		if dm.NodeID == id {
			return dm.Role == transport.RoleFollower || dm.Role == transport.RoleLeader, fmt.Sprintf("%s is a %s of the log", id, dm.Role)
		}
	}
	return false, fmt.Sprintf("%s is not a member of the log", id)
}

// leads returns the logs, the default one included (as
// transport.DefaultLog), that m leads and those it holds but does not
// lead, by its /status.
func (m *member) leads() (leads, follows []string, err error) {
	body, err := m.admin(http.MethodGet, "/status")
	if err != nil {
		return nil, nil, err
	}
	var st struct {
		Logs []struct {
			Name string `json:"name"`
			Role string `json:"role"`
		} `json:"logs"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, nil, fmt.Errorf("%s: /status: %w", m.id, err)
	}
	for _, l := range st.Logs {
		if l.Role == "Leader" {
			leads = append(leads, l.Name)
		} else {
			follows = append(follows, l.Name)
		}
	}
	return leads, follows, nil
}

// describeLeads describes which logs m leads, for a fault's detail, when
// the run has named logs; "" otherwise. partial reports whether m leads
// some of the logs it holds and not others.
func (c *cluster) describeLeads(m *member) (detail string, partial bool) {
	if len(c.logs) == 0 {
		return "", false
	}
	leads, follows, err := m.leads()
	if err != nil {
		return fmt.Sprintf(" (its logs unknown: %v)", err), false
	}
	return fmt.Sprintf(" (leading [%s], following [%s])", strings.Join(leads, " "), strings.Join(follows, " ")),
		len(leads) > 0 && len(follows) > 0
}

// logLeader waits until a member of the log name that is up reports
// itself its leader, and returns it.
func (c *cluster) logLeader(ctx context.Context, name string, timeout time.Duration) (*member, error) {
	return c.logLeaderAmong(ctx, name, c.logMembers(name), timeout)
}

// logLeaderAmong is logLeader asking the members ms: all of them, when
// the log's replicas move.
func (c *cluster) logLeaderAmong(ctx context.Context, name string, ms []*member, timeout time.Duration) (*member, error) {
	var l *member
	err := poll(ctx, timeout, func() (bool, error) {
		var best *member
		var bestTerm uint64
		for _, m := range ms {
			if !m.isUp() {
				continue
			}
			st, err := m.logStatus(name)
			if err == nil && st.Role == "Leader" && st.Term >= bestTerm {
				best, bestTerm = m, st.Term
			}
		}
		l = best
		return l != nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no leader of log %s: %w", logLabel(name), err)
	}
	return l, nil
}

// waitLogHealthy waits until every member of the log name runs unpaused,
// one of them leads the log and every member reports that leader and the
// same term, and returns the leader's status of the log.
func (c *cluster) waitLogHealthy(ctx context.Context, name string, timeout time.Duration) (nodeStatus, error) {
	var lead nodeStatus
	var why string
	ms := c.logMembers(name)
	err := poll(ctx, timeout, func() (bool, error) {
		why = ""
		sts := make([]nodeStatus, len(ms))
		for i, m := range ms {
			if !m.isUp() {
				return false, fmt.Errorf("%s is not running", m.id)
			}
			st, err := m.logStatus(name)
			if err != nil {
				why = err.Error()
				return false, nil
			}
			sts[i] = st
		}
		leaders := 0
		for _, st := range sts {
			if st.Role == "Leader" {
				leaders++
				lead = st
			}
		}
		if leaders != 1 {
			why = fmt.Sprintf("%d leaders", leaders)
			return false, nil
		}
		for _, st := range sts {
			if st.LeaderID != lead.ID || st.Term != lead.Term {
				why = fmt.Sprintf("%s follows %q in term %d; %s leads in term %d", st.ID, st.LeaderID, st.Term, lead.ID, lead.Term)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		what := "cluster"
		if name != "" {
			what = "log " + name
		}
		return lead, fmt.Errorf("%s not healthy within %v (%s): %w", what, timeout, why, err)
	}
	return lead, nil
}

// waitLogApplied waits until every member of the log name (or those of
// only) has applied index of it.
func (c *cluster) waitLogApplied(ctx context.Context, name string, index uint64, timeout time.Duration, only ...*member) error {
	ms := c.logMembers(name)
	if len(only) > 0 {
		ms = only
	}
	var why string
	err := poll(ctx, timeout, func() (bool, error) {
		for _, m := range ms {
			st, err := m.logStatus(name)
			if err != nil {
				why = err.Error()
				return false, nil
			}
			if st.AppliedIndex < index {
				why = fmt.Sprintf("%s applied %d", m.id, st.AppliedIndex)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("log %s: index %d not applied within %v (%s): %w", logLabel(name), index, timeout, why, err)
	}
	return nil
}

// logLabel names a log for messages: transport.DefaultLog for "".
func logLabel(name string) string {
	if name == "" {
		return transport.DefaultLog
	}
	return name
}

// TestCheckPerLog checks that a history of several logs is checked log by
// log: each log's appends, reads and tail against that log's final logs
// alone, so that a record of one log found in another is a violation, and
// two logs may hold the same indexes.
func TestCheckPerLog(t *testing.T) {
	inLog := func(name string, op *operation) *operation { op.Log = name; return op }
	h := history{
		Ops: []*operation{
			inLog("", appendOp(0, 0, 1, "d", 3)),
			inLog("a", appendOp(0, 0, 1, "a/x", 3)),
			inLog("b", appendOp(0, 0, 1, "b/x", 3)),
			inLog("a", &operation{Lane: 1, Kind: kindRead, Call: 2, Return: 3, OK: true, From: 0, Max: 10, Next: 4, Records: []entry{e(3, "a/x")}}),
		},
		Tail: []tailEvent{{Log: "b", At: 2, Record: &entry{3, "b/x"}}},
	}
	nodes := func(es ...entry) []nodeLog {
		return []nodeLog{{Node: "n1", Entries: es}, {Node: "n2", Entries: es}}
	}
	for _, tt := range []struct {
		log   string
		final []nodeLog
		want  string // a violation; "" for none
		ops   int    // operations of the log
	}{
		{"", nodes(e(3, "d")), "", 1},
		{"a", nodes(e(3, "a/x")), "", 2},
		{"b", nodes(e(3, "b/x")), "", 1},
		{"b", nodes(e(3, "a/x")), "record never appended", 1},
		{"a", nodes(e(3, "b/x")), "acknowledged append lost", 2},
	} {
		lh := h.forLog(tt.log)
		if len(lh.Ops) != tt.ops {
			t.Errorf("log %q: %d operations, want %d", tt.log, len(lh.Ops), tt.ops)
		}
		res := checkRun(lh, tt.final, 10*time.Second)
		all := strings.Join(res.violations, "\n")
		switch {
		case tt.want == "" && len(res.violations) > 0:
			t.Errorf("log %q, final %v: violations:\n%s", tt.log, tt.final[0].Entries, all)
		case tt.want != "" && !strings.Contains(all, tt.want):
			t.Errorf("log %q, final %v: want a violation %q, got:\n%s", tt.log, tt.final[0].Entries, tt.want, all)
		}
	}
}
