package replica

// Serving a log's clients: appends, reads, tails and trims, answered in
// the client protocol's terms (package transport).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/transport"
)

// NotLeader is the error for a request only the leader serves: NotLeader,
// naming the leader when the replica knows it. For a named log
// (Config.Name) that knows no leader, it names another member of the log
// to ask (Error.MemberID), with the client address the member recorded.
func (r *Replica) NotLeader() *transport.Error {
	_, id := r.raft.LeaderWithID()
	msg := fmt.Sprintf("node %s is not the leader", r.cfg.NodeID)
	if r.cfg.Name != "" {
		msg = fmt.Sprintf("node %s is not the leader of log %q", r.cfg.NodeID, r.cfg.Name)
	}
	e := &transport.Error{Code: transport.CodeNotLeader, Message: msg, LeaderID: string(id)}
	if id != "" {
		e.LeaderAddr = r.fsm.Member(string(id))
		return e
	}
	if r.cfg.Name == "" {
		return e
	}
	if f := r.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if m := string(s.ID); m != r.cfg.NodeID {
				if addr := r.fsm.Member(m); addr != "" {
					e.MemberID, e.MemberAddr = m, addr
					break
				}
			}
		}
	}
	return e
}

// RaftError turns an error of raft into the one a client sees.
func (r *Replica) RaftError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		return r.NotLeader()
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
	return fmt.Errorf("replica: raft: %w", err)
}

// Leading waits until the node leads and its stint is ready, and returns
// the stint; NotLeader when it does not lead.
//
// A replica that does not lead answers NotLeader at once while it hears
// from a leader. While it knows no live leader (none named, or none heard
// from for one and a half heartbeat intervals: the leader is late, or an
// election is due or under way), it first waits for one, for up to two
// heartbeat timeouts and an election timeout (raft's longest wait before
// it campaigns, and one round of votes): a request that comes during a
// failover is then served, when this replica wins the election, or
// answered with the new leader's name, rather than with no name or the
// name of a leader that is gone, after which the client would back off
// and ask again.
func (r *Replica) Leading(ctx context.Context) (*Stint, error) {
	s := r.Stint()
	if s == nil {
		s = r.awaitLeader(ctx)
	}
	if s == nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, r.NotLeader()
	}
	select {
	case <-s.ready:
		return s, nil
	case <-s.done:
		return nil, r.NotLeader()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// cmdChunk is the size of the buffers small records' commands share.
const cmdChunk = 32 << 10

// awaitPoll is how often awaitLeader looks at raft's leader besides the
// news of one: a leader that was only late sends no news. A variable for
// tests.
var awaitPoll = 5 * time.Millisecond

// awaitLeader waits while the replica knows no live leader (Leading), for
// up to two heartbeat timeouts and an election timeout, until ctx ends or
// the replica stops; it returns the replica's stint if it begins one
// meanwhile. It wakes at the news of a leader (leadernews.go): a leader
// other than the one known when the wait began, heard from just now, is
// live.
func (r *Replica) awaitLeader(ctx context.Context) *Stint {
	news := r.news.next()
	if r.liveLeader() {
		return nil
	}
	_, known := r.raft.LeaderWithID()
	rc := r.raft.ReloadableConfig()
	limit := time.NewTimer(2*rc.HeartbeatTimeout + rc.ElectionTimeout)
	defer limit.Stop()
	tick := time.NewTicker(awaitPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.ctx.Done():
			return nil
		case <-limit.C:
			return nil
		case <-tick.C:
		case <-news:
			news = r.news.next()
		}
		if s := r.Stint(); s != nil {
			return s
		}
		if r.liveLeader() {
			return nil
		}
		if _, id := r.raft.LeaderWithID(); id != "" && id != known && string(id) != r.cfg.NodeID {
			return nil
		}
	}
}

// liveLeader reports whether the replica follows a leader other than
// itself that it heard from within one and a half heartbeat intervals (a
// tenth of the heartbeat timeout each, as raft sends them). A leader that
// is only late costs a request the wait for its next heartbeat.
func (r *Replica) liveLeader() bool {
	_, id := r.raft.LeaderWithID()
	if id == "" || string(id) == r.cfg.NodeID {
		return false
	}
	return time.Since(r.raft.LastContact()) < 3*r.raft.ReloadableConfig().HeartbeatTimeout/20
}

