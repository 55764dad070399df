package node

import (
	"strconv"
	"time"

	"github.com/hashicorp/raft"
)

// When a leader dies, the survivors call the election in turns
// (leadergone.go), and the first in turn loses when its log is behind
// another survivor's: it missed the dead leader's last entries. The
// survivor ahead of it refuses its vote, and used to wait for its own turn
// before calling, a stagger later. But in a group of 3 or 4 voters, a
// candidate refused by one survivor cannot win once the leader is gone:
// the others are too few for a majority. So the survivor that refused
// calls at once. In larger groups the candidate can still win without it,
// and the survivor keeps its turn.
//
// The gate sees raft's answers to vote requests: a refusal in the term the
// candidate asked for, from a candidate whose log is behind this node's,
// is kept (refusedVote) and wakes the watch.

// refusedVote is a vote request this node's raft refused.
type refusedVote struct {
	at        time.Time
	candidate string // the candidate's raft address
	term      uint64 // the term the candidate asked in
	lastIndex uint64 // the candidate's last entry
	lastTerm  uint64
}

// observeVote makes the gate see raft's answer to the vote request rpc,
// which it then hands on: the gate's book notes the request and the
// answer (handover.go); a refusal is kept as the last refused vote, and
// wakes the watch.
func (g *voteGate) observeVote(rpc raft.RPC, req *raft.RequestVoteRequest) raft.RPC {
	orig := rpc.RespChan
	g.book.asked(req.Term)
	ch := make(chan raft.RPCResponse, 1)
	rpc.RespChan = ch
	go func() {
		var resp raft.RPCResponse
		select {
		case resp = <-ch:
		case <-g.done:
			return
		}
		v, ok := resp.Response.(*raft.RequestVoteResponse)
		g.book.answered(req.Term, ok && resp.Error == nil && v.Granted)
		refused := ok && resp.Error == nil && !v.Granted && v.Term == req.Term
		if refused {
			g.refused.Store(&refusedVote{
				at:        time.Now(),
				candidate: string(req.Addr),
				term:      req.Term,
				lastIndex: req.LastLogIndex,
				lastTerm:  req.LastLogTerm,
			})
		}
		orig <- resp
		if refused && g.wake != nil {
			g.wake()
		}
	}()
	return rpc
}

// behindCandidate returns the vote request that r refused within the last
// within, in r's current term, to a candidate whose log is behind r's;
// nil if there is none.
func (g *voteGate) behindCandidate(r *raft.Raft, within time.Duration) *refusedVote {
	v := g.refused.Load()
	if v == nil || time.Since(v.at) > within || v.term != r.CurrentTerm() {
		return nil
	}
	st := r.Stats()
	lastIndex, err1 := strconv.ParseUint(st["last_log_index"], 10, 64)
	lastTerm, err2 := strconv.ParseUint(st["last_log_term"], 10, 64)
	if err1 != nil || err2 != nil {
		return nil
	}
	if v.lastTerm < lastTerm || v.lastTerm == lastTerm && v.lastIndex < lastIndex {
		return v
	}
	return nil
}

// cannotWinWithout reports whether a candidate refused by this node cannot
// win among voters voters once the leader is gone: the others, candidate
// included, are fewer than a majority.
func cannotWinWithout(voters int) bool {
	return voters-2 < voters/2+1
}

// wakeOnRefusedVote wakes the leader-gone watch after a log's raft refused
// a vote.
func (n *Node) wakeOnRefusedVote() {
	select {
	case n.refusedVotes <- struct{}{}:
	default:
	}
}
