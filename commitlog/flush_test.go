package commitlog

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// Tests of group commit, the sync-flush timeout, asynchronous flushing,
// metrics and Close. They run on faultfs so that syncs can be counted and
// held open from the OnSync hook; nothing sleeps to synchronise, and every
// wait on another goroutine is bounded by flushTestWait.

// flushTestDir is the log directory inside a faultfs.FS.
const flushTestDir = "/log"

// flushTestSegPath is a faultfs.Fault Path that matches the segment files
// of flushTestDir and nothing else in it (checkpoint, abort, LOCK).
const flushTestSegPath = flushTestDir + "/0"

// flushTestWait bounds every wait for another goroutine; reaching it fails
// the test instead of hanging it.
const flushTestWait = 10 * time.Second

// flushTestPaths are the write paths most tests run on.
var flushTestPaths = []WritePath{WritePwrite, WriteMmap}

func flushTestPathName(wp WritePath) string {
	switch wp {
	case WritePwrite:
		return "pwrite"
	case WriteMmap:
		return "mmap"
	}
	return fmt.Sprintf("writepath%d", int(wp))
}

// flushTestProbe watches the data syncs of a faultfs.FS through its OnSync
// hook, which runs after every successful File.Sync and Mapping.Sync on the
// goroutine that synced, and can hold one of them open.
type flushTestProbe struct {
	t testing.TB
	// syncs counts data syncs seen since the probe was installed.
	syncs atomic.Int64
	// synced gets one signal per data sync; signals beyond its buffer are
	// dropped.
	synced chan struct{}
	// entered gets a signal when a held sync has started waiting on its
	// gate.
	entered chan struct{}
	// gate, when set, is taken by the next sync, which blocks until the
	// channel is closed.
	gate atomic.Pointer[chan struct{}]
}

func newFlushTestProbe(t testing.TB, fs *faultfs.FS) *flushTestProbe {
	p := &flushTestProbe{t: t, synced: make(chan struct{}, 1<<12), entered: make(chan struct{}, 16)}
	fs.OnSync(p.hook)
	return p
}

func (p *flushTestProbe) hook() {
	p.syncs.Add(1)
	select {
	case p.synced <- struct{}{}:
	default:
	}
	if g := p.gate.Swap(nil); g != nil {
		p.entered <- struct{}{}
		<-*g
	}
}

// hold makes the next data sync block, after it has succeeded, until the
// returned function is called. The test's cleanup calls it too, so that a
// failing test never leaves the flusher stuck; logs opened before hold is
// called are closed after that.
func (p *flushTestProbe) hold() (release func()) {
	g := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(g) }) }
	p.t.Cleanup(release)
	p.gate.Store(&g)
	return release
}

// waitHeld waits until a sync is blocked by hold.
func (p *flushTestProbe) waitHeld() {
	p.t.Helper()
	select {
	case <-p.entered:
	case <-time.After(flushTestWait):
		p.t.Fatal("no sync reached the held OnSync hook")
	}
}

// waitSync waits for the next data sync signal.
func (p *flushTestProbe) waitSync(what string) {
	p.t.Helper()
	select {
	case <-p.synced:
	case <-time.After(flushTestWait):
		p.t.Fatalf("no data sync %s within %v", what, flushTestWait)
	}
}

// flushTestOpen opens a log in flushTestDir on fs, closes it at cleanup and
// waits for its first background segment preparation, so that no sync of a
// segment being prepared mixes with the syncs a test observes. Checkpoints
// are periodic only every hour for the same reason.
func flushTestOpen(t testing.TB, fs *faultfs.FS, o Options) *Log {
	t.Helper()
	o.FS = fs
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = time.Hour
	}
	l, err := Open(flushTestDir, &o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	flushTestSettle(t, l)
	return l
}

// flushTestSettle waits until the segment being prepared in the background,
// if any, is ready.
func flushTestSettle(t testing.TB, l *Log) {
	t.Helper()
	l.mu.Lock()
	p := l.pending
	l.mu.Unlock()
	if p == nil {
		return
	}
	select {
	case <-p.done:
	case <-time.After(flushTestWait):
		t.Fatalf("segment at %d still being prepared after %v", p.base, flushTestWait)
	}
}

