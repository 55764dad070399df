package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// testTimeout bounds every wait in these tests; nothing sleeps.
const testTimeout = 20 * time.Second

// fakeCluster is a cluster of in-memory members serving the client protocol
// with transport.Serve on 127.0.0.1 listeners. They share one log with
// duplicate suppression by (ClientID, Seq), as the replicated state machine
// does; one member leads and the others answer NotLeader naming it. Tests
// move leadership, script replies and drop connections.
type fakeCluster struct {
	waker                 // t, and mu, which guards the fields below
	members []*fakeMember // immutable

	leader   int                     // index of the leading member; -1 for none
	log      []transport.Record      // log[i].Index == first+i
	first    uint64                  // index of log[0]
	sessions map[string]*fakeSession // duplicate suppression
	stored   int                     // append requests stored
	dups     int                     // appends answered as duplicates
	configs  uint64                  // configuration changes made
	reqs     map[reqKey]int          // requests handled, per member and op
	refused  map[int]int             // NotLeader answers per member
	streams  map[int]int             // tail streams started per member
	accepted map[int]int             // connections accepted per member
	replay   bool                    // a tail starts one record before its From
	script   func(ctx context.Context, h *fakeHandler, op transport.Op, req any) (resp any, err error, handled bool)
	stored1  func(n int) (drop bool) // called, mu held, after the nth append request is stored
}

type reqKey struct {
	m  int
	op transport.Op
}

// fakeSession is one client's duplicate-suppression state.
type fakeSession struct {
	max  uint64              // highest sequence number seen
	done map[uint64][]uint64 // indexes stored per sequence number in the window
}

// fakeMember is one member: a listener and its connections.
type fakeMember struct {
	c    *fakeCluster // immutable
	idx  int          // immutable
	id   string       // immutable
	addr string       // immutable
	ln   net.Listener // immutable
	tls  *tls.Config  // immutable: connections speak TLS with it; nil: plain TCP

	mu     sync.Mutex            // guards the fields below
	conns  map[net.Conn]struct{} // open connections
	dead   bool                  // killed: connections are closed at once
	refuse *transport.Error      // set: new connections are refused with it (transport.Refuse)
	hang   bool                  // new connections are held open and never read
}

// newCluster starts n members serving plain TCP; member 0 leads.
func newCluster(t *testing.T, n int) *fakeCluster {
	t.Helper()
	return newTLSCluster(t, make([]*tls.Config, n))
}

// newTLSCluster starts a member per configuration, serving TLS with it, or
// plain TCP for nil; member 0 leads.
func newTLSCluster(t *testing.T, confs []*tls.Config) *fakeCluster {
	t.Helper()
	n := len(confs)
	c := &fakeCluster{
		waker:    newWaker(t),
		first:    1,
		sessions: make(map[string]*fakeSession),
		reqs:     make(map[reqKey]int),
		refused:  make(map[int]int),
		streams:  make(map[int]int),
		accepted: make(map[int]int),
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		for _, m := range c.members {
			m.kill()
		}
		wg.Wait()
	})
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m := &fakeMember{c: c, idx: i, id: "n" + strconv.Itoa(i), addr: ln.Addr().String(), ln: ln, tls: confs[i], conns: make(map[net.Conn]struct{})}
		c.members = append(c.members, m)
	}
	// Serve only once c.members is complete: handlers read it.
	for _, m := range c.members {
		wg.Go(func() {
			for {
				nc, err := m.ln.Accept()
				if err != nil {
					return
				}
				c.mu.Lock()
				c.accepted[m.idx]++
				c.pokeLocked()
				c.mu.Unlock()
				m.mu.Lock()
				if m.dead { // accepted just before kill closed the listener
					nc.Close()
				}
				m.conns[nc] = struct{}{}
				refuse, hang := m.refuse, m.hang
				m.mu.Unlock()
				if hang {
					continue // closed by kill or dropConns
				}
				wg.Go(func() {
					if refuse != nil {
						transport.Refuse(nc, refuse)
					} else {
						conn := nc
						if m.tls != nil {
							conn = tls.Server(nc, m.tls)
						}
						transport.Serve(ctx, conn, &fakeHandler{m: m, nc: nc}, transport.Limits{})
					}
					m.mu.Lock()
					delete(m.conns, nc)
					m.mu.Unlock()
				})
			}
		})
	}
	return c
}

// addrs returns the members' client addresses.
func (c *fakeCluster) addrs() []string {
	var a []string
	for _, m := range c.members {
		a = append(a, m.addr)
	}
	return a
}

