package node

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// When a peer's process dies while its host lives on, the kernel closes
// its sockets: the raft connections this node accepted from it end at
// once (end of file, or a reset), and a new connection to its raft port is
// refused. peerLossLayer, between the raft transport and the stream layer,
// reports both to the leader-gone watch (leadergone.go), which then looks
// at once at the leaders of the logs this node follows instead of waiting
// until their heartbeats are overdue. A report decides nothing by itself:
// the watch calls an election only for a leader whose raft port refuses a
// connection it dials.

// peerLossLayer is a raft.StreamLayer that reports the signs of a peer
// whose process is gone.
type peerLossLayer struct {
	raft.StreamLayer
	// lost is called with the raft address of a peer whose port refused a
	// dial, or with "" when an accepted connection (whose peer's raft
	// address is not known here) ended. It must not block.
	lost func(addr raft.ServerAddress)
}

// Dial implements raft.StreamLayer.
func (l *peerLossLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := l.StreamLayer.Dial(addr, timeout)
	if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
		l.lost(addr)
	}
	return c, err
}

// Accept implements net.Listener.
func (l *peerLossLayer) Accept() (net.Conn, error) {
	c, err := l.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return &lossConn{Conn: c, lost: l.lost}, nil
}

// lossConn is an accepted raft connection that reports its end by the
// peer (end of file or a reset) once. Its own Close and deadlines report
// nothing.
type lossConn struct {
	net.Conn
	lost func(raft.ServerAddress)
	once sync.Once
}

// Read implements net.Conn.
func (c *lossConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		c.once.Do(func() { c.lost("") })
	}
	return n, err
}

// peerLosses collects what peerLossLayer reports until the leader-gone
// watch takes it. Safe for concurrent use.
type peerLosses struct {
	mu    sync.Mutex
	addrs map[raft.ServerAddress]bool // reported since the last take; "" for any peer
	wake  chan struct{}               // cap 1: something was reported
}

func newPeerLosses() *peerLosses {
	return &peerLosses{addrs: map[raft.ServerAddress]bool{}, wake: make(chan struct{}, 1)}
}

// report records addr ("" for a peer not known) and wakes the watch.
func (p *peerLosses) report(addr raft.ServerAddress) {
	p.mu.Lock()
	p.addrs[addr] = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns what was reported since the last take.
func (p *peerLosses) take() map[raft.ServerAddress]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.addrs
	p.addrs = map[raft.ServerAddress]bool{}
	return a
}
