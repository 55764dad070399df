package commitlog

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks of the commit log on the real file system. b.TempDir lives on
// the machine's disk, so these measure fdatasync and msync for real; run
// them with -benchtime and -count and compare runs with benchstat.
//
// Every benchmark reports records/s, and those that sync report syncs/op
// (fdatasync or msync rounds per record) and latency percentiles.

// latencies collects per-operation durations and reports percentiles.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	if len(l.d) == 0 {
		return
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	at := func(q float64) float64 { return float64(l.d[int(q*float64(len(l.d)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// countingMetrics counts syncs and appends.
type countingMetrics struct {
	syncs, appends atomic.Uint64
}

func (m *countingMetrics) IncCounter(name string, d uint64) {
	switch name {
	case MetricSyncs:
		m.syncs.Add(d)
	case MetricAppends:
		m.appends.Add(d)
	}
}
func (m *countingMetrics) Observe(string, float64) {}

func benchLog(b *testing.B, opts Options) (*Log, *countingMetrics) {
	b.Helper()
	m := &countingMetrics{}
	opts.Metrics = m
	l, err := Open(b.TempDir(), &opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l, m
}

// appendLoop calls AppendBatch(batch) b.N times from one goroutine and
// reports records/s, syncs/op and latency percentiles.
func appendLoop(b *testing.B, l *Log, m *countingMetrics, batch [][]byte) {
	b.Helper()
	var bytes int64
	for _, p := range batch {
		bytes += int64(len(p))
	}
	var lat latencies
	lat.d = make([]time.Duration, 0, b.N)
	b.SetBytes(bytes)
	b.ResetTimer()
	m.syncs.Store(0)
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if _, err := l.AppendBatch(batch); err != nil {
			b.Fatal(err)
		}
		lat.d = append(lat.d, time.Since(t))
	}
	b.StopTimer()
	reportRate(b, m, b.N*len(batch), start)
	lat.report(b)
}

// batchOf returns n records of size bytes.
func batchOf(n, size int) [][]byte {
	batch := make([][]byte, n)
	for i := range batch {
		batch[i] = make([]byte, size)
	}
	return batch
}

func reportRate(b *testing.B, m *countingMetrics, records int, start time.Time) {
	el := time.Since(start).Seconds()
	b.ReportMetric(float64(records)/el, "records/s")
	if m != nil && records > 0 {
		b.ReportMetric(float64(m.syncs.Load())/float64(records), "syncs/op")
	}
}

// BenchmarkAppend appends records one at a time from one goroutine, in both
// flush modes, both write paths and three record sizes.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range []struct {
		name  string
		flush FlushMode
	}{{"sync", SyncFlush}, {"async", AsyncFlushUnsafe}} {
		for _, wp := range []struct {
			name string
			path WritePath
		}{{"pwrite", WritePwrite}, {"mmap", WriteMmap}} {
			for _, size := range []int{128, 1024, 16384} {
				b.Run(fmt.Sprintf("%s/%s/%dB", mode.name, wp.name, size), func(b *testing.B) {
					l, m := benchLog(b, Options{Flush: mode.flush, WritePath: wp.path})
					appendLoop(b, l, m, batchOf(1, size))
				})
			}
		}
	}
}

// BenchmarkSyncAppendConcurrent runs 1 or 8 goroutines each appending 1 KiB
// records with SyncFlush: with group commit, 8 appenders share syncs, which
// syncs/op shows.
func BenchmarkSyncAppendConcurrent(b *testing.B) {
	for _, wp := range []struct {
		name string
		path WritePath
	}{{"pwrite", WritePwrite}, {"mmap", WriteMmap}} {
		for _, n := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/appenders=%d", wp.name, n), func(b *testing.B) {
				l, m := benchLog(b, Options{WritePath: wp.path})
				var lat latencies
				var next atomic.Int64
				var wg sync.WaitGroup
				b.SetBytes(1024)
				b.ResetTimer()
				m.syncs.Store(0)
				start := time.Now()
				for g := 0; g < n; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						p := make([]byte, 1024)
						for next.Add(1) <= int64(b.N) {
							t := time.Now()
							if _, err := l.Append(p); err != nil {
								b.Error(err)
								return
							}
							lat.add(time.Since(t))
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				reportRate(b, m, b.N, start)
				lat.report(b)
			})
		}
	}
}

// BenchmarkBaselineOverwriteFdatasync is the floor any synchronous append
// is measured against: overwrite 4 KiB in a preallocated file and
// fdatasync, without any log.
func BenchmarkBaselineOverwriteFdatasync(b *testing.B) {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "baseline"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const blocks = 256
	buf := make([]byte, 4096)
	for i := 0; i < blocks; i++ {
		if _, err := f.WriteAt(buf, int64(i)*4096); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	var lat latencies
	lat.d = make([]time.Duration, 0, b.N)
	b.SetBytes(4096)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if _, err := f.WriteAt(buf, int64(i%blocks)*4096); err != nil {
			b.Fatal(err)
		}
		if err := datasync(f); err != nil {
			b.Fatal(err)
		}
		lat.d = append(lat.d, time.Since(t))
	}
	b.StopTimer()
	reportRate(b, nil, b.N, start)
	lat.report(b)
}

// BenchmarkSegmentPreparation measures the effect of WarmSegments and
// LockActiveSegment: asynchronous 1 KiB appends through the mapping into
// small segments, so that every few thousand appends land in a fresh
// segment whose pages were (or were not) faulted in ahead of time.
func BenchmarkSegmentPreparation(b *testing.B) {
	for _, c := range []struct {
		name       string
		warm, lock bool
	}{{"plain", false, false}, {"warm", true, false}, {"warm+mlock", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			l, m := benchLog(b, Options{
				Flush: AsyncFlushUnsafe, WritePath: WriteMmap, SegmentSize: 4 << 20,
				WarmSegments: c.warm, LockActiveSegment: c.lock,
			})
			appendLoop(b, l, m, batchOf(1, 1024))
		})
	}
}

