package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/raftstore"
)

// The StoreLogs shape of workload 7: every group appends batches of
// groupBatch entries of groupEntrySize bytes.
const (
	groupBatch     = 16
	groupEntrySize = 1 << 10
)

// maxGroupCount bounds -groups: raft-wal and raft-boltdb hold a few files
// open per group.
const maxGroupCount = 1024

// groupSet is the stores of raft groups 1 to n, opened together for
// workload 7.
type groupSet struct {
	// stores holds group g's store at index g-1.
	stores []raft.LogStore
	// close closes every store.
	close func() error
	// fsyncs returns the fsyncs counted so far; nil if they cannot be
	// counted.
	fsyncs func() uint64
	// durable is set if StoreLogs returns only after an fsync, so that a
	// case that counts none has not counted at all.
	durable bool
}

// uncountedFsyncs is the fsyncs/StoreLogs cell of a store whose fsyncs
// cannot be counted from inside the process.
var uncountedFsyncs = map[string]string{boltKey: "2 (not counted)"}

// openRaftstoreGroups opens one raftstore DB in dir, with flush, and the
// stores of groups 1 to n in it. Its fsyncs are the commit log's syncs,
// which raftstore reports through go-metrics to raftstoreSyncs (the only
// DB open while a case runs).
func openRaftstoreGroups(flush raftstore.FlushMode) func(dir string, n int) (*groupSet, error) {
	return func(dir string, n int) (*groupSet, error) {
		db, err := raftstore.OpenDB(dir, &raftstore.Options{Flush: flush})
		if err != nil {
			return nil, err
		}
		gs := &groupSet{close: db.Close, fsyncs: raftstoreSyncs.count, durable: flush == raftstore.SyncFlush}
		for g := 1; g <= n; g++ {
			s, err := db.Store(uint64(g))
			if err != nil {
				db.Close()
				return nil, fmt.Errorf("group %d: %w", g, err)
			}
			gs.stores = append(gs.stores, s)
		}
		return gs, nil
	}
}

// openWALGroups opens n raft-wal stores, each in a directory of its own
// under dir, with their fsyncs counted.
func openWALGroups(dir string, n int) (*groupSet, error) {
	c := &walFsyncs{}
	gs, err := openEach(dir, n, func(d string) (logStore, error) { return openCountedWAL(d, c) })
	if err != nil {
		return nil, err
	}
	gs.fsyncs, gs.durable = c.total, true
	return gs, nil
}

// openBoltGroups opens n raft-boltdb stores, each in a directory of its
// own under dir. bbolt's fsyncs are not counted.
func openBoltGroups(dir string, n int) (*groupSet, error) {
	return openEach(dir, n, openBolt)
}

// openEach opens n stores with open, group g in dir/gNNN.
func openEach(dir string, n int, open func(dir string) (logStore, error)) (*groupSet, error) {
	var opened []logStore
	gs := &groupSet{close: func() error {
		var errs []error
		for _, s := range opened {
			errs = append(errs, s.Close())
		}
		return errors.Join(errs...)
	}}
	for g := 1; g <= n; g++ {
		d := filepath.Join(dir, fmt.Sprintf("g%04d", g))
		err := os.MkdirAll(d, 0o755)
		var s logStore
		if err == nil {
			s, err = open(d)
		}
		if err != nil {
			gs.close()
			return nil, fmt.Errorf("group %d: %w", g, err)
		}
		opened = append(opened, s)
		gs.stores = append(gs.stores, s)
	}
	return gs, nil
}

// groupsVariant names the rows of n groups.
func groupsVariant(n int, compact bool) string {
	if compact {
		return strconv.Itoa(n) + ", compacted"
	}
	return strconv.Itoa(n)
}