// flushTestWaitFor polls cond, yielding the processor between calls, until
// it holds. It observes state; it does not sleep.
func flushTestWaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(flushTestWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", flushTestWait, what)
		}
		runtime.Gosched()
	}
}

// flushTestWaiters returns how many appenders wait for the next group
// commit.
func flushTestWaiters(l *Log) int {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return len(l.waiters)
}

// flushTestRecv receives from ch or fails the test after flushTestWait.
func flushTestRecv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(flushTestWait):
		t.Fatalf("timed out after %v waiting for %s", flushTestWait, what)
		panic("unreachable")
	}
}

// flushTestRecord is a record a test appended.
type flushTestRecord struct {
	pos     int64
	payload []byte
}

// flushTestResult is the outcome of one concurrent Append.
type flushTestResult struct {
	flushTestRecord
	err error
}

// flushTestAppendAll starts n goroutines that each Append payload(i) and
// report on the returned channel; returned counts those that have.
func flushTestAppendAll(l *Log, n int, payload func(i int) []byte, returned *atomic.Int64) <-chan flushTestResult {
	ch := make(chan flushTestResult, n)
	for i := range n {
		go func() {
			p := payload(i)
			pos, err := l.Append(p)
			returned.Add(1)
			ch <- flushTestResult{flushTestRecord{pos, p}, err}
		}()
	}
	return ch
}

// flushTestAppend appends records one by one with Append and returns them.
func flushTestAppend(t testing.TB, l *Log, first, n, size int) []flushTestRecord {
	t.Helper()
	var out []flushTestRecord
	for i := first; i < first+n; i++ {
		p := payloadFor(i, size)
		pos, err := l.Append(p)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		out = append(out, flushTestRecord{pos, p})
	}
	return out
}

// flushTestAppendDurable appends one record and waits until it is durable,
// riding out ErrSyncTimeout for logs with a very short timeout: only an
// error other than a timeout fails the test.
func flushTestAppendDurable(t testing.TB, l *Log, p []byte) flushTestRecord {
	t.Helper()
	pos, end, err := l.Write([][]byte{p})
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	deadline := time.Now().Add(flushTestWait)
	for {
		err := l.WaitDurable(end)
		if err == nil {
			return flushTestRecord{pos[0], p}
		}
		if !errors.Is(err, ErrSyncTimeout) || time.Now().After(deadline) {
			t.Fatalf("wait durable %d: %v", end, err)
		}
	}
}

// flushTestVerify checks that every record of want reads back intact.
func flushTestVerify(t testing.TB, l *Log, want []flushTestRecord) {
	t.Helper()
	for i, w := range want {
		r, err := l.Read(w.pos)
		if err != nil {
			t.Fatalf("record %d of %d at %d: %v", i, len(want), w.pos, err)
		}
		if r.Position != w.pos || !bytes.Equal(r.Payload, w.payload) {
			t.Fatalf("record %d of %d at %d differs: got %d bytes at %d, want %d bytes", i, len(want), w.pos, len(r.Payload), r.Position, len(w.payload))
		}
	}
}

// flushTestVerifyExact checks that the log holds exactly want, in position
// order, and nothing else.
func flushTestVerifyExact(t testing.TB, l *Log, want []flushTestRecord) {
	t.Helper()
	want = append([]flushTestRecord(nil), want...)
	sort.Slice(want, func(i, j int) bool { return want[i].pos < want[j].pos })
	got := readAll(t, l, l.First())
	if len(got) != len(want) {
		t.Fatalf("log holds %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Position != want[i].pos || !bytes.Equal(got[i].Payload, want[i].payload) {
			t.Fatalf("record %d: got position %d (%d bytes), want %d (%d bytes)", i, got[i].Position, len(got[i].Payload), want[i].pos, len(want[i].payload))
		}
	}
}