// setScript sets the function every request goes through first.
func (c *fakeCluster) setScript(f func(ctx context.Context, h *fakeHandler, op transport.Op, req any) (any, error, bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.script = f
}

// setLeader makes member i lead (-1: none).
func (c *fakeCluster) setLeader(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLeaderLocked(i)
}

func (c *fakeCluster) setLeaderLocked(i int) {
	c.leader = i
	c.pokeLocked()
}

// waker lets a fake cluster's goroutines wait for a change of its state:
// mu guards the state, and poke is closed, and replaced, on every change.
type waker struct {
	t    *testing.T
	mu   sync.Mutex
	poke chan struct{} // guarded by mu
}

func newWaker(t *testing.T) waker { return waker{t: t, poke: make(chan struct{})} }

// pokeLocked wakes every waiter: tails and waitFor.
func (w *waker) pokeLocked() {
	close(w.poke)
	w.poke = make(chan struct{})
}

// waitFor waits until cond, called with w.mu held, is true.
func (w *waker) waitFor(what string, cond func() bool) {
	w.t.Helper()
	timeout := time.After(testTimeout)
	for {
		w.mu.Lock()
		ok := cond()
		poke := w.poke
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-poke:
		case <-timeout:
			w.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// count returns how many op requests member i has handled.
func (c *fakeCluster) count(i int, op transport.Op) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reqs[reqKey{i, op}]
}

// notLeaderLocked is the error a follower answers with.
func (c *fakeCluster) notLeaderLocked(m *fakeMember) error {
	c.refused[m.idx]++
	c.pokeLocked()
	e := &transport.Error{Code: transport.CodeNotLeader, Message: m.id + " does not lead"}
	if c.leader >= 0 {
		e.LeaderID, e.LeaderAddr = c.members[c.leader].id, c.members[c.leader].addr
	}
	return e
}

// recordsLocked returns up to max records from index from.
func (c *fakeCluster) recordsLocked(from uint64, max uint32) []transport.Record {
	i := from - c.first
	if i >= uint64(len(c.log)) {
		return nil
	}
	n := min(uint64(len(c.log))-i, uint64(max))
	return append([]transport.Record(nil), c.log[i:i+n]...)
}

// setRefuse makes m refuse new connections with e (nil: serve them), as a
// node at its connection limit does.
func (m *fakeMember) setRefuse(e *transport.Error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refuse = e
}

// setHang makes m hold new connections open without reading them: a
// member that accepts and then says nothing.
func (m *fakeMember) setHang() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hang = true
}

// kill closes m's listener and connections: dials to it are refused.
func (m *fakeMember) kill() {
	m.mu.Lock()
	m.dead = true
	m.mu.Unlock()
	m.ln.Close()
	m.dropConns()
}

// dropConns closes m's connections; m keeps listening.
func (m *fakeMember) dropConns() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for nc := range m.conns {
		nc.Close()
	}
}

// fakeHandler serves one connection of a member.
type fakeHandler struct {
	m  *fakeMember // immutable
	nc net.Conn    // immutable
}

func (h *fakeHandler) Handle(ctx context.Context, op transport.Op, req any) (any, error) {
	c := h.m.c
	c.mu.Lock()
	c.reqs[reqKey{h.m.idx, op}]++
	c.pokeLocked()
	script := c.script
	c.mu.Unlock()
	if script != nil {
		if resp, err, ok := script(ctx, h, op, req); ok {
			return resp, err
		}
	}
	return h.serve(op, req)
}

