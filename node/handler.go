package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// handler serves the client protocol (transport.Handler).
type handler struct{ n *Node }

// CopiesAppendRecords implements transport.AppendCopier: an append's
// records are copied into its raft commands (replica.Replica.Append).
func (h *handler) CopiesAppendRecords() bool { return true }

// Handle implements transport.Handler.
func (h *handler) Handle(ctx context.Context, op transport.Op, req any) (any, error) {
	n := h.n
	if err := n.authorize(ctx, op, req); err != nil {
		return nil, err
	}
	if _, ok := req.(*transport.StatusRequest); !ok && n.removed.Load() {
		return nil, n.removedError()
	}
	switch r := req.(type) {
	case *transport.AppendRequest:
		return n.appendRecords(ctx, r)
	case *transport.ReadRequest:
		l, err := n.replicaFor(r.Log)
		if err != nil {
			return nil, err
		}
		return l.Read(ctx, r)
	case *transport.StatusRequest:
		s := n.Status()
		if !r.Details {
			s.Details = nil // for callers that do not know them
		}
		return &s, nil
	case *transport.JoinRequest:
		return n.join(ctx, r)
	case *transport.RemoveRequest:
		return n.remove(ctx, r)
	case *transport.TransferLeadershipRequest:
		return n.transfer(ctx, r)
	case *transport.TrimRequest:
		l, err := n.replicaFor(r.Log)
		if err != nil {
			return nil, err
		}
		return l.Trim(ctx, r)
	case *transport.CreateLogRequest:
		return n.createLog(ctx, r)
	case *transport.DeleteLogRequest:
		return n.deleteLog(ctx, r)
	case *transport.ListLogsRequest:
		// The default log's leader answers: it applied every create and
		// delete it acknowledged, where a follower may not have yet (a
		// list right after a create missed the log). A follower that
		// knows no live leader, or asked for its own copy, answers from
		// its own catalog.
		if !r.Local && !n.log.IsLeader() && n.log.FollowsLiveLeader() {
			return nil, n.log.NotLeader()
		}
		return n.listLogs(), nil
	case *transport.DescribeLogRequest:
		return n.describeLog(ctx, r)
	case *transport.RestoreLogRequest:
		return n.restoreLog(ctx, r)
	}
	return nil, &transport.Error{Code: transport.CodeUnknownOp, Message: fmt.Sprintf("op %v is not served", op)}
}

// Stream implements transport.Handler.
func (h *handler) Stream(ctx context.Context, op transport.Op, req any, s *transport.ServerStream) error {
	if err := h.n.authorize(ctx, op, req); err != nil {
		return err
	}
	if h.n.removed.Load() {
		return h.n.removedError()
	}
	switch r := req.(type) {
	case *transport.TailRequest:
		l, err := h.n.replicaFor(r.Log)
		if err != nil {
			return err
		}
		return l.Tail(ctx, r, s)
	case *transport.BackupRequest:
		return h.n.backup(ctx, r, s)
	}
	return &transport.Error{Code: transport.CodeUnknownOp, Message: fmt.Sprintf("op %v is not served", op)}
}

// appendRecords appends to the log, counting the appends it refuses.
func (n *Node) appendRecords(ctx context.Context, r *transport.AppendRequest) (*transport.AppendResponse, error) {
	l, err := n.replicaFor(r.Log)
	if err != nil {
		return nil, err
	}
	resp, err := l.Append(ctx, r)
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.Code {
		case transport.CodeSessionExpired:
			n.metrics.refusedAppends.WithLabelValues(refusedSession).Inc()
		case transport.CodeBusy:
			n.metrics.refusedAppends.WithLabelValues(refusedOrder).Inc()
		}
	}
	return resp, err
}

// notLeader is the error for a request only the leader serves.
func (n *Node) notLeader() *transport.Error { return n.log.NotLeader() }

// raftError turns an error of raft into the one a client sees.
func (n *Node) raftError(err error) error { return n.log.RaftError(err) }

