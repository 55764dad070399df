package replica

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/raftstore"
)

// failStopStore is raft's log and stable store. When the store fails (a
// write or fsync error, see raftstore.DB.Err), the node stops (Config.StoreError): after a
// failed fsync the kernel may have dropped the dirty pages, so nothing
// written since the last good sync can be trusted, and a node that went on
// would acknowledge entries it may not hold. Restarting reopens the store
// and recovers what was durable. Running out of space is not a failure:
// writes fail with commitlog.ErrNoSpace (or ENOSPC creating a segment)
// and succeed again once space is freed; raft's leader resends what a
// follower failed to store, backing off up to about ten seconds.
type failStopStore struct {
	*raftstore.Store
	r *Replica
}

// check hands a store error to Config.StoreError, which stops the node
// when the store failed.
func (s failStopStore) check(err error) error {
	if err != nil && s.r.cfg.StoreError != nil {
		s.r.cfg.StoreError(err)
	}
	return err
}

func (s failStopStore) StoreLog(l *raft.Log) error { return s.check(s.Store.StoreLog(l)) }

// StoreLogs stores logs and tells the proposer when it did: on the
// leader, raft stores each batch it takes before it takes the next.
func (s failStopStore) StoreLogs(logs []*raft.Log) error {
	err := s.check(s.Store.StoreLogs(logs))
	if err == nil {
		s.r.prop.Stored()
	}
	return err
}

func (s failStopStore) DeleteRange(min, max uint64) error {
	return s.check(s.Store.DeleteRange(min, max))
}

// IsMonotonic reports false, although the store is monotonic (the node
// opens it with raftstore.Options.Monotonic, so it never accepts a gap),
// so that hashicorp/raft does not wipe the log after installing a snapshot.
//
// A follower can hold entries past a snapshot the leader sends it (a
// deposed leader with uncommitted entries, a node the leader's replication
// gave up on). With a MonotonicLogStore, raft v1.8.0 then deletes every
// entry, up to the store's last index, but keeps its own idea of the last
// index: the node accepted entries after a hole and panicked ("log not
// found") applying the first missing one, at every restart. Without it,
// raft compacts only up to the snapshot, which its unbounded TrailingLogs
// makes a no-op, and keeps the entries after it. The node itself deletes
// its entries up to the snapshot when a snapshot arrives
// (logView.dropLiveThrough), so no stale entry below the snapshot remains
// and no gap is ever stored; the entries after it stay, and raft's usual
// conflict check replaces those the leader's log does not have.
func (failStopStore) IsMonotonic() bool { return false }

// GetLog reads an entry. The last entry of the newest snapshot, once
// deleted, reads as a no-op entry with the snapshot's index and term.
//
// That is for the follower's check of the leader's previous entry, the
// only reader of that index: hashicorp/raft compares the previous index
// with the snapshot's only when the snapshot is its last entry, and
// otherwise reads the log, so a follower holding entries past the snapshot
// (see IsMonotonic) would refuse every AppendEntries that follows the
// snapshot, and the leader would send the snapshot again, forever. A
// leader never reads that entry: it sends the previous entry of the
// snapshot's index from the snapshot, and the entries below it are gone.
func (s failStopStore) GetLog(index uint64, out *raft.Log) error {
	err := s.Store.GetLog(index, out)
	if errors.Is(err, raft.ErrLogNotFound) {
		if p := s.r.snap.Latest.Load(); p != nil && p.Index == index {
			*out = raft.Log{Index: p.Index, Term: p.Term, Type: raft.LogNoop}
			return nil
		}
	}
	return err
}

func (s failStopStore) Set(key, val []byte) error { return s.check(s.Store.Set(key, val)) }

func (s failStopStore) SetUint64(key []byte, val uint64) error {
	return s.check(s.Store.SetUint64(key, val))
}

// CheckLog reads what raft.NewRaft reads of the log when it starts (the
// last entry, and every entry after the newest snapshot) and returns an
// error naming the first entry that does not read, so that a damaged or
// missing entry stops the start rather than panicking in raft.
func (r *Replica) CheckLog() error {
	var from uint64 = 1
	if p := r.snap.Latest.Load(); p != nil {
		from = p.Index + 1
	}
	_, last := Bounds(r.view.Live)
	if last == 0 {
		return nil
	}
	store := failStopStore{Store: r.view.Live, r: r}
	var l raft.Log
	check := func(i uint64) error {
		if err := store.GetLog(i, &l); err != nil {
			return fmt.Errorf("raft's log, entry %d: %w", i, err)
		}
		return nil
	}
	if last < from {
		return check(last)
	}
	for i := from; i <= last; i++ {
		if err := check(i); err != nil {
			return err
		}
	}
	return nil
}
