package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The disk ceilings of workload 7. A raft group calls StoreLogs from one
// goroutine and the call must be durable when it returns, so one shared
// log can complete at most one call per group per fdatasync: with N
// groups, N × 16 entries per sync. The ceiling rows measure the fastest
// that can go on this disk, with no store at all: one file, one writer, a
// pwrite of N × 16 KiB and an fdatasync, back to back.
const (
	// ceilingNewKey writes over blocks reserved with fallocate and never
	// written, as a growing log does: each sync must also commit the file
	// system's journal to mark them written.
	ceilingNewKey = "ceiling-new"
	// ceilingWrittenKey writes over blocks written before, as a log that
	// reuses the segments its groups compacted away does.
	ceilingWrittenKey = "ceiling-written"
)

// ceilingRows names the ceiling rows in the order printed.
var ceilingRows = []struct{ key, name string }{
	{ceilingNewKey, "disk ceiling, new blocks: pwrite + fdatasync of N × 16 KiB"},
	{ceilingWrittenKey, "disk ceiling, written blocks: pwrite + fdatasync of N × 16 KiB"},
}

// ceilingLimits bound one ceiling case.
const (
	ceilingDuration = time.Second
	ceilingFileSize = 256 << 20
)

// diskCeiling measures one ceiling case for n groups in dir, which it
// creates and leaves for the caller to remove. written chooses the
// blocks: reserved only, or zero-filled (and synced) beforehand.
func diskCeiling(dir string, n int, written bool, seed uint64) (measurement, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "ceiling"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	call := n * groupBatch * groupEntrySize
	size := ceilingFileSize / call * call
	if size == 0 {
		return nil, fmt.Errorf("%d groups write more than %d bytes per sync", n, ceilingFileSize)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil {
		return nil, fmt.Errorf("fallocate: %w", err)
	}
	if written {
		zero := make([]byte, 1<<20)
		for off := 0; off < size; off += len(zero) {
			if _, err := f.WriteAt(zero[:min(len(zero), size-off)], int64(off)); err != nil {
				return nil, err
			}
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return nil, fmt.Errorf("fdatasync: %w", err)
	}
	buf := make([]byte, 0, call)
	for len(buf) < call {
		buf = append(buf, randomPayload(groupEntrySize, seed)...)
	}
	lat := newSampler(seed)
	syncs := 0
	start := time.Now()
	// New blocks are used once; written ones round after round.
	for off := 0; time.Since(start) < ceilingDuration && (written || off < size); off += call {
		if off >= size {
			off = 0
		}
		t0 := time.Now()
		if _, err := f.WriteAt(buf, int64(off)); err != nil {
			return nil, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return nil, fmt.Errorf("fdatasync: %w", err)
		}
		lat.add(time.Since(t0))
		syncs++
	}
	elapsed := time.Since(start)
	p := lat.percentiles(50, 99)
	return measurement{
		mCalls:      float64(syncs * n),
		mEntriesSec: float64(syncs*n*groupBatch) / elapsed.Seconds(),
		mP50:        p[0],
		mP99:        p[1],
		mFsyncs:     1 / float64(n),
		mElapsed:    elapsed.Seconds(),
	}, nil
}

// ceilingNote explains the ceiling rows of workload 7.
const ceilingNote = "Disk ceiling rows: no store, just what this disk allows a shared log. Each group's StoreLogs " +
	"must be durable before it returns and the group's next call cannot start before that, so one fdatasync can " +
	"complete at most one call of every group: N × 16 entries. The rows time one writer doing a pwrite of N × 16 KiB " +
	"and an fdatasync, back to back, for 1 s, on a file of 256 MiB reserved with fallocate: over blocks never written " +
	"(as a growing log writes; the sync must also commit the file system's journal to mark them written), and over " +
	"blocks zero-filled beforehand (as a log that reuses compacted segments writes). entries/s = N × 16 per sync; no " +
	"encoding, checksums, indexes or scheduling, so a store on one log can approach these figures but not pass them."
