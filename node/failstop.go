package node

import (
	"errors"
	"syscall"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/raftstore"
)

// failStopStore is raft's log and stable store. When the store fails (a
// write or fsync error, see raftstore.DB.Err), the node stops: after a
// failed fsync the kernel may have dropped the dirty pages, so nothing
// written since the last good sync can be trusted, and a node that went on
// would acknowledge entries it may not hold. Restarting reopens the store
// and recovers what was durable. Running out of space is not a failure:
// writes fail with commitlog.ErrNoSpace (or ENOSPC creating a segment)
// and succeed again once space is freed; raft's leader resends what a
// follower failed to store, backing off up to about ten seconds.
type failStopStore struct {
	*raftstore.Store
	n *Node
}

func (s failStopStore) check(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, commitlog.ErrNoSpace) || errors.Is(err, syscall.ENOSPC) {
		s.n.metrics.storeErrors.WithLabelValues("no_space").Inc()
		s.n.space.invalidate()
		return err
	}
	s.n.metrics.storeErrors.WithLabelValues("io").Inc()
	if ferr := s.n.db.Err(); ferr != nil {
		s.n.failStop(ferr)
	}
	return err
}

func (s failStopStore) StoreLog(l *raft.Log) error { return s.check(s.Store.StoreLog(l)) }

// StoreLogs stores logs and tells the proposer when it did: on the
// leader, raft stores each batch it takes before it takes the next.
func (s failStopStore) StoreLogs(logs []*raft.Log) error {
	err := s.check(s.Store.StoreLogs(logs))
	if err == nil {
		s.n.prop.Stored()
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
		if p := s.n.snap.Latest.Load(); p != nil && p.Index == index {
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

// failStop stops the node after a storage failure. Done is closed and Err
// returns the failure.
func (n *Node) failStop(err error) {
	n.failOnce.Do(func() {
		n.failErr = err
		n.cfg.Logger.Error("storage failed: stopping the node; restart it to recover what was durable", "error", err)
		close(n.failed)
		go n.Close()
	})
}

// Done is closed when the node stopped by itself after a storage failure.
func (n *Node) Done() <-chan struct{} { return n.failed }

// Err returns the storage failure that stopped the node, or nil.
func (n *Node) Err() error {
	select {
	case <-n.failed:
		return n.failErr
	default:
		return nil
	}
}