// flushTestPayloads maps the payload of every record of l to its position.
func flushTestPayloads(t testing.TB, l *Log) map[string]int64 {
	t.Helper()
	m := make(map[string]int64)
	for _, r := range readAll(t, l, l.First()) {
		m[string(r.Payload)] = r.Position
	}
	return m
}

// TestFlushGroupCommit holds the flusher inside a sync while eight
// appenders register, then checks that one more sync completes all of them.
func TestFlushGroupCommit(t *testing.T) {
	for _, wp := range flushTestPaths {
		t.Run(flushTestPathName(wp), func(t *testing.T) {
			fs := faultfs.New(1)
			l := flushTestOpen(t, fs, Options{SegmentSize: 1 << 20, WritePath: wp})
			p := newFlushTestProbe(t, fs)
			recs := flushTestAppend(t, l, 0, 3, 100)

			release := p.hold()
			var heldReturned atomic.Int64
			held := flushTestAppendAll(l, 1, func(int) []byte { return payloadFor(100, 50) }, &heldReturned)
			p.waitHeld()
			before := p.syncs.Load() // counts the held sync

			const appenders = 8
			var returned atomic.Int64
			results := flushTestAppendAll(l, appenders, func(i int) []byte { return payloadFor(200+i, 10+i*100) }, &returned)
			flushTestWaitFor(t, "8 registered waiters", func() bool { return flushTestWaiters(l) == appenders })
			if n := returned.Load(); n != 0 {
				t.Fatalf("%d appends returned while their sync could not have run", n)
			}
			if heldReturned.Load() != 0 {
				t.Fatal("the append whose sync is held returned")
			}
			// The flusher reads nwaiters, without wmu, to decide whether
			// to wait for more appenders before it swaps; it must count
			// the registered waiters.
			if got := l.nwaiters.Load(); got != appenders {
				t.Errorf("nwaiters is %d with %d waiters registered", got, appenders)
			}
			release()

			h := flushTestRecv(t, held, "the append of the held sync")
			if h.err != nil {
				t.Fatalf("append of the held sync: %v", h.err)
			}
			recs = append(recs, h.flushTestRecord)
			for range appenders {
				r := flushTestRecv(t, results, "a grouped append")
				if r.err != nil {
					t.Fatalf("grouped append: %v", r.err)
				}
				recs = append(recs, r.flushTestRecord)
			}
			if d := p.syncs.Load() - before; d != 1 {
				t.Fatalf("%d appenders waiting together cost %d data syncs, want 1", appenders, d)
			}
			if l.Durable() != l.End() {
				t.Fatalf("durable %d, end %d after every append returned", l.Durable(), l.End())
			}
			flushTestVerifyExact(t, l, recs)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			flushTestVerifyExact(t, flushTestOpen(t, fs.CrashDropAll(), Options{SegmentSize: 1 << 20, WritePath: wp}), recs)
		})
	}
}

