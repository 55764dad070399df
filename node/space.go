package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"

	"github.com/raftlog/raftlog/transport"
)

// Free space. Every node keeps a reserve of free space on its data dir's
// file system (Config.MinFreeBytes). Below it, a node is "below its
// reserve": it goes on storing what raft sends it, but cannot be counted
// on to store appends for long. The reserve is there for raft's own small
// entries (elections, membership, trims, each under a hundred bytes) and
// the snapshot a trim triggers (the state machine's state, a few MiB at
// most), so that a cluster whose disks fill up keeps a leader, serves
// reads, and takes the trim that frees space.
//
// The leader refuses appends, with NoSpace naming the nodes, when it is
// below its own reserve, or when the voters not below theirs are fewer
// than a quorum: such appends could not commit, and would fill the last
// of the space. It learns the followers' state by asking each voter for
// its status (OpStatus, over the client protocol) every spacePollEvery.
// A report older than spaceReportTTL is dropped: a node that does not
// answer is raft's business, not the reserve's. Reads and trims are never
// refused for space. Appends resume by themselves, within about a second,
// once space is freed: nothing latches.
//
// A follower whose disk does fill up fails to store what raft sends it
// (commitlog.ErrNoSpace, which does not stop the node: failstop.go); the
// leader keeps resending, and the follower catches up once space is
// freed.
const (
	// spaceCheckEvery is how long a free-space reading is reused.
	spaceCheckEvery = 250 * time.Millisecond
	// spacePollEvery is how often the leader asks the voters about their
	// free space.
	spacePollEvery = 500 * time.Millisecond
	// spaceReportTTL is how long a voter's report counts.
	spaceReportTTL = 3 * time.Second
)

// Reasons of raftlog_appends_refused_total.
const (
	refusedSpace   = "no_space"
	refusedSession = "session_expired"
	refusedOrder   = "out_of_order" // AppendRequest.After was not stored
)

// spaceGuard reads the data dir's free space and holds the leader's
// verdict on the cluster's.
type spaceGuard struct {
	dir     string // immutable
	reserve int64  // immutable; <= 0: no reserve
	// free is statfs by default; fault injection replaces it. Set before
	// the node starts, then immutable.
	free func() (int64, error)

	mu      sync.Mutex // guards the fields below
	checked time.Time
	avail   int64
	err     error

	// verdict is the leader's refusal for the cluster's space, nil when
	// appends may go; written by spaceLoop only.
	verdict atomic.Pointer[transport.Error]
	// below mirrors the last reading: 1 while below the reserve.
	below atomic.Bool
}

func statfsFree(dir string) func() (int64, error) {
	return func() (int64, error) {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return 0, err
		}
		return int64(st.Bavail) * int64(st.Bsize), nil
	}
}

// read returns the free space, read again when the last reading is older
// than spaceCheckEvery.
func (g *spaceGuard) read() (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.checked) >= spaceCheckEvery {
		g.avail, g.err = g.free()
		g.checked = time.Now()
		g.below.Store(g.err == nil && g.reserve > 0 && g.avail < g.reserve)
	}
	return g.avail, g.err
}

// isBelow reports whether the data dir is below its reserve; false when
// the free space cannot be read (the store reports a real ENOSPC itself).
func (g *spaceGuard) isBelow() bool {
	g.read()
	return g.below.Load()
}

// report describes the node's own space, as a voter reports it.
func (g *spaceGuard) report() spaceReport {
	avail, err := g.read()
	r := spaceReport{reserve: uint64(max(g.reserve, 0)), below: g.below.Load()}
	if err == nil {
		r.free = uint64(max(avail, 0))
	}
	return r
}

// invalidate makes the next check read the free space again.
func (g *spaceGuard) invalidate() {
	g.mu.Lock()
	g.checked = time.Time{}
	g.mu.Unlock()
}

// spaceReport is one node's free-space state.
type spaceReport struct {
	free, reserve uint64
	below         bool
	at            time.Time // when the leader received it
}

// spaceVerdict decides whether the leader self must refuse appends, given
// the voters and the reports it holds (its own included); nil when not.
func spaceVerdict(self string, voters []string, reports map[string]spaceReport, now time.Time) *transport.Error {
	var low []string
	for _, id := range voters {
		if r, ok := reports[id]; ok && r.below && (id == self || now.Sub(r.at) <= spaceReportTTL) {
			low = append(low, id)
		}
	}
	selfLow := slices.Contains(low, self)
	quorum := len(voters)/2 + 1
	if !selfLow && len(voters)-len(low) >= quorum {
		return nil
	}
	slices.Sort(low)
	var b strings.Builder
	b.WriteString(strings.Join(low, ", "))
	if len(low) == 1 {
		b.WriteString(" is below its free-space reserve (")
	} else {
		b.WriteString(" are below their free-space reserve (")
	}
	for i, id := range low {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d MiB free, reserve %d MiB", id, reports[id].free>>20, reports[id].reserve>>20)
	}
	b.WriteString("): ")
	if selfLow {
		fmt.Fprintf(&b, "the leader, %s, cannot store appends", self)
	} else {
		fmt.Fprintf(&b, "%d of the %d voters can store appends, fewer than a quorum of %d", len(voters)-len(low), len(voters), quorum)
	}
	b.WriteString("; appends are refused until space is freed (trim the log with 'node trim' or free disk space); reads and trims are served")
	return &transport.Error{Code: transport.CodeNoSpace, Message: b.String()}
}

