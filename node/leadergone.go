package node

import (
	"errors"
	"net"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/transport"
)

// When the leader's process dies (a crash, SIGKILL, an OOM kill) while its
// host lives on, its raft port refuses connections at once, but raft's
// followers notice only when no heartbeat has come for a heartbeat timeout
// (700 ms by default, and up to twice that, randomized), and then elect:
// appends stopped for about 1.6 s. Lower timeouts fail over faster, but
// elect leaders nobody asked for on a busy host.
//
// So a voting follower of a log (the default log or a named one) that has
// heard nothing from the log's leader for three
// heartbeat intervals (raft's heartbeat interval is a tenth of the
// heartbeat timeout) dials the leader's raft address. A refused connection
// means that nothing listens there any more: the process is gone. The
// follower then calls an election at once, as a leadership transfer does:
// it hands its raft a TimeoutNow, so raft campaigns without waiting for
// its timeout and without a pre-vote, and the other voters grant their
// votes although they have not timed the leader out yet. Elections decide
// nothing about safety: a vote still goes only to a candidate whose log
// holds everything the voter's does. An unreachable host, a partition or a
// paused process refuses nothing, and the timeouts apply as before.
//
// A dying process's peers need not wait for the heartbeats to be missed:
// the kernel closes its sockets, so the raft connections it had opened to
// this node end at once, and this node's own dials to it are refused
// (peerloss.go). Either wakes the watch, which then dials at once the
// leader of every log this node follows whose address could be the lost
// peer's (any leader, for a connection that ended, whose peer's address
// is not known), silent or not, for a short while (see lostWindow). A
// leader that accepts the connection is alive, whatever ended; only a
// refusal calls an election, as above.
//
// The surviving voters all see the refusal at about the same time; if they
// all campaigned at once, they could split the votes and wait out an
// election timeout. So they take turns: the voters other than the leader,
// in reverse order of the configuration, each one stagger after the one
// before (two of the watch's intervals, so that a voter that noticed a
// pass later keeps its turn), and a voter whose turn comes after a new
// leader has been heard from does nothing. The order is raft's: a
// hashicorp/raft candidate writes its new term, then goes through the
// configuration's voters in order, asking each for its vote, and writing
// its own vote (two more durable writes) when it comes to itself. The
// survivor listed last asks every other survivor right after its first
// write, and the voters' writes run beside its own; one listed before
// another survivor asks that one only after all three writes (2.1 ms on
// this project's machine with one log failing over, 3.3 ms with three at
// once). The first in turn loses when its log is behind another
// survivor's (it missed the dead leader's last entry); the survivor that
// refused it its vote then calls at once when the candidate cannot win
// without it (refusedvote.go), and otherwise the next in turn wins. Once an
// election is under way, the watch calls no other: not while raft is a
// candidate, nor after it granted a vote and knows no leader yet, although
// the old leader's port still refuses (calling again there deposed the
// new leader just elected, and the log waited out raft's timeouts, 1.1 to
// 2 s after the kill), nor when raft has a vote request of a newer term
// than the gone leader's to answer: a leader stopped on purpose hands its
// leadership over, then closes its port (handover.go).

// stagger is how long a surviving voter waits per voter before it in id
// order before it calls the election: two of the watch's intervals of
// every (140 ms with the default heartbeat timeout).
func stagger(every time.Duration) time.Duration { return 2 * every }

// leaderGone is the state of the watch: the leader found gone, and when.
type leaderGone struct {
	id         raft.ServerID
	addr       raft.ServerAddress
	leaderTerm uint64 // the term it led in
	since      time.Time
	after      string // what led to the dial: goneAfterLost or goneAfterSilence
	term       uint64 // the term the election was called in; 0 while not called
}

// What led to the dial that found a leader gone (the label "after" of
// raftlog_leader_gone_elections_total).
const (
	goneAfterLost    = "lost_connection"   // a raft connection with a peer ended, or a dial to it was refused
	goneAfterSilence = "missed_heartbeats" // no word from the leader for three heartbeat intervals
)

// leaderWatch is the watch of one log's raft group.
type leaderWatch struct {
	gone       *leaderGone
	leaderID   raft.ServerID      // the leader last heard of
	leaderAddr raft.ServerAddress // and its raft address
	leaderTerm uint64             // and the term it led in
	nextDial   time.Time          // no dial before: a slow leader is not dialled every tick
}

