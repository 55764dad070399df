package node

import (
	"errors"

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
// writes fail with commitlog.ErrNoSpace and succeed again once space is
// freed.
type failStopStore struct {
	*raftstore.Store
	n *Node
}

func (s failStopStore) check(err error) error {
	if err != nil && !errors.Is(err, commitlog.ErrNoSpace) {
		if ferr := s.n.db.Err(); ferr != nil {
			s.n.failStop(ferr)
		}
	}
	return err
}

func (s failStopStore) StoreLog(l *raft.Log) error { return s.check(s.Store.StoreLog(l)) }

func (s failStopStore) StoreLogs(logs []*raft.Log) error { return s.check(s.Store.StoreLogs(logs)) }

func (s failStopStore) DeleteRange(min, max uint64) error {
	return s.check(s.Store.DeleteRange(min, max))
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
