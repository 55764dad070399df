package node

import (
	"context"
	"errors"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/transport"
)

// Metrics. Each node has its own Prometheus registry, served at /metrics
// on the admin address:
//
//	raftlog_requests_total{op,code}            client requests the handler answered, by op and result ("ok" or an error code)
//	raftlog_request_duration_seconds{op}       histogram of request latency (a Tail: its whole life)
//	raftlog_client_connections                 open client connections
//	raftlog_client_connections_total           client connections accepted
//	raftlog_client_connections_refused_total   connections refused at MaxConns
//	raftlog_append_batch_records               histogram of records the leader proposed to raft together (replica.Proposer)
//	raftlog_store_fsync_duration_seconds       histogram of commit-log fdatasync latency
//	raftlog_store_entries_per_fsync            histogram of records made durable by one fdatasync
//	raftlog_store_flush_lag_bytes              histogram of bytes waiting for each sync
//	raftlog_store_appended_bytes_total         bytes appended to the commit log
//	raftlog_store_appends_total                records appended to the commit log
//	raftlog_store_fsyncs_total                 fdatasyncs of the commit log
//	raftlog_store_segments_created_total, raftlog_store_segments_removed_total
//	raftlog_store_segments                     segment files now
//	raftlog_store_bytes                        bytes of the retained commit log
//	raftlog_store_pinned_bytes{group}          bytes of the log a raftstore group keeps
//	raftlog_store_free_bytes                   free bytes of the data dir's file system (space.go)
//	raftlog_store_below_reserve                1 while the free bytes are below the reserve (--min-free)
//	raftlog_store_failed                       1 once the store has failed (a write or fsync error latched): the node stops
//	raftlog_store_errors_total{kind}           failed log and stable-store writes: no_space or io
//	raftlog_appends_refusing                   1 while this node leads and refuses appends for want of space
//	raftlog_appends_refused_total{reason}      appends refused by the leader: no_space, session_expired or
//	                                           out_of_order (sent to follow one not stored)
//	raftlog_requests_refused_total{op,reason}  requests refused, by op ("none" when the frame names no known
//	                                           op, or for a connection) and reason: malformed, too_large,
//	                                           busy, unsupported (transport.RefusalObserver), permission (authz.go)
//	raftlog_peer_connections_refused_total{reason}  raft connections refused: not_a_node (in the TLS handshake),
//	                                           other_cluster (its hello named another cluster, hello.go)
//	raftlog_leader_gone_elections_total{after} elections this node called because the leader's raft port refused
//	                                           connections (leadergone.go), after lost_connection (a raft
//	                                           connection with it ended) or missed_heartbeats
//	raftlog_raft_term, raftlog_raft_last_index, raftlog_raft_commit_index,
//	raftlog_raft_applied_index, raftlog_raft_first_index, raftlog_raft_leader (1 when leading):
//	                                           the default log's
//	raftlog_logs_held                          logs whose replica runs here, the default log included
//	raftlog_log_first_index{log}, raftlog_log_last_index{log}, raftlog_log_commit_index{log},
//	raftlog_log_applied_index{log}, raftlog_log_bytes{log}, raftlog_log_leader{log}:
//	                                           each log held here, by name (logstatus.go)
//
// plus hashicorp/raft's own metrics (raftlog_raft_*, for example
// raftlog_raft_commitNumLogs), bridged from go-metrics, which is process-wide:
// nodes in one process share them. The per-peer ones carry the peer in a
// label, peer_id (for example
// raftlog_raft_replication_appendEntries_rpc{peer_id="n2"}): the node
// starts raft with NoLegacyTelemetry, which drops raft's copies with the
// peer id in the metric name. Go runtime and process metrics are included.
//
// The counters an operator alerts on (store errors, refusals) are exported
// as 0 from the start, so that an increase() over their first event is not
// lost to a series that did not exist yet.
type nodeMetrics struct {
	reg *prometheus.Registry

	requests   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	conns      prometheus.Gauge
	connsTotal prometheus.Counter
	refused    prometheus.Counter
	batch      prometheus.Histogram

	fsync      prometheus.Histogram
	perSync    prometheus.Histogram
	flushLag   prometheus.Histogram
	appended   prometheus.Counter
	appends    prometheus.Counter
	syncs      prometheus.Counter
	segCreated prometheus.Counter
	segRemoved prometheus.Counter

	storeErrors    *prometheus.CounterVec // by kind: no_space, io
	refusedAppends *prometheus.CounterVec // by reason: refusedSpace, refusedSession, refusedOrder

	refusedRequests *prometheus.CounterVec // by op and reason: refusedMalformed, refusedTooLarge, refusedBusy, refusedUnsupported, refusedPermission
	refusedPeers    *prometheus.CounterVec // by reason: refusedNotANode, refusedOtherCluster, refusedJoining

	leaderGoneElections *prometheus.CounterVec // by what led to the dial: goneAfterLost, goneAfterSilence
	leaderGoneEarly     prometheus.Counter     // of those, called before the node's turn (refusedvote.go)
	transfers           *prometheus.CounterVec // leaderships handed to preferred leaders, by result: transferHanded, transferFailed
}