// runGroups runs workload 7: every round, every group count, every store
// on a fresh directory, the stores in a rotating order. raftstore's syncs
// are counted through go-metrics' global sink while it runs.
func runGroups(ctx context.Context, cfg *config, base string, res *results, progress io.Writer) error {
	restore, err := installSyncSink()
	if err != nil {
		return err
	}
	defer restore()
	for round := range cfg.rounds {
		for ni, n := range cfg.groups {
			for _, kind := range rotate(cfg.stores, round+ni) {
				if err := ctx.Err(); err != nil {
					return err
				}
				dir := filepath.Join(base, fmt.Sprintf("r%d-groups-%d-%s", round, n, kind.key))
				m, err := groupsCase(cfg, kind, dir, n, cfg.seed+uint64(round))
				if rerr := removeAndSettle(dir); err == nil {
					err = rerr
				}
				if err != nil {
					return fmt.Errorf("groups %d, %s: %w", n, kind.name, err)
				}
				res.add(rowKey{wGroups, groupsVariant(n, cfg.compact), kind.key}, m)
				fsyncs := fmtFsyncs(m[mFsyncs])
				if text, ok := uncountedFsyncs[kind.key]; ok {
					fsyncs = text
				}
				fmt.Fprintf(progress, "round %d/%d  groups %-4d  %-25s %12s entries/s  p50 %s  p99 %s  fsyncs/call %s  (%s calls in %s)\n",
					round+1, cfg.rounds, n, kind.name, fmtCount(m[mEntriesSec]), fmtSeconds(m[mP50]), fmtSeconds(m[mP99]), fsyncs,
					fmtCount(m[mCalls]), fmtSeconds(m[mElapsed]))
			}
			for _, c := range ceilingRows {
				dir := filepath.Join(base, fmt.Sprintf("r%d-groups-%d-%s", round, n, c.key))
				m, err := diskCeiling(dir, n, c.key == ceilingWrittenKey, cfg.seed+uint64(round))
				if rerr := removeAndSettle(dir); err == nil {
					err = rerr
				}
				if err != nil {
					return fmt.Errorf("groups %d, %s: %w", n, c.name, err)
				}
				res.add(rowKey{wGroups, groupsVariant(n, cfg.compact), c.key}, m)
				fmt.Fprintf(progress, "round %d/%d  groups %-4d  %-25s %12s entries/s  p50 %s  p99 %s\n",
					round+1, cfg.rounds, n, c.key, fmtCount(m[mEntriesSec]), fmtSeconds(m[mP50]), fmtSeconds(m[mP99]))
			}
		}
	}
	return nil
}

