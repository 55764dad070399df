package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Metric names: the figures a measurement holds.
const (
	mCalls      = "calls"
	mEntriesSec = "entries/s"
	mMiBSec     = "MiB/s"
	mP50        = "p50"
	mP99        = "p99"
	mGetsSec    = "gets/s"
	mTime       = "time"
	mClose      = "close"
	mOpen       = "open"
	mFirstGet   = "first get"
	mFill       = "fill"
	mApparent   = "apparent"
	mAllocated  = "allocated"
	mFiles      = "files"
	mFsyncs     = "fsyncs/call"
	mElapsed    = "elapsed"
	mGetMid     = "GetLog(middle)"
	mSeqGets    = "sequential gets"
	mCachedPre  = "cached before open"
)

// measurement is one round's figures for one row, by metric name.
type measurement map[string]float64

// rowKey names a row: a workload, a case within it ("" if it has one
// case) and a store.
type rowKey struct{ workload, variant, store string }

// results collects one measurement per round for every row.
type results struct {
	rows map[rowKey][]measurement
}

func newResults() *results { return &results{rows: map[rowKey][]measurement{}} }

func (r *results) add(k rowKey, m measurement) { r.rows[k] = append(r.rows[k], m) }

// median returns the median over rounds of one metric of a row, NaN if
// the row has none.
func (r *results) median(k rowKey, metric string) float64 {
	var xs []float64
	for _, m := range r.rows[k] {
		if v, ok := m[metric]; ok {
			xs = append(xs, v)
		}
	}
	return median(xs)
}

// column is one figure of a table.
type column struct {
	title  string
	metric string
	format func(float64) string
}

// ratio is a column comparing a metric with raft-wal's: the row's median
// divided by raft-wal's.
type ratio struct {
	title  string
	metric string
}

// workload describes one workload and its table.
type workload struct {
	key     string // name in -only
	title   string
	note    string // what is measured, printed under the title
	columns []column
	ratios  []ratio
}

// Workload keys, in the order of the report.
const (
	wStoreLogs  = "storelogs"
	wGetLog     = "getlog"
	wDeleteHead = "deletehead"
	wDeleteTail = "deletetail"
	wReopen     = "reopen"
	wDisk       = "disk"
	wGroups     = "groups"
	wCold       = "coldopen"
)

