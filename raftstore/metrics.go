package raftstore

import (
	"strconv"
	"time"

	metrics "github.com/hashicorp/go-metrics"
	"github.com/raftlog/raftlog/commitlog"
)

// metricsSink reports to go-metrics, the library hashicorp/raft itself
// reports through, so a service that already exports raft's metrics gets
// these too. Keys are the prefix (default "raftstore") followed by:
//
//	store_logs          sample: StoreLogs latency, ms
//	entries_stored      counter: entries stored
//	bytes_stored        counter: encoded entry bytes stored
//	get_log             sample: GetLog latency, ms
//	appends, append_bytes, syncs, segments_created, segments_removed,
//	segments_released   counters from the commit log
//	sync_seconds        sample: fdatasync latency, ms (name kept from the log)
//	records_per_sync    sample: entries made durable by one fdatasync
//	flush_lag_bytes     sample: bytes waiting for each sync
//	pinned_bytes        gauge, label group: bytes of the log a group keeps
//	                    (Store.PinnedBytes), set at every checkpoint
type metricsSink struct {
	tee    commitlog.Metrics // Options.Metrics, or nil
	off    bool              // Options.NoGoMetrics
	prefix []string
	keys   map[string][]string // immutable after construction
}

var _ commitlog.Metrics = (*metricsSink)(nil)

func newMetricsSink(prefix []string) *metricsSink {
	m := &metricsSink{prefix: prefix, keys: map[string][]string{}}
	for _, name := range []string{
		"store_logs", "entries_stored", "pinned_bytes", "bytes_stored", "get_log", "segments_released",
		commitlog.MetricAppends, commitlog.MetricAppendBytes, commitlog.MetricSyncs,
		commitlog.MetricSyncSeconds, commitlog.MetricRecordsPerSync, commitlog.MetricFlushLagBytes,
		commitlog.MetricSegmentsCreated, commitlog.MetricSegmentsRemoved,
	} {
		m.keys[name] = append(append([]string(nil), prefix...), name)
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
	metrics.IncrCounter(m.key(name), float32(delta))
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
	metrics.AddSample(m.key(name), float32(v))
}

func (m *metricsSink) storeLogs(start time.Time, entries, bytes int) {
	if m.off {
		return
	}
	metrics.MeasureSince(m.keys["store_logs"], start)
	metrics.IncrCounter(m.keys["entries_stored"], float32(entries))
	metrics.IncrCounter(m.keys["bytes_stored"], float32(bytes))
}

func (m *metricsSink) getLog(start time.Time) {
	if m.off {
		return
	}
	metrics.MeasureSince(m.keys["get_log"], start)
}

func (m *metricsSink) pinned(group uint64, bytes int64) {
	if m.off {
		return
	}
	metrics.SetGaugeWithLabels(m.keys["pinned_bytes"], float32(bytes),
		[]metrics.Label{{Name: "group", Value: strconv.FormatUint(group, 10)}})
}