// groupsCase opens n groups of kind in dir and has each call StoreLogs
// from a goroutine of its own, all at once, until cfg's count or duration
// is spent or the groups have written cfg.maxBytes of payload together.
func groupsCase(cfg *config, kind storeKind, dir string, n int, seed uint64) (measurement, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	gs, err := kind.openGroups(dir, n)
	if err != nil {
		return nil, err
	}
	m, err := driveGroups(cfg, gs, seed)
	if cerr := gs.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// driveGroups runs the case on open stores and checks what they hold.
func driveGroups(cfg *config, gs *groupSet, seed uint64) (measurement, error) {
	n := len(gs.stores)
	payload := randomPayload(groupEntrySize, seed)
	callBytes := int64(groupBatch * groupEntrySize)
	var (
		ready, done sync.WaitGroup
		startAll    = make(chan struct{})
		start       time.Time // set before startAll is closed
		written     atomic.Int64
		failed      atomic.Bool
		errs        = make([]error, n)
		calls       = make([]int, n)
		ends        = make([]time.Time, n)
		lats        = make([]*sampler, n)
	)
	for g := range n {
		// The samplers together keep at most maxSamples latencies.
		lats[g] = newSamplerLimit(seed+uint64(g), maxSamples/n)
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			s := gs.stores[g]
			batch := newBatch(groupBatch, payload)
			// One untimed batch first: a group's first batch creates its
			// files (and, in a fresh raft-wal, syncs its directory).
			next := setIndexes(batch, 1)
			errs[g] = s.StoreLogs(batch)
			ready.Done()
			<-startAll
			if errs[g] != nil {
				return
			}
			now := start
			first, lastCompact := uint64(1), uint64(0)
			for cfg.more(calls[g], now.Sub(start)) && written.Load() < cfg.maxBytes && !failed.Load() {
				next = setIndexes(batch, next)
				t0 := time.Now()
				err := s.StoreLogs(batch)
				if last := next - 1; err == nil && cfg.compact && last-lastCompact >= compactEvery && last > compactKeep {
					// A snapshot: drop all but the trailing entries.
					err = s.DeleteRange(first, last-compactKeep)
					first, lastCompact = last-compactKeep+1, last
				}
				now = time.Now()
				if err != nil {
					errs[g] = fmt.Errorf("group %d: %w", g+1, err)
					failed.Store(true)
					break
				}
				lats[g].add(now.Sub(t0))
				calls[g]++
				written.Add(callBytes)
			}
			ends[g] = now
		}()
	}
	ready.Wait()
	if err := errors.Join(errs...); err != nil {
		failed.Store(true)
		close(startAll)
		done.Wait()
		return nil, fmt.Errorf("first StoreLogs: %w", err)
	}

	runtime.GC()
	var before, after uint64
	if gs.fsyncs != nil {
		before = gs.fsyncs()
	}
	start = time.Now()
	close(startAll)
	done.Wait()
	if gs.fsyncs != nil {
		after = gs.fsyncs()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	total := 0
	end := start
	for g := range n {
		total += calls[g]
		if ends[g].After(end) {
			end = ends[g]
		}
	}
	elapsed := end.Sub(start).Seconds()
	if err := checkGroups(gs, calls, payload, cfg.compact); err != nil {
		return nil, err
	}
	ps := mergeSamplers(lats).percentiles(50, 99)
	m := measurement{
		mCalls:      float64(total),
		mElapsed:    elapsed,
		mEntriesSec: float64(total*groupBatch) / elapsed,
		mP50:        ps[0],
		mP99:        ps[1],
	}
	if gs.fsyncs != nil && total > 0 {
		if gs.durable && after == before {
			return nil, errors.New("no fsync counted: is go-metrics' global sink the one raftstore reports to?")
		}
		m[mFsyncs] = float64(after-before) / float64(total)
	}
	return m, nil
}

// checkGroups checks that every group holds its untimed batch and the
// calls[g] batches after it, so that a store that loses entries fails the
// run rather than winning it.
func checkGroups(gs *groupSet, calls []int, payload []byte, compacted bool) error {
	for g, s := range gs.stores {
		want := uint64(groupBatch * (calls[g] + 1))
		first, err1 := s.FirstIndex()
		last, err2 := s.LastIndex()
		if err := errors.Join(err1, err2); err != nil || (first != 1 && !compacted) || first == 0 || first > want || last != want {
			return errors.Join(fmt.Errorf("group %d: first %d last %d, want 1, %d", g+1, first, last, want), err)
		}
		var l raft.Log
		if err := s.GetLog(want, &l); err != nil || l.Index != want || !bytes.Equal(l.Data, payload) {
			return errors.Join(fmt.Errorf("group %d: GetLog(%d) returned index %d with %d bytes", g+1, want, l.Index, len(l.Data)), err)
		}
	}
	return nil
}

// fmtFsyncs formats fsyncs per call: three decimals, or three
// significant digits below 0.01 (an async store's few background syncs).
func fmtFsyncs(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case x == 0 || x >= 0.01:
		return strconv.FormatFloat(x, 'f', 3, 64)
	default:
		prec := min(2-int(math.Floor(math.Log10(x))), 12)
		return strconv.FormatFloat(x, 'f', prec, 64)
	}
}

