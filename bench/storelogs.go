package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/hashicorp/raft"
)

// appendCase is one StoreLogs shape: entries per call and payload size,
// and whether the log is compacted as it grows.
type appendCase struct {
	name  string
	batch int
	size  int
	// compact, when set, deletes the log's prefix every compactEvery
	// entries, keeping compactKeep, as raft does after each snapshot
	// (its defaults: SnapshotThreshold 8192, TrailingLogs 10240). The
	// DeleteRange calls are timed as part of the case.
	compact bool
}

// Raft's default snapshot threshold and trailing logs, used by compacted
// cases.
const (
	compactEvery = 8192
	compactKeep  = 10240
)

// appendCases are the StoreLogs shapes of workload 1: a lone entry (a
// leader under light load), full batches of small, medium and large
// entries.
var appendCases = []appendCase{
	{"1 x 1 KiB", 1, 1 << 10, false},
	{"64 x 1 KiB", 64, 1 << 10, false},
	{"64 x 16 KiB", 64, 16 << 10, false},
	{"64 x 128 B", 64, 128, false},
	{"64 x 1 KiB, compacted", 64, 1 << 10, true},
}

// appendedAt is the AppendedAt of every entry, so that every store encodes
// the same bytes in every run.
var appendedAt = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// newBatch returns n entries that share payload, ready for setIndexes.
// Stores encode or copy entries in StoreLogs, so one batch is reused for
// every call and memory stays bounded.
func newBatch(n int, payload []byte) []*raft.Log {
	batch := make([]*raft.Log, n)
	for i := range batch {
		batch[i] = &raft.Log{Term: 1, Type: raft.LogCommand, Data: payload, AppendedAt: appendedAt}
	}
	return batch
}

// setIndexes numbers batch from next on and returns the index after it.
func setIndexes(batch []*raft.Log, next uint64) uint64 {
	for _, l := range batch {
		l.Index = next
		next++
	}
	return next
}

// randomPayload returns n pseudo-random bytes, so that nothing along the
// way can compress them.
func randomPayload(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

// runStoreLogs runs workload 1: every round, every case, every store on a
// fresh directory, the stores in a rotating order.
func runStoreLogs(ctx context.Context, cfg *config, base string, res *results, progress io.Writer) error {
	for round := range cfg.rounds {
		for ci, c := range appendCases {
			for _, kind := range rotate(cfg.stores, round+ci) {
				if err := ctx.Err(); err != nil {
					return err
				}
				dir := filepath.Join(base, fmt.Sprintf("r%d-storelogs-%d-%s", round, ci, kind.key))
				m, err := storeLogsCase(cfg, kind, dir, c, cfg.seed+uint64(round))
				if rerr := removeAndSettle(dir); err == nil {
					err = rerr
				}
				if err != nil {
					return fmt.Errorf("storelogs %s, %s: %w", c.name, kind.name, err)
				}
				res.add(rowKey{wStoreLogs, c.name, kind.key}, m)
				fmt.Fprintf(progress, "round %d/%d  storelogs %-11s  %-25s %12s entries/s  p50 %s  p99 %s\n",
					round+1, cfg.rounds, c.name, kind.name, fmtCount(m[mEntriesSec]), fmtSeconds(m[mP50]), fmtSeconds(m[mP99]))
			}
		}
	}
	return nil
}

// storeLogsCase opens kind in dir and calls StoreLogs with c's batches
// until cfg's count, duration or byte budget is spent.
func storeLogsCase(cfg *config, kind storeKind, dir string, c appendCase, seed uint64) (measurement, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s, err := kind.open(dir)
	if err != nil {
		return nil, err
	}
	batch := newBatch(c.batch, randomPayload(c.size, seed))
	callBytes := int64(c.batch * c.size)
	lat := newSampler(seed)
	next := uint64(1)
	var calls int
	var written int64
	first, lastCompact := uint64(1), uint64(0)

	runtime.GC()
	start := time.Now()
	now := start
	for cfg.more(calls, now.Sub(start)) && written < cfg.maxBytes {
		next = setIndexes(batch, next)
		t0 := time.Now()
		if err := s.StoreLogs(batch); err != nil {
			s.Close()
			return nil, err
		}
		if last := next - 1; c.compact && last-lastCompact >= compactEvery && last > compactKeep {
			// A snapshot was taken: drop all but the trailing entries.
			if err := s.DeleteRange(first, last-compactKeep); err != nil {
				s.Close()
				return nil, err
			}
			first, lastCompact = last-compactKeep+1, last
		}
		now = time.Now()
		lat.add(now.Sub(t0))
		calls++
		written += callBytes
	}
	elapsed := now.Sub(start).Seconds()

	if err := s.Close(); err != nil {
		return nil, err
	}
	ps := lat.percentiles(50, 99)
	return measurement{
		mCalls:      float64(calls),
		mEntriesSec: float64(calls*c.batch) / elapsed,
		mMiBSec:     float64(written) / (1 << 20) / elapsed,
		mP50:        ps[0],
		mP99:        ps[1],
	}, nil
}
