package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/internal/pagecache"
)

// Cold-cache eviction modes of -cold.
const (
	coldFadvise = "fadvise" // the store's own files, posix_fadvise(DONTNEED)
	coldDrop    = "drop"    // the whole machine: echo 3 > /proc/sys/vm/drop_caches
)

// coldSeqGets is how many GetLogs the cold workload makes in order after
// GetLog(middle), as a follower catching up is sent.
const coldSeqGets = 10_000

// coldOpen is workload 8, a reopen with a cold page cache: it closes the
// store, evicts its files from the page cache (-cold), then times opening
// it until FirstIndex and LastIndex return, one GetLog(last) (what raft
// does first on start), one GetLog of the entry half way between first and
// last (an entry neither end of the log, which opening may have read) and
// coldSeqGets GetLogs in order after it. It runs -coldruns times a round; each run is one
// sample of the medians.
func (f *filled) coldOpen(context.Context) (measurement, error) {
	first, last, err := f.bounds()
	if err != nil {
		return nil, err
	}
	err = f.s.Close()
	f.s = nil
	if err != nil {
		return nil, fmt.Errorf("close: %w", err)
	}
	if f.cfg.cold == coldDrop {
		err = evictDropCaches()
	} else {
		err = pagecache.Evict(f.dir)
	}
	if err != nil {
		return nil, err
	}
	cached, err := pagecache.ResidentDir(f.dir, nil)
	if err != nil {
		return nil, err
	}
	runtime.GC()

	t0 := time.Now()
	if f.s, err = f.kind.open(f.dir); err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	gotFirst, gotLast, err := f.bounds()
	if err != nil {
		return nil, err
	}
	opened := time.Since(t0)
	if gotFirst != first || gotLast != last {
		return nil, fmt.Errorf("after reopen: first %d last %d (want %d, %d)", gotFirst, gotLast, first, last)
	}

	var out raft.Log
	get := func(i uint64) (time.Duration, error) {
		t := time.Now()
		err := f.s.GetLog(i, &out)
		d := time.Since(t)
		if err != nil {
			return 0, fmt.Errorf("GetLog(%d) after a cold reopen: %w", i, err)
		}
		if out.Index != i || len(out.Data) != f.cfg.entrySize {
			return 0, fmt.Errorf("GetLog(%d) after a cold reopen returned index %d with %d bytes", i, out.Index, len(out.Data))
		}
		return d, nil
	}
	getLast, err := get(last)
	if err != nil {
		return nil, err
	}
	mid := first + (last-first)/2
	getMid, err := get(mid)
	if err != nil {
		return nil, err
	}
	n := min(uint64(coldSeqGets), last-mid)
	t1 := time.Now()
	for i := mid + 1; i <= mid+n; i++ {
		if _, err := get(i); err != nil {
			return nil, err
		}
	}
	seq := time.Since(t1)
	f.report(wCold, "open %s  GetLog(last) %s  GetLog(middle) %s  %d in order %s  (cached before open: %s)",
		fmtSeconds(opened.Seconds()), fmtSeconds(getLast.Seconds()), fmtSeconds(getMid.Seconds()),
		n, fmtSeconds(seq.Seconds()), fmtBytes(float64(cached)))
	return measurement{
		mOpen:      opened.Seconds(),
		mFirstGet:  getLast.Seconds(),
		mGetMid:    getMid.Seconds(),
		mSeqGets:   seq.Seconds(),
		mCachedPre: float64(cached),
	}, nil
}