// A peer's connections end a few milliseconds before its raft port closes:
// a process's sockets are not all closed at the same instant. So a lost
// connection opens a window of lostWindow during which the watch passes
// over the logs every lostEvery, dialling the leaders the losses may
// concern; a loss during the window extends it. A peer that stays down
// is reported again and again (the leaders here retry it); the reports of
// a peer's address open or extend a window at most once per lostQuiet.
// Accepted connections end rarely otherwise, and each of their ends
// counts.
const (
	lostWindow = 50 * time.Millisecond
	lostEvery  = 5 * time.Millisecond
	lostQuiet  = 250 * time.Millisecond
)

// leaderGoneLoop watches for a dead leader of every log the node follows;
// see above. The logs' watches take turns within a pass, and a pass dials
// each leader's address at most once; a dial that is refused is cheap. A
// live leader is dialled at most every five ticks for its silence, and
// every lostEvery while a lost connection's window lasts.
func (n *Node) leaderGoneLoop() {
	defer n.wg.Done()
	every := max(n.cfg.HeartbeatTimeout/10, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	lostT := time.NewTimer(time.Hour)
	lostT.Stop()
	defer lostT.Stop()
	var (
		lost      map[raft.ServerAddress]bool          // peers lost in the window; nil outside one
		lostUntil time.Time                            // the window's end
		lostAt    = map[raft.ServerAddress]time.Time{} // when each peer's address last opened or extended a window
	)
	watches := map[*raft.Raft]*leaderWatch{}
	for {
		p := &watchPass{every: every, refused: map[raft.ServerAddress]bool{}}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		case <-n.peerLosses.wake:
			now := time.Now()
			fresh := false
			for a := range n.peerLosses.take() {
				if a != "" && now.Sub(lostAt[a]) < lostQuiet {
					continue
				}
				lostAt[a] = now
				fresh = true
				if lost == nil {
					lost = map[raft.ServerAddress]bool{}
				}
				lost[a] = true
			}
			if !fresh {
				continue
			}
			lostUntil = now.Add(lostWindow)
			p.lost = lost
			lostT.Reset(lostEvery)
		case <-n.refusedVotes:
			// A refused candidate may let a survivor call before its
			// turn: a pass of the watch decides.
		case <-lostT.C:
			if time.Now().After(lostUntil) {
				lost = nil
				continue
			}
			p.lost = lost
			lostT.Reset(lostEvery)
		}
		seen := map[*raft.Raft]bool{}
		for _, g := range n.gatedLogs() {
			w := watches[g.r]
			if w == nil {
				w = &leaderWatch{}
				watches[g.r] = w
			}
			seen[g.r] = true
			n.watchLeader(g, w, p)
		}
		for r := range watches {
			if !seen[r] {
				delete(watches, r)
			}
		}
	}
}

// watchPass is one pass of the watch over the logs.
type watchPass struct {
	every time.Duration
	// lost holds the peers reported lost in the window this pass belongs
	// to ("" for any peer); nil for a pass of the ticker.
	lost map[raft.ServerAddress]bool
	// refused memoizes this pass's dials, by address.
	refused map[raft.ServerAddress]bool
}

// dial reports whether addr refuses a connection, dialling it once per
// pass.
func (p *watchPass) dial(addr raft.ServerAddress) bool {
	r, ok := p.refused[addr]
	if !ok {
		r = refusesConnections(string(addr), p.every)
		p.refused[addr] = r
	}
	return r
}

// mayBeLost reports whether addr could be a peer reported lost.
func (p *watchPass) mayBeLost(addr raft.ServerAddress) bool {
	return p.lost[""] || p.lost[addr]
}

// gatedLog is a log's raft and the vote gate its transport goes through.
type gatedLog struct {
	name string
	r    *raft.Raft
	gate *voteGate
}

// gatedLogs returns the default log's and every named log's raft held
// here.
func (n *Node) gatedLogs() []gatedLog {
	out := []gatedLog{{transport.DefaultLog, n.raft, n.gate}}
	for _, h := range n.host.all() {
		out = append(out, gatedLog{h.name, h.r.Raft(), h.gate})
	}
	return out
}