var (
	bridgeOnce sync.Once
	bridge     *gmprom.PrometheusSink
	bridgeErr  error
)

// raftBridge returns the process-wide go-metrics sink that carries raft's
// (and raftstore's) go-metrics to Prometheus.
func raftBridge() (*gmprom.PrometheusSink, error) {
	bridgeOnce.Do(func() {
		bridge, bridgeErr = gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{
			Name:       "raftlog_gometrics_bridge",
			Registerer: prometheus.NewRegistry(), // registered per node below
			Expiration: time.Minute,
		})
		if bridgeErr != nil {
			return
		}
		// No service name, type prefix or filter in go-metrics: each of
		// those builds a new key (or joins it into a string) on every
		// call, before a filter can drop it; raftSink drops and prefixes
		// instead.
		conf := gometrics.DefaultConfig("")
		conf.EnableHostname = false
		conf.EnableHostnameLabel = false
		conf.EnableRuntimeMetrics = false
		conf.EnableServiceLabel = false
		_, bridgeErr = gometrics.NewGlobal(conf, raftSink{bridge})
	})
	return bridge, bridgeErr
}

// raftSink is the go-metrics sink raft and raftstore report to. It drops
// the two metrics raft updates once per entry, so once per record here: a
// counter per Apply (raft.apply) and a summary, a quantile stream, per
// committed entry (raft.commitTime). Through the bridge they took about
// 12% of a leader's CPU under load (pprof, 1 client with 64 appends in
// flight); raftlog_append_batch_records and raft's commitNumLogs tell the
// same per batch. It passes the rest to the Prometheus bridge under the
// service's prefix, "raftlog". It allocates nothing for what it drops.
type raftSink struct{ next *gmprom.PrometheusSink }

// perEntry reports whether key is one of raft's per-entry metrics.
func perEntry(key []string) bool {
	return len(key) == 2 && key[0] == "raft" && (key[1] == "apply" || key[1] == "commitTime")
}

// prefixed returns key under the service's prefix.
func prefixed(key []string) []string {
	return append(append(make([]string, 0, len(key)+1), "raftlog"), key...)
}

func (s raftSink) SetGauge(key []string, val float32) { s.next.SetGauge(prefixed(key), val) }
func (s raftSink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.next.SetGaugeWithLabels(prefixed(key), val, labels)
}
func (s raftSink) EmitKey(key []string, val float32) { s.next.EmitKey(prefixed(key), val) }
func (s raftSink) IncrCounter(key []string, val float32) {
	if !perEntry(key) {
		s.next.IncrCounter(prefixed(key), val)
	}
}
func (s raftSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	if !perEntry(key) {
		s.next.IncrCounterWithLabels(prefixed(key), val, labels)
	}
}
func (s raftSink) AddSample(key []string, val float32) {
	if !perEntry(key) {
		s.next.AddSample(prefixed(key), val)
	}
}
func (s raftSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	if !perEntry(key) {
		s.next.AddSampleWithLabels(prefixed(key), val, labels)
	}
}

