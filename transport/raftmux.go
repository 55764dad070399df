package transport

// RaftMux: one raft listener and one pool of connections per peer, shared
// by any number of raft groups, each with a RaftTransport of its own. This
// file holds the mux, its group registry and its connection pool;
// raftnet.go the per-group transport and its calls; raftserve.go the
// answering side.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// ErrRaftGroupExists reports a RaftMux.Group call for a group that is
// already registered on the mux.
var ErrRaftGroupExists = errors.New("transport: raft group already registered")

// RaftMux serves any number of raft groups over one raft.StreamLayer: one
// listener and one pool of connections per peer. Each group, named by a
// uint64 id that every frame carries (raftwire.go), gets a RaftTransport
// of its own (Group), with its own Consumer channel, heartbeat handler and
// pipelines; groups come and go while the others run.
//
// Head-of-line blocking: none between groups. A call holds a pooled
// connection for itself until it is answered, a pipeline and a snapshot
// each have a connection of their own, and the answering side serves a
// connection's requests in order; so a group whose raft does not read its
// Consumer holds up only the connections that carry its own calls, never
// another group's; and a request its raft does not take within Timeout
// (when its caller has given up) is answered with an error, which frees
// the connection. The price is connections: a peer gets as many as it
// has calls in progress at once, over all groups, and keeps up to MaxPool
// idle ones per group registered.
//
// Idle groups: an idle group's traffic is raft's own. Each leader sends
// every follower a heartbeat every HeartbeatTimeout/10 to twice that, and
// an AppendEntries without entries every CommitTimeout to twice that, so
// that followers learn the commit index; with a CommitTimeout of a few
// milliseconds the second is most of the RPCs (TestRaftMuxIdleGroups
// measures them). The transport sends them all: answering a repeated one
// from the follower's last answer would be cheaper, but raft counts a
// successful AppendEntries answer as the follower's vote in VerifyLeader,
// and a remembered answer would confirm a leadership the follower may
// have moved on from (after a restart, say), letting a deposed leader
// serve a stale read.
//
// A request for a group that is not registered (never, or no longer) is
// answered with an error ("group N is not on this node"), which the
// calling raft handles as it does an unreachable peer: it backs off and
// retries, and its other groups carry on.
//
// Concurrency: every method may be called from any goroutine. Close closes
// the stream layer and every connection, closes every group's transport,
// and waits for the mux's goroutines.
type RaftMux struct {
	stream raft.StreamLayer    // immutable
	cfg    RaftTransportConfig // immutable, defaults applied
	logger hclog.Logger        // immutable
	done   chan struct{}       // closed by Close

	gmu    sync.RWMutex
	groups map[uint64]*RaftTransport // registered groups; guarded by gmu

	mu     sync.Mutex
	closed bool                                     // guarded by mu
	pool   map[raft.ServerAddress][]*raftClientConn // idle connections; guarded by mu
	open   map[io.Closer]struct{}                   // every open connection; guarded by mu
	wg     sync.WaitGroup                           // goroutines: the accept loop, answering connections, pipeline decoders; Add under mu while !closed

	stats raftMuxCounters
}

// raftMuxCounters count what a mux did; every field is updated atomically.
type raftMuxCounters struct {
	sent, served, unknown, untaken, dialled, accepted atomic.Uint64
}

// RaftMuxStats are a mux's counters since it started.
type RaftMuxStats struct {
	// Sent counts the requests this node sent, over all groups (pipelined
	// AppendEntries and snapshots included).
	Sent uint64
	// Served counts the requests this node answered, over all groups,
	// those for unknown groups included.
	Served uint64
	// UnknownGroup counts the requests answered with an error because
	// their group is not registered here.
	UnknownGroup uint64
	// NotTaken counts the requests answered with an error because their
	// group's raft did not take them within Timeout.
	NotTaken uint64
	// Dialled and Accepted count connections opened by this node and by
	// its peers.
	Dialled, Accepted uint64
	// Conns is the number of connections open now, dialled (idle in the
	// pool or in use) and accepted.
	Conns int
}