// TestFlushSyncTimeout holds a sync past SyncFlushTimeout: the appends
// waiting for it fail with ErrSyncTimeout, yet their records become durable
// once the sync completes and the log keeps working.
func TestFlushSyncTimeout(t *testing.T) {
	for _, wp := range flushTestPaths {
		t.Run(flushTestPathName(wp), func(t *testing.T) {
			const timeout = 50 * time.Millisecond
			fs := faultfs.New(2)
			opts := Options{SegmentSize: 1 << 20, WritePath: wp, SyncFlushTimeout: timeout}
			l := flushTestOpen(t, fs, opts)
			p := newFlushTestProbe(t, fs)
			recs := []flushTestRecord{flushTestAppendDurable(t, l, payloadFor(0, 300))}

			release := p.hold()
			a := payloadFor(1, 100)
			aErr := make(chan error, 1)
			go func() {
				_, err := l.Append(a)
				aErr <- err
			}()
			p.waitHeld()
			b := payloadFor(2, 200)
			if _, err := l.Append(b); !errors.Is(err, ErrSyncTimeout) {
				t.Fatalf("append while the sync is held: %v, want ErrSyncTimeout", err)
			}
			if err := flushTestRecv(t, aErr, "the append of the held sync"); !errors.Is(err, ErrSyncTimeout) {
				t.Fatalf("append of the held sync: %v, want ErrSyncTimeout", err)
			}
			c := payloadFor(3, 300)
			cpos, err := l.AppendBatch([][]byte{c})
			if !errors.Is(err, ErrSyncTimeout) {
				t.Fatalf("batch append while the sync is held: %v, want ErrSyncTimeout", err)
			}
			if len(cpos) != 1 {
				t.Fatalf("timed-out AppendBatch returned positions %v: the caller cannot find its record", cpos)
			}
			if err := l.Err(); err != nil {
				t.Fatalf("a timeout failed the log: %v", err)
			}
			end := l.End()
			if l.Durable() >= end {
				t.Fatalf("durable %d reached end %d while the sync was held", l.Durable(), end)
			}
			release()

			flushTestWaitFor(t, "the timed-out records to become durable", func() bool { return l.Durable() >= end })
			got := flushTestPayloads(t, l)
			for i, want := range [][]byte{a, b, c} {
				if _, ok := got[string(want)]; !ok {
					t.Fatalf("timed-out record %d is not in the log", i)
				}
			}
			if got[string(c)] != cpos[0] {
				t.Fatalf("batch record at %d, AppendBatch said %d", got[string(c)], cpos[0])
			}
			for _, pl := range [][]byte{a, b, c} {
				recs = append(recs, flushTestRecord{got[string(pl)], pl})
			}
			if err := l.Err(); err != nil {
				t.Fatalf("log failed after a timeout: %v", err)
			}
			recs = append(recs, flushTestAppendDurable(t, l, payloadFor(4, 400)))
			flushTestVerifyExact(t, l, recs)

			// Durable means it survives losing everything unsynced.
			nfs := fs.CrashDropAll()
			l.Close()
			flushTestVerifyExact(t, flushTestOpen(t, nfs, opts), recs)
		})
	}
}

