package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/transport"
)

// A member removed from the cluster ('node remove') must stay removed.
// Raft does not tell it: the leader stops sending it entries once the
// configuration that removes it is appended, so it usually never learns of
// that configuration, and hears from no leader again. Left alone it would
// campaign forever (the others refuse its votes), and its register loop
// would ask the leader to add it back. So:
//
//   - the register loop sends Register joins, which the leader refuses for a
//     node that is not a member instead of adding it (handler.go);
//   - a member that hears from no leader for a while, or whose Register is
//     refused, probes its peers (probe.go). When the leader answers that the
//     node is not in its configuration, twice in the same term, and its
//     commit index at the second answer covers its last index at the first,
//     the configuration that removed the node is committed: the node was
//     removed. (A leader whose own removal commits steps down, see
//     replica's ShutdownOnRemove, and finds out the same way.)
//   - the node then records it in the marker file "removed", stops raft
//     (no more campaigns), answers every request but Status with
//     Unavailable, reports the role "Removed", and refuses to start
//     again with ErrRemoved. To add it back, wipe its data dir and start it
//     with --join.

// ErrRemoved is the error of Start on a node that was removed from its
// cluster.
var ErrRemoved = errors.New("node: removed from the cluster")

// removalCheck is the state of the register loop's removal check: the
// first of two leader answers that the node is not a member.
type removalCheck struct {
	leader string
	term   uint64
	last   uint64 // the leader's last index at the first answer
}

// errNotMember is the message a leader refuses a Register join with.
const errNotMember = "is not a member of the cluster"

// checkRemoved probes the peers and reports whether the node was removed.
// rc carries the first answer between calls; ok is false while nothing is
// known.
func (n *Node) checkRemoved(rc *removalCheck) bool {
	var addrs []string
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) != n.cfg.ID {
				addrs = append(addrs, string(s.Address))
			}
		}
	}
	addrs = append(addrs, n.otherPeers()...)
	for _, r := range n.probes.probeAll(dedupe(addrs), probeRequest{ID: n.cfg.ID}, probeTimeout) {
		if r.err != nil || !r.a.Leader {
			continue
		}
		a := r.a
		if a.InConfig {
			*rc = removalCheck{}
			return false
		}
		if rc.leader != a.ID || rc.term != a.Term {
			*rc = removalCheck{leader: a.ID, term: a.Term, last: a.LastIndex}
			return false
		}
		return a.CommitIndex >= rc.last
	}
	return false
}

// markRemoved records that the node was removed, and stops it taking part.
func (n *Node) markRemoved(why string) {
	if !n.removed.CompareAndSwap(false, true) {
		return
	}
	if err := n.marks.write(removedFile, []byte(why+"\n")); err != nil {
		n.cfg.Logger.Error("recording the removal", "error", err)
	}
	n.gate.allowed.Store(false)
	n.cfg.Logger.Error("this node was removed from the cluster: it no longer campaigns or serves, and will refuse to start again; to add it back, wipe its data dir and start it with --join", "how", why)
	go func() {
		if err := n.log.StopRaft(); err != nil {
			n.cfg.Logger.Warn("stopping raft after removal", "error", err)
		}
	}()
}

// removedError answers a request to a removed node: Unavailable, so that
// a client moves on to another member.
func (n *Node) removedError() *transport.Error {
	return &transport.Error{Code: transport.CodeUnavailable, Message: fmt.Sprintf(
		"node %s was removed from the cluster; ask another member (to add this node back, wipe its data dir and start it with --join)", n.cfg.ID)}
}

// checkNotRemoved fails the start of a node whose data dir says it was
// removed.
func (n *Node) checkNotRemoved() error {
	why, ok, err := n.marks.read(removedFile)
	if err != nil || !ok {
		return err
	}
	return fmt.Errorf("%w: node %s (%s); its data dir %s is kept for inspection; to add the node back, wipe the data dir and start it with --join",
		ErrRemoved, n.cfg.ID, strings.TrimSpace(why), n.cfg.DataDir)
}

// registerLoop makes sure the member table holds this node's client
// address, asking the leader to record it, and finds out when the node
// was removed from the cluster.
func (n *Node) registerLoop() {
	defer n.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var (
		rc           removalCheck
		leaderlessAt time.Time // when the node last knew a leader, while it knows none
	)
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		if n.removed.Load() {
			return
		}
		if n.raft.State() == raft.Shutdown {
			return // stopped by markRemoved or Close
		}
		if n.raft.State() == raft.Leader || !n.gate.allowed.Load() {
			// The leader records its own address; a new member or a
			// deciding node is looked after by promoteLoop or decideLoop.
			leaderlessAt, rc = time.Time{}, removalCheck{}
			continue
		}
		_, id := n.raft.LeaderWithID()
		if id == "" {
			if leaderlessAt.IsZero() {
				leaderlessAt = time.Now()
			}
			if time.Since(leaderlessAt) >= 2*n.cfg.ElectionTimeout && n.checkRemoved(&rc) {
				n.markRemoved(fmt.Sprintf("leader %s answered twice in term %d that the node is not in its committed configuration", rc.leader, rc.term))
				return
			}
			continue
		}
		leaderlessAt = time.Time{}
		if n.fsm.Member(n.cfg.ID) == n.clientAddr {
			rc = removalCheck{}
			continue
		}
		addr := n.fsm.Member(string(id))
		if addr == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		_, err := n.callJoin(ctx, addr, n.joinRequest(false, true))
		cancel()
		if transport.ErrorCode(err) == transport.CodeFailedPrecondition && strings.Contains(err.Error(), errNotMember) {
			if n.checkRemoved(&rc) {
				n.markRemoved(fmt.Sprintf("leader %s answered twice in term %d that the node is not in its committed configuration", rc.leader, rc.term))
				return
			}
			continue
		}
		if err != nil {
			n.cfg.Logger.Debug("registering client address", "error", err)
		}
	}
}
