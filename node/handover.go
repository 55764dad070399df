package node

import (
	"sync"

	"github.com/hashicorp/raft"
)

// A leader stopped on purpose hands its leadership over first
// (handOverLeadership): it sends a TimeoutNow to one survivor, which
// campaigns and wins with the old leader's vote; then the old leader's
// process closes its raft port. The other survivors see that port refuse,
// as after a death (leadergone.go), possibly before they hear from the new
// leader. Calling an election then deposes the leader just elected: its
// appends in flight fail, and the log loses a commit round or more.
//
// What tells a handover from a death is the election that follows it: a
// survivor asked for its vote in a newer term than the dead leader's knows
// that someone campaigns already. So the gate keeps the vote requests that
// reach raft: the highest term in which raft granted one, and the terms of
// those it has not answered yet. The watch's call goes through the gate's
// loop, in order with the requests raft receives, and goes no further when
// raft granted a vote in a term newer than the gone leader's, or has such
// a request to answer: that candidate wins, or raft's own timeouts take
// over. A request raft refuses does not count, so a survivor that refused
// a candidate whose log is behind its own still calls (refusedvote.go).

// voteBook is what the gate saw of the vote requests raft received.
type voteBook struct {
	mu      sync.Mutex
	granted uint64         // the highest term in which raft granted a vote
	pending map[uint64]int // requests raft has not answered yet, by term
}

// asked records a vote request for term on its way to raft.
func (b *voteBook) asked(term uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == nil {
		b.pending = map[uint64]int{}
	}
	b.pending[term]++
}

// answered records raft's answer to a request for term that asked noted.
func (b *voteBook) answered(term uint64, granted bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending[term]--; b.pending[term] <= 0 {
		delete(b.pending, term)
	}
	if granted {
		b.granted = max(b.granted, term)
	}
}

// campaignAfter reports whether raft granted a vote in a term after term,
// or has a request for one to answer.
func (b *voteBook) campaignAfter(term uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.granted > term {
		return true
	}
	for t := range b.pending {
		if t > term {
			return true
		}
	}
	return false
}

// electionCall is the watch's call of an election over a leader of term
// leaderTerm found gone; called receives whether raft was told to
// campaign.
type electionCall struct {
	leaderTerm uint64
	called     chan bool
}

// callElection hands raft a TimeoutNow request, as a leader transferring
// its leadership sends one, unless raft has granted or been asked for a
// vote in a term after leaderTerm (see above) or the store failed; it
// reports whether it did. It does not wait for raft's answer.
func (g *voteGate) callElection(leaderTerm uint64) bool {
	c := electionCall{leaderTerm: leaderTerm, called: make(chan bool, 1)}
	select {
	case g.calls <- c:
	case <-g.done:
		return false
	}
	select {
	case ok := <-c.called:
		return ok
	case <-g.done:
		return false
	}
}

// call is callElection on the gate's loop, which hands raft the requests
// it receives in the order they come.
func (g *voteGate) call(c electionCall) {
	if g.failed.Load() || g.book.campaignAfter(c.leaderTerm) {
		c.called <- false
		return
	}
	rpc := raft.RPC{
		Command:  &raft.TimeoutNowRequest{RPCHeader: g.self},
		RespChan: make(chan raft.RPCResponse, 1),
	}
	select {
	case g.out <- rpc:
		c.called <- true
	case <-g.done:
		c.called <- false
	}
}
