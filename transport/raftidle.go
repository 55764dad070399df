package transport

// Idle groups: answering a leader's repeated, unchanged AppendEntries
// without sending them (RaftTransportConfig.IdleAppendWindow).
//
// hashicorp/raft (v1.8.0, replication.go) wakes every follower's
// replication goroutine every CommitTimeout to twice that and sends an
// AppendEntries, so that followers learn the commit index when commits
// stop. In an idle group that request is the same every time: no
// entries, the same term, previous entry and commit index. On a node
// (CommitTimeout 5 ms) it is about nine in ten of the raft RPCs of idle
// groups, and each costs a write and a read on both sides, a wake-up of
// the follower's raft, and its answer.
//
// When the request repeats exactly the last one sent to that peer for
// that group, which the peer answered with Success and the same term, and
// that one was sent less than IdleAppendWindow ago, the transport answers
// with the same response. What raft does with the answer: it records
// contact with the follower (the lease) and resets its failure count; it
// learns nothing new, because the follower learned nothing new. So the
// only change is timing: a follower that died, or moved to a newer term,
// is noticed by the leader's replication up to IdleAppendWindow later.
// Heartbeats (which carry no previous entry) are never answered this way:
// raft's VerifyLeader and its heartbeat goroutine keep their real round
// trips. A request that differs in any field, an error or a failed answer
// forgets the remembered one. A pipeline (raftpipe.go) answers from
// memory only when none of its requests is in flight, so answers reach
// raft in the order of the requests.

import (
	"bytes"
	"time"

	"github.com/hashicorp/raft"
)

// idleAppend is the last idle AppendEntries a group sent to a peer that
// was answered with Success.
type idleAppend struct {
	sent time.Time
	req  raft.AppendEntriesRequest // Entries nil
	resp raft.AppendEntriesResponse
}

// isIdleAppend reports whether r may be answered from memory: no
// entries, and not a heartbeat.
func isIdleAppend(r *raft.AppendEntriesRequest) bool {
	return len(r.Entries) == 0 && !isHeartbeat(r)
}

// sameIdleAppend reports whether a and b carry the same fields (neither
// has entries).
func sameIdleAppend(a, b *raft.AppendEntriesRequest) bool {
	//lint:ignore SA1019 raft v1.8.0 still sets Leader
	la, lb := a.Leader, b.Leader
	return a.Term == b.Term && a.PrevLogEntry == b.PrevLogEntry && a.PrevLogTerm == b.PrevLogTerm &&
		a.LeaderCommitIndex == b.LeaderCommitIndex && a.ProtocolVersion == b.ProtocolVersion &&
		bytes.Equal(a.ID, b.ID) && bytes.Equal(a.Addr, b.Addr) && bytes.Equal(la, lb)
}

// repeated answers args from memory when it repeats the last idle
// AppendEntries to target answered with Success within the window.
func (t *RaftTransport) repeated(target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	if t.cfg.IdleAppendWindow <= 0 || !isIdleAppend(args) {
		return false
	}
	t.mu.Lock()
	last := t.idle[target]
	t.mu.Unlock()
	if last == nil || time.Since(last.sent) >= t.cfg.IdleAppendWindow || !sameIdleAppend(&last.req, args) {
		return false
	}
	*resp = last.resp
	t.mux.stats.idleAnswered.Add(1)
	return true
}

// remember records the outcome of an AppendEntries to target sent at
// sent: an idle one answered with Success and no newer term is
// remembered; anything else forgets.
func (t *RaftTransport) remember(target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, err error, sent time.Time) {
	if t.cfg.IdleAppendWindow <= 0 {
		return
	}
	var last *idleAppend
	if err == nil && isIdleAppend(args) && resp.Success && resp.Term == args.Term {
		last = &idleAppend{sent: sent, req: *args, resp: *resp}
		last.req.Entries = nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if last == nil {
		delete(t.idle, target)
		return
	}
	if t.idle == nil {
		t.idle = map[raft.ServerAddress]*idleAppend{}
	}
	t.idle[target] = last
}