// TestFlushAsyncAcknowledgesEarly shows what AsyncFlushUnsafe trades away:
// appends return before their records are durable, and a power loss before
// a sync loses acknowledged records. Sync and Close make them durable.
func TestFlushAsyncAcknowledgesEarly(t *testing.T) {
	for _, wp := range flushTestPaths {
		opts := Options{
			SegmentSize:           1 << 20,
			WritePath:             wp,
			Flush:                 AsyncFlushUnsafe,
			FlushInterval:         time.Hour,
			FlushThoroughInterval: time.Hour,
		}
		appendAsync := func(t *testing.T, l *Log) []flushTestRecord {
			t.Helper()
			var recs []flushTestRecord
			for i := range 10 {
				recs = append(recs, flushTestAppend(t, l, i, 1, 100+i*10)...)
				if l.Durable() >= l.End() {
					t.Fatalf("async append %d returned durable: durable %d, end %d", i, l.Durable(), l.End())
				}
			}
			return recs
		}
		t.Run(flushTestPathName(wp)+"/crash-loses-acknowledged", func(t *testing.T) {
			fs := faultfs.New(3)
			l := flushTestOpen(t, fs, opts)
			recs := appendAsync(t, l)
			nfs := fs.CrashDropAll()
			l.Close()
			l2 := flushTestOpen(t, nfs, opts)
			if n := len(readAll(t, l2, l2.First())); n != 0 {
				t.Fatalf("%d records survived a crash with nothing synced", n)
			}
			if _, err := l2.Read(recs[0].pos); !errors.Is(err, ErrNotFound) {
				t.Fatalf("acknowledged but unsynced record after crash: %v, want ErrNotFound", err)
			}
		})
		t.Run(flushTestPathName(wp)+"/sync", func(t *testing.T) {
			fs := faultfs.New(4)
			l := flushTestOpen(t, fs, opts)
			p := newFlushTestProbe(t, fs)
			recs := appendAsync(t, l)
			if n := p.syncs.Load(); n != 0 {
				t.Fatalf("%d data syncs with hour-long flush intervals", n)
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if l.Durable() != l.End() {
				t.Fatalf("after Sync durable %d, end %d", l.Durable(), l.End())
			}
			nfs := fs.CrashDropAll()
			l.Close()
			flushTestVerifyExact(t, flushTestOpen(t, nfs, opts), recs)
		})
		t.Run(flushTestPathName(wp)+"/close", func(t *testing.T) {
			fs := faultfs.New(5)
			l := flushTestOpen(t, fs, opts)
			recs := appendAsync(t, l)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l2 := flushTestOpen(t, fs.CrashDropAll(), opts)
			if l2.Recovery().Crashed {
				t.Fatalf("clean close then crash reported %+v", l2.Recovery())
			}
			flushTestVerifyExact(t, l2, recs)
		})
	}
}

// TestFlushAsyncPeriodic checks the background flusher's policy: with fewer
// than FlushLeastPages dirty pages it waits for FlushThoroughInterval, even
// though it wakes every FlushInterval, and with more it syncs on the next
// wake-up.
func TestFlushAsyncPeriodic(t *testing.T) {
	const thorough = 100 * time.Millisecond
	for _, wp := range flushTestPaths {
		for _, tc := range []struct {
			name     string
			sizes    []int
			thorough time.Duration
		}{
			// Three records fill three of the four pages: only the
			// thorough interval may sync them, not the next tick.
			{"below-least-pages", []int{4000, 4000, 4000}, thorough},
			{"one-small-record", []int{10}, thorough},
			// Five records pass four pages: a tick syncs them, long before
			// the hour-long thorough interval.
			{"least-pages", []int{4000, 4000, 4000, 4000, 4000}, time.Hour},
		} {
			t.Run(flushTestPathName(wp)+"/"+tc.name, func(t *testing.T) {
				fs := faultfs.New(6)
				start := time.Now()
				l := flushTestOpen(t, fs, Options{
					SegmentSize:           1 << 20,
					WritePath:             wp,
					Flush:                 AsyncFlushUnsafe,
					FlushInterval:         time.Millisecond,
					FlushLeastPages:       4,
					FlushThoroughInterval: tc.thorough,
				})
				p := newFlushTestProbe(t, fs)
				var recs []flushTestRecord
				for i, n := range tc.sizes {
					recs = append(recs, flushTestAppend(t, l, i, 1, n)...)
				}
				end := l.End()
				below := end < 4*4096
				if below != (tc.thorough != time.Hour) {
					t.Fatalf("test writes %d bytes: wrong side of four pages for %s", end, tc.name)
				}
				p.waitSync("of the records")
				if elapsed := time.Since(start); below && elapsed < tc.thorough {
					t.Fatalf("a sync of %d dirty bytes, fewer than four pages, came %v after open, before the thorough interval %v", end, elapsed, tc.thorough)
				}
				flushTestWaitFor(t, "the periodic sync to cover the records", func() bool { return l.Durable() >= end })
				nfs := fs.CrashDropAll()
				l.Close()
				flushTestVerifyExact(t, flushTestOpen(t, nfs, Options{SegmentSize: 1 << 20, WritePath: wp}), recs)
			})
		}
	}
}

// flushTestMetrics records every measurement.
type flushTestMetrics struct {
	mu       sync.Mutex
	counters map[string]uint64
	samples  map[string][]float64
}

func newFlushTestMetrics() *flushTestMetrics {
	return &flushTestMetrics{counters: map[string]uint64{}, samples: map[string][]float64{}}
}

func (m *flushTestMetrics) IncCounter(name string, delta uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counters[name] += delta
}

func (m *flushTestMetrics) Observe(name string, v float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.samples[name] = append(m.samples[name], v)
}

func (m *flushTestMetrics) counter(name string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counters[name]
}

func (m *flushTestMetrics) observed(name string) []float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]float64(nil), m.samples[name]...)
}

func flushTestSum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

