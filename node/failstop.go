package node

import (
	"github.com/raftlog/raftlog/commitlog"
)

// storeError is replica.Config.StoreError: when the store failed (a
// write or fsync error, see raftstore.DB.Err), the node stops: after a
// failed fsync the kernel may have dropped the dirty pages, so nothing
// written since the last good sync can be trusted, and a node that went on
// would acknowledge entries it may not hold. Restarting reopens the store
// and recovers what was durable. Running out of space is not a failure:
// writes fail with commitlog.ErrNoSpace (or ENOSPC creating a segment)
// and succeed again once space is freed; raft's leader resends what a
// follower failed to store, backing off up to about ten seconds.
func (n *Node) storeError(err error) {
	if commitlog.IsNoSpace(err) {
		n.metrics.storeErrors.WithLabelValues("no_space").Inc()
		n.space.invalidate()
		return
	}
	n.metrics.storeErrors.WithLabelValues("io").Inc()
	if ferr := n.db.Err(); ferr != nil {
		n.failStop(ferr)
	}
}

// failStop stops the node after a storage failure. Done is closed and Err
// returns the failure.
func (n *Node) failStop(err error) {
	n.failOnce.Do(func() {
		n.failErr = err
		n.cfg.Logger.Error("storage failed: stopping the node; restart it to recover what was durable", "error", err)
		// Until Close has shut every raft group down, none takes a new
		// term, which it could not store (voteGate.stopRaft).
		if n.gate != nil {
			n.gate.stopRaft()
		}
		n.host.stopRaft()
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