// checkSpace returns a NoSpace error when the node, leading, must refuse
// appends for want of space.
func (n *Node) checkSpace() error {
	if n.space.isBelow() {
		r := n.space.report()
		r.at = time.Now()
		err := spaceVerdict(n.cfg.ID, []string{n.cfg.ID}, map[string]spaceReport{n.cfg.ID: r}, r.at)
		if v := n.space.verdict.Load(); v != nil {
			err = v // it names the other nodes below their reserve too
		}
		n.metrics.refusedAppends.WithLabelValues(refusedSpace).Inc()
		return err
	}
	if v := n.space.verdict.Load(); v != nil {
		n.metrics.refusedAppends.WithLabelValues(refusedSpace).Inc()
		return v
	}
	return nil
}

// spaceLoop reads the node's free space every spacePollEvery, logging
// when it crosses the reserve, and, while the node leads, asks the other
// voters for theirs and keeps the verdict on the cluster's.
//
// It also stops the node (failStop) once the store has failed, within one
// tick of the failure, however idle the node is.
func (n *Node) spaceLoop() {
	defer n.wg.Done()
	p := &spacePoller{n: n, conns: map[string]*transport.Conn{}, reports: map[string]spaceReport{}}
	defer p.closeConns()
	t := time.NewTicker(spacePollEvery)
	defer t.Stop()
	wasBelow := false
	for {
		if err := n.db.Err(); err != nil {
			// The store failed without a write of raft's noticing it (a
			// background checkpoint's sync): stop now, not at the next
			// write, nor when raft panics failing to store a vote.
			n.failStop(err)
			return
		}
		if below := n.space.isBelow(); below != wasBelow {
			wasBelow = below
			r := n.space.report()
			if below {
				n.cfg.Logger.Warn("data dir is below its free-space reserve: appends are refused while this node leads, or while a quorum is below",
					"dir", n.space.dir, "free_mib", r.free>>20, "reserve_mib", r.reserve>>20)
			} else {
				n.cfg.Logger.Info("data dir is above its free-space reserve again", "dir", n.space.dir, "free_mib", r.free>>20)
			}
		}
		if n.raft.State() == raft.Leader {
			p.poll()
		} else {
			p.reset()
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// spacePoller is the state of spaceLoop; only spaceLoop uses it.
type spacePoller struct {
	n       *Node
	conns   map[string]*transport.Conn // by client address
	reports map[string]spaceReport     // by node id
}

// poll asks every other voter for its free-space state and updates the
// verdict.
func (p *spacePoller) poll() {
	n := p.n
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	var voters []string
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		}
	}
	self := n.space.report()
	self.at = time.Now()
	p.reports[n.cfg.ID] = self
	type answer struct {
		id, addr string
		r        spaceReport
		err      error
	}
	answers := make(chan answer, len(voters))
	asked := 0
	for _, id := range voters {
		addr := n.fsm.Member(id)
		if id == n.cfg.ID || addr == "" {
			continue
		}
		conn, err := p.conn(addr)
		if err != nil {
			continue
		}
		asked++
		go func() {
			ctx, cancel := context.WithTimeout(n.ctx, spacePollEvery)
			defer cancel()
			var st transport.StatusResponse
			err := conn.Call(ctx, transport.OpStatus, &transport.StatusRequest{}, &st)
			answers <- answer{id: id, addr: addr, err: err, r: spaceReport{
				free: st.Store.FreeBytes, reserve: st.Store.ReserveBytes, below: st.Store.BelowReserve, at: time.Now()}}
		}()
	}
	for range asked {
		a := <-answers
		if a.err != nil {
			if c := p.conns[a.addr]; c != nil {
				c.Close()
				delete(p.conns, a.addr)
			}
			continue
		}
		p.reports[a.id] = a.r
	}
	for id := range p.reports {
		if !slices.Contains(voters, id) {
			delete(p.reports, id)
		}
	}
	v := spaceVerdict(n.cfg.ID, voters, p.reports, time.Now())
	old := n.space.verdict.Swap(v)
	switch {
	case v != nil && (old == nil || old.Message != v.Message):
		n.cfg.Logger.Warn("refusing appends for want of space", "why", v.Message)
	case v == nil && old != nil:
		n.cfg.Logger.Info("accepting appends again: enough voters are above their free-space reserve")
	}
}

// conn returns a connection to the client address addr, dialling one
// when needed.
func (p *spacePoller) conn(addr string) (*transport.Conn, error) {
	if c := p.conns[addr]; c != nil {
		return c, nil
	}
	ctx, cancel := context.WithTimeout(p.n.ctx, spacePollEvery)
	defer cancel()
	nc, err := p.n.dialClient(ctx, addr)
	if err != nil {
		return nil, err
	}
	c, err := transport.NewConn(nc, nil)
	if err != nil {
		nc.Close()
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

// reset forgets the reports and the verdict: the node does not lead.
func (p *spacePoller) reset() {
	if len(p.reports) == 0 && len(p.conns) == 0 && p.n.space.verdict.Load() == nil {
		return
	}
	p.n.space.verdict.Store(nil)
	clear(p.reports)
	p.closeConns()
}

func (p *spacePoller) closeConns() {
	for addr, c := range p.conns {
		c.Close()
		delete(p.conns, addr)
	}
}
