package transport

// The answering side of RaftTransport: accepting connections, handing
// their requests to raft, writing raft's responses back.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

const (
	// raftServerQueue bounds the requests of one connection handed to raft
	// and not yet answered: past it, the connection's reader waits, and
	// TCP pushes back on the peer.
	raftServerQueue = 64
	// raftServerReadBuffer and raftServerWriteBuffer size an answering
	// connection's buffers.
	raftServerReadBuffer  = 16 << 10
	raftServerWriteBuffer = 4 << 10
)

// acceptLoop accepts connections until the stream layer is closed.
func (m *RaftMux) acceptLoop() {
	defer m.wg.Done()
	const minBackoff, maxBackoff = 5 * time.Millisecond, time.Second
	backoff := minBackoff
	for {
		conn, err := m.stream.Accept()
		if err != nil {
			if m.isClosed() {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				m.logger.Error("the raft listener was closed; no more raft connections are accepted", "error", err)
				return
			}
			m.logger.Error("failed to accept a raft connection", "error", err)
			timer := time.NewTimer(backoff)
			select {
			case <-m.done:
				timer.Stop()
				return
			case <-timer.C:
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		if !m.track(conn, true) {
			conn.Close()
			return
		}
		m.stats.accepted.Add(1)
		go m.serveConn(conn)
	}
}

// raftPending is a request handed to raft, waiting for its response.
type raftPending struct {
	kind  raftKind
	group uint64
	resp  chan raft.RPCResponse
	// gone is closed when the group is removed: raft may never answer
	// then. Nil for a group that is not registered.
	gone <-chan struct{}
}

// errRaftNoGroup is the error a request for a group that is not
// registered gets. It travels to the caller as text (raftwire.go).
var errRaftNoGroup = errors.New("transport: no such raft group")

// serveConn answers the requests of one accepted connection. It reads
// them and hands them to raft in order, while writeResponses writes the
// responses in the same order.
func (m *RaftMux) serveConn(conn net.Conn) {
	defer m.wg.Done()
	defer m.untrack(conn)
	defer conn.Close()
	br := bufio.NewReaderSize(conn, raftServerReadBuffer)
	if err := m.greet(conn, br); err != nil {
		m.logger.Warn("refused a raft connection", "remote-address", conn.RemoteAddr().String(), "error", err)
		return
	}
	queue := make(chan *raftPending, raftServerQueue)
	writerDone := make(chan struct{})
	go m.writeResponses(conn, queue, writerDone)
	defer func() { <-writerDone }()
	defer close(queue)
	for {
		err := m.serveRequest(conn, br, queue, writerDone)
		if err == nil {
			continue
		}
		if err != io.EOF && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errRaftConnDone) && !m.isClosed() {
			m.logger.Error("failed to serve a raft connection", "remote-address", conn.RemoteAddr().String(), "error", err)
		}
		return
	}
}

// errRaftConnDone ends the serving of a connection without an error worth
// logging: the writer stopped, or an InstallSnapshot was answered.
var errRaftConnDone = errors.New("transport: raft connection done")

// greet reads and checks the preamble of an accepted connection. A peer
// of another version gets this side's preamble back, which tells it the
// version spoken here.
func (m *RaftMux) greet(conn net.Conn, br *bufio.Reader) error {
	if m.cfg.Timeout > 0 {
		conn.SetReadDeadline(time.Now().Add(m.cfg.Timeout))
	}
	p := make([]byte, raftPreambleSize)
	n, err := io.ReadFull(br, p)
	if err != nil && n == 0 {
		return err
	}
	if err := checkRaftPreamble(p[:n]); err != nil {
		if n == raftPreambleSize && string(p[:len(raftMagic)]) == raftMagic {
			if m.cfg.Timeout > 0 {
				conn.SetWriteDeadline(time.Now().Add(m.cfg.Timeout))
			}
			conn.Write(appendRaftPreamble(nil))
		}
		return err
	}
	conn.SetReadDeadline(time.Time{})
	return nil
}

// serveRequest reads one request and hands it to raft (or to the
// heartbeat handler), after queueing its response for the writer.
func (m *RaftMux) serveRequest(conn net.Conn, br *bufio.Reader, queue chan<- *raftPending, writerDone <-chan struct{}) error {
	f, err := readRaftFrame(br, m.cfg.MaxFrameSize, func(length int) {
		if m.cfg.Timeout > 0 {
			conn.SetReadDeadline(time.Now().Add(snapshotTimeout(m.cfg.Timeout, int64(length))))
		}
	})
	if err != nil {
		return err
	}
	conn.SetReadDeadline(time.Time{})
	if !f.kind.valid() {
		return fmt.Errorf("%w: a %v frame where a request belongs", ErrMalformedFrame, f.kind)
	}
	cmd, err := decodeRequest(f.kind, f.body)
	if err != nil {
		return err
	}
	m.stats.served.Add(1)
	g := m.group(f.group)
	p := &raftPending{kind: f.kind, group: f.group, resp: make(chan raft.RPCResponse, 1)}
	if g != nil {
		p.gone = g.done
	}
	rpc := raft.RPC{Command: cmd, RespChan: p.resp}
	snap, isSnap := cmd.(*raft.InstallSnapshotRequest)
	if isSnap {
		if m.cfg.Timeout > 0 {
			conn.SetReadDeadline(time.Now().Add(snapshotTimeout(m.cfg.Timeout, snap.Size)))
		}
		rpc.Reader = io.LimitReader(br, snap.Size)
	}
	select {
	case queue <- p:
	case <-writerDone:
		return errRaftConnDone
	case <-m.done:
		return errRaftConnDone
	}
	var hb *func(raft.RPC)
	if g != nil && isHeartbeat(cmd) {
		hb = g.hb.Load() // once: a concurrent SetHeartbeatHandler(nil) may clear it
	}
	switch {
	case g == nil:
		m.stats.unknown.Add(1)
		p.resp <- raft.RPCResponse{Error: fmt.Errorf("%w: group %d is not on this node", errRaftNoGroup, f.group)}
	case hb != nil:
		(*hb)(rpc)
	default:
		wait := m.cfg.Timeout
		if isSnap && wait > 0 {
			wait = snapshotTimeout(wait, snap.Size)
		}
		if err := m.handOver(g, rpc, wait); err != nil {
			if err == errRaftConnDone {
				return err
			}
			p.resp <- raft.RPCResponse{Error: err}
		}
	}
	if isSnap {
		// The writer closes the connection after the response: the
		// stream after the snapshot data is not trusted.
		<-writerDone
		return errRaftConnDone
	}
	return nil
}

// handOver hands rpc to g's Consumer. When g's raft does not take it
// within wait, the caller's own timeout (zero: no limit), it returns an
// error for the caller instead: a group whose raft is stuck pins the
// connections of its calls of the last Timeout, not of every call since
// it stuck. It returns nil, with the writer to answer, when the group is
// removed, and errRaftConnDone when the mux closes.
func (m *RaftMux) handOver(g *RaftTransport, rpc raft.RPC, wait time.Duration) error {
	select {
	case g.rpcs <- rpc:
		return nil
	default:
	}
	var expired <-chan time.Time
	if wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case g.rpcs <- rpc:
		return nil
	case <-g.done:
		return nil
	case <-m.done:
		return errRaftConnDone
	case <-expired:
		m.stats.untaken.Add(1)
		return fmt.Errorf("%w: raft group %d did not take the request within %v", errRaftNotTaken, g.group, wait)
	}
}