func newNodeMetrics() *nodeMetrics {
	m := &nodeMetrics{reg: prometheus.NewRegistry()}
	f := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		m.reg.MustRegister(c)
		return c
	}
	h := func(name, help string, buckets []float64) prometheus.Histogram {
		x := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
		m.reg.MustRegister(x)
		return x
	}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftlog_requests_total", Help: "Client requests served, by op and result code.",
	}, []string{"op", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "raftlog_request_duration_seconds", Help: "Latency of client requests, by op.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18),
	}, []string{"op"})
	m.conns = prometheus.NewGauge(prometheus.GaugeOpts{Name: "raftlog_client_connections", Help: "Open client connections."})
	m.storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftlog_store_errors_total", Help: "Failed writes of the raft log and stable store, by kind (no_space, io).",
	}, []string{"kind"})
	m.refusedAppends = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftlog_appends_refused_total", Help: "Appends the leader refused, by reason (no_space, session_expired, out_of_order).",
	}, []string{"reason"})
	m.refusedRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftlog_requests_refused_total", Help: "Client requests refused, by op (none: no known op, or a connection) and reason (malformed, too_large, busy, unsupported, permission).",
	}, []string{"op", "reason"})
	m.refusedPeers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftlog_peer_connections_refused_total", Help: "Raft connections refused, by reason: not_a_node (in the TLS handshake, a certificate not of a node), other_cluster (a node of another cluster), joining (before a joining node learnt its cluster's id from its join target).",
	}, []string{"reason"})
	m.leaderGoneElections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftlog_leader_gone_elections_total", Help: "Elections called because the leader's raft port refused connections, by what led to the dial (lost_connection, missed_heartbeats).",
	}, []string{"after"})
	m.leaderGoneEarly = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "raftlog_leader_gone_early_elections_total", Help: "Of the elections counted by raftlog_leader_gone_elections_total, those called before this node's turn because it refused its vote to a candidate whose log is behind its own, which cannot win without it.",
	})
	m.transfers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftlog_leader_transfers_total", Help: "Transfers of a named log's leadership to its preferred leader this node started as the log's leader, by result (handed, failed). raft refuses appends while one runs.",
	}, []string{"result"})
	// Exported as 0 from the start.
	for _, result := range []string{transferHanded, transferFailed} {
		m.transfers.WithLabelValues(result)
	}
	m.refusedPeers.WithLabelValues(refusedNotANode)
	m.refusedPeers.WithLabelValues(refusedOtherCluster)
	m.refusedPeers.WithLabelValues(refusedJoining)
	for _, after := range []string{goneAfterLost, goneAfterSilence} {
		m.leaderGoneElections.WithLabelValues(after)
	}
	for _, kind := range []string{storeErrNoSpace, storeErrIO} {
		m.storeErrors.WithLabelValues(kind)
	}
	for _, reason := range []string{refusedSpace, refusedSession, refusedOrder} {
		m.refusedAppends.WithLabelValues(reason)
	}
	for op := transport.Op(0); op == 0 || op.Valid(); op++ {
		for _, reason := range []string{refusedMalformed, refusedTooLarge, refusedBusy, refusedUnsupported, refusedPermission} {
			m.refusedRequests.WithLabelValues(opLabel(op), reason)
		}
	}
	m.reg.MustRegister(m.requests, m.latency, m.conns, m.storeErrors, m.refusedAppends, m.refusedRequests, m.refusedPeers, m.leaderGoneElections, m.leaderGoneEarly, m.transfers,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.connsTotal = f("raftlog_client_connections_total", "Client connections accepted.")
	m.refused = f("raftlog_client_connections_refused_total", "Client connections refused because MaxConns were open.")
	m.batch = h("raftlog_append_batch_records", "Records the leader proposed to raft together.", prometheus.ExponentialBuckets(1, 2, 10))
	m.fsync = h("raftlog_store_fsync_duration_seconds", "Latency of commit-log fdatasync calls.", prometheus.ExponentialBuckets(25e-6, 2, 16))
	m.perSync = h("raftlog_store_entries_per_fsync", "Records made durable by one fdatasync.", prometheus.ExponentialBuckets(1, 2, 14))
	m.flushLag = h("raftlog_store_flush_lag_bytes", "Bytes waiting for each fdatasync.", prometheus.ExponentialBuckets(512, 4, 12))
	m.appended = f("raftlog_store_appended_bytes_total", "Bytes appended to the commit log.")
	m.appends = f("raftlog_store_appends_total", "Records appended to the commit log.")
	m.syncs = f("raftlog_store_fsyncs_total", "fdatasync calls on the commit log.")
	m.segCreated = f("raftlog_store_segments_created_total", "Commit-log segment files created.")
	m.segRemoved = f("raftlog_store_segments_removed_total", "Commit-log segment files removed.")
	return m
}

