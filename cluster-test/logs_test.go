package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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

// TestLogs runs a 3-node cluster serving three named logs of three
// replicas (log-1, log-2, log-3) beside the default log, each with a
// workload of its own that trims too, under logKinds, one fault at a time
// or a second one while the first holds. Every operation names its log;
// each log's history is checked on its own, as a single log's is
// (durability, agreement, reads, tail, linearizability against a model of
// that log alone), and no record may appear in a log it was not appended
// to. Leaders spread over the nodes, so the run fails unless some SIGKILL
// hit a node that led some of its logs and not others.
//
// The nemeses that lose a node's data dir (disk-failure, wipe,
// wipe-bootstrap) are left out of every run with named logs: a replica of
// a named log whose data dir is gone bootstraps the log again instead of
// rejoining it as a new member (README, "Named logs", "Not yet"). The
// other nemeses run on named logs in the randomized runs that draw them
// (seededConfig: TestSoak and RAFTLOG_SEED).
func TestLogs(t *testing.T) {
	skipShort(t)
	const duration = 20 * time.Second
	rc := runConfig{
		seed:     61,
		nodes:    3,
		kinds:    logKinds,
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
		checkTimeout:          time.Minute,
		logs:                  3,
		wantPartialLeaderKill: true,
	}
	if s, ok := envSeed(t); ok {
		rc.seed = s
	}
	rc.replay = fmt.Sprintf("RAFTLOG_SEED=%d go test -run '^TestLogs$' -v ./cluster-test/", rc.seed)
	runCluster(t, rc)
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
	for _, l := range c.logs {
		if _, err := c.waitLogHealthy(ctx, l.name, healthyTimeout); err != nil {
			return err
		}
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
			if !m.removed.Load() {
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
			return nodeStatus{ID: m.id, Role: l.Role, LeaderID: l.LeaderID, Term: l.Term, LastIndex: l.LastIndex,
				CommitIndex: l.CommitIndex, AppliedIndex: l.AppliedIndex, FirstIndex: l.FirstIndex}, nil
		}
	}
	return nodeStatus{}, fmt.Errorf("%s does not hold log %s (yet)", m.id, name)
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
