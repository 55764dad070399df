package replica

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Proposer hands appends to raft in batches.
//
// hashicorp/raft's leader loop takes everything its apply queue holds and
// stores it with one StoreLogs, one fdatasync in sync mode, and then
// replicates it: one AppendEntries and one fdatasync on each follower. An
// entry that reaches the queue while the loop is idle is stored and
// replicated alone. Appends arrive in bursts, because a commit answers
// many clients at once and they answer back at once; without the Proposer
// the first append of each burst was stored alone (half the leader's
// fdatasyncs held one record) and the rest waited behind it.
//
// So the Proposer batches. An append is proposed at once when no batch is
// in flight, so a lone client waits for nothing. Otherwise it waits with
// the others that arrive, and everything waiting is proposed together, in
// arrival order, as soon as one of these holds:
//
//   - the leader's store has just finished storing a batch (stored) and
//     fewer than maxInFlight batches are in flight: the leader then
//     stores the next batch while the followers store the one before it,
//     so the disks and the network work at once instead of in turn;
//   - a batch in flight has committed and been answered, and the leader's
//     store is idle (or no batch is in flight any more);
//   - maxBatch commands wait;
//   - linger has passed since the first of them arrived.
//
// A linger of zero or less proposes every append at once. A maxInFlight
// of one keeps one batch in raft at a time.
type Proposer struct {
	r           applier            // immutable
	linger      time.Duration      // immutable
	maxBatch    int                // immutable
	maxInFlight int                // immutable: the most batches proposed and not finished
	observe     func(commands int) // immutable: called with each batch's size; may be nil

	mu       sync.Mutex  // guards the fields below
	pending  []*Proposal // waiting to be proposed, in arrival order
	waiting  int         // commands in pending
	inflight int         // batches proposed and not finished
	storing  bool        // a batch was proposed since the leader's store last finished
	timer    *time.Timer // fires linger after the first pending proposal arrived

	submitMu sync.Mutex // keeps batches in arrival order
}

// applier is the part of *raft.Raft the proposer uses.
type applier interface {
	Apply(cmd []byte, timeout time.Duration) raft.ApplyFuture
}

// ApplierFunc is a function that is an applier.
type ApplierFunc func(cmd []byte, timeout time.Duration) raft.ApplyFuture

// Apply calls f.
func (f ApplierFunc) Apply(cmd []byte, timeout time.Duration) raft.ApplyFuture {
	return f(cmd, timeout)
}

// batch is the proposals proposed together.
type batch struct{ left int } // proposals not finished

// Proposal is one append's raft commands and, once proposed, their
// futures.
type Proposal struct {
	cmds      [][]byte
	Futures   []raft.ApplyFuture
	batch     *batch
	submitted chan struct{} // closed once futures is set
}

// NewProposer returns a proposer over r (see Proposer for linger,
// maxBatch and maxInFlight); observe, when not nil, is called with each
// batch's size.
func NewProposer(r applier, linger time.Duration, maxBatch, maxInFlight int, observe func(int)) *Proposer {
	p := &Proposer{r: r, linger: linger, maxBatch: max(maxBatch, 1), maxInFlight: max(maxInFlight, 1), observe: observe}
	p.timer = time.AfterFunc(time.Hour, p.lingered)
	p.timer.Stop()
	return p
}

// Propose hands cmds to raft, at once or with the next batch, and returns
// the proposal with their futures. The caller must call finish once the
// futures are done.
func (p *Proposer) Propose(cmds [][]byte) *Proposal {
	pr := &Proposal{cmds: cmds, submitted: make(chan struct{})}
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

// Finish records that the futures of pr are done; the last proposal of a
// batch to Finish proposes the next batch if no batch is in flight any
// more, or if another may be.
func (p *Proposer) Finish(pr *Proposal) {
	p.mu.Lock()
	if pr.batch.left--; pr.batch.left == 0 {
		p.inflight--
	}
	if len(p.pending) > 0 && (p.inflight == 0 || p.mayOverlapLocked()) {
		p.flushLocked()
	}
	p.mu.Unlock()
}

// Stored records that the leader's store finished storing entries (raft's
// leader loop stores each batch it takes, and only then takes the next):
// what waits is proposed now if another batch may be in flight.
//
// It may be called on any node, for any store: on a follower, or for
// entries other than the proposer's, nothing is pending and nothing
// happens; a call for a store that began before the last batch was
// proposed only lets the next batch go to raft a little early, where it
// waits in raft's queue.
//
// It runs on raft's leader loop, which is what takes from raft's queue,
// so it must not feed the queue itself: the linger timer's goroutine
// proposes instead.
func (p *Proposer) Stored() {
	p.mu.Lock()
	p.storing = false
	if len(p.pending) > 0 && p.mayOverlapLocked() {
		p.timer.Reset(0)
	}
	p.mu.Unlock()
}

// mayOverlapLocked reports whether the next batch may go while others are
// in flight: the leader's store is idle and there is room.
func (p *Proposer) mayOverlapLocked() bool {
	return !p.storing && p.inflight < p.maxInFlight
}

// lingered proposes what waited for linger.
func (p *Proposer) lingered() {
	p.mu.Lock()
	if len(p.pending) > 0 {
		p.flushLocked()
	}
	p.mu.Unlock()
}

// flushLocked proposes every pending proposal as one batch. mu must be
// held; it is released while raft's queue is fed and taken again.
func (p *Proposer) flushLocked() {
	props := p.pending
	if p.observe != nil {
		p.observe(p.waiting)
	}
	p.pending = nil
	p.waiting = 0
	p.inflight++
	p.storing = true
	p.timer.Stop()
	b := &batch{left: len(props)}
	p.submitMu.Lock()
	p.mu.Unlock()
	// Only the batch's first entry waits for raft's queue with a timeout:
	// raft takes a timer for each call that has one (two allocations per
	// record otherwise), and the rest of the batch follows an entry raft's
	// loop took, into a queue as long as the largest batch that loop
	// drains; raft's shutdown ends any wait.
	timeout := EnqueueTimeout
	for _, pr := range props {
		pr.batch = b
		pr.Futures = make([]raft.ApplyFuture, len(pr.cmds))
		for i, c := range pr.cmds {
			pr.Futures[i] = p.r.Apply(c, timeout)
			timeout = 0
		}
		close(pr.submitted)
	}
	p.submitMu.Unlock()
	p.mu.Lock()
}

// EnqueueTimeout bounds how long an operation waits to enter raft's queue.
const EnqueueTimeout = 5 * time.Second
