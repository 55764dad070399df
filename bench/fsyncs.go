package main

import (
	"sync/atomic"

	metrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/raft-wal/types"
)

// Counting fsyncs, for workload 7. raftstore reports its commit log's
// syncs through go-metrics, which syncSink receives; raft-wal takes a VFS
// and a meta store, which are wrapped; raft-boltdb (bbolt) calls fdatasync
// on its file itself and cannot be counted from inside the process.

// syncSink is a go-metrics sink that counts the syncs of raftstore's
// commit log (the counter raftstore reports as "raftstore", "syncs", under
// the default MetricsPrefix) and drops every other metric. It is lighter
// than an InmemSink, which takes a lock for each of the several metrics
// every StoreLogs reports, and so would add contention between the writers
// being measured; and its count is not split into time intervals.
type syncSink struct {
	syncs atomic.Uint64
}

var _ metrics.MetricSink = (*syncSink)(nil)

// count returns the syncs counted so far.
func (s *syncSink) count() uint64 { return s.syncs.Load() }

// IncrCounterWithLabels counts raftstore's syncs. The key may carry the
// service name in front (go-metrics' Config.ServiceName).
func (s *syncSink) IncrCounterWithLabels(key []string, val float32, _ []metrics.Label) {
	if n := len(key); n >= 2 && key[n-2] == "raftstore" && key[n-1] == "syncs" {
		s.syncs.Add(uint64(val))
	}
}

// IncrCounter counts raftstore's syncs.
func (s *syncSink) IncrCounter(key []string, val float32) { s.IncrCounterWithLabels(key, val, nil) }

// SetGauge drops the gauge.
func (*syncSink) SetGauge([]string, float32) {}

// SetGaugeWithLabels drops the gauge.
func (*syncSink) SetGaugeWithLabels([]string, float32, []metrics.Label) {}

// EmitKey drops the value.
func (*syncSink) EmitKey([]string, float32) {}

// AddSample drops the sample.
func (*syncSink) AddSample([]string, float32) {}

// AddSampleWithLabels drops the sample.
func (*syncSink) AddSampleWithLabels([]string, float32, []metrics.Label) {}

// raftstoreSyncs is the sink installSyncSink installs.
var raftstoreSyncs = &syncSink{}

// installSyncSink makes raftstoreSyncs go-metrics' global sink, which
// raftstore reports to, and returns a function that puts back a sink that
// drops everything. The bench's go-metrics is the module raftstore imports
// (github.com/hashicorp/go-metrics, pinned by go.mod's replace), so there is
// one global.
func installSyncSink() (restore func(), err error) {
	if _, err := metrics.NewGlobal(metricsConfig(), raftstoreSyncs); err != nil {
		return nil, err
	}
	return func() { metrics.NewGlobal(metricsConfig(), &metrics.BlackholeSink{}) }, nil
}

// metricsConfig is go-metrics' default configuration without the host
// name and without the runtime collector, whose ReadMemStats every second
// would stop the world in the middle of a case.
func metricsConfig() *metrics.Config {
	c := metrics.DefaultConfig("bench")
	c.HostName = ""
	c.EnableHostname = false
	c.EnableHostnameLabel = false
	c.EnableServiceLabel = false
	c.EnableRuntimeMetrics = false
	return c
}

// walFsyncs counts the fsyncs of raft-wal stores opened with
// openCountedWAL.
type walFsyncs struct {
	// syncs counts fsync(2) calls on segment files and, after the first
	// Sync of a new segment file, on its directory (raft-wal's fs.File
	// syncs the directory then).
	syncs atomic.Uint64
	// commits counts meta-store commits: one bbolt transaction each, which
	// bbolt makes durable with two fdatasyncs (the dirty pages, then the
	// meta page).
	commits atomic.Uint64
}

// total returns the fsyncs counted so far, a meta-store commit as two.
func (c *walFsyncs) total() uint64 { return c.syncs.Load() + 2*c.commits.Load() }

// countingVFS is raft-wal's VFS with the Syncs of its writable files
// counted.
type countingVFS struct {
	types.VFS
	c *walFsyncs
}

// Create creates a segment file whose Syncs are counted; its first Sync
// also syncs the directory.
func (v *countingVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return &countingFile{WritableFile: f, c: v.c, created: true}, nil
}

// OpenWriter opens a segment file whose Syncs are counted.
func (v *countingVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return &countingFile{WritableFile: f, c: v.c}, nil
}

// countingFile counts the fsyncs of a segment file.
type countingFile struct {
	types.WritableFile
	c       *walFsyncs
	created bool        // made by Create: the first Sync syncs the directory too
	synced  atomic.Bool // Sync has been called
}

// Sync syncs the file and counts it.
func (f *countingFile) Sync() error {
	err := f.WritableFile.Sync()
	n := uint64(1)
	if f.created && !f.synced.Swap(true) {
		n++
	}
	f.c.syncs.Add(n)
	return err
}

// countingMeta is raft-wal's meta store with its commits counted.
type countingMeta struct {
	types.MetaStore
	c *walFsyncs
}

// CommitState commits the state and counts the commit.
func (m *countingMeta) CommitState(s types.PersistentState) error {
	m.c.commits.Add(1)
	return m.MetaStore.CommitState(s)
}
