package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/hashicorp/raft"
)

// termKey is the stable-store key the benchmark writes before filling a
// store and checks after reopening it.
var termKey = []byte("CurrentTerm")

// filledWorkloads are the workloads that run on a filled store.
var filledWorkloads = []string{wGetLog, wDeleteHead, wDeleteTail, wReopen, wDisk, wCold}

// runFilled runs workloads 2 to 6: every round, each store in a rotating
// order is filled in a fresh directory and put through the selected
// workloads in turn, then removed.
func runFilled(ctx context.Context, cfg *config, base string, res *results, progress io.Writer) error {
	for round := range cfg.rounds {
		for _, kind := range rotate(cfg.stores, round) {
			if err := ctx.Err(); err != nil {
				return err
			}
			dir := filepath.Join(base, fmt.Sprintf("r%d-filled-%s", round, kind.key))
			f := &filled{cfg: cfg, kind: kind, dir: dir, round: round, res: res, progress: progress}
			err := f.run(ctx)
			if rerr := removeAndSettle(dir); err == nil {
				err = rerr
			}
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", kind.name, round+1, err)
			}
		}
	}
	return nil
}

// filled is one store's pass through the filled-store workloads.
type filled struct {
	cfg      *config
	kind     storeKind
	dir      string
	round    int
	res      *results
	progress io.Writer

	s       logStore // the open store; nil once closed
	payload []byte
}

// run fills the store and runs the selected workloads, in an order that
// leaves each the store it expects: disk (right after the fill), getlog,
// reopen, deletetail (whose entries are then stored again), deletehead.
func (f *filled) run(ctx context.Context) (err error) {
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return err
	}
	if f.s, err = f.kind.open(f.dir); err != nil {
		return err
	}
	defer func() {
		if f.s != nil {
			if cerr := f.s.Close(); err == nil {
				err = cerr
			}
		}
	}()
	if err := f.s.SetUint64(termKey, uint64(f.round+1)); err != nil {
		return err
	}
	f.payload = randomPayload(f.cfg.entrySize, f.cfg.seed+uint64(f.round))

	runtime.GC()
	start := time.Now()
	if err := f.store(ctx, 1, f.cfg.entries); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	fill := time.Since(start)
	f.report("fill", "%s", fmtSeconds(fill.Seconds()))

	steps := []struct {
		workload string
		run      func(context.Context) (measurement, error)
	}{
		{wDisk, func(context.Context) (measurement, error) { return f.disk(fill) }},
		{wGetLog, f.getLog},
		{wReopen, f.reopen},
		{wCold, f.coldOpen},
		{wDeleteTail, f.deleteTail},
		{wDeleteHead, f.deleteHead},
	}
	for _, st := range steps {
		if !f.cfg.only[st.workload] {
			continue
		}
		runs := 1
		if st.workload == wCold {
			runs = f.cfg.coldRuns
		}
		for range runs {
			if err := ctx.Err(); err != nil {
				return err
			}
			m, err := st.run(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", st.workload, err)
			}
			f.res.add(rowKey{st.workload, "", f.kind.key}, m)
		}
	}
	return nil
}

// report prints a progress line for one step.
func (f *filled) report(step, format string, args ...any) {
	fmt.Fprintf(f.progress, "round %d/%d  %-10s  %-25s ", f.round+1, f.cfg.rounds, step, f.kind.name)
	fmt.Fprintf(f.progress, format+"\n", args...)
}

// store appends n entries from index first on, in batches of fillBatch.
func (f *filled) store(ctx context.Context, first uint64, n int) error {
	batch := newBatch(f.cfg.fillBatch, f.payload)
	next, end := first, first+uint64(n)
	for i := 0; next < end; i++ {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		b := batch[:min(uint64(len(batch)), end-next)]
		next = setIndexes(b, next)
		if err := f.s.StoreLogs(b); err != nil {
			return err
		}
	}
	return nil
}

// bounds returns the store's first and last index.
func (f *filled) bounds() (first, last uint64, err error) {
	if first, err = f.s.FirstIndex(); err != nil {
		return 0, 0, err
	}
	last, err = f.s.LastIndex()
	return first, last, err
}

// disk measures the directory right after the fill (workload 6).
func (f *filled) disk(fill time.Duration) (measurement, error) {
	u, err := usageOf(f.dir)
	if err != nil {
		return nil, err
	}
	f.report(wDisk, "%d files, apparent %s, allocated %s", u.files, fmtBytes(float64(u.apparent)), fmtBytes(float64(u.allocated)))
	return measurement{
		mFill:      fill.Seconds(),
		mFiles:     float64(u.files),
		mApparent:  float64(u.apparent),
		mAllocated: float64(u.allocated),
	}, nil
}

