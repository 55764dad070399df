package node

// Per-log figures of the logs a node holds: /status's "logs" and the
// raftlog_log_* metrics, labelled by log name.

import (
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// logStatus is one log's replica on this node, as /status shows it.
type logStatus struct {
	Name string `json:"name"`
	ID   uint64 `json:"id"`
	Role string `json:"role"`
	// Voting says whether the replica votes in its log's elections: false
	// while a replica that lost its data (its node's data dir was wiped)
	// is being rebuilt, until its rebuild is finished (moves.go), and for
	// the default log on a new member until it is promoted (rejoin.go).
	Voting       bool   `json:"voting"`
	LeaderID     string `json:"leader_id,omitempty"`
	Term         uint64 `json:"term"`
	FirstIndex   uint64 `json:"first_index"`
	LastIndex    uint64 `json:"last_index"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Bytes        uint64 `json:"bytes"`
	// Error, with the role "Damaged", says why the log's replica cannot
	// start here (its data on this node is damaged: see 'node repair').
	Error string `json:"error,omitempty"`
}

// roleDamaged is the role /status shows for a log whose replica cannot
// start on the node because its data here is damaged.
const roleDamaged = "Damaged"

// namedReplica is a replica with its log's name and id, and the vote
// gate of its raft transport.
type namedReplica struct {
	name string
	id   uint64
	r    *replica.Replica
	gate *voteGate
}

// replicas returns the default log's replica and those of the named logs
// running here, by name.
func (n *Node) replicas() []namedReplica {
	out := []namedReplica{{transport.DefaultLog, 0, n.log, n.gate}}
	for _, h := range n.host.all() {
		out = append(out, namedReplica{h.name, h.id, h.r, h.gate})
	}
	slices.SortFunc(out, func(a, b namedReplica) int { return strings.Compare(a.name, b.name) })
	return out
}

// logStatuses describes every log's replica on this node, and every log
// whose replica cannot start here (role Damaged), by name.
func (n *Node) logStatuses() []logStatus {
	var out []logStatus
	for _, nr := range n.replicas() {
		rf := nr.r.Raft()
		_, leader := rf.LeaderWithID()
		st := logStatus{Name: nr.name, ID: nr.id, Role: rf.State().String(), Voting: nr.gate.allowed.Load() && !n.removed.Load(),
			LeaderID: string(leader), Term: rf.CurrentTerm(),
			LastIndex: rf.LastIndex(), CommitIndex: rf.CommitIndex(), AppliedIndex: nr.r.FSM().Applied.Load(), Bytes: nr.r.FSM().RecordBytes()}
		if floor := nr.r.FSM().ReadView().Floor; st.LastIndex >= floor {
			st.FirstIndex = floor
		}
		out = append(out, st)
	}
	for id, d := range n.host.allDamaged() {
		out = append(out, logStatus{Name: d.name, ID: id, Role: roleDamaged, Error: d.err.Error()})
	}
	slices.SortStableFunc(out, func(a, b logStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// logsCollector reports the raftlog_log_* metrics of every log held here.
type logsCollector struct{ n *Node }

var (
	logLabels      = []string{"log"}
	logFirstDesc   = prometheus.NewDesc("raftlog_log_first_index", "First retained index of a log held here.", logLabels, nil)
	logLastDesc    = prometheus.NewDesc("raftlog_log_last_index", "Last index of a log's raft log here.", logLabels, nil)
	logCommitDesc  = prometheus.NewDesc("raftlog_log_commit_index", "Highest index of a log known committed here.", logLabels, nil)
	logAppliedDesc = prometheus.NewDesc("raftlog_log_applied_index", "Highest index of a log applied here.", logLabels, nil)
	logBytesDesc   = prometheus.NewDesc("raftlog_log_bytes", "Bytes of a log's retained records, by its ledger.", logLabels, nil)
	logLeaderDesc  = prometheus.NewDesc("raftlog_log_leader", "1 when this node leads the log.", logLabels, nil)
	logsHeldDesc   = prometheus.NewDesc("raftlog_logs_held", "Logs whose replica runs on this node, the default log included.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c logsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{logFirstDesc, logLastDesc, logCommitDesc, logAppliedDesc, logBytesDesc, logLeaderDesc, logsHeldDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c logsCollector) Collect(ch chan<- prometheus.Metric) {
	reps := c.n.replicas()
	ch <- prometheus.MustNewConstMetric(logsHeldDesc, prometheus.GaugeValue, float64(len(reps)))
	for _, nr := range reps {
		rf, f := nr.r.Raft(), nr.r.FSM()
		leader := 0.0
		if rf.State() == raft.Leader {
			leader = 1
		}
		for _, m := range []struct {
			d *prometheus.Desc
			v float64
		}{
			{logFirstDesc, float64(f.ReadView().Floor)}, {logLastDesc, float64(rf.LastIndex())},
			{logCommitDesc, float64(rf.CommitIndex())}, {logAppliedDesc, float64(f.Applied.Load())},
			{logBytesDesc, float64(f.RecordBytes())}, {logLeaderDesc, leader},
		} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.GaugeValue, m.v, nr.name)
		}
	}
}

// groupStores returns the raftstore groups of every log held here.
func (n *Node) groupStores() []interface {
	Group() uint64
	PinnedBytes() int64
} {
	var out []interface {
		Group() uint64
		PinnedBytes() int64
	}
	for _, nr := range n.replicas() {
		v := nr.r.View()
		out = append(out, v.Live, v.Archives[0], v.Archives[1])
	}
	return out
}

// groupLabel is a raftstore group's label value.
func groupLabel(g uint64) string { return strconv.FormatUint(g, 10) }
