package replica

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// Stint is one period of leadership: one term. watchLeadership begins and
// ends stints as raft's LeaderCh reports changes, which it may see late or
// merge (raft overwrites an unread value), so a stint can outlive its
// term; whoever relies on one checks its term (Linearize).
type Stint struct {
	ready chan struct{} // closed once the stint's barrier is applied
	done  chan struct{} // closed when the stint ends
	// term is the term in which the stint's barrier committed, the term of
	// its leadership. Written by lead before ready is closed; read only
	// after ready is.
	term uint64
	ctx  context.Context
	stop context.CancelFunc
}

// Ready is closed once the stint's first entry is applied: the state
// machine then holds every entry of earlier terms.
func (s *Stint) Ready() <-chan struct{} { return s.ready }

// Done is closed when the stint ends.
func (s *Stint) Done() <-chan struct{} { return s.done }

// Term returns the stint's term; call it only once Ready is closed.
func (s *Stint) Term() uint64 { return s.term }

// Stint returns the current stint, nil when the replica does not lead.
func (r *Replica) Stint() *Stint {
	r.lmu.Lock()
	defer r.lmu.Unlock()
	return r.stint
}

// IsLeader reports whether the replica leads and is ready to serve.
func (r *Replica) IsLeader() bool {
	s := r.Stint()
	if s == nil {
		return false
	}
	select {
	case <-s.ready:
		return r.raft.State() == raft.Leader && r.raft.CurrentTerm() == s.term
	default:
		return false
	}
}

// watchLeadership starts and ends leader stints as raft reports them.
func (r *Replica) watchLeadership() {
	defer r.wg.Done()
	ch := r.raft.LeaderCh()
	for {
		select {
		case <-r.ctx.Done():
			r.endStint()
			return
		case leader := <-ch:
			if r.cfg.LeaderChange != nil {
				r.cfg.LeaderChange(leader)
			}
			r.endStint()
			if leader {
				r.beginStint()
			}
		}
	}
}

func (r *Replica) beginStint() {
	s := &Stint{ready: make(chan struct{}), done: make(chan struct{})}
	s.ctx, s.stop = context.WithCancel(r.ctx)
	r.lmu.Lock()
	r.stint = s
	r.lmu.Unlock()
	r.news.announce()
	r.wg.Add(1)
	go r.lead(s)
}

func (r *Replica) endStint() {
	r.lmu.Lock()
	s := r.stint
	r.stint = nil
	r.lmu.Unlock()
	if s != nil {
		s.stop()
		close(s.done)
	}
}

// lead runs while the replica leads. It first commits an entry of its own
// term (recording the node's client address), so that the state machine
// holds every entry of earlier terms before reads are served: reads wait
// for the stint to be ready, and the stint's term is that entry's. Then it
// enforces retention.
func (r *Replica) lead(s *Stint) {
	defer r.wg.Done()
	c := r.cfg
	for {
		f := r.Apply(EncodeMemberCmd(c.NodeID, c.ClientAddr), c.ElectionTimeout*4)
		err := f.Error()
		if err == nil {
			var l raft.Log
			if err = r.view.GetLog(f.Index(), &l); err == nil {
				s.term = l.Term
				break
			}
		}
		if s.ctx.Err() != nil || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
			return
		}
		if !errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			c.Logger.Warn("leader's first entry", "error", err)
		}
		t := time.NewTimer(c.HeartbeatTimeout / 10)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	close(s.ready)
	c.Logger.Info("leading", "term", s.term)
	if c.RetentionBytes <= 0 && c.RetentionAge <= 0 {
		return
	}
	t := time.NewTicker(c.RetentionCheck)
	defer t.Stop()
	for {
		r.enforceRetention()
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// enforceRetention proposes a trim when the log exceeds the retention
// limits. Trims fall on ledger marks, so up to markEvery records more than
// the limits allow may stay.
func (r *Replica) enforceRetention() {
	c := r.cfg
	below := r.fsm.RetentionByBytes(uint64(max(c.RetentionBytes, 0)))
	if c.RetentionAge > 0 {
		cutoff := time.Now().Add(-c.RetentionAge)
		marks := r.fsm.MarksCopy()
		var l raft.Log
		// The last mark whose entry is older than the cutoff.
		lo, hi := 0, len(marks)
		for lo < hi {
			mid := (lo + hi) / 2
			if err := r.view.GetLog(marks[mid].Index, &l); err == nil && l.AppendedAt.Before(cutoff) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		if lo > 0 {
			below = max(below, marks[lo-1].Index)
		}
	}
	if below <= r.fsm.ReadView().Floor {
		return
	}
	c.Logger.Info("retention: trimming", "below", below)
	if err := r.Apply(EncodeTrimCmd(below), 0).Error(); err != nil {
		c.Logger.Warn("retention trim", "error", err)
	}
}