// getLog reads random indexes for the configured count or duration
// (workload 2).
func (f *filled) getLog(context.Context) (measurement, error) {
	first, last, err := f.bounds()
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(f.cfg.seed, uint64(f.round)))
	lat := newSampler(f.cfg.seed + uint64(f.round))
	var out raft.Log
	gets := 0

	runtime.GC()
	start := time.Now()
	now := start
	for f.cfg.more(gets, now.Sub(start)) {
		idx := first + rng.Uint64N(last-first+1)
		t0 := time.Now()
		if err := f.s.GetLog(idx, &out); err != nil {
			return nil, fmt.Errorf("GetLog(%d): %w", idx, err)
		}
		now = time.Now()
		lat.add(now.Sub(t0))
		gets++
		if out.Index != idx || len(out.Data) != f.cfg.entrySize {
			return nil, fmt.Errorf("GetLog(%d) returned index %d with %d bytes", idx, out.Index, len(out.Data))
		}
	}
	elapsed := now.Sub(start).Seconds()
	ps := lat.percentiles(50, 99)
	f.report(wGetLog, "%s gets/s  p50 %s  p99 %s", fmtCount(float64(gets)/elapsed), fmtSeconds(ps[0]), fmtSeconds(ps[1]))
	return measurement{mGetsSec: float64(gets) / elapsed, mP50: ps[0], mP99: ps[1]}, nil
}

// reopen closes the store and times opening it until its bounds are
// known, then one GetLog of the last entry (workload 5).
func (f *filled) reopen(context.Context) (measurement, error) {
	first, last, err := f.bounds()
	if err != nil {
		return nil, err
	}
	runtime.GC()
	t0 := time.Now()
	err = f.s.Close()
	f.s = nil
	if err != nil {
		return nil, fmt.Errorf("close: %w", err)
	}
	closed := time.Since(t0)

	t1 := time.Now()
	if f.s, err = f.kind.open(f.dir); err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	gotFirst, gotLast, err := f.bounds()
	if err != nil {
		return nil, err
	}
	opened := time.Since(t1)

	var out raft.Log
	t2 := time.Now()
	err = f.s.GetLog(gotLast, &out)
	got := time.Since(t2)
	if err != nil {
		return nil, fmt.Errorf("GetLog(%d) after reopen: %w", gotLast, err)
	}
	if gotFirst != first || gotLast != last || out.Index != last {
		return nil, fmt.Errorf("after reopen: first %d last %d (want %d, %d), GetLog(last) index %d", gotFirst, gotLast, first, last, out.Index)
	}
	if term, err := f.s.GetUint64(termKey); err != nil || term != uint64(f.round+1) {
		return nil, fmt.Errorf("after reopen: %s = %d, %v (want %d)", termKey, term, err, f.round+1)
	}
	f.report(wReopen, "close %s  open %s  first GetLog %s", fmtSeconds(closed.Seconds()), fmtSeconds(opened.Seconds()), fmtSeconds(got.Seconds()))
	return measurement{mClose: closed.Seconds(), mOpen: opened.Seconds(), mFirstGet: got.Seconds()}, nil
}

// deleteTail times the removal of the last deleteTail entries (workload
// 4), then stores them again (not timed) for the prefix deletion.
func (f *filled) deleteTail(ctx context.Context) (measurement, error) {
	_, last, err := f.bounds()
	if err != nil {
		return nil, err
	}
	lo := last - uint64(f.cfg.deleteTail) + 1
	runtime.GC()
	t0 := time.Now()
	err = f.s.DeleteRange(lo, last)
	d := time.Since(t0)
	if err != nil {
		return nil, err
	}
	if got, err := f.s.LastIndex(); err != nil || got != lo-1 {
		return nil, errors.Join(fmt.Errorf("last index %d after deleting [%d, %d]", got, lo, last), err)
	}
	f.report(wDeleteTail, "%s", fmtSeconds(d.Seconds()))
	if err := f.store(ctx, lo, f.cfg.deleteTail); err != nil {
		return nil, fmt.Errorf("storing the tail again: %w", err)
	}
	return measurement{mTime: d.Seconds()}, nil
}

// deleteHead times the removal of the first deleteHead entries (workload
// 3).
func (f *filled) deleteHead(context.Context) (measurement, error) {
	first, _, err := f.bounds()
	if err != nil {
		return nil, err
	}
	hi := first + uint64(f.cfg.deleteHead) - 1
	runtime.GC()
	t0 := time.Now()
	err = f.s.DeleteRange(first, hi)
	d := time.Since(t0)
	if err != nil {
		return nil, err
	}
	if got, err := f.s.FirstIndex(); err != nil || got != hi+1 {
		return nil, errors.Join(fmt.Errorf("first index %d after deleting [%d, %d]", got, first, hi), err)
	}
	f.report(wDeleteHead, "%s", fmtSeconds(d.Seconds()))
	return measurement{mTime: d.Seconds()}, nil
}
