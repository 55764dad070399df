package node

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/transport"
)

// The cluster a new member joins. A node that starts without raft state
// and is not bootstrapping knows no cluster id and no members, and so
// (hello.go) would admit the raft connection of any node. If its raft
// address was a member's of another cluster (a host and port reused),
// that cluster's leader still dials it, and the node would follow it and
// take its id: it is absorbed into the wrong cluster, and the cluster it
// was meant to join holds a member it can never reach.
//
// So a node that joins through a join target (--join, Config.Join; or a
// rejoin chosen from its bootstrap list) admits no hello until it has
// asked the target's status (learnJoinTarget): from then on it says the
// target's cluster id in its hellos and status, and admits only hellos
// that name it (and, as every node, those that name none from a member:
// here, while it has no raft configuration, a member of the target's
// list). A target that names no id (a cluster of an older version, or
// one bootstrapped less than a second ago) leaves the node admitting
// only the members its status lists. Once the join succeeded, the id is
// kept in the data dir's cluster-id file, so that a restart before the
// leader's first entry knows it too.
//
// A node added by an operator ('node join', with no --join and no
// bootstrap list) has no target to ask. It takes the cluster id of the
// first hello it admits for its own (pinCluster, in memory only, until its
// catalog has one): the first leader to reach it wins, as before, but
// from then on it refuses every other cluster's, and its status names the
// cluster it follows. The leader that adds a node checks that status
// before it adds it (checkJoiner) and after (confirmJoined), and refuses a
// node that names another cluster, so that the join does not report
// success for a node another cluster took.

const (
	// joinStatusTimeout bounds one status request to a join target or to
	// a node being added.
	joinStatusTimeout = 2 * time.Second
	// joinConfirmTimeout bounds how long the leader waits, after adding
	// a node that named no cluster, for it to name one.
	joinConfirmTimeout = 5 * time.Second
)

// whyJoining is admitPeer's refusal while a joining node has not yet
// asked its join target which cluster it joins.
const whyJoining = "this node is joining a cluster and has not yet learnt the cluster's id from its join target"

// joinerState is what a new member knows of the cluster it joins; a part
// of clusterIDs, guarded by its mu.
type joinerState struct {
	// expect is the id of the cluster the node joins: its join target's,
	// or the first a hello it admitted named; zero if none. In memory
	// only: the data dir's copy is written once the join succeeded.
	expect catalog.ClusterID
	// members are the members the join target's status listed, when it
	// named no cluster id.
	members []Peer
	// waiting: the node joins through a target it has not asked yet, and
	// admits no hello.
	waiting bool
}

// setJoinWaiting says whether the node waits to learn from its join
// target which cluster it joins.
func (n *Node) setJoinWaiting(w bool) {
	n.clusterIDs.mu.Lock()
	defer n.clusterIDs.mu.Unlock()
	n.clusterIDs.join.waiting = w
}

// joinWaiting reports whether the node waits to learn from its join
// target which cluster it joins.
func (n *Node) joinWaiting() bool {
	n.clusterIDs.mu.Lock()
	defer n.clusterIDs.mu.Unlock()
	return n.clusterIDs.join.waiting
}

// joinTargetMembers returns the members the join target listed, when it
// named no cluster id.
func (n *Node) joinTargetMembers() []Peer {
	n.clusterIDs.mu.Lock()
	defer n.clusterIDs.mu.Unlock()
	return n.clusterIDs.join.members
}

// joinVia asks the member at addr to add this node, once it has learnt
// from that member's status which cluster it joins.
func (n *Node) joinVia(ctx context.Context, addr string) (uint64, error) {
	st, err := n.joinerStatus(ctx, addr)
	if err != nil {
		return 0, fmt.Errorf("node: status of %s: %w", addr, err)
	}
	if err := n.learnJoinTarget(st, addr); err != nil {
		return 0, err
	}
	return n.callJoin(ctx, addr, n.joinRequest(true, false))
}

// learnJoinTarget takes the cluster id (or, without one, the members)
// that st, the status of the join target at addr, names. It fails with
// ErrForeignCluster when the node knows another id already.
func (n *Node) learnJoinTarget(st *transport.StatusResponse, addr string) error {
	own := n.clusterID()
	c := &n.clusterIDs
	if st.ClusterID == "" {
		var ms []Peer
		for _, m := range st.Members {
			ms = append(ms, Peer{ID: m.NodeID, RaftAddr: m.RaftAddr})
		}
		if own.IsZero() && len(ms) == 0 {
			return fmt.Errorf("node: %s (%s) names neither its cluster's id nor its members", addr, orUnknown(st.NodeID))
		}
		c.mu.Lock()
		if len(ms) > 0 {
			c.join.members = ms
		}
		c.join.waiting = false
		c.mu.Unlock()
		return nil
	}
	id, err := catalog.ParseClusterID(st.ClusterID)
	if err != nil {
		return fmt.Errorf("node: %s (%s) names cluster %q: %w", addr, orUnknown(st.NodeID), st.ClusterID, err)
	}
	if !own.IsZero() && own != id {
		return fmt.Errorf("%w: this node belongs to cluster %s, and %s (%s) to cluster %s: it cannot join that cluster (to move it there, wipe its data dir and start it with --join)",
			ErrForeignCluster, own, addr, orUnknown(st.NodeID), id)
	}
	c.mu.Lock()
	first := c.join.expect.IsZero()
	c.join.expect, c.join.waiting = id, false
	c.mu.Unlock()
	if first && own.IsZero() {
		n.cfg.Logger.Info("joining cluster: admitting only its nodes' raft connections", "cluster", id, "via", addr)
	}
	return nil
}