// groupsNote describes workload 7 under its title.
func groupsNote(cfg *config) string {
	length := cfg.duration.String()
	if cfg.count > 0 {
		length = fmtCount(float64(cfg.count)) + " calls per group"
	}
	return fmt.Sprintf("N raft groups append at once, each from a goroutine of its own that calls StoreLogs "+
		"with %d × %d B entries back to back (hashicorp/raft has one StoreLogs caller per group). "+
		"raftstore: one DB, groups 1..N from db.Store(g), sharing one commit log and its group commit. "+
		"raft-wal and raft-boltdb: N stores, each opened in a directory of its own, as a service runs N groups on them. "+
		"Each group first stores one untimed batch; then all start together and run for %s "+
		"or until the groups have written %s of payload together. "+
		"Total entries/s counts the entries of all groups over the time until the last one stopped; "+
		"p50 and p99 are of single StoreLogs calls, all groups together.",
		groupBatch, groupEntrySize, length, fmtBytes(float64(cfg.maxBytes)))
}

// groupsFsyncNote explains the fsyncs/StoreLogs column.
const groupsFsyncNote = "fsyncs/StoreLogs: fsyncs while the groups ran ÷ StoreLogs calls of all groups. " +
	"raftstore: counted exactly, from the commit log's `syncs` counter that raftstore reports through go-metrics " +
	"(each one fdatasync of the log's segment file; the checkpoint every second, which msyncs the index slots written " +
	"since and fsyncs the checkpoint file, is not in it); for the UNSAFE async row these are its background syncs. " +
	"raft-wal: counted exactly, through its VFS and meta store wrapped by the bench: every fsync of a segment file, " +
	"its directory's after a new file's first one, and two fdatasyncs per meta-store (bbolt) commit, which happens " +
	"only when a segment is rotated. raft-boltdb: not counted, since bbolt calls fdatasync itself: " +
	"one StoreLogs is one bbolt transaction, whose commit makes two fdatasyncs (the dirty pages, then the meta page), " +
	"plus an fsync whenever bbolt grows its file."

// printGroupsTable writes workload 7's results as a Markdown table, rows
// by group count, then store.
func printGroupsTable(out io.Writer, num int, w workload, cfg *config, res *results) {
	fmt.Fprintf(out, "## %d. %s\n\n%s\n\n", num, w.title, w.note)
	head := []string{"store", "groups", "total entries/s", "p50", "p99", "fsyncs/StoreLogs", "entries/s ÷ raft-wal (higher is better)"}
	fmt.Fprintf(out, "| %s |\n", strings.Join(head, " | "))
	fmt.Fprintf(out, "|%s\n", strings.Repeat(" --- |", len(head)))
	for _, n := range cfg.groups {
		v := groupsVariant(n, cfg.compact)
		base := res.median(rowKey{wGroups, v, walKey}, mEntriesSec)
		for _, s := range cfg.stores {
			k := rowKey{wGroups, v, s.key}
			rate := res.median(k, mEntriesSec)
			ratio := rate / base
			if base == 0 {
				ratio = math.NaN()
			}
			fsyncs := fmtFsyncs(res.median(k, mFsyncs))
			if text, ok := uncountedFsyncs[s.key]; ok {
				fsyncs = text
			}
			cells := []string{
				s.name, v, fmtCount(rate), fmtSeconds(res.median(k, mP50)), fmtSeconds(res.median(k, mP99)),
				fsyncs, fmtRatio(ratio),
			}
			fmt.Fprintf(out, "| %s |\n", strings.Join(cells, " | "))
		}
		for _, c := range ceilingRows {
			k := rowKey{wGroups, v, c.key}
			rate := res.median(k, mEntriesSec)
			ratio := rate / base
			if base == 0 {
				ratio = math.NaN()
			}
			cells := []string{
				c.name, v, fmtCount(rate), fmtSeconds(res.median(k, mP50)), fmtSeconds(res.median(k, mP99)),
				fmtFsyncs(res.median(k, mFsyncs)), fmtRatio(ratio),
			}
			fmt.Fprintf(out, "| %s |\n", strings.Join(cells, " | "))
		}
	}
	fmt.Fprintf(out, "\n%s\n\n%s\n\n", groupsFsyncNote, ceilingNote)
}