func (n *Node) join(ctx context.Context, r *transport.JoinRequest) (*transport.JoinResponse, error) {
	if _, err := n.log.Leading(ctx); err != nil {
		return nil, err
	}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, n.raftError(err)
	}
	resp := &transport.JoinResponse{}
	var (
		member, voter, nonvoter bool
		memberAddr              raft.ServerAddress
		err                     error
	)
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == r.NodeID {
			member, memberAddr = true, s.Address
			voter = s.Suffrage == raft.Voter
			nonvoter = s.Suffrage == raft.Nonvoter
		}
		if string(s.Address) == r.RaftAddr && string(s.ID) != r.NodeID {
			return nil, &transport.Error{Code: transport.CodeFailedPrecondition,
				Message: fmt.Sprintf("raft address %s belongs to member %s: remove it first, or give node %s another address", r.RaftAddr, s.ID, r.NodeID)}
		}
	}
	// A node about to be added must not belong to another cluster
	// (joinid.go).
	var confirm bool
	if r.Fresh || !member && !r.Register {
		if confirm, err = n.checkJoiner(ctx, r); err != nil {
			return nil, err
		}
		if h := n.cfg.hooks; h != nil && h.joinChecked != nil {
			h.joinChecked(r)
		}
	}
	switch {
	case r.Fresh:
		if err := n.recordLost(ctx, r.NodeID); err != nil {
			return nil, err
		}
		if resp.Index, err = n.joinNew(r, cf.Configuration()); err != nil {
			return nil, err
		}
	case r.Register && !member:
		// A node that was removed asking to record its address: it must
		// stay removed (removed.go).
		return nil, &transport.Error{Code: transport.CodeFailedPrecondition, Message: fmt.Sprintf(
			"node %s %s; not adding it back (to add it, wipe its data dir and start it with --join)", r.NodeID, errNotMember)}
	case r.Register || voter && string(memberAddr) == r.RaftAddr:
		// A member recording its client address. Its raft address is
		// the configuration's: a Register never changes it.
	case member && string(memberAddr) != r.RaftAddr:
		return nil, &transport.Error{Code: transport.CodeFailedPrecondition, Message: fmt.Sprintf(
			"node %s is a member at raft address %s, not %s: to change its address, remove it and add it again", r.NodeID, memberAddr, r.RaftAddr)}
	case nonvoter:
		// A new member that has caught up: promote it.
		f := n.raft.AddVoter(raft.ServerID(r.NodeID), raft.ServerAddress(r.RaftAddr), 0, replica.EnqueueTimeout)
		if err := f.Error(); err != nil {
			return nil, n.raftError(err)
		}
		resp.Index = f.Index()
		n.cfg.Logger.Info("promoted to voter", "id", r.NodeID)
	default:
		f := n.raft.AddNonvoter(raft.ServerID(r.NodeID), raft.ServerAddress(r.RaftAddr), 0, replica.EnqueueTimeout)
		if err := f.Error(); err != nil {
			return nil, n.raftError(err)
		}
		resp.Index = f.Index()
		n.cfg.Logger.Info("added nonvoter", "id", r.NodeID, "raft", r.RaftAddr)
	}
	if n.fsm.Member(r.NodeID) != r.ClientAddr {
		f := n.log.Apply(replica.EncodeMemberCmd(r.NodeID, r.ClientAddr), replica.EnqueueTimeout)
		if err := f.Error(); err != nil {
			return nil, n.raftError(err)
		}
		if resp.Index == 0 {
			resp.Index = f.Index()
		}
	}
	if confirm {
		if err := n.confirmJoined(ctx, r); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

func (n *Node) remove(ctx context.Context, r *transport.RemoveRequest) (*transport.RemoveResponse, error) {
	if _, err := n.log.Leading(ctx); err != nil {
		return nil, err
	}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, n.raftError(err)
	}
	var found *raft.Server
	voters := 0
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == r.NodeID {
			found = &s
		}
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	switch {
	case found == nil:
		return nil, &transport.Error{Code: transport.CodeNotFound, Message: fmt.Sprintf("node %q is not a member", r.NodeID)}
	case found.Suffrage == raft.Voter && voters == 1:
		return nil, &transport.Error{Code: transport.CodeFailedPrecondition, Message: fmt.Sprintf("node %q is the only voter: the cluster cannot go on without it", r.NodeID)}
	}
	if drained, err := n.drain(ctx, r.NodeID); err != nil || drained {
		return n.removeOutcome(r.NodeID, err)
	}
	self := r.NodeID == n.cfg.ID
	if self {
		// Forget the leader's own client address first: once removed,
		// it leads no more and could not.
		if err := n.log.Apply(replica.EncodeMemberCmd(r.NodeID, ""), replica.EnqueueTimeout).Error(); err != nil {
			return nil, n.raftError(err)
		}
	}
	f := n.raft.RemoveServer(raft.ServerID(r.NodeID), 0, replica.EnqueueTimeout)
	if err := f.Error(); err != nil {
		return nil, n.raftError(err)
	}
	if !self {
		// After the removal, so that the node cannot record it again.
		if err := n.log.Apply(replica.EncodeMemberCmd(r.NodeID, ""), replica.EnqueueTimeout).Error(); err != nil {
			n.cfg.Logger.Warn("forgetting a removed node's client address", "id", r.NodeID, "error", err)
		}
	}
	n.cfg.Logger.Info("removed server", "id", r.NodeID)
	return &transport.RemoveResponse{Index: f.Index()}, nil
}

