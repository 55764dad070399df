package raftstore

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/commitlog/vfs"
)

// FlushMode says when StoreLogs returns.
type FlushMode int

const (
	// SyncFlush returns from StoreLogs and DeleteRange only after the
	// entries are durable (group commit). This is the default, and what
	// Raft's safety argument assumes.
	SyncFlush FlushMode = iota
	// AsyncFlush returns from StoreLogs once the entries are written to the
	// page cache and syncs in the background (every 500 ms, and at least
	// every 10 s). UNSAFE on power loss or an operating-system crash: a
	// node can lose entries it acknowledged, and with them a vote or a
	// commit the cluster counted on. A crash of the process alone loses
	// nothing. Stable-store writes and DeleteRange stay synchronous.
	AsyncFlush
)

// Options configure a Store or DB. Nil or zero Options mean the defaults.
type Options struct {
	// Flush is SyncFlush (default) or AsyncFlush (unsafe on power loss).
	Flush FlushMode
	// SegmentSize is the size of commit-log segment files (default 64 MiB).
	// An entry, encoded, must fit in one segment.
	SegmentSize int64
	// GroupCommitWait bounds how long the commit log waits, before an
	// fdatasync, for the StoreLogs calls it expects to share it, as a
	// multiple of the last sync's duration: commitlog.Options'
	// GroupCommitWait (default a quarter). Groups whose raft runs over a
	// network call StoreLogs again only after a round trip several syncs
	// long; package node sets 4 there (8 raft groups on 3 nodes: more
	// than twice the entries per fdatasync, at the same entries per
	// second within the spread of the runs). Only used with SyncFlush.
	GroupCommitWait float64
	// CheckpointInterval is how often the indexes are synced and the
	// checkpoint written (default 1 s); it bounds the tail recovery scans.
	CheckpointInterval time.Duration
	// MetricsPrefix prefixes the go-metrics keys (default "raftstore").
	MetricsPrefix []string
	// Metrics, when set, also receives the commit log's metrics (see
	// commitlog.Metrics), for example to export them as Prometheus
	// histograms; they go to go-metrics in any case.
	Metrics commitlog.Metrics
	// NoGoMetrics stops the reports to go-metrics, for a caller that
	// exports Metrics itself and would pay for both.
	NoGoMetrics bool
	// FS is the file system (default the operating system's); tests pass
	// a faultfs.FS.
	FS vfs.FS
	// Monotonic makes every store of the DB refuse a StoreLogs batch that
	// leaves a gap after its last entry, and report IsMonotonic() true.
	// DANGEROUS with hashicorp/raft v1.8.0 on its own: raft then empties
	// the whole store after installing a snapshot but keeps its own last
	// index, and a follower whose log ran past the snapshot panics "log
	// not found" (hashicorp/raft#697). Set it only when raft gets a
	// wrapper of the store that reports IsMonotonic() false and deletes
	// what a received snapshot covers itself, as package node does. The
	// default (false) accepts a gap the way raft-boltdb does, by dropping
	// the entries before it; see Store.StoreLogs.
	Monotonic bool
	// Logger receives, at info level, what opening the DB found and did:
	// a store created or opened after a clean shutdown, and after a crash
	// the commit-log tail scanned from the checkpoint, a torn record cut
	// off, leftover files removed, the records replayed into the indexes,
	// a batch the crash cut short removed and the index slots rebuilt per
	// group; and each group dropped (DB.DropGroup), with a warning if its
	// index directory could not be removed (the next open removes it);
	// and, as a warning, a lost stable state that UnsafeResetStableState
	// opened anyway.
	// Default: nothing is logged (hclog.NewNullLogger).
	Logger hclog.Logger
	// IgnoreBoltDB opens a DB that holds no raft state even when a
	// raft-boltdb store (raft.db) lies in its directory or the directory's
	// parent, instead of refusing with ErrBoltDBFound: set it to open the
	// destination of Migrate, or when starting afresh is what you want.
	IgnoreBoltDB bool
	// UnsafeResetStableState opens a DB whose stable state is lost
	// (ErrStableLost: neither stable file is valid, though the DB was
	// used) with an empty one instead of refusing it: every group starts
	// with term 0 and no vote, and logs a warning. UNSAFE as raft's
	// StableStore: a node that forgets its vote can vote twice in a term.
	// Set it only when raft keeps its term and vote in another
	// StableStore and the DB is only its LogStore. The stable state also
	// held where each dropped group was dropped (DB.DropGroup): a group
	// dropped since the last checkpoint may come back with its entries.
	UnsafeResetStableState bool

	// goMetrics replaces go-metrics' global functions; for tests.
	goMetrics goMetrics
}

func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Flush != SyncFlush && c.Flush != AsyncFlush {
		return c, fmt.Errorf("raftstore: unknown flush mode %d", c.Flush)
	}
	if c.CheckpointInterval < 0 {
		return c, fmt.Errorf("raftstore: negative checkpoint interval %v", c.CheckpointInterval)
	}
	if c.MetricsPrefix == nil {
		c.MetricsPrefix = []string{"raftstore"}
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c, nil
}

// logOptions returns the commit-log options for o.
func (o *Options) logOptions() *commitlog.Options {
	flush := commitlog.SyncFlush
	if o.Flush == AsyncFlush {
		flush = commitlog.AsyncFlushUnsafe
	}
	return &commitlog.Options{
		SegmentSize:        o.SegmentSize,
		Flush:              flush,
		CheckpointInterval: o.CheckpointInterval,
		GroupCommitWait:    o.GroupCommitWait,
		FS:                 o.FS,
	}
}
