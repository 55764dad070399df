package commitlog

// Metrics receives the log's measurements. Implementations must be safe for
// concurrent use and cheap: they are called on the append and sync paths.
// The raftstore package bridges them to go-metrics; a server can bridge them
// to Prometheus. Names are the Metric* constants.
type Metrics interface {
	// IncCounter adds delta to a monotonic counter.
	IncCounter(name string, delta uint64)
	// Observe records one sample of a distribution (a latency in seconds, a
	// count per sync, a lag in bytes).
	Observe(name string, value float64)
}

// Metric names.
const (
	// MetricAppends counts records appended.
	MetricAppends = "appends"
	// MetricAppendBytes counts bytes appended, headers included.
	MetricAppendBytes = "append_bytes"
	// MetricSyncs counts syncs (fdatasync or msync rounds) of the log.
	MetricSyncs = "syncs"
	// MetricSyncSeconds samples the latency of each sync in seconds.
	MetricSyncSeconds = "sync_seconds"
	// MetricRecordsPerSync samples how many records each sync made durable.
	MetricRecordsPerSync = "records_per_sync"
	// MetricFlushLagBytes samples, at each sync, how many written bytes
	// were not yet durable when it started.
	MetricFlushLagBytes = "flush_lag_bytes"
	// MetricSegmentsCreated counts segment files created.
	MetricSegmentsCreated = "segments_created"
	// MetricSegmentsRemoved counts segment files removed.
	MetricSegmentsRemoved = "segments_removed"
)

type noMetrics struct{}

func (noMetrics) IncCounter(string, uint64) {}
func (noMetrics) Observe(string, float64)   {}
