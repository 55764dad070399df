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
		return n.read(ctx, r)
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
		return n.trim(ctx, r)
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
		return h.n.tail(ctx, r, s)
	case *transport.BackupRequest:
		return h.n.backup(ctx, s)
	}
	return &transport.Error{Code: transport.CodeUnknownOp, Message: fmt.Sprintf("op %v is not served", op)}
}

// notLeader is the error for a request only the leader serves.
func (n *Node) notLeader() *transport.Error {
	_, id := n.raft.LeaderWithID()
	e := &transport.Error{Code: transport.CodeNotLeader, Message: fmt.Sprintf("node %s is not the leader", n.cfg.ID), LeaderID: string(id)}
	if id != "" {
		e.LeaderAddr = n.fsm.Member(string(id))
	}
	return e
}

// raftError turns an error of raft into the one a client sees.
func (n *Node) raftError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		return n.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost):
		return &transport.Error{Code: transport.CodeTimeout, Message: "leadership lost before the entry committed; it may or may not be stored"}
	case errors.Is(err, raft.ErrRaftShutdown):
		return &transport.Error{Code: transport.CodeUnavailable, Message: "node is shutting down"}
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return &transport.Error{Code: transport.CodeUnavailable, Message: "raft is overloaded: " + err.Error()}
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return &transport.Error{Code: transport.CodeUnavailable, Message: "leadership transfer in progress"}
	case errors.Is(err, raft.ErrAbortedByRestore), errors.Is(err, raft.ErrNothingNewToSnapshot):
		return &transport.Error{Code: transport.CodeUnavailable, Message: err.Error()}
	}
	return fmt.Errorf("node: raft: %w", err)
}