// workloads lists every workload; cfg supplies the sizes for the notes.
func workloads(cfg *config) []workload {
	fill := fmt.Sprintf("%s entries of %d B stored in batches of %d", fmtCount(float64(cfg.entries)), cfg.entrySize, cfg.fillBatch)
	return []workload{
		{
			key:   wStoreLogs,
			title: "StoreLogs",
			note: "One goroutine calls StoreLogs back to back on a fresh store, as raft does, for " + cfg.runLength(true) +
				". MiB/s counts payload bytes only. p50/p99 are per StoreLogs call. " +
				"In the compacted case the store is compacted as raft's defaults do (every 8,192 entries, " +
				"DeleteRange of all but the last 10,240), and those calls are timed too.",
			columns: []column{
				{"calls", mCalls, fmtCount},
				{"entries/s", mEntriesSec, fmtCount},
				{"MiB/s", mMiBSec, fmtMiB},
				{"p50", mP50, fmtSeconds},
				{"p99", mP99, fmtSeconds},
			},
			ratios: []ratio{{"entries/s ÷ raft-wal (higher is better)", mEntriesSec}},
		},
		{
			key:   wGetLog,
			title: "GetLog at random indexes",
			note:  "GetLog of uniformly random indexes in a store of " + fill + ", for " + cfg.runLength(false) + ", warm page cache.",
			columns: []column{
				{"gets/s", mGetsSec, fmtCount},
				{"p50", mP50, fmtSeconds},
				{"p99", mP99, fmtSeconds},
			},
			ratios: []ratio{{"gets/s ÷ raft-wal (higher is better)", mGetsSec}},
		},
		{
			key:   wDeleteHead,
			title: "Prefix DeleteRange",
			note:  fmt.Sprintf("One DeleteRange(first, first+%d-1) on a store of %s (log compaction after a snapshot).", cfg.deleteHead, fill),
			columns: []column{
				{"time", mTime, fmtSeconds},
			},
			ratios: []ratio{{"time ÷ raft-wal (lower is better)", mTime}},
		},
		{
			key:   wDeleteTail,
			title: "Suffix truncation",
			note:  fmt.Sprintf("One DeleteRange(last-%d+1, last) on a store of %s (a follower dropping a conflicting tail).", cfg.deleteTail, fill),
			columns: []column{
				{"time", mTime, fmtSeconds},
			},
			ratios: []ratio{{"time ÷ raft-wal (lower is better)", mTime}},
		},
		{
			key:   wReopen,
			title: "Reopen",
			note: "Close, then open the store of " + fill + " until FirstIndex and LastIndex return; then one GetLog(last), " +
				"which raft does first on start. Files are in the page cache (caches are not dropped).",
			columns: []column{
				{"close", mClose, fmtSeconds},
				{"open + First/LastIndex", mOpen, fmtSeconds},
				{"first GetLog", mFirstGet, fmtSeconds},
			},
			ratios: []ratio{{"open ÷ raft-wal (lower is better)", mOpen}},
		},
		{
			key:   wDisk,
			title: "Bytes on disk",
			note: fmt.Sprintf("The store's directory after storing %s (%s of payload), store still open. "+
				"Apparent: sum of file sizes; allocated: st_blocks × 512. Fill time is the time to store them.",
				fill, fmtBytes(float64(cfg.entries*cfg.entrySize))),
			columns: []column{
				{"fill time", mFill, fmtSeconds},
				{"files", mFiles, fmtCount},
				{"apparent", mApparent, fmtBytes},
				{"allocated", mAllocated, fmtBytes},
			},
			ratios: []ratio{
				{"apparent ÷ raft-wal", mApparent},
				{"allocated ÷ raft-wal", mAllocated},
			},
		},
		{
			// Printed by printGroupsTable.
			key:   wGroups,
			title: "Many raft groups on one commit log",
			note:  groupsNote(cfg),
		},
		{
			key:   wCold,
			title: "Reopen with a cold page cache",
			note: "Close the store of " + fill + ", sync its files and evict them from the page cache (" + coldNote(cfg) +
				"), then open it until FirstIndex and LastIndex return; then GetLog(last), which raft does first on start, " +
				"GetLog(middle) of the entry half way between first and last, and " + fmtCount(coldSeqGets) +
				" GetLogs in order after it, as a follower catching up is sent. " +
				fmt.Sprintf("%d cold reopens per round; medians over all of them. ", cfg.coldRuns) +
				"\"cached\" is what mincore found of the store's files in the page cache before the open (should be 0).",
			columns: []column{
				{"cached", mCachedPre, fmtBytes},
				{"open + First/LastIndex", mOpen, fmtSeconds},
				{"GetLog(last)", mFirstGet, fmtSeconds},
				{"GetLog(middle)", mGetMid, fmtSeconds},
				{fmtCount(coldSeqGets) + " GetLogs in order", mSeqGets, fmtSeconds},
			},
			ratios: []ratio{
				{"open ÷ raft-wal", mOpen},
				{"GetLog(last) ÷ raft-wal", mFirstGet},
				{"GetLog(middle) ÷ raft-wal", mGetMid},
				{"in order ÷ raft-wal", mSeqGets},
			},
		},
	}
}

// coldNote says how workload 8 empties the page cache.
func coldNote(cfg *config) string {
	if cfg.cold == coldDrop {
		return "echo 3 > /proc/sys/vm/drop_caches: the whole machine's page cache, dentries and inodes"
	}
	return "posix_fadvise DONTNEED on each of its files; directories stay cached"
}

// printTable writes w's results as a Markdown table: one row per case and
// store.
func printTable(out io.Writer, n int, w workload, variants []string, stores []storeKind, res *results) {
	fmt.Fprintf(out, "## %d. %s\n\n%s\n\n", n, w.title, w.note)
	var head []string
	if len(variants) > 1 || variants[0] != "" {
		head = append(head, "case")
	}
	head = append(head, "store")
	for _, c := range w.columns {
		head = append(head, c.title)
	}
	for _, r := range w.ratios {
		head = append(head, r.title)
	}
	fmt.Fprintf(out, "| %s |\n", strings.Join(head, " | "))
	fmt.Fprintf(out, "|%s\n", strings.Repeat(" --- |", len(head)))
	for _, v := range variants {
		for _, s := range stores {
			k := rowKey{w.key, v, s.key}
			var cells []string
			if len(variants) > 1 || v != "" {
				cells = append(cells, v)
			}
			cells = append(cells, s.name)
			for _, c := range w.columns {
				cells = append(cells, c.format(res.median(k, c.metric)))
			}
			for _, r := range w.ratios {
				base := res.median(rowKey{w.key, v, walKey}, r.metric)
				x := res.median(k, r.metric)
				if base == 0 {
					x = math.NaN()
				}
				cells = append(cells, fmtRatio(x/base))
			}
			fmt.Fprintf(out, "| %s |\n", strings.Join(cells, " | "))
		}
	}
	fmt.Fprintln(out)
}
