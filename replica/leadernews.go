package replica

import (
	"sync"

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