func (n *Node) transfer(ctx context.Context, r *transport.TransferLeadershipRequest) (*transport.TransferLeadershipResponse, error) {
	if _, err := n.log.Leading(ctx); err != nil {
		return nil, err
	}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, n.raftError(err)
	}
	target, err := n.transferTarget(cf.Configuration(), r.Target)
	if err != nil {
		return nil, err
	}
	var f raft.Future
	if target == nil {
		f = n.raft.LeadershipTransfer()
	} else {
		f = n.raft.LeadershipTransferToServer(target.ID, target.Address)
	}
	if err := f.Error(); err != nil {
		return nil, n.raftError(err)
	}
	return &transport.TransferLeadershipResponse{}, nil
}

// transferTarget returns the server that a leadership transfer to the node
// id goes to (nil for id "": raft picks one), or the error that says why
// the transfer cannot happen in configuration cfg: the node leads already,
// is no member, is not a voter, or there is no other voter.
func (n *Node) transferTarget(cfg raft.Configuration, id string) (*raft.Server, error) {
	var target *raft.Server
	others := 0 // voters other than this node
	for _, s := range cfg.Servers {
		if string(s.ID) == id {
			target = &s
		}
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.ID {
			others++
		}
	}
	fail := func(code transport.Code, format string, args ...any) (*raft.Server, error) {
		return nil, &transport.Error{Code: code, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case id == n.cfg.ID:
		return fail(transport.CodeFailedPrecondition, "node %s already leads", id)
	case id != "" && target == nil:
		return fail(transport.CodeNotFound, "node %q is not a member", id)
	case target != nil && target.Suffrage != raft.Voter:
		return fail(transport.CodeFailedPrecondition, "node %q is a nonvoter: only a voter can lead (a joining node becomes one once it has caught up)", id)
	case others == 0:
		return fail(transport.CodeFailedPrecondition, "node %s is the only voter: there is no other to hand leadership to", n.cfg.ID)
	}
	return target, nil
}

// Status describes the node, with its details (version and settings,
// see StatusDetails); /status serves it.
func (n *Node) Status() transport.StatusResponse {
	_, leader := n.raft.LeaderWithID()
	st := n.db.Stats()
	role := n.raft.State().String()
	switch {
	case n.removed.Load():
		role = "Removed"
	case n.deciding.Load():
		role = "Deciding"
	}
	s := transport.StatusResponse{
		NodeID:       n.cfg.ID,
		Role:         role,
		Voting:       n.gate.allowed.Load() && !n.removed.Load(),
		LeaderID:     string(leader),
		ClusterID:    n.hello().Cluster,
		Term:         n.raft.CurrentTerm(),
		FirstIndex:   n.fsm.ReadView().Floor,
		LastIndex:    n.raft.LastIndex(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.fsm.Applied.Load(),
		Store: transport.StoreStatus{
			Segments: uint64(st.Segments),
			Bytes:    uint64(max(st.Bytes, 0)),
			Written:  uint64(max(st.Written, 0)),
			Flushed:  uint64(max(st.Durable, 0)),
		},
	}
	sp := n.space.report()
	s.Store.FreeBytes, s.Store.ReserveBytes, s.Store.BelowReserve = sp.free, sp.reserve, sp.below
	if v := n.space.verdict.Load(); v != nil && s.Role == raft.Leader.String() {
		s.Refusing = v.Error()
	}
	if leader != "" {
		s.LeaderAddr = n.fsm.Member(string(leader))
	}
	if s.LastIndex == 0 {
		s.FirstIndex = 0
	}
	s.Details = n.details()
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		addrs := n.fsm.MemberAddrs()
		for _, m := range f.Configuration().Servers {
			s.Members = append(s.Members, transport.Member{
				NodeID: string(m.ID), RaftAddr: string(m.Address),
				ClientAddr: addrs[string(m.ID)], Voter: m.Suffrage == raft.Voter,
			})
		}
	}
	return s
}
