package node

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// proposer hands appends to raft in batches.
//
// hashicorp/raft's leader loop takes everything its apply queue holds and
// stores it with one StoreLogs, one fdatasync in sync mode, and then
// replicates it: one AppendEntries and one fdatasync on each follower. An
// entry that reaches the queue while the loop is idle is stored and
// replicated alone. Appends arrive in bursts, because a commit answers
// many clients at once and they answer back at once; without the proposer
// the first append of each burst was stored alone (half the leader's
// fdatasyncs held one record) and the rest waited behind it.
//
// So the proposer keeps one batch in raft at a time. An append is proposed
// at once when no batch is in flight, so a lone client waits for nothing.
// Otherwise it waits with the others that arrive until the batch in flight
// has committed and been answered, until maxBatch commands wait, or for at
// most linger, whichever comes first; then everything waiting is proposed
// together, in arrival order. A linger of zero or less proposes every
// append at once.
type proposer struct {
	r        applier
	linger   time.Duration
	maxBatch int
	observe  func(commands int) // called with each batch's size; may be nil

	mu       sync.Mutex
	pending  []*proposal
	waiting  int // commands in pending
	inflight int // batches proposed and not finished
	timer    *time.Timer

	submitMu sync.Mutex // keeps batches in arrival order
}

// applier is the part of *raft.Raft the proposer uses.
type applier interface {
	Apply(cmd []byte, timeout time.Duration) raft.ApplyFuture
}

// batch is the proposals proposed together.
type batch struct{ left int } // proposals not finished

// proposal is one append's raft commands and, once proposed, their
// futures.
type proposal struct {
	cmds      [][]byte
	futures   []raft.ApplyFuture
	batch     *batch
	submitted chan struct{} // closed once futures is set
}

func newProposer(r applier, linger time.Duration, maxBatch int, observe func(int)) *proposer {
	p := &proposer{r: r, linger: linger, maxBatch: max(maxBatch, 1), observe: observe}
	p.timer = time.AfterFunc(time.Hour, p.lingered)
	p.timer.Stop()
	return p
}

// propose hands cmds to raft, at once or with the next batch, and returns
// the proposal with their futures. The caller must call finish once the
// futures are done.
func (p *proposer) propose(cmds [][]byte) *proposal {
	pr := &proposal{cmds: cmds, submitted: make(chan struct{})}
	p.mu.Lock()
	p.pending = append(p.pending, pr)
	p.waiting += len(cmds)
	switch {
	case p.linger <= 0 || p.inflight == 0 || p.waiting >= p.maxBatch:
		p.flushLocked()
	case len(p.pending) == 1:
		p.timer.Reset(p.linger)
	}
	p.mu.Unlock()
	<-pr.submitted
	return pr
}

// finish records that the futures of pr are done; the last proposal of
// the batch in flight to finish proposes the next batch.
func (p *proposer) finish(pr *proposal) {
	p.mu.Lock()
	if pr.batch.left--; pr.batch.left == 0 {
		p.inflight--
	}
	if p.inflight == 0 && len(p.pending) > 0 {
		p.flushLocked()
	}
	p.mu.Unlock()
}

// lingered proposes what waited for linger.
func (p *proposer) lingered() {
	p.mu.Lock()
	if len(p.pending) > 0 {
		p.flushLocked()
	}
	p.mu.Unlock()
}

// flushLocked proposes every pending proposal as one batch. mu must be
// held; it is released while raft's queue is fed and taken again.
func (p *proposer) flushLocked() {
	props := p.pending
	if p.observe != nil {
		p.observe(p.waiting)
	}
	p.pending = nil
	p.waiting = 0
	p.inflight++
	p.timer.Stop()
	b := &batch{left: len(props)}
	p.submitMu.Lock()
	p.mu.Unlock()
	for _, pr := range props {
		pr.batch = b
		pr.futures = make([]raft.ApplyFuture, len(pr.cmds))
		for i, c := range pr.cmds {
			pr.futures[i] = p.r.Apply(c, enqueueTimeout)
		}
		close(pr.submitted)
	}
	p.submitMu.Unlock()
	p.mu.Lock()
}