// leading waits until the node leads and its stint is ready, and returns
// the stint; NotLeader when it does not lead.
func (n *Node) leading(ctx context.Context) (*leaderStint, error) {
	n.lmu.Lock()
	s := n.stint
	n.lmu.Unlock()
	if s == nil {
		return nil, n.notLeader()
	}
	select {
	case <-s.ready:
		return s, nil
	case <-s.done:
		return nil, n.notLeader()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (n *Node) appendRecords(ctx context.Context, r *transport.AppendRequest) (*transport.AppendResponse, error) {
	if _, err := n.leading(ctx); err != nil {
		return nil, err
	}
	if err := n.checkSpace(); err != nil {
		return nil, err
	}
	if r.ClientID != "" {
		if idx, ok := n.fsm.Lookup(r.ClientID, r.Seq); ok {
			return &transport.AppendResponse{Indexes: idx, Duplicate: true}, nil
		}
	}
	cmds := make([][]byte, len(r.Records))
	total := uint64(len(r.Records))
	for i, rec := range r.Records {
		cmds[i] = replica.AppendRecordCmd(make([]byte, 0, len(rec)+len(r.ClientID)+40), r.ClientID, r.Seq, uint64(i), total, r.Base, r.After, rec)
	}
	// The appends of one connection go to raft in the order they arrived,
	// so that one sent after another (AppendRequest.After) normally lands
	// after it; the state machine voids it if not.
	turn := transport.TurnOf(ctx)
	if err := turn.Wait(ctx); err != nil {
		return nil, err
	}
	pr := n.prop.Propose(cmds)
	turn.Pass()
	futures := pr.Futures
	for _, f := range futures {
		f.Error()
	}
	n.prop.Finish(pr)
	var (
		firstErr error
		reached  bool // some entry reached raft's log: the append may be stored in part
		resp     = &transport.AppendResponse{}
		results  = make([]replica.AppendResult, len(futures))
	)
	for i, f := range futures {
		if err := f.Error(); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			reached = reached || !errors.Is(err, raft.ErrNotLeader)
			continue
		}
		reached = true
		res, ok := f.Response().(replica.AppendResult)
		if !ok {
			return nil, fmt.Errorf("node: unexpected apply result %T", f.Response())
		}
		results[i] = res
		resp.Duplicate = resp.Duplicate || res.Dup
		if res.Err != nil && errors.Is(res.Err, replica.ErrSessionExpired) {
			n.metrics.refusedAppends.WithLabelValues(refusedSession).Inc()
			return nil, &transport.Error{Code: transport.CodeSessionExpired, Message: res.Err.Error()}
		}
		if res.Err != nil && errors.Is(res.Err, replica.ErrOutOfOrder) {
			n.metrics.refusedAppends.WithLabelValues(refusedOrder).Inc()
			return nil, &transport.Error{Code: transport.CodeBusy, Message: res.Err.Error()}
		}
	}
	if firstErr != nil {
		// Some entries may be stored: with a client id, a retry stores the
		// rest exactly once. NotLeader tells a client that nothing was
		// stored, so it is only given when no entry reached the log.
		if reached && errors.Is(firstErr, raft.ErrNotLeader) {
			firstErr = raft.ErrLeadershipLost
		}
		return nil, n.raftError(firstErr)
	}
	if r.ClientID == "" {
		for _, res := range results {
			resp.Indexes = append(resp.Indexes, res.Indexes...)
		}
		return resp, nil
	}
	if last := results[len(results)-1]; last.Indexes != nil {
		resp.Indexes = last.Indexes
		return resp, nil
	}
	if idx, ok := n.fsm.Lookup(r.ClientID, r.Seq); ok {
		resp.Indexes = idx
		return resp, nil
	}
	return nil, &transport.Error{Code: transport.CodeUnavailable, Message: "append interleaved with an earlier attempt of the same sequence number; retry it"}
}

// linearize makes a read linearizable (read index): it takes the commit
// index, confirms with a quorum that the node still leads in its stint's
// term, and waits until the state machine has applied up to that index.
//
// The term matters: a node that lost leadership and won it back holds a
// commit index that may lag behind entries another leader committed
// meanwhile, until an entry of its new term commits (the new stint's
// barrier). If watchLeadership has not yet seen the change, the old stint
// is still current and ready, and VerifyLeader succeeds in the new term.
// After VerifyLeader, a current term equal to the stint's proves that the
// leadership it confirmed, and the commit index taken before it, are the
// stint's; otherwise the read waits for the next stint.
func (n *Node) linearize(ctx context.Context) (*leaderStint, error) {
	var (
		s  *leaderStint
		ci uint64
	)
	for {
		var err error
		if s, err = n.leading(ctx); err != nil {
			return nil, err
		}
		ci = n.raft.CommitIndex()
		if err := n.raft.VerifyLeader().Error(); err != nil {
			if errors.Is(err, raft.ErrLeadershipLost) {
				// Nothing was written: for a read, losing leadership is NotLeader.
				return nil, n.notLeader()
			}
			return nil, n.raftError(err)
		}
		if n.raft.CurrentTerm() == s.term {
			break
		}
		// A stint of an earlier term: watchLeadership ends it soon.
		select {
		case <-s.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for {
		applied, wake := n.fsm.AppliedCh()
		if applied >= ci {
			return s, nil
		}
		select {
		case <-wake:
		case <-s.done:
			return nil, n.notLeader()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (n *Node) read(ctx context.Context, r *transport.ReadRequest) (*transport.ReadResponse, error) {
	if !r.Stale {
		if _, err := n.linearize(ctx); err != nil {
			return nil, err
		}
	}
	recs, next, err := n.readRecords(r.From, n.fsm.Applied.Load(), int(r.MaxRecords), int(r.MaxBytes))
	if err != nil {
		return nil, err
	}
	return &transport.ReadResponse{Records: recs, Next: next}, nil
}

// readRecords reads the records in [from, upTo], at most maxRecords and
// (beyond the first) maxBytes of data, skipping raft's own entries, control
// commands and void entries. It returns the index to continue from.
func (n *Node) readRecords(from, upTo uint64, maxRecords, maxBytes int) ([]transport.Record, uint64, error) {
	rv := n.fsm.ReadView()
	if from == 0 {
		from = rv.Floor
	}
	if from < rv.Floor {
		return nil, from, &transport.Error{Code: transport.CodeTrimmed, Message: fmt.Sprintf("index %d is trimmed; the first retained index is %d", from, rv.Floor)}
	}
	var (
		recs  []transport.Record
		bytes int
		l     raft.Log
		idx   = from
	)
	for ; idx <= upTo && len(recs) < maxRecords; idx++ {
		if err := n.view.GetLog(idx, &l); err != nil {
			if floor := n.fsm.ReadView().Floor; floor > idx {
				if len(recs) > 0 {
					break // return what was read; the next read reports the trim
				}
				return nil, idx, &transport.Error{Code: transport.CodeTrimmed, Message: fmt.Sprintf("index %d was trimmed while being read; the first retained index is %d", idx, floor)}
			}
			if errors.Is(err, raft.ErrLogNotFound) {
				return nil, idx, &transport.Error{Code: transport.CodeUnavailable, Message: fmt.Sprintf("node %s does not hold index %d yet", n.cfg.ID, idx)}
			}
			return nil, idx, fmt.Errorf("node: read index %d: %w", idx, err)
		}
		if l.Type != raft.LogCommand || rv.Void(idx) {
			continue
		}
		payload, ok := replica.RecordPayload(l.Data)
		if !ok {
			continue
		}
		if len(recs) > 0 && bytes+len(payload) > maxBytes {
			break
		}
		recs = append(recs, transport.Record{Index: idx, Data: payload, AppendedAt: l.AppendedAt.UnixNano()})
		bytes += len(payload)
	}
	return recs, idx, nil
}

func (n *Node) tail(ctx context.Context, r *transport.TailRequest, st *transport.ServerStream) error {
	var done <-chan struct{}
	if !r.Stale {
		s, err := n.linearize(ctx)
		if err != nil {
			return err
		}
		done = s.done
	}
	next := r.From
	for {
		applied, wake := n.fsm.AppliedCh()
		recs, nx, err := n.readRecords(next, applied, int(r.MaxRecords), int(r.MaxBytes))
		if err != nil {
			return err
		}
		next = nx
		if len(recs) > 0 {
			if err := st.Send(&transport.TailItem{Records: recs, Next: nx}); err != nil {
				return err
			}
			continue
		}
		select {
		case <-wake:
		case <-done:
			return n.notLeader()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (n *Node) join(ctx context.Context, r *transport.JoinRequest) (*transport.JoinResponse, error) {
	if _, err := n.leading(ctx); err != nil {
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
	switch {
	case r.Fresh:
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
		f := n.raft.Apply(replica.EncodeMemberCmd(r.NodeID, r.ClientAddr), replica.EnqueueTimeout)
		if err := f.Error(); err != nil {
			return nil, n.raftError(err)
		}
		if resp.Index == 0 {
			resp.Index = f.Index()
		}
	}
	return resp, nil
}

func (n *Node) remove(ctx context.Context, r *transport.RemoveRequest) (*transport.RemoveResponse, error) {
	if _, err := n.leading(ctx); err != nil {
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
	self := r.NodeID == n.cfg.ID
	if self {
		// Forget the leader's own client address first: once removed,
		// it leads no more and could not.
		if err := n.raft.Apply(replica.EncodeMemberCmd(r.NodeID, ""), replica.EnqueueTimeout).Error(); err != nil {
			return nil, n.raftError(err)
		}
	}
	f := n.raft.RemoveServer(raft.ServerID(r.NodeID), 0, replica.EnqueueTimeout)
	if err := f.Error(); err != nil {
		return nil, n.raftError(err)
	}
	if !self {
		// After the removal, so that the node cannot record it again.
		if err := n.raft.Apply(replica.EncodeMemberCmd(r.NodeID, ""), replica.EnqueueTimeout).Error(); err != nil {
			n.cfg.Logger.Warn("forgetting a removed node's client address", "id", r.NodeID, "error", err)
		}
	}
	n.cfg.Logger.Info("removed server", "id", r.NodeID)
	return &transport.RemoveResponse{Index: f.Index()}, nil
}

func (n *Node) transfer(ctx context.Context, r *transport.TransferLeadershipRequest) (*transport.TransferLeadershipResponse, error) {
	if _, err := n.leading(ctx); err != nil {
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

func (n *Node) trim(ctx context.Context, r *transport.TrimRequest) (*transport.TrimResponse, error) {
	if _, err := n.leading(ctx); err != nil {
		return nil, err
	}
	if last := n.raft.LastIndex(); r.Below > last+1 {
		return nil, &transport.Error{Code: transport.CodeBadRequest, Message: fmt.Sprintf("trim below %d is past the end of the log (last index %d)", r.Below, last)}
	}
	f := n.raft.Apply(replica.EncodeTrimCmd(r.Below), replica.EnqueueTimeout)
	if err := f.Error(); err != nil {
		return nil, n.raftError(err)
	}
	return &transport.TrimResponse{Index: f.Index()}, nil
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