// TestFlushMetrics checks the measurements of concurrent appends and of
// one group commit of a known size.
func TestFlushMetrics(t *testing.T) {
	for _, wp := range flushTestPaths {
		t.Run(flushTestPathName(wp), func(t *testing.T) {
			fs := faultfs.New(8)
			m := newFlushTestMetrics()
			l := flushTestOpen(t, fs, Options{SegmentSize: 1 << 20, WritePath: wp, Metrics: m})
			const writers, per = 8, 25
			var bytesWant uint64
			var mu sync.Mutex
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for i := range per {
						n := (w*per + i) % 1000
						if _, err := l.Append(payloadFor(w*per+i, n)); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						bytesWant += uint64(recordSize(n))
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			check := func(records uint64) {
				t.Helper()
				if got := m.counter(MetricAppends); got != records {
					t.Errorf("%s = %d, want %d", MetricAppends, got, records)
				}
				if got := m.counter(MetricAppendBytes); got != bytesWant || int64(got) != l.End() {
					t.Errorf("%s = %d, want %d (end %d)", MetricAppendBytes, got, bytesWant, l.End())
				}
				syncs := m.counter(MetricSyncs)
				if syncs == 0 || syncs > records {
					t.Errorf("%s = %d for %d synchronous appends", MetricSyncs, syncs, records)
				}
				secs := m.observed(MetricSyncSeconds)
				if uint64(len(secs)) != syncs {
					t.Errorf("%d %s samples for %d syncs", len(secs), MetricSyncSeconds, syncs)
				}
				for _, s := range secs {
					if s < 0 || s > flushTestWait.Seconds() || math.IsNaN(s) {
						t.Errorf("%s sample %v", MetricSyncSeconds, s)
					}
				}
				rps := m.observed(MetricRecordsPerSync)
				if uint64(len(rps)) != syncs {
					t.Errorf("%d %s samples for %d syncs", len(rps), MetricRecordsPerSync, syncs)
				}
				for _, s := range rps {
					if s < 1 {
						t.Errorf("%s sample %v: a sync in sync mode covers at least one record", MetricRecordsPerSync, s)
					}
				}
				if got := flushTestSum(rps); got != float64(records) {
					t.Errorf("%s samples add up to %v, want %d records synced", MetricRecordsPerSync, got, records)
				}
				lag := m.observed(MetricFlushLagBytes)
				if uint64(len(lag)) != syncs {
					t.Errorf("%d %s samples for %d syncs", len(lag), MetricFlushLagBytes, syncs)
				}
				for _, s := range lag {
					if s <= 0 {
						t.Errorf("%s sample %v", MetricFlushLagBytes, s)
					}
				}
				if got := flushTestSum(lag); got != float64(l.End()) {
					t.Errorf("%s samples add up to %v, want every byte written once: %d", MetricFlushLagBytes, got, l.End())
				}
			}
			check(writers * per)
			if t.Failed() {
				t.FailNow()
			}

			// One held sync of one record, then one group commit of eight.
			p := newFlushTestProbe(t, fs)
			syncsBefore := m.counter(MetricSyncs)
			release := p.hold()
			var returned atomic.Int64
			held := flushTestAppendAll(l, 1, func(int) []byte { return payloadFor(900, 77) }, &returned)
			p.waitHeld()
			bytesWant += uint64(recordSize(77))
			results := flushTestAppendAll(l, 8, func(i int) []byte { return payloadFor(1000+i, 100) }, &returned)
			flushTestWaitFor(t, "8 registered waiters", func() bool { return flushTestWaiters(l) == 8 })
			bytesWant += 8 * uint64(recordSize(100))
			release()
			if r := flushTestRecv(t, held, "the held append"); r.err != nil {
				t.Fatal(r.err)
			}
			for range 8 {
				if r := flushTestRecv(t, results, "a grouped append"); r.err != nil {
					t.Fatal(r.err)
				}
			}
			rps := m.observed(MetricRecordsPerSync)
			if got := m.counter(MetricSyncs) - syncsBefore; got != 2 {
				t.Fatalf("the held sync and the group commit counted %d syncs, want 2 (records per sync, newest last: %v)", got, rps[max(0, len(rps)-4):])
			}
			if got := rps[len(rps)-2:]; got[0] != 1 || got[1] != 8 {
				t.Errorf("the held sync of 1 record and the group commit of 8 observed %s %v", MetricRecordsPerSync, got)
			}
			lag := m.observed(MetricFlushLagBytes)
			if got := lag[len(lag)-2:]; got[0] != float64(recordSize(77)) || got[1] != float64(8*recordSize(100)) {
				t.Errorf("the held sync of %d bytes and the group commit of 8 records of %d bytes observed %s %v", recordSize(77), recordSize(100), MetricFlushLagBytes, got)
			}
			check(writers*per + 9)
		})
	}
}

// TestFlushWaitDurableAndClose checks that WaitDurable needs no sync for
// what is already durable, that Close completes the appends waiting for it
// and that later calls get ErrClosed.
func TestFlushWaitDurableAndClose(t *testing.T) {
	for _, wp := range flushTestPaths {
		t.Run(flushTestPathName(wp), func(t *testing.T) {
			fs := faultfs.New(9)
			opts := Options{SegmentSize: 1 << 20, WritePath: wp}
			l := flushTestOpen(t, fs, opts)
			p := newFlushTestProbe(t, fs)
			recs := flushTestAppend(t, l, 0, 4, 500)
			durable := l.End()
			if l.Durable() != durable {
				t.Fatalf("durable %d, end %d after synchronous appends", l.Durable(), durable)
			}

			// Hold the flusher: a WaitDurable that needed it would block.
			release := p.hold()
			var returned atomic.Int64
			held := flushTestAppendAll(l, 1, func(int) []byte { return payloadFor(50, 60) }, &returned)
			p.waitHeld()
			syncs := p.syncs.Load()
			for _, end := range []int64{0, recs[0].pos, durable} {
				if err := l.WaitDurable(end); err != nil {
					t.Fatalf("WaitDurable(%d) with durable %d: %v", end, durable, err)
				}
			}
			if p.syncs.Load() != syncs {
				t.Fatal("WaitDurable of a durable end synced")
			}

			// Appends pending at Close.
			const appenders = 8
			results := flushTestAppendAll(l, appenders, func(i int) []byte { return payloadFor(100+i, 200) }, &returned)
			flushTestWaitFor(t, "8 registered waiters", func() bool { return flushTestWaiters(l) == appenders })
			closed := make(chan error, 1)
			go func() { closed <- l.Close() }()
			flushTestWaitFor(t, "Close to begin", func() bool {
				l.mu.Lock()
				defer l.mu.Unlock()
				return l.closed
			})
			release()
			if err := flushTestRecv(t, closed, "Close with pending appends"); err != nil {
				t.Fatalf("close: %v", err)
			}
			if r := flushTestRecv(t, held, "the held append"); r.err != nil {
				t.Fatalf("append of the held sync: %v", r.err)
			} else {
				recs = append(recs, r.flushTestRecord)
			}
			for range appenders {
				r := flushTestRecv(t, results, "an append pending at Close")
				if r.err != nil {
					t.Fatalf("append pending at Close: %v", r.err)
				}
				recs = append(recs, r.flushTestRecord)
			}

			if _, err := l.Append([]byte("late")); !errors.Is(err, ErrClosed) {
				t.Fatalf("append after close: %v, want ErrClosed", err)
			}
			if _, _, err := l.Write([][]byte{[]byte("late")}); !errors.Is(err, ErrClosed) {
				t.Fatalf("write after close: %v, want ErrClosed", err)
			}
			if err := l.WaitDurable(l.End() + 1); !errors.Is(err, ErrClosed) {
				t.Fatalf("WaitDurable past the end after close: %v, want ErrClosed", err)
			}
			if err := l.Sync(); !errors.Is(err, ErrClosed) {
				t.Fatalf("sync after close with everything durable: %v, want ErrClosed", err)
			}
			flushTestVerifyExact(t, flushTestOpen(t, fs.CrashDropAll(), opts), recs)
		})
	}
}