// serve is the members' behaviour without a script.
func (h *fakeHandler) serve(op transport.Op, req any) (any, error) {
	c, m := h.m.c, h.m
	c.mu.Lock()
	defer c.mu.Unlock()
	leads := c.leader == m.idx
	switch r := req.(type) {
	case *transport.AppendRequest:
		if !leads {
			return nil, c.notLeaderLocked(m)
		}
		return h.appendLocked(r)
	case *transport.ReadRequest:
		if !leads && !r.Stale {
			return nil, c.notLeaderLocked(m)
		}
		if r.From != 0 && r.From < c.first {
			return nil, &transport.Error{Code: transport.CodeTrimmed, Message: fmt.Sprintf("index %d is below %d", r.From, c.first)}
		}
		from := max(r.From, c.first)
		recs := c.recordsLocked(from, r.MaxRecords)
		return &transport.ReadResponse{Records: recs, Next: from + uint64(len(recs))}, nil
	case *transport.StatusRequest:
		s := &transport.StatusResponse{NodeID: m.id, Role: "Follower", FirstIndex: c.first, LastIndex: c.first + uint64(len(c.log)) - 1}
		if leads {
			s.Role = "Leader"
		}
		if c.leader >= 0 {
			s.LeaderID, s.LeaderAddr = c.members[c.leader].id, c.members[c.leader].addr
		}
		if r.Details {
			s.Details = &transport.StatusDetails{Version: "v0.0.0-fake", Flush: "sync"}
		}
		return s, nil
	}
	if !leads {
		return nil, c.notLeaderLocked(m)
	}
	c.configs++
	switch r := req.(type) {
	case *transport.JoinRequest:
		return &transport.JoinResponse{Index: 1000 + c.configs}, nil
	case *transport.RemoveRequest:
		return &transport.RemoveResponse{Index: 1000 + c.configs}, nil
	case *transport.TransferLeadershipRequest:
		c.setLeaderLocked((m.idx + 1) % len(c.members))
		return nil, nil
	case *transport.TrimRequest:
		for c.first < r.Below && len(c.log) > 0 {
			c.log = c.log[1:]
			c.first++
		}
		return &transport.TrimResponse{Index: 1000 + c.configs}, nil
	}
	return nil, &transport.Error{Code: transport.CodeUnknownOp}
}

// appendLocked stores an append once per (ClientID, Seq).
func (h *fakeHandler) appendLocked(r *transport.AppendRequest) (any, error) {
	c := h.m.c
	s := c.sessions[r.ClientID]
	if s == nil {
		s = &fakeSession{done: make(map[uint64][]uint64)}
		c.sessions[r.ClientID] = s
	}
	if idx, ok := s.done[r.Seq]; ok {
		c.dups++
		c.pokeLocked()
		return &transport.AppendResponse{Indexes: idx, Duplicate: true}, nil
	}
	if s.max >= SeqWindow && r.Seq <= s.max-SeqWindow {
		c.t.Errorf("append with seq %d outside the window of %d below %d", r.Seq, SeqWindow, s.max)
		return nil, &transport.Error{Code: transport.CodeBadRequest, Message: "seq outside the window"}
	}
	var idx []uint64
	for _, rec := range r.Records {
		i := c.first + uint64(len(c.log))
		c.log = append(c.log, transport.Record{Index: i, Data: rec})
		idx = append(idx, i)
	}
	s.done[r.Seq] = idx
	if r.Seq > s.max {
		s.max = r.Seq
		if s.max > SeqWindow {
			delete(s.done, s.max-SeqWindow)
		}
	}
	c.stored++
	drop := c.stored1 != nil && c.stored1(c.stored)
	c.pokeLocked()
	if drop {
		h.nc.Close() // the append is stored, its reply is lost
		return nil, errors.New("connection dropped")
	}
	return &transport.AppendResponse{Indexes: idx}, nil
}

func (h *fakeHandler) Stream(ctx context.Context, op transport.Op, req any, s *transport.ServerStream) error {
	c, m := h.m.c, h.m
	r := req.(*transport.TailRequest)
	from := r.From
	c.mu.Lock()
	c.streams[m.idx]++
	if c.replay && from > c.first {
		from-- // a sloppy server repeats a record
	}
	c.pokeLocked()
	c.mu.Unlock()
	for {
		c.mu.Lock()
		if !r.Stale && c.leader != m.idx {
			err := c.notLeaderLocked(m)
			c.mu.Unlock()
			return err
		}
		if from == 0 {
			from = c.first
		}
		if from < c.first {
			c.mu.Unlock()
			return &transport.Error{Code: transport.CodeTrimmed, Message: fmt.Sprintf("index %d is below %d", from, c.first)}
		}
		recs := c.recordsLocked(from, r.MaxRecords)
		poke := c.poke
		c.mu.Unlock()
		if err := tailStep(ctx, s, recs, &from, poke); err != nil {
			return err
		}
	}
}

// tailStep is a step of a fake's tail: it sends recs, the records from
// *from on, and moves *from past them; with none, it waits for poke, the
// fake's next change.
func tailStep(ctx context.Context, s *transport.ServerStream, recs []transport.Record, from *uint64, poke <-chan struct{}) error {
	if len(recs) > 0 {
		*from += uint64(len(recs))
		return s.Send(&transport.TailItem{Records: recs, Next: *from})
	}
	select {
	case <-poke:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
