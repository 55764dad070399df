package node

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// The admin server's probes (admin.go). They answer different questions,
// for different callers:
//
//   - /health, liveness: does the process work, its store included? It
//     fails once the store has failed (a write or fsync error latched in
//     raftstore.DB.Err: after a failed fsync nothing written since the last
//     good one can be trusted), once the node stopped after such a failure,
//     was removed from the cluster, or is shutting down. Restarting is the
//     cure for each: a restart reopens the store and recovers what was
//     durable, and a removed node refuses to start, which an operator
//     sees. It does not fail for anything the cluster can heal by itself
//     (no leader, a partition, catching up, a full disk), where restarting
//     would only make things worse.
//   - /ready, readiness: can this node serve clients now? A voter that is
//     in touch with the cluster: a follower that heard from its leader
//     within the leader lease (Config.LeaderLeaseTimeout) and, since it
//     started, has applied a commit index its leader sent it
//     (notCaughtUp), or a leader
//     whose first entry of its term has committed (before that it cannot
//     tell what is committed, and reads wait) and that confirms its
//     leadership with a quorum of voters within the lease, as a
//     linearizable read does. A nonvoter (a new member catching up), a
//     candidate, a node without a leader or cut off from it beyond the
//     lease, and any node /health fails, are not ready.
//
// A leader that refuses appends for want of space (space.go) stays ready:
// it serves reads and trims, and the trim is how space comes back; every
// node would answer the same, since appends go to the leader. /ready's
// body says so, /status has it in "refusing", and raftlog_appends_refusing
// is 1.

// unhealthy returns why the node fails /health, "" when it does not.
func (n *Node) unhealthy() string {
	if err := n.Err(); err != nil {
		return fmt.Sprintf("stopped after a storage failure: %v", err)
	}
	if err := n.db.Err(); err != nil {
		return fmt.Sprintf("the store failed: %v; the node is stopping; restart it to recover what was durable", err)
	}
	switch {
	case n.removed.Load():
		return "removed from the cluster"
	case n.ctx.Err() != nil:
		return "shutting down"
	case n.raft.State() == raft.Shutdown:
		return "raft is shut down"
	}
	return ""
}

// notReady returns why the node fails /ready, "" when it is ready, and in
// that case what it is. It waits up to the leader lease, or until ctx
// ends, for a leader's quorum to confirm its leadership.
func (n *Node) notReady(ctx context.Context) (why, ready string) {
	if why := n.unhealthy(); why != "" {
		return why, ""
	}
	if n.deciding.Load() {
		return "deciding whether to bootstrap a new cluster or join the running one", ""
	}
	switch suffrage, ok := n.selfSuffrage(); {
	case !ok:
		return "not in the cluster's configuration yet: a new member catching up with the leader", ""
	case suffrage != raft.Voter:
		return "a nonvoter: a new member catching up with the leader, ready once promoted to voter", ""
	case !n.gate.allowed.Load():
		return "a new member not voting yet: it holds the entry that makes it a voter but has not caught up to it", ""
	}
	lease := n.cfg.LeaderLeaseTimeout
	switch st := n.raft.State(); st {
	case raft.Leader:
		return n.leaderNotReady(ctx, lease)
	case raft.Follower:
		_, leader := n.raft.LeaderWithID()
		if leader == "" {
			return fmt.Sprintf("a follower in term %d that knows no leader", n.raft.CurrentTerm()), ""
		}
		last := n.raft.LastContact()
		if last.IsZero() {
			return fmt.Sprintf("a follower of %s that has not heard from it yet", leader), ""
		}
		if ago := time.Since(last); ago > lease {
			return fmt.Sprintf("a follower of %s that last heard from it %v ago, longer than the leader lease (%v)",
				leader, ago.Round(time.Millisecond), lease), ""
		}
		if why := n.notCaughtUp(leader); why != "" {
			return why, ""
		}
		return "", fmt.Sprintf("a follower of %s in term %d", leader, n.raft.CurrentTerm())
	default:
		return fmt.Sprintf("a %s in term %d: an election is under way", st, n.raft.CurrentTerm()), ""
	}
}

// notCaughtUp returns why a follower of leader has not caught up since it
// started, "" once it has: it has applied a commit index that a leader of
// raft's current term sent it (or it has led since it started). A node
// restarted from a snapshot older than its log holds the snapshot's index
// as raft's commit index (0 without one) and applies nothing until an
// AppendEntries with entries or a commit index comes; heartbeats carry
// neither, and the leader's replication to a node that was down backs off,
// so for a second or more it hears from its leader, its /status shows
// commit and applied index 0 (or the snapshot's), and a stale read sees
// the log as it was at that snapshot. A rolling restart that took it for
// ready went on to the next node at once. Once caught up it stays so: a
// follower falls behind under load by a batch or two, which is no reason
// to take it out of a load balancer.
func (n *Node) notCaughtUp(leader raft.ServerID) string {
	if n.replayed.Load() {
		return ""
	}
	term := n.raft.CurrentTerm()
	c := n.gate.commit.Load()
	if c == nil || c.term != term {
		return fmt.Sprintf("a follower of %s in term %d that has not learned the commit index since it started: it has not replayed its log yet", leader, term)
	}
	if applied := n.fsm.Applied.Load(); applied < c.index {
		return fmt.Sprintf("a follower of %s catching up since it started: applied index %d, the commit index its leader sent %d", leader, applied, c.index)
	}
	n.replayed.Store(true)
	return ""
}

// leaderNotReady is notReady for a node that raft says leads.
func (n *Node) leaderNotReady(ctx context.Context, lease time.Duration) (why, ready string) {
	s := n.log.Stint()
	term := n.raft.CurrentTerm()
	stintReady := false
	if s != nil {
		select {
		case <-s.Ready():
			stintReady = s.Term() == term
		default:
		}
	}
	if !stintReady {
		return fmt.Sprintf("leading in term %d, but no entry of this term has committed yet", term), ""
	}
	ctx, cancel := context.WithTimeout(ctx, lease)
	defer cancel()
	f := n.raft.VerifyLeader()
	verified := make(chan error, 1)
	go func() { verified <- f.Error() }()
	select {
	case err := <-verified:
		if err != nil {
			return fmt.Sprintf("leading in term %d, but a quorum of voters did not confirm it: %v", term, err), ""
		}
	case <-ctx.Done():
		return fmt.Sprintf("leading in term %d, but a quorum of voters did not confirm it within the leader lease (%v)", term, lease), ""
	}
	if now := n.raft.CurrentTerm(); now != term {
		return fmt.Sprintf("led in term %d, and the term is now %d", term, now), ""
	}
	n.replayed.Store(true) // a leader whose term's first entry committed has applied everything before it
	return "", fmt.Sprintf("the leader in term %d", term)
}

// refusingAppends returns why the node, leading, refuses appends for want
// of space; "" when it does not lead or does not refuse them.
func (n *Node) refusingAppends() string {
	if n.raft.State() != raft.Leader {
		return ""
	}
	if v := n.space.verdict.Load(); v != nil {
		return v.Message
	}
	if n.space.isBelow() {
		sp := n.space.report()
		return fmt.Sprintf("the leader's data dir is below its free-space reserve (%d MiB free, reserve %d MiB)", sp.free>>20, sp.reserve>>20)
	}
	return ""
}
