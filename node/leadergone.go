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
// The surviving voters all see the refusal at about the same time; if they
// all campaigned at once, they could split the votes and wait out an
// election timeout. So they take turns: the voters other than the leader,
// by id, each one leadergoneStagger after the one before, and a voter
// whose turn comes after a new leader has been heard from does nothing.

// leadergoneStagger is how long a surviving voter waits per voter before
// it in id order before it calls the election.
const leadergoneStagger = 150 * time.Millisecond

// leaderGone is the state of the watch: the leader found gone, and when.
type leaderGone struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	since time.Time
	term  uint64 // the term the election was called in; 0 while not called
}

// leaderWatch is the watch of one log's raft group.
type leaderWatch struct {
	gone       *leaderGone
	leaderID   raft.ServerID      // the leader last heard of
	leaderAddr raft.ServerAddress // and its raft address
	nextDial   time.Time          // no dial before: a slow leader is not dialled every tick
}

// leaderGoneLoop watches for a dead leader of every log the node follows;
// see above. The logs' watches take turns within a tick; a dial that is
// refused is cheap, and a live leader is dialled at most every five ticks.
func (n *Node) leaderGoneLoop() {
	defer n.wg.Done()
	every := max(n.cfg.HeartbeatTimeout/10, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	watches := map[*raft.Raft]*leaderWatch{}
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		seen := map[*raft.Raft]bool{}
		for _, g := range n.gatedLogs() {
			w := watches[g.r]
			if w == nil {
				w = &leaderWatch{}
				watches[g.r] = w
			}
			seen[g.r] = true
			n.watchLeader(g, w, every)
		}
		for r := range watches {
			if !seen[r] {
				delete(watches, r)
			}
		}
	}
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

// watchLeader is one tick of log g's watch w.
func (n *Node) watchLeader(g gatedLog, w *leaderWatch, every time.Duration) {
	r := g.r
	if addr, id := r.LeaderWithID(); id != "" {
		w.leaderAddr, w.leaderID = addr, id
	}
	if r.State() != raft.Follower || time.Since(r.LastContact()) < 3*every || w.leaderID == "" || !g.gate.allowed.Load() {
		w.gone = nil
		return
	}
	if w.gone == nil || w.gone.id != w.leaderID {
		if time.Now().Before(w.nextDial) {
			return
		}
		if !refusesConnections(string(w.leaderAddr), every) {
			w.nextDial = time.Now().Add(5 * every)
			return
		}
		w.gone = &leaderGone{id: w.leaderID, addr: w.leaderAddr, since: time.Now()}
	}
	if w.gone.term != 0 {
		return // called already; raft's timeouts take over if it failed
	}
	rank, voter := survivorRank(r, n.cfg.ID, w.gone.id)
	if !voter || time.Since(w.gone.since) < time.Duration(rank)*leadergoneStagger {
		return
	}
	w.gone.term = r.CurrentTerm()
	n.metrics.leaderGoneElections.Inc()
	n.cfg.Logger.Warn("the leader's raft port refuses connections: its process is gone; calling an election now",
		"log", g.name, "leader", w.gone.id, "addr", w.gone.addr, "silent_for", time.Since(r.LastContact()).Round(time.Millisecond))
	g.gate.timeoutNow()
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
// voters of r's latest configuration other than leader, by id; false when
// the node is not one of them.
func survivorRank(r *raft.Raft, self string, leader raft.ServerID) (int, bool) {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return 0, false
	}
	var ids []string
	in := false
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter || s.ID == leader {
			continue
		}
		ids = append(ids, string(s.ID))
		in = in || string(s.ID) == self
	}
	if !in {
		return 0, false
	}
	slices.Sort(ids)
	return slices.Index(ids, self), true
}
