package replica

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Leader news: a request that came while the replica knew no live leader
// waits for one (awaitLeader). It wakes as soon as raft hears from a new
// leader, or this replica begins a stint, rather than at its next poll.

// leaderNews is a broadcast of leader changes.
type leaderNews struct {
	mu sync.Mutex
	ch chan struct{} // closed by the next announcement; nil while nobody waits
}

// next returns a channel that the next announcement closes.
func (n *leaderNews) next() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

// announce wakes everyone waiting on a channel from next.
func (n *leaderNews) announce() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// isLeaderObservation is the filter of the replica's raft observer.
func isLeaderObservation(o *raft.Observation) bool {
	_, ok := o.Data.(raft.LeaderObservation)
	return ok
}

// watchLeaderNews announces raft's leader observations until the replica
// shuts down. Raft never blocks on ch (a full channel drops one), and one
// announcement wakes every waiter.
func (r *Replica) watchLeaderNews(ch <-chan raft.Observation) {
	defer r.wg.Done()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-ch:
			r.news.announce()
		}
	}
}

// AwaitSuccessor waits until raft follows a leader other than this
// replica, ctx ends, or the replica stops; it reports whether raft does.
// A leader that handed its leadership over (raft.LeadershipTransfer)
// waits so before it closes its raft port: the other voters have then
// been asked for their votes by the successor, and can tell the port's
// closing from a death (node/handover.go).
func (r *Replica) AwaitSuccessor(ctx context.Context) bool {
	tick := time.NewTicker(awaitPoll) // raft drops an observation when its channel is full
	defer tick.Stop()
	for {
		news := r.news.next()
		if _, id := r.raft.LeaderWithID(); id != "" && string(id) != r.cfg.NodeID {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-r.ctx.Done():
			return false
		case <-tick.C:
		case <-news:
		}
	}
}