// NewRaftMux returns a mux over stream and starts accepting its
// connections. A nil cfg means the defaults; cfg applies to every group.
// The mux owns stream: Close closes it.
func NewRaftMux(stream raft.StreamLayer, cfg *RaftTransportConfig) (*RaftMux, error) {
	var c RaftTransportConfig
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &RaftMux{
		stream: stream,
		cfg:    c,
		logger: c.Logger,
		done:   make(chan struct{}),
		groups: map[uint64]*RaftTransport{},
		pool:   map[raft.ServerAddress][]*raftClientConn{},
		open:   map[io.Closer]struct{}{},
	}
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

// Group registers raft group id and returns its transport. Requests for
// the group are served from now on; its transport's Close removes it.
// It fails with ErrRaftGroupExists while the group is registered, and
// with raft.ErrTransportShutdown once the mux is closed.
func (m *RaftMux) Group(id uint64) (*RaftTransport, error) { return m.addGroup(id, false) }

func (m *RaftMux) addGroup(id uint64, owner bool) (*RaftTransport, error) {
	t := &RaftTransport{
		mux:   m,
		group: id,
		owner: owner,
		cfg:   &m.cfg,
		rpcs:  make(chan raft.RPC),
		done:  make(chan struct{}),
		inUse: map[io.Closer]struct{}{},
	}
	m.gmu.Lock()
	defer m.gmu.Unlock()
	if m.isClosed() {
		return nil, raft.ErrTransportShutdown
	}
	if _, ok := m.groups[id]; ok {
		return nil, fmt.Errorf("%w: group %d", ErrRaftGroupExists, id)
	}
	m.groups[id] = t
	return t, nil
}

// group returns the transport of a registered group, or nil.
func (m *RaftMux) group(id uint64) *RaftTransport {
	m.gmu.RLock()
	defer m.gmu.RUnlock()
	return m.groups[id]
}

// removeGroup unregisters t, if it is still the group's transport.
func (m *RaftMux) removeGroup(t *RaftTransport) {
	m.gmu.Lock()
	if m.groups[t.group] == t {
		delete(m.groups, t.group)
	}
	m.gmu.Unlock()
}

// Groups returns the ids of the registered groups, in increasing order.
func (m *RaftMux) Groups() []uint64 {
	m.gmu.RLock()
	ids := make([]uint64, 0, len(m.groups))
	for id := range m.groups {
		ids = append(ids, id)
	}
	m.gmu.RUnlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// Stats returns the mux's counters.
func (m *RaftMux) Stats() RaftMuxStats {
	conns := 0
	m.mu.Lock()
	for c := range m.open {
		if _, ok := c.(*raftPipeline); !ok {
			conns++
		}
	}
	m.mu.Unlock()
	return RaftMuxStats{
		Conns: conns,
		Sent:  m.stats.sent.Load(), Served: m.stats.served.Load(), UnknownGroup: m.stats.unknown.Load(), NotTaken: m.stats.untaken.Load(),
		Dialled: m.stats.dialled.Load(), Accepted: m.stats.accepted.Load(),
	}
}

// LocalAddr is the stream layer's address, every group's LocalAddr.
func (m *RaftMux) LocalAddr() raft.ServerAddress {
	return raft.ServerAddress(m.stream.Addr().String())
}

// Close closes the stream layer, every group's transport and every
// connection, and waits for the mux's goroutines. Calls in progress and
// later calls of every group return raft.ErrTransportShutdown or the
// error of their closed connection.
func (m *RaftMux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	open := m.open
	m.open, m.pool = nil, nil
	m.mu.Unlock()
	m.gmu.Lock()
	groups := m.groups
	m.groups = map[uint64]*RaftTransport{}
	m.gmu.Unlock()
	for _, t := range groups {
		t.shut()
	}
	err := m.stream.Close()
	for c := range open {
		c.Close()
	}
	m.wg.Wait()
	return err
}

func (m *RaftMux) isClosed() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// track registers an open connection, so that Close closes it; it fails
// once the mux is closed. With goroutine set, it also counts a goroutine
// in wg.
func (m *RaftMux) track(c io.Closer, goroutine bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.open[c] = struct{}{}
	if goroutine {
		m.wg.Add(1)
	}
	return true
}

func (m *RaftMux) untrack(c io.Closer) {
	m.mu.Lock()
	delete(m.open, c)
	m.mu.Unlock()
}

// raftClientConn is a connection this node dialled. It is used by one
// call at a time (a pooled RPC, or a pipeline whose sends and reads each
// have their own goroutine and their own half of the connection).
type raftClientConn struct {
	target raft.ServerAddress
	conn   net.Conn
	br     *bufio.Reader
	// greeted: the preamble was sent. Owned by the sending goroutine.
	greeted bool
	// aside, when not nil, collects the large entry data that frames
	// leave out of their buffers, to write it from where raft has it:
	// only over plain TCP, where that is one writev (over TLS each buffer
	// would be a record of its own). Owned by the sending goroutine.
	aside *dataAside
}

// Close closes the connection.
func (c *raftClientConn) Close() error { return c.conn.Close() }

// dial opens a connection to target.
func (m *RaftMux) dial(target raft.ServerAddress) (*raftClientConn, error) {
	conn, err := m.stream.Dial(target, m.cfg.Timeout)
	if err != nil {
		return nil, err
	}
	c := &raftClientConn{target: target, conn: conn, br: bufio.NewReaderSize(conn, 4096)}
	if _, ok := conn.(*net.TCPConn); ok {
		c.aside = &dataAside{}
	}
	if !m.track(c, false) {
		conn.Close()
		return nil, raft.ErrTransportShutdown
	}
	m.stats.dialled.Add(1)
	return c, nil
}

// discard closes a connection that is not to be reused.
func (m *RaftMux) discard(c *raftClientConn) {
	m.untrack(c)
	c.Close()
}

// getConn returns an idle connection to target, or a new one; reused says
// which.
func (m *RaftMux) getConn(target raft.ServerAddress) (c *raftClientConn, reused bool, err error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, false, raft.ErrTransportShutdown
	}
	if conns := m.pool[target]; len(conns) > 0 {
		c = conns[len(conns)-1]
		conns[len(conns)-1] = nil
		m.pool[target] = conns[:len(conns)-1]
		m.mu.Unlock()
		return c, true, nil
	}
	m.mu.Unlock()
	c, err = m.dial(target)
	return c, false, err
}

// putConn returns a healthy connection to the pool, or closes it when the
// pool is full: MaxPool idle connections per peer for each registered
// group (at least MaxPool).
func (m *RaftMux) putConn(c *raftClientConn) {
	m.gmu.RLock()
	limit := m.cfg.MaxPool * max(1, len(m.groups))
	m.gmu.RUnlock()
	m.mu.Lock()
	if !m.closed && len(m.pool[c.target]) < limit {
		m.pool[c.target] = append(m.pool[c.target], c)
		m.mu.Unlock()
		return
	}
	delete(m.open, c)
	m.mu.Unlock()
	c.Close()
}