// FollowsLiveLeader reports whether the replica follows a leader it has
// heard from within one and a half heartbeat intervals: a request it
// should not answer itself may be sent on to that leader (NotLeader names
// it).
func (r *Replica) FollowsLiveLeader() bool { return r.liveLeader() }

// Append appends a request's records, on the leader, exactly once for a
// request with a client id (sessions.go), and answers with their indexes.
func (r *Replica) Append(ctx context.Context, req *transport.AppendRequest) (*transport.AppendResponse, error) {
	if _, err := r.Leading(ctx); err != nil {
		return nil, err
	}
	if r.cfg.CheckAppend != nil {
		if err := r.cfg.CheckAppend(); err != nil {
			return nil, err
		}
	}
	if req.ClientID != "" {
		if idx, ok := r.fsm.Lookup(req.ClientID, req.Seq); ok {
			return &transport.AppendResponse{Indexes: idx, Duplicate: true}, nil
		}
	}
	// The commands are copies: req.Records alias a buffer that the
	// server reuses for another request once this returns (the node's
	// handler is a transport.AppendCopier), while raft keeps the commands.
	//
	// Small records' commands share buffers of cmdChunk bytes: a few
	// allocations per request, not one per record; a large record's
	// command has its own (one large buffer would be a fresh span from the
	// heap each time, and stay whole while raft's cache holds any entry of
	// it). A command's header is at most recordCmdHeader bytes beside its
	// client id.
	cmds := make([][]byte, len(req.Records))
	total := uint64(len(req.Records))
	var buf []byte // free space of the current chunk
	for i, rec := range req.Records {
		n := len(rec) + len(req.ClientID) + recordCmdHeader
		var dst []byte
		if n <= cmdChunk/2 {
			if n > len(buf) {
				buf = make([]byte, cmdChunk)
			}
			dst, buf = buf[:0:n], buf[n:]
		} else {
			dst = make([]byte, 0, n)
		}
		cmds[i] = AppendRecordCmd(dst, req.ClientID, req.Seq, uint64(i), total, req.Base, req.After, rec)
	}
	// The appends of one connection go to raft in the order they arrived,
	// so that one sent after another (AppendRequest.After) normally lands
	// after it; the state machine voids it if not.
	turn := transport.TurnOf(ctx)
	if err := turn.Wait(ctx); err != nil {
		return nil, err
	}
	// The mark of a restore is checked with the gate held until the
	// records are in raft's queue: a restore that begins meanwhile finds
	// them (BeginRestore), or they find its mark. The turn is taken first:
	// an append holding the gate never waits for one that does not.
	if !r.restoreGate.TryRLock() {
		if appendHeldForRestore != nil {
			appendHeldForRestore()
		}
		r.restoreGate.RLock()
	}
	if err := r.CheckRestored(); err != nil {
		r.restoreGate.RUnlock()
		turn.Pass()
		return nil, err
	}
	pr := r.prop.Propose(cmds)
	r.restoreGate.RUnlock()
	turn.Pass()
	futures := pr.Futures
	answered := await(r, futures)
	r.prop.Finish(pr)
	if !answered {
		// Some entries may be stored: with a client id, a retry stores
		// the rest exactly once.
		return nil, r.RaftError(raft.ErrRaftShutdown)
	}
	var (
		firstErr error
		reached  bool // some entry reached raft's log: the append may be stored in part
		resp     = &transport.AppendResponse{}
		results  = make([]AppendResult, len(futures))
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
		res, ok := f.Response().(*AppendResult)
		if !ok {
			return nil, fmt.Errorf("replica: unexpected apply result %T", f.Response())
		}
		results[i] = *res
		resp.Duplicate = resp.Duplicate || res.Dup
		if res.Err != nil && errors.Is(res.Err, ErrSessionExpired) {
			return nil, &transport.Error{Code: transport.CodeSessionExpired, Message: res.Err.Error()}
		}
		if res.Err != nil && errors.Is(res.Err, ErrOutOfOrder) {
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
		return nil, r.RaftError(firstErr)
	}
	if req.ClientID == "" {
		for _, res := range results {
			resp.Indexes = append(resp.Indexes, res.Indexes...)
		}
		return resp, nil
	}
	if last := results[len(results)-1]; last.Indexes != nil {
		resp.Indexes = last.Indexes
		return resp, nil
	}
	if idx, ok := r.fsm.Lookup(req.ClientID, req.Seq); ok {
		resp.Indexes = idx
		return resp, nil
	}
	return nil, &transport.Error{Code: transport.CodeUnavailable, Message: "append interleaved with an earlier attempt of the same sequence number; retry it"}
}

// Linearize makes a read linearizable (read index): it takes the commit
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
func (r *Replica) Linearize(ctx context.Context) (*Stint, error) {
	var (
		s  *Stint
		ci uint64
	)
	for {
		var err error
		if s, err = r.Leading(ctx); err != nil {
			return nil, err
		}
		ci = r.raft.CommitIndex()
		if err := r.raft.VerifyLeader().Error(); err != nil {
			if errors.Is(err, raft.ErrLeadershipLost) {
				// Nothing was written: for a read, losing leadership is NotLeader.
				return nil, r.NotLeader()
			}
			return nil, r.RaftError(err)
		}
		if r.raft.CurrentTerm() == s.term {
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
		applied, wake := r.fsm.AppliedCh()
		if applied >= ci {
			return s, nil
		}
		select {
		case <-wake:
		case <-s.done:
			return nil, r.NotLeader()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Read reads records from an index: linearizable unless the request
// asks for a stale read (Linearize).
func (r *Replica) Read(ctx context.Context, req *transport.ReadRequest) (*transport.ReadResponse, error) {
	if !req.Stale {
		if _, err := r.Linearize(ctx); err != nil {
			return nil, err
		}
	}
	if err := r.CheckRestored(); err != nil {
		return nil, err
	}
	recs, next, err := r.readRecords(req.From, r.fsm.Applied.Load(), int(req.MaxRecords), int(req.MaxBytes))
	if err != nil {
		return nil, err
	}
	return &transport.ReadResponse{Records: recs, Next: next}, nil
}

// readRecords reads the records in [from, upTo], at most maxRecords and
// (beyond the first) maxBytes of data, skipping raft's own entries, control
// commands and void entries. It returns the index to continue from.
func (r *Replica) readRecords(from, upTo uint64, maxRecords, maxBytes int) ([]transport.Record, uint64, error) {
	rv := r.fsm.ReadView()
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
		if err := r.view.GetLog(idx, &l); err != nil {
			if floor := r.fsm.ReadView().Floor; floor > idx {
				if len(recs) > 0 {
					break // return what was read; the next read reports the trim
				}
				return nil, idx, &transport.Error{Code: transport.CodeTrimmed, Message: fmt.Sprintf("index %d was trimmed while being read; the first retained index is %d", idx, floor)}
			}
			if errors.Is(err, raft.ErrLogNotFound) {
				return nil, idx, &transport.Error{Code: transport.CodeUnavailable, Message: fmt.Sprintf("node %s does not hold index %d yet", r.cfg.NodeID, idx)}
			}
			return nil, idx, fmt.Errorf("replica: read index %d: %w", idx, err)
		}
		if l.Type != raft.LogCommand || rv.Void(idx) {
			continue
		}
		payload, ok := RecordPayload(l.Data)
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

// Tail streams records from an index as they commit, until ctx ends or,
// for a linearizable tail, the stint ends.
func (r *Replica) Tail(ctx context.Context, req *transport.TailRequest, st *transport.ServerStream) error {
	var done <-chan struct{}
	if !req.Stale {
		s, err := r.Linearize(ctx)
		if err != nil {
			return err
		}
		done = s.done
	}
	if err := r.CheckRestored(); err != nil {
		return err
	}
	next := req.From
	for {
		applied, wake := r.fsm.AppliedCh()
		recs, nx, err := r.readRecords(next, applied, int(req.MaxRecords), int(req.MaxBytes))
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
			return r.NotLeader()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Trim raises the log's first retained index, on the leader.
func (r *Replica) Trim(ctx context.Context, req *transport.TrimRequest) (*transport.TrimResponse, error) {
	if _, err := r.Leading(ctx); err != nil {
		return nil, err
	}
	if err := r.CheckRestored(); err != nil {
		return nil, err
	}
	if last := r.raft.LastIndex(); req.Below > last+1 {
		return nil, &transport.Error{Code: transport.CodeBadRequest, Message: fmt.Sprintf("trim below %d is past the end of the log (last index %d)", req.Below, last)}
	}
	f := r.Apply(EncodeTrimCmd(req.Below), EnqueueTimeout)
	if err := f.Error(); err != nil {
		return nil, r.RaftError(err)
	}
	return &transport.TrimResponse{Index: f.Index()}, nil
}