// IncCounter implements commitlog.Metrics.
func (m *nodeMetrics) IncCounter(name string, delta uint64) {
	var c prometheus.Counter
	switch name {
	case commitlog.MetricAppends:
		c = m.appends
	case commitlog.MetricAppendBytes:
		c = m.appended
	case commitlog.MetricSyncs:
		c = m.syncs
	case commitlog.MetricSegmentsCreated:
		c = m.segCreated
	case commitlog.MetricSegmentsRemoved:
		c = m.segRemoved
	default:
		return
	}
	c.Add(float64(delta))
}

// Observe implements commitlog.Metrics.
func (m *nodeMetrics) Observe(name string, v float64) {
	switch name {
	case commitlog.MetricSyncSeconds:
		m.fsync.Observe(v)
	case commitlog.MetricRecordsPerSync:
		m.perSync.Observe(v)
	case commitlog.MetricFlushLagBytes:
		m.flushLag.Observe(v)
	}
}

// registerNode adds the gauges read from a running node and the raft
// bridge.
func (m *nodeMetrics) registerNode(n *Node) error {
	g := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	g("raftlog_store_segments", "Commit-log segment files.", func() float64 { return float64(n.db.Stats().Segments) })
	g("raftlog_store_bytes", "Bytes of the retained commit log.", func() float64 { return float64(n.db.Stats().Bytes) })
	g("raftlog_store_free_bytes", "Free bytes of the data dir's file system.", func() float64 { return float64(n.space.report().free) })
	g("raftlog_store_below_reserve", "1 while the data dir's free bytes are below the reserve.", func() float64 {
		if n.space.isBelow() {
			return 1
		}
		return 0
	})
	g("raftlog_store_failed", "1 once the store has failed (a write or fsync error latched); the node stops.", func() float64 {
		if n.db.Err() != nil {
			return 1
		}
		return 0
	})
	g("raftlog_appends_refusing", "1 while this node leads and refuses appends for want of space.", func() float64 {
		if n.refusingAppends() != "" {
			return 1
		}
		return 0
	})
	g("raftlog_raft_cache_bytes", "Bytes of recent raft entries the node's logs keep in memory, together (at most 16 MiB, and 1,024 entries per log).", func() float64 { return float64(n.cache.Held()) })
	g("raftlog_raft_term", "Current raft term.", func() float64 { return float64(n.raft.CurrentTerm()) })
	g("raftlog_raft_last_index", "Last index in the raft log.", func() float64 { return float64(n.raft.LastIndex()) })
	g("raftlog_raft_commit_index", "Highest index known committed.", func() float64 { return float64(n.raft.CommitIndex()) })
	g("raftlog_raft_applied_index", "Highest index applied to the state machine.", func() float64 { return float64(n.fsm.Applied.Load()) })
	g("raftlog_raft_first_index", "First retained index.", func() float64 { return float64(n.fsm.ReadView().Floor) })
	g("raftlog_raft_leader", "1 when this node leads.", func() float64 {
		if n.raft.State() == raft.Leader {
			return 1
		}
		return 0
	})
	m.reg.MustRegister(pinnedCollector{n}, logsCollector{n})
	b, err := raftBridge()
	if err != nil {
		return err
	}
	if err := m.reg.Register(b); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return err
	}
	return nil
}

// pinnedCollector reports raftlog_store_pinned_bytes per group.
type pinnedCollector struct{ n *Node }

var pinnedDesc = prometheus.NewDesc("raftlog_store_pinned_bytes",
	"Bytes of the commit log a raftstore group keeps from deletion.", []string{"group"}, nil)