// errRaftNotTaken is the error a request gets when its group's raft does
// not take it within Timeout. It travels to the caller as text.
var errRaftNotTaken = errors.New("transport: raft group busy")

// isHeartbeat reports whether cmd is an AppendEntries that carries
// nothing but the term and the leader, the RPC raft's heartbeat handler
// takes.
func isHeartbeat(cmd any) bool {
	r, ok := cmd.(*raft.AppendEntriesRequest)
	if !ok {
		return false
	}
	//lint:ignore SA1019 raft v1.8.0 still sets and reads Leader
	leader := r.Leader
	return r.Term != 0 && (len(r.Addr) != 0 || len(leader) != 0) &&
		r.PrevLogEntry == 0 && r.PrevLogTerm == 0 && len(r.Entries) == 0 && r.LeaderCommitIndex == 0
}

// writeResponses writes the responses of queued requests, in order,
// flushing whenever the next response is not ready yet. It closes the
// connection when it stops: after a failed write, after the response to
// an InstallSnapshot, or when the queue closes.
func (m *RaftMux) writeResponses(conn net.Conn, queue <-chan *raftPending, writerDone chan<- struct{}) {
	defer close(writerDone)
	defer conn.Close()
	bw := bufio.NewWriterSize(conn, raftServerWriteBuffer)
	bp := getRaftBuf()
	defer putRaftBuf(bp)
	for {
		// Wait for the next request's response, flushing what is
		// written first if it is not ready.
		var p *raftPending
		var ok bool
		select {
		case p, ok = <-queue:
		default:
			if bw.Flush() != nil {
				return
			}
			select {
			case p, ok = <-queue:
			case <-m.done:
				return
			}
		}
		if !ok {
			bw.Flush()
			return
		}
		var r raft.RPCResponse
		select {
		case r = <-p.resp:
		default:
			if bw.Flush() != nil {
				return
			}
			select {
			case r = <-p.resp:
			case <-p.gone:
				r = raft.RPCResponse{Error: fmt.Errorf("%w: group %d was removed from this node", errRaftNoGroup, p.group)}
			case <-m.done:
				return
			}
		}
		b := appendRaftHeader((*bp)[:0], p.kind|raftResponseBit, p.group)
		b = appendResponse(b, p.kind, r.Response, r.Error)
		*bp = b
		if err := finishRaftFrame(b, 0, 0, m.cfg.MaxFrameSize); err != nil {
			m.logger.Error("failed to encode a raft response", "kind", p.kind, "error", err)
			return
		}
		if m.cfg.Timeout > 0 {
			conn.SetWriteDeadline(time.Now().Add(m.cfg.Timeout))
		}
		if _, err := bw.Write(b); err != nil {
			return
		}
		if p.kind == raftInstallSnapshot {
			bw.Flush()
			return
		}
	}
}