// BenchmarkRead reads 1 KiB records at random positions through the
// mapping.
func BenchmarkRead(b *testing.B) {
	l, _ := benchLog(b, Options{Flush: AsyncFlushUnsafe})
	const n = 100000
	payloads := make([][]byte, 64)
	for i := range payloads {
		payloads[i] = make([]byte, 1024)
	}
	var pos []int64
	for len(pos) < n {
		p, err := l.AppendBatch(payloads)
		if err != nil {
			b.Fatal(err)
		}
		pos = append(pos, p...)
	}
	b.SetBytes(1024)
	b.ResetTimer()
	x := uint64(88172645463325252)
	for i := 0; i < b.N; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if _, err := l.Read(pos[x%uint64(len(pos))]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendBatchPreallocation appends batches of 64 x 1 KiB with
// SyncFlush (what raft's StoreLogs does) over several segments, with new
// segments zero-filled or only reserved.
func BenchmarkAppendBatchPreallocation(b *testing.B) {
	for _, c := range []struct {
		name string
		p    Preallocation
	}{{"zeroes", PreallocateZeroes}, {"sparse", PreallocateSparse}} {
		b.Run(c.name, func(b *testing.B) {
			l, m := benchLog(b, Options{Preallocate: c.p, SegmentSize: 16 << 20})
			appendLoop(b, l, m, batchOf(64, 1024))
		})
	}
}

// BenchmarkSegmentSize compares segment sizes: asynchronous 16 KiB appends
// at disk speed (where preparing the next segment must keep up) and
// synchronous 64 x 1 KiB batches (where rollovers show in the tail).
func BenchmarkSegmentSize(b *testing.B) {
	for _, size := range []int64{4 << 20, 16 << 20, 64 << 20, 256 << 20} {
		for _, c := range []struct {
			name  string
			flush FlushMode
			batch int
			rec   int
		}{{"async-16KiB", AsyncFlushUnsafe, 1, 16 << 10}, {"sync-64x1KiB", SyncFlush, 64, 1 << 10}} {
			b.Run(fmt.Sprintf("%dMiB/%s", size>>20, c.name), func(b *testing.B) {
				l, m := benchLog(b, Options{SegmentSize: size, Flush: c.flush})
				appendLoop(b, l, m, batchOf(c.batch, c.rec))
			})
		}
	}
}

// BenchmarkAppendBatchSteadyState appends batches of 64 x 1 KiB with
// SyncFlush into 16 MiB segments, either only growing the log or removing
// its oldest segments as it grows (as raft's compaction does), which lets
// new segments reuse removed files.
func BenchmarkAppendBatchSteadyState(b *testing.B) {
	for _, compact := range []bool{false, true} {
		name := "growing"
		if compact {
			name = "compacted"
		}
		b.Run(name, func(b *testing.B) {
			l, m := benchLog(b, Options{SegmentSize: 16 << 20})
			batch := batchOf(64, 1024)
			if compact {
				// Warm up: fill and drop a few segments so the pool has files.
				for l.Segments()[0].Base < 4*(16<<20) {
					if _, err := l.AppendBatch(batch); err != nil {
						b.Fatal(err)
					}
					if segs := l.Segments(); len(segs) > 2 {
						l.DeleteBefore(segs[len(segs)-2].Base)
					}
				}
			}
			var lat latencies
			lat.d = make([]time.Duration, 0, b.N)
			b.SetBytes(64 * 1024)
			b.ResetTimer()
			m.syncs.Store(0)
			start := time.Now()
			for i := 0; i < b.N; i++ {
				t := time.Now()
				if _, err := l.AppendBatch(batch); err != nil {
					b.Fatal(err)
				}
				lat.d = append(lat.d, time.Since(t))
				if compact {
					if segs := l.Segments(); len(segs) > 2 {
						l.DeleteBefore(segs[len(segs)-2].Base)
					}
				}
			}
			b.StopTimer()
			reportRate(b, m, b.N*64, start)
			lat.report(b)
		})
	}
}