func (c pinnedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- pinnedDesc }

func (c pinnedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.n.groupStores() {
		ch <- prometheus.MustNewConstMetric(pinnedDesc, prometheus.GaugeValue, float64(s.PinnedBytes()), groupLabel(s.Group()))
	}
}

// Kinds of raftlog_store_errors_total.
const (
	storeErrNoSpace = "no_space"
	storeErrIO      = "io"
)

// Reasons of raftlog_requests_refused_total besides refusedPermission
// (authz.go).
const (
	// refusedMalformed: a frame or body that does not decode, breaks the
	// protocol or fails validation (BadRequest).
	refusedMalformed = "malformed"
	// refusedTooLarge: a frame or record over a limit (TooLarge).
	refusedTooLarge = "too_large"
	// refusedBusy: a request beyond a connection's in-flight limits, or a
	// connection beyond MaxConns (Busy).
	refusedBusy = "busy"
	// refusedUnsupported: an unknown op or protocol version, a client
	// newer than the node (UnknownOp, UnsupportedVersion).
	refusedUnsupported = "unsupported"
)

// opNone is the op label of a refusal that names no known op: a frame
// read no further than its version, an unknown op, a connection.
const opNone = "none"

// opLabel is op's label: its name, or opNone for an op this node does not
// know, so that clients cannot mint label values.
func opLabel(op transport.Op) string {
	if !op.Valid() {
		return opNone
	}
	return op.String()
}

// refusedReason is the reason label of a refusal with code c, "" for a
// code that is no refusal.
func refusedReason(c transport.Code) string {
	switch c {
	case transport.CodeBadRequest:
		return refusedMalformed
	case transport.CodeTooLarge:
		return refusedTooLarge
	case transport.CodeBusy:
		return refusedBusy
	case transport.CodeUnknownOp, transport.CodeUnsupportedVersion:
		return refusedUnsupported
	case transport.CodePermissionDenied:
		return refusedPermission
	}
	return ""
}

// refuseConn counts a client connection refused at MaxConns.
func (m *nodeMetrics) refuseConn() {
	m.refused.Inc()
	m.refusedRequests.WithLabelValues(opNone, refusedBusy).Inc()
}

// metricsHandler wraps a transport.Handler, counting and timing requests.
type metricsHandler struct {
	h transport.Handler
	m *nodeMetrics
}

// CopiesAppendRecords implements transport.AppendCopier for the handler
// it wraps.
func (mh metricsHandler) CopiesAppendRecords() bool {
	c, ok := mh.h.(transport.AppendCopier)
	return ok && c.CopiesAppendRecords()
}

func (mh metricsHandler) Handle(ctx context.Context, op transport.Op, req any) (any, error) {
	start := time.Now()
	resp, err := mh.h.Handle(ctx, op, req)
	mh.observe(op, start, err)
	return resp, err
}

func (mh metricsHandler) Stream(ctx context.Context, op transport.Op, req any, s *transport.ServerStream) error {
	start := time.Now()
	err := mh.h.Stream(ctx, op, req, s)
	mh.observe(op, start, err)
	return err
}

// Refused implements transport.RefusalObserver: it counts the requests
// transport.Serve refuses without calling the handler.
func (mh metricsHandler) Refused(op transport.Op, e *transport.Error) {
	if reason := refusedReason(e.Code); reason != "" {
		mh.m.refusedRequests.WithLabelValues(opLabel(op), reason).Inc()
	}
}

func (mh metricsHandler) observe(op transport.Op, start time.Time, err error) {
	name := op.String()
	mh.m.latency.WithLabelValues(name).Observe(time.Since(start).Seconds())
	code := "ok"
	if err != nil {
		code = "Internal"
		if c := transport.ErrorCode(err); c != 0 {
			code = c.String()
		} else if errors.Is(err, context.Canceled) {
			code = transport.CodeCanceled.String()
		} else if errors.Is(err, context.DeadlineExceeded) {
			code = transport.CodeTimeout.String()
		}
	}
	mh.m.requests.WithLabelValues(name, code).Inc()
}
