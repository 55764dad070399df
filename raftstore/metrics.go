package raftstore

import (
	"strconv"
	"time"

	metrics "github.com/hashicorp/go-metrics"
	"github.com/raftlog/raftlog/commitlog"
)

// MetricType is how a metric is reported.
type MetricType string

// Metric types.
const (
	// Counter is a monotonic count: go-metrics IncrCounter, and
	// commitlog.Metrics.IncCounter for Options.Metrics.
	Counter MetricType = "counter"
	// Sample is one observation of a distribution: go-metrics AddSample
	// (a timer, MeasureSince, for latencies), and
	// commitlog.Metrics.Observe for Options.Metrics.
	Sample MetricType = "sample"
	// Gauge is a value set from time to time: go-metrics SetGauge.
	Gauge MetricType = "gauge"
)

// MetricInfo describes one metric a DB reports.
type MetricInfo struct {
	// Name is the metric's name: its go-metrics key is
	// Options.MetricsPrefix (default "raftstore") followed by Name, and
	// Options.Metrics receives it under Name.
	Name string
	// Type is how it is reported.
	Type MetricType
	// Unit is the unit of its values: "ms" and "s" are durations.
	Unit string
	// Labels are the go-metrics labels it carries.
	Labels []string
	// Help says what it measures.
	Help string
	// Collector is true for the metrics Options.Metrics receives too:
	// the commit log's, and segments_released. The others go to go-metrics
	// only.
	Collector bool
}

// Metrics lists every metric a DB reports, sorted by name, for a service
// that exports or documents them (a Prometheus bridge, dashboards,
// alerts). The slice is the caller's.
//
// Every metric goes to go-metrics (the library hashicorp/raft reports
// through, so a service that already exports raft's metrics gets these
// too) unless Options.NoGoMetrics is set; those marked Collector also go
// to Options.Metrics. sync_seconds is in seconds for Options.Metrics and
// in milliseconds for go-metrics, whose timers are in milliseconds.
func Metrics() []MetricInfo {
	return []MetricInfo{
		{Name: commitlog.MetricAppendBytes, Type: Counter, Unit: "bytes", Collector: true,
			Help: "bytes appended to the commit log, record headers included"},
		{Name: commitlog.MetricAppends, Type: Counter, Unit: "records", Collector: true,
			Help: "records appended to the commit log: entries and deletions of every group"},
		{Name: "bytes_stored", Type: Counter, Unit: "bytes",
			Help: "encoded entry bytes StoreLogs stored"},
		{Name: "entries_stored", Type: Counter, Unit: "entries",
			Help: "entries StoreLogs stored"},
		{Name: commitlog.MetricFlushLagBytes, Type: Sample, Unit: "bytes", Collector: true,
			Help: "bytes written but not yet durable when each sync started"},
		{Name: "get_log", Type: Sample, Unit: "ms",
			Help: "latency of a GetLog that found its entry"},
		{Name: "pinned_bytes", Type: Gauge, Unit: "bytes", Labels: []string{"group"},
			Help: "bytes of the shared commit log a group keeps on disk (Store.PinnedBytes), set at every checkpoint"},
		{Name: commitlog.MetricRecordsPerSync, Type: Sample, Unit: "records", Collector: true,
			Help: "records one sync made durable (group commit)"},
		{Name: commitlog.MetricSegmentsCreated, Type: Counter, Unit: "segments", Collector: true,
			Help: "commit-log segment files created"},
		{Name: "segments_released", Type: Counter, Unit: "segments", Collector: true,
			Help: "commit-log segments removed because every group compacted past them"},
		{Name: commitlog.MetricSegmentsRemoved, Type: Counter, Unit: "segments", Collector: true,
			Help: "commit-log segment files removed (released, retention, truncation)"},
		{Name: "store_logs", Type: Sample, Unit: "ms",
			Help: "latency of a StoreLogs call that stored its batch, the wait for durability included"},
		{Name: commitlog.MetricSyncSeconds, Type: Sample, Unit: "s", Collector: true,
			Help: "latency of one sync (fdatasync or msync) of the commit log; milliseconds in go-metrics"},
		{Name: commitlog.MetricSyncs, Type: Counter, Unit: "syncs", Collector: true,
			Help: "syncs of the commit log"},
	}
}

// goMetrics is what raftstore calls of go-metrics: its global functions
// (globalMetrics), or a *metrics.Metrics in tests.
type goMetrics interface {
	IncrCounter(key []string, val float32)
	AddSample(key []string, val float32)
	MeasureSince(key []string, start time.Time)
	SetGaugeWithLabels(key []string, val float32, labels []metrics.Label)
}

// globalMetrics reports through go-metrics' global functions.
type globalMetrics struct{}

func (globalMetrics) IncrCounter(k []string, v float32)        { metrics.IncrCounter(k, v) }
func (globalMetrics) AddSample(k []string, v float32)          { metrics.AddSample(k, v) }
func (globalMetrics) MeasureSince(k []string, start time.Time) { metrics.MeasureSince(k, start) }
func (globalMetrics) SetGaugeWithLabels(k []string, v float32, l []metrics.Label) {
	metrics.SetGaugeWithLabels(k, v, l)
}

// metricsSink reports to go-metrics and to Options.Metrics (see Metrics).
// Its fields are set before the DB opens its commit log and never change.
type metricsSink struct {
	tee    commitlog.Metrics // Options.Metrics, or nil
	off    bool              // Options.NoGoMetrics
	gm     goMetrics
	prefix []string
	keys   map[string][]string
}

var _ commitlog.Metrics = (*metricsSink)(nil)

func newMetricsSink(prefix []string) *metricsSink {
	m := &metricsSink{gm: globalMetrics{}, prefix: prefix, keys: map[string][]string{}}
	for _, mi := range Metrics() {
		m.keys[mi.Name] = append(append([]string(nil), prefix...), mi.Name)
	}
	return m
}

func (m *metricsSink) key(name string) []string {
	if k, ok := m.keys[name]; ok {
		return k
	}
	return append(append([]string(nil), m.prefix...), name)
}

// IncCounter implements commitlog.Metrics.
func (m *metricsSink) IncCounter(name string, delta uint64) {
	if m.tee != nil {
		m.tee.IncCounter(name, delta)
	}
	if m.off {
		return
	}
	m.gm.IncrCounter(m.key(name), float32(delta))
}

// Observe implements commitlog.Metrics.
func (m *metricsSink) Observe(name string, v float64) {
	if m.tee != nil {
		m.tee.Observe(name, v)
	}
	if m.off {
		return
	}
	if name == commitlog.MetricSyncSeconds {
		v *= 1000 // go-metrics timers are in milliseconds
	}
	m.gm.AddSample(m.key(name), float32(v))
}

func (m *metricsSink) storeLogs(start time.Time, entries, bytes int) {
	if m.off {
		return
	}
	m.gm.MeasureSince(m.keys["store_logs"], start)
	m.gm.IncrCounter(m.keys["entries_stored"], float32(entries))
	m.gm.IncrCounter(m.keys["bytes_stored"], float32(bytes))
}

func (m *metricsSink) getLog(start time.Time) {
	if m.off {
		return
	}
	m.gm.MeasureSince(m.keys["get_log"], start)
}

func (m *metricsSink) pinned(group uint64, bytes int64) {
	if m.off {
		return
	}
	m.gm.SetGaugeWithLabels(m.keys["pinned_bytes"], float32(bytes),
		[]metrics.Label{{Name: "group", Value: strconv.FormatUint(group, 10)}})
}