// keepJoinedClusterID, once the join succeeded, writes the cluster id
// learnt from the join target to the data dir's cluster-id file.
func (n *Node) keepJoinedClusterID() error {
	c := &n.clusterIDs
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.join.expect
	if id.IsZero() || !c.file.IsZero() {
		return nil
	}
	return n.writeClusterIDFile(id)
}

// pinCluster admits the hello of peer at a node with no raft
// configuration (a new member, before its leader's first entry) that
// knows no cluster id: the id peer names, if any, becomes the id the node
// expects, and a hello naming another is refused. It returns why not, ""
// to admit.
func (n *Node) pinCluster(peer helloMsg) string {
	if peer.Cluster == "" {
		return ""
	}
	id, err := catalog.ParseClusterID(peer.Cluster)
	if err != nil {
		return fmt.Sprintf("its hello names cluster %q: %v", peer.Cluster, err)
	}
	c := &n.clusterIDs
	c.mu.Lock()
	have := c.file
	if have.IsZero() {
		have = c.join.expect
	}
	if have.IsZero() {
		c.join.expect = id
	}
	c.mu.Unlock()
	switch {
	case have.IsZero():
		n.cfg.Logger.Info("a new member took the cluster id of the first node that reached it; it refuses the raft connections of other clusters",
			"cluster", id, "from", orUnknown(peer.ID), "addr", orUnknown(peer.Addr))
	case have != id:
		return fmt.Sprintf("this node belongs to cluster %s", have)
	}
	return ""
}

// checkJoiner, on the leader, asks the status of a node it is about to
// add (at its client address): a node that names another cluster is
// refused (FailedPrecondition). confirm says that the node answered and
// named no cluster while this one has an id: confirmJoined then checks
// it again once added. A node that does not answer is added as before
// (it may not run yet, or not be reachable from here).
func (n *Node) checkJoiner(ctx context.Context, r *transport.JoinRequest) (confirm bool, err error) {
	ours := n.clusterID()
	if ours.IsZero() {
		return false, nil
	}
	st, err := n.joinerStatus(ctx, r.ClientAddr)
	if err != nil {
		n.cfg.Logger.Debug("a node to add does not answer its status; adding it unchecked", "id", r.NodeID, "client", r.ClientAddr, "error", err)
		return false, nil
	}
	switch st.ClusterID {
	case ours.String():
		return false, nil
	case "":
		return true, nil
	}
	return false, &transport.Error{Code: transport.CodeFailedPrecondition, Message: fmt.Sprintf(
		"node %s (client address %s) belongs to cluster %s, and this cluster is %s: not adding it (a host and port reused from another cluster? wipe the node's data dir and start it with --join)",
		r.NodeID, r.ClientAddr, st.ClusterID, ours)}
}

// confirmJoined, on the leader, after it added a node that named no
// cluster (checkJoiner), waits up to joinConfirmTimeout for the node's
// status to name one. A node that names another cluster (another
// cluster's leader reached it first) is removed again and the join
// fails (FailedPrecondition); one that names none by then (a node of an
// older version) is taken as joined, as before.
func (n *Node) confirmJoined(ctx context.Context, r *transport.JoinRequest) error {
	ours := n.clusterID().String()
	wctx, cancel := context.WithTimeout(ctx, joinConfirmTimeout)
	defer cancel()
	for {
		st, err := n.joinerStatus(wctx, r.ClientAddr)
		switch {
		case err != nil || st.ClusterID == "":
		case st.ClusterID == ours:
			return nil
		default:
			msg := fmt.Sprintf("node %s (client address %s) was added, but it follows cluster %s, not this cluster, %s (a host and port reused from another cluster, whose leader reached it first?)",
				r.NodeID, r.ClientAddr, st.ClusterID, ours)
			rctx, rcancel := context.WithTimeout(n.ctx, 10*time.Second)
			_, rerr := n.remove(rctx, &transport.RemoveRequest{NodeID: r.NodeID})
			rcancel()
			if rerr != nil {
				msg += fmt.Sprintf("; removing it again failed (%v): remove it with 'node remove', then wipe its data dir and start it with --join", rerr)
			} else {
				msg += "; removed it again: wipe its data dir and start it with --join"
			}
			n.cfg.Logger.Error("a node added to the cluster follows another cluster", "id", r.NodeID, "its_cluster", st.ClusterID, "this_cluster", ours, "removed", rerr == nil)
			return &transport.Error{Code: transport.CodeFailedPrecondition, Message: msg}
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-wctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// joinerStatus asks the node at the client address addr for its status:
// a join target, or a node being added.
func (n *Node) joinerStatus(ctx context.Context, addr string) (*transport.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, joinStatusTimeout)
	defer cancel()
	var st transport.StatusResponse
	if err := n.callNode(ctx, addr, transport.OpStatus, &transport.StatusRequest{}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}