// watchLeader is pass p of log g's watch w.
func (n *Node) watchLeader(g gatedLog, w *leaderWatch, p *watchPass) {
	r := g.r
	term := r.CurrentTerm()
	addr, id := r.LeaderWithID()
	if id != "" && r.CurrentTerm() == term {
		w.leaderAddr, w.leaderID, w.leaderTerm = addr, id, term
	}
	switch st := r.State(); {
	case st == raft.Candidate:
		return // an election is under way: the watch does not call another
	case st != raft.Follower || w.leaderID == "" || !g.gate.allowed.Load():
		w.gone = nil
		return
	}
	last := r.LastContact()
	if w.gone != nil && id == w.gone.id && last.After(w.gone.since) {
		// Heard from since: it is back. (A vote this node granted since
		// also counts as contact, but leaves raft without a leader: an
		// election is under way, and the watch does not call another.)
		w.gone = nil
	}
	if w.gone == nil || w.gone.id != w.leaderID {
		now := time.Now()
		after := goneAfterLost
		switch {
		case p.lost != nil:
			if !p.mayBeLost(w.leaderAddr) || !p.dial(w.leaderAddr) {
				return
			}
		case now.Sub(last) < 3*p.every:
			w.gone = nil
			return
		default:
			after = goneAfterSilence
			if now.Before(w.nextDial) {
				return
			}
			if !p.dial(w.leaderAddr) {
				w.nextDial = now.Add(5 * p.every)
				return
			}
		}
		w.gone = &leaderGone{id: w.leaderID, addr: w.leaderAddr, leaderTerm: w.leaderTerm, since: now, after: after}
	}
	if w.gone.term != 0 {
		return // called already; raft's timeouts take over if it failed
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	rank, voters, voter := survivorRank(f.Configuration(), n.cfg.ID, w.gone.id)
	if !voter {
		return
	}
	var behind *refusedVote
	if wait := time.Duration(rank) * stagger(p.every); time.Since(w.gone.since) < wait {
		if !cannotWinWithout(voters) {
			return
		}
		// A candidate refused since the leader was found gone, or
		// within the wait before (its dial may have come first).
		if behind = g.gate.behindCandidate(r, time.Since(w.gone.since)+wait); behind == nil {
			return
		}
	}
	term = r.CurrentTerm()
	if !g.gate.callElection(w.gone.leaderTerm) {
		// A vote asked or granted in a newer term than the gone leader's:
		// someone campaigns already, e.g. the survivor the leader handed
		// over to (handover.go).
		return
	}
	w.gone.term = term
	n.metrics.leaderGoneElections.WithLabelValues(w.gone.after).Inc()
	silent := time.Since(r.LastContact()).Round(time.Millisecond)
	if behind != nil {
		n.metrics.leaderGoneEarly.Inc()
		n.cfg.Logger.Warn("the leader's raft port refuses connections, and a candidate whose log is behind this node's cannot win without its vote; calling an election before its turn",
			"log", g.name, "leader", w.gone.id, "addr", w.gone.addr, "after", w.gone.after, "silent_for", silent,
			"candidate", behind.candidate, "candidate_last_index", behind.lastIndex)
	} else {
		n.cfg.Logger.Warn("the leader's raft port refuses connections: its process is gone; calling an election now",
			"log", g.name, "leader", w.gone.id, "addr", w.gone.addr, "after", w.gone.after, "silent_for", silent)
	}
}

// refusesConnections reports whether a TCP connection to addr is refused:
// the host answered that nothing listens on the port.
func refusesConnections(addr string, timeout time.Duration) bool {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// survivorRank returns the node's (self's) place, from 0, among the
// voters of conf other than leader, counted from the end of the
// configuration (see above), and the number of voters, leader included;
// false when the node is not one of them. Every voter ranks the survivors
// alike: raft keeps the servers of a configuration in their order across
// changes (a new one goes last).
func survivorRank(conf raft.Configuration, self string, leader raft.ServerID) (rank, voters int, ok bool) {
	var ids []raft.ServerID // the survivors, in the configuration's order
	for _, s := range conf.Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if s.ID != leader {
			ids = append(ids, s.ID)
		}
	}
	i := slices.Index(ids, raft.ServerID(self))
	if i < 0 {
		return 0, 0, false
	}
	return len(ids) - 1 - i, voters, true
}
