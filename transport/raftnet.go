package transport

// RaftTransport: hashicorp/raft's Transport over the raft wire protocol
// (raftwire.go), for one raft group of a RaftMux (raftmux.go). This file
// holds the type, its configuration and the calling side; raftserve.go the
// answering side; raftpipe.go pipelined AppendEntries.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Defaults of RaftTransportConfig.
const (
	// DefaultRaftTimeout bounds a dial, the write of a request and the
	// wait for its response.
	DefaultRaftTimeout = 10 * time.Second
	// DefaultRaftMaxPool is the number of idle connections kept per peer
	// and per raft group.
	DefaultRaftMaxPool = 4
	// DefaultRaftMaxInFlight is the number of AppendEntries a pipeline
	// keeps in flight.
	DefaultRaftMaxInFlight = 4
	// DefaultRaftMaxFrameSize is the largest frame sent or accepted.
	DefaultRaftMaxFrameSize = 64 << 20
	// RaftSnapshotTimeoutScale: an InstallSnapshot may take Timeout for
	// every RaftSnapshotTimeoutScale bytes of snapshot (and at least
	// Timeout), as with hashicorp/raft's NetworkTransport.
	RaftSnapshotTimeoutScale = 256 << 10

	// minRaftFrameSize and maxRaftFrameSize bound MaxFrameSize. The upper
	// bound keeps a length's first byte below raftMagic's, which is how a
	// reader tells a refused preamble from a frame.
	minRaftFrameSize = 64 << 10
	maxRaftFrameSize = 1 << 30
)

// ErrInvalidRaftConfig reports a RaftTransportConfig that NewRaftTransport
// refuses.
var ErrInvalidRaftConfig = errors.New("transport: invalid raft transport config")

// RaftTransportConfig configures a RaftTransport. A zero field means its
// default.
type RaftTransportConfig struct {
	// Timeout bounds each dial, the write of each request, the wait for
	// each response, and on the answering side a frame that has started
	// to arrive and the write of a response. InstallSnapshot scales it by
	// the snapshot's size (RaftSnapshotTimeoutScale). Default
	// DefaultRaftTimeout.
	Timeout time.Duration
	// MaxPool is the number of idle connections kept per peer for RPCs
	// other than pipelined AppendEntries, for each raft group registered
	// on the mux (a mux of 100 groups keeps up to 400 per peer by
	// default, as many as were in use at once). Each RPC in progress has
	// a connection of its own, so a heartbeat never waits behind a large
	// AppendEntries, nor one group behind another. Default
	// DefaultRaftMaxPool.
	MaxPool int
	// MaxInFlight is the number of AppendEntries a pipeline keeps in
	// flight to one follower; 1 turns pipelining off (raft then replicates
	// one AppendEntries at a time). Default DefaultRaftMaxInFlight.
	MaxInFlight int
	// MaxFrameSize bounds the length of a frame, sent or accepted; between
	// 64 KiB and 1 GiB, default DefaultRaftMaxFrameSize. An AppendEntries
	// whose entries do not fit is sent with the leading entries that do
	// (see RaftTransport.AppendEntries); an entry that alone does not fit
	// cannot be sent.
	MaxFrameSize int
	// Logger receives connection errors. Default: a logger named
	// "raft-transport" writing to stderr.
	Logger hclog.Logger
}

func (c RaftTransportConfig) withDefaults() (RaftTransportConfig, error) {
	if c.Timeout == 0 {
		c.Timeout = DefaultRaftTimeout
	}
	if c.MaxPool == 0 {
		c.MaxPool = DefaultRaftMaxPool
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultRaftMaxInFlight
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = DefaultRaftMaxFrameSize
	}
	if c.Logger == nil {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft-transport"})
	}
	switch {
	case c.Timeout < 0:
		return c, fmt.Errorf("%w: Timeout %v", ErrInvalidRaftConfig, c.Timeout)
	case c.MaxPool < 0:
		return c, fmt.Errorf("%w: MaxPool %d", ErrInvalidRaftConfig, c.MaxPool)
	case c.MaxInFlight < 0:
		return c, fmt.Errorf("%w: MaxInFlight %d", ErrInvalidRaftConfig, c.MaxInFlight)
	case c.MaxFrameSize < minRaftFrameSize || c.MaxFrameSize > maxRaftFrameSize:
		return c, fmt.Errorf("%w: MaxFrameSize %d is outside [%d, %d]", ErrInvalidRaftConfig, c.MaxFrameSize, minRaftFrameSize, maxRaftFrameSize)
	}
	return c, nil
}

// RaftTransport is a hashicorp/raft Transport (with WithClose and
// WithPreVote) for one raft group of a RaftMux, speaking the raft wire
// protocol of raftwire.go. The mux's stream layer decides what a
// connection is (TCP, TLS, anything that wraps them); its Addr is the
// transport's LocalAddr. NewRaftTransport makes a mux that serves group 0
// alone, for a node of one raft group.
//
// Calls: every RPC but a pipelined AppendEntries takes an idle connection
// to the peer from the mux's pool, or dials one, and returns it to the
// pool once answered; a pooled connection that turns out closed by the
// peer before answering is replaced by a fresh one once. A pipeline
// (AppendEntriesPipeline) has a connection of its own and keeps up to
// MaxInFlight requests in flight.
//
// Answers: each accepted connection has a goroutine that reads requests
// and hands them to their group's Consumer in order, and one that writes
// the responses in the same order, so the next request is decoded while
// raft handles the one before.
//
// Memory: a received message is decoded in place. The entries of an
// AppendEntries alias the frame's buffer, which is allocated for that
// frame alone and never reused, so raft may keep them (its log cache does)
// for as long as it likes. Frames are built in pooled buffers.
//
// Concurrency: every method may be called from any goroutine. Close
// removes the group from its mux: it closes the group's connections in
// use (failing its calls, pipelines and snapshots in progress, and no
// other group's), answers the requests handed to its Consumer and not yet
// answered with an error, and from then on the mux answers the group's
// requests with an error. The transport of NewRaftTransport also closes
// its mux.
type RaftTransport struct {
	mux   *RaftMux                       // immutable
	group uint64                         // immutable: the raft group served
	owner bool                           // immutable: Close closes mux too (NewRaftTransport)
	cfg   *RaftTransportConfig           // immutable: the mux's
	rpcs  chan raft.RPC                  // Consumer's channel; unbuffered
	done  chan struct{}                  // closed by Close (or the mux's)
	hb    atomic.Pointer[func(raft.RPC)] // the heartbeat handler, if set

	mu     sync.Mutex
	closed bool                   // guarded by mu
	inUse  map[io.Closer]struct{} // the group's connections in use by its calls and pipelines; guarded by mu
}

// NewRaftTransport returns the transport of raft group 0 on a new RaftMux
// over stream, which it starts. A nil cfg means the defaults. The
// transport owns the mux and stream: Close closes them.
func NewRaftTransport(stream raft.StreamLayer, cfg *RaftTransportConfig) (*RaftTransport, error) {
	m, err := NewRaftMux(stream, cfg)
	if err != nil {
		return nil, err
	}
	t, err := m.addGroup(0, true)
	if err != nil {
		m.Close()
		return nil, err
	}
	return t, nil
}

// Mux returns the mux the transport belongs to.
func (t *RaftTransport) Mux() *RaftMux { return t.mux }

// Group returns the raft group the transport serves.
func (t *RaftTransport) Group() uint64 { return t.group }

// Consumer implements raft.Transport.
func (t *RaftTransport) Consumer() <-chan raft.RPC { return t.rpcs }

// LocalAddr implements raft.Transport: the stream layer's address.
func (t *RaftTransport) LocalAddr() raft.ServerAddress { return t.mux.LocalAddr() }

// SetHeartbeatHandler implements raft.Transport. A heartbeat (an
// AppendEntries with no entries and nothing but the term and the leader
// set, as NetworkTransport detects it) is passed to cb on the connection's
// goroutine instead of Consumer. A nil cb removes the handler.
func (t *RaftTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		t.hb.Store(nil)
		return
	}
	t.hb.Store(&cb)
}

// EncodePeer implements raft.Transport.
func (t *RaftTransport) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte {
	return []byte(addr)
}

// DecodePeer implements raft.Transport.
func (t *RaftTransport) DecodePeer(b []byte) raft.ServerAddress { return raft.ServerAddress(b) }

// Close implements raft.WithClose: it removes the group from its mux (see
// RaftTransport), or closes the mux when the transport owns it
// (NewRaftTransport). Calls in progress and later calls return
// raft.ErrTransportShutdown or the error of their closed connection.
// raft.Raft's Shutdown calls it.
func (t *RaftTransport) Close() error {
	t.mux.removeGroup(t)
	t.shut()
	if t.owner {
		return t.mux.Close()
	}
	return nil
}

// shut stops the transport: later calls fail, and the connections its
// calls and pipelines use are closed.
func (t *RaftTransport) shut() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	close(t.done)
	inUse := t.inUse
	t.inUse = nil
	t.mu.Unlock()
	for c := range inUse {
		c.Close()
	}
}

// acquire records c as in use by one of the group's calls, so that Close
// closes it; it fails once the transport is closed.
func (t *RaftTransport) acquire(c io.Closer) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.inUse[c] = struct{}{}
	return true
}

func (t *RaftTransport) release(c io.Closer) {
	t.mu.Lock()
	delete(t.inUse, c)
	t.mu.Unlock()
}

// isClosed reports whether the transport, or its mux, is closed.
func (t *RaftTransport) isClosed() bool {
	select {
	case <-t.done:
		return true
	default:
		return t.mux.isClosed()
	}
}

// getConn returns a connection to target, recorded as in use by the
// group; reused says whether it came from the pool.
func (t *RaftTransport) getConn(target raft.ServerAddress) (c *raftClientConn, reused bool, err error) {
	if t.isClosed() {
		return nil, false, raft.ErrTransportShutdown
	}
	c, reused, err = t.mux.getConn(target)
	if err != nil {
		return nil, false, err
	}
	if !t.acquire(c) {
		t.mux.putConn(c)
		return nil, false, raft.ErrTransportShutdown
	}
	return c, reused, nil
}

// putConn hands a healthy connection back to the mux's pool.
func (t *RaftTransport) putConn(c *raftClientConn) {
	t.release(c)
	t.mux.putConn(c)
}

// discard closes a connection that is not to be reused.
func (t *RaftTransport) discard(c *raftClientConn) {
	t.release(c)
	t.mux.discard(c)
}

// dial opens a connection to target of the group's own (a pipeline's, a
// snapshot's), recorded as in use by the group.
func (t *RaftTransport) dial(target raft.ServerAddress) (*raftClientConn, error) {
	if t.isClosed() {
		return nil, raft.ErrTransportShutdown
	}
	c, err := t.mux.dial(target)
	if err != nil {
		return nil, err
	}
	if !t.acquire(c) {
		t.mux.discard(c)
		return nil, raft.ErrTransportShutdown
	}
	return c, nil
}

// AppendEntriesPipeline implements raft.Transport. It returns
// raft.ErrPipelineReplicationNotSupported when MaxInFlight is 1.
func (t *RaftTransport) AppendEntriesPipeline(_ raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if t.cfg.MaxInFlight < 2 {
		return nil, raft.ErrPipelineReplicationNotSupported
	}
	c, err := t.dial(target)
	if err != nil {
		return nil, err
	}
	return newRaftPipeline(t, c)
}

// AppendEntries implements raft.Transport. When the encoded request would
// exceed MaxFrameSize it sends only the leading entries that fit and cuts
// args.Entries to them: raft reads args.Entries after the call to learn
// which entries the follower got, and sends the rest next.
func (t *RaftTransport) AppendEntries(_ raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.call(target, raftAppendEntries, args, resp)
}

// RequestVote implements raft.Transport.
func (t *RaftTransport) RequestVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.call(target, raftRequestVote, args, resp)
}

// RequestPreVote implements raft.WithPreVote.
func (t *RaftTransport) RequestPreVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.call(target, raftRequestPreVote, args, resp)
}

// TimeoutNow implements raft.Transport.
func (t *RaftTransport) TimeoutNow(_ raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.call(target, raftTimeoutNow, args, resp)
}

// call makes one RPC on a pooled connection. A connection taken from the
// pool that the peer closed before answering (the peer restarted, or shed
// idle connections) is replaced by a fresh one, once: raft's RPCs may be
// repeated.
func (t *RaftTransport) call(target raft.ServerAddress, k raftKind, args, resp any) error {
	for attempt := 0; ; attempt++ {
		c, reused, err := t.getConn(target)
		if err != nil {
			return err
		}
		rpcErr, err := t.roundTrip(c, k, args, resp)
		if err == nil {
			t.putConn(c)
			return rpcErr
		}
		t.discard(c)
		if t.isClosed() {
			return raft.ErrTransportShutdown
		}
		if reused && attempt == 0 && closedByPeer(err) {
			continue
		}
		return fmt.Errorf("transport: raft %v to %s: %w", k, target, err)
	}
}

// closedByPeer reports whether err says the peer closed the connection
// (rather than, say, a timeout).
func closedByPeer(err error) bool {
	return err == io.EOF || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// roundTrip sends one request on c and reads its response into resp. It
// returns the error raft answered with as rpcErr; err is a failure of the
// connection, after which c must be discarded.
func (t *RaftTransport) roundTrip(c *raftClientConn, k raftKind, args, resp any) (rpcErr, err error) {
	if t.cfg.Timeout > 0 {
		c.conn.SetDeadline(time.Now().Add(t.cfg.Timeout))
	}
	if err := t.send(c, k, args); err != nil {
		return nil, err
	}
	return t.receive(c, k, resp)
}

// send writes one request frame (after the preamble, on a new
// connection).
func (t *RaftTransport) send(c *raftClientConn, k raftKind, args any) error {
	bp := getRaftBuf()
	defer putRaftBuf(bp)
	b, err := t.encodeRequest(*bp, c, k, args, c.aside)
	*bp = b
	if a := c.aside; a != nil && len(a.at) > 0 {
		if err == nil {
			bufs := a.buffers(b)
			_, err = bufs.WriteTo(c.conn)
		}
		a.reset()
	} else if err == nil {
		_, err = c.conn.Write(b)
	}
	if err != nil {
		return err
	}
	c.greeted = true
	t.mux.stats.sent.Add(1)
	return nil
}

// encodeRequest appends a request frame to b, after the preamble if c has
// not sent it yet. An AppendEntries too large for a frame is cut to the
// leading entries that fit (see AppendEntries). With aside not nil, the
// large data of AppendEntries' entries is left out of b and noted in
// aside, which the caller must reset once the frame is written (also on
// an error).
func (t *RaftTransport) encodeRequest(b []byte, c *raftClientConn, k raftKind, args any, aside *dataAside) ([]byte, error) {
	if !c.greeted {
		b = appendRaftPreamble(b)
	}
	start := len(b)
	b = appendRaftHeader(b, k, t.group)
	var err error
	if ae, ok := args.(*raft.AppendEntriesRequest); ok {
		if err := t.fitEntries(ae); err != nil {
			return b, err
		}
		b, err = appendAppendEntriesRequestAside(b, ae, len(ae.Entries), aside)
	} else {
		b, err = appendRequest(b, k, args)
	}
	if err != nil {
		return b, err
	}
	extra := 0
	if aside != nil {
		extra = aside.bytes
	}
	return b, finishRaftFrame(b, start, extra, t.cfg.MaxFrameSize)
}

// fitEntries cuts r.Entries to the leading entries whose request fits a
// frame, at least one; ErrFrameTooLarge when the first alone does not.
func (t *RaftTransport) fitEntries(r *raft.AppendEntriesRequest) error {
	// A bound first, which is cheap: most requests are far below it.
	bound := raftHeaderSize + 128 + len(r.Addr) + len(r.ID) + len(r.Leader) //lint:ignore SA1019 raft v1.8.0 still sets Leader
	for _, e := range r.Entries {
		if e == nil {
			return nil // appendAppendEntriesRequest reports it
		}
		bound += len(e.Data) + len(e.Extensions) + 64
	}
	if bound <= t.cfg.MaxFrameSize {
		return nil
	}
	fixed, err := appendAppendEntriesRequest(nil, r, 0)
	if err != nil {
		return err
	}
	room := t.cfg.MaxFrameSize - raftHeaderSize - len(fixed) - binary.MaxVarintLen64 // the count may grow
	for i, e := range r.Entries {
		if room -= logLen(e); room < 0 {
			if i == 0 {
				return fmt.Errorf("%w: entry %d alone encodes to %d bytes, limit %d", ErrFrameTooLarge, e.Index, logLen(e), t.cfg.MaxFrameSize)
			}
			t.mux.logger.Debug("AppendEntries larger than a frame; sending its leading entries", "entries", len(r.Entries), "sent", i, "max-frame-size", t.cfg.MaxFrameSize)
			r.Entries = r.Entries[:i]
			return nil
		}
	}
	return nil
}

// receive reads the response of kind k into resp.
func (t *RaftTransport) receive(c *raftClientConn, k raftKind, resp any) (rpcErr, err error) {
	f, err := readRaftFrame(c.br, t.cfg.MaxFrameSize, nil)
	if err != nil {
		return nil, err
	}
	if f.kind != k|raftResponseBit || f.group != t.group {
		return nil, fmt.Errorf("%w: a %v for group %d in answer to a %v", ErrMalformedFrame, f.kind, f.group, k)
	}
	msg, err := decodeResponse(k, f.body, resp)
	if err != nil {
		return nil, err
	}
	if msg != "" {
		return errors.New(msg), nil
	}
	return nil, nil
}

// InstallSnapshot implements raft.Transport: it sends the request, then
// exactly args.Size bytes of data, then waits for the response, on a
// connection of its own that it closes afterwards.
func (t *RaftTransport) InstallSnapshot(_ raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	c, err := t.dial(target)
	if err != nil {
		return err
	}
	defer t.discard(c)
	if err := t.installSnapshot(c, args, resp, data); err != nil {
		if t.isClosed() {
			return raft.ErrTransportShutdown
		}
		return fmt.Errorf("transport: raft InstallSnapshot to %s: %w", target, err)
	}
	return nil
}

func (t *RaftTransport) installSnapshot(c *raftClientConn, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if t.cfg.Timeout > 0 {
		c.conn.SetDeadline(time.Now().Add(snapshotTimeout(t.cfg.Timeout, args.Size)))
	}
	bp := getRaftBuf()
	b, err := t.encodeRequest(*bp, c, raftInstallSnapshot, args, nil)
	*bp = b
	if err != nil {
		putRaftBuf(bp)
		return err
	}
	bw := bufio.NewWriterSize(c.conn, 64<<10)
	_, err = bw.Write(b)
	putRaftBuf(bp)
	if err != nil {
		return err
	}
	c.greeted = true
	t.mux.stats.sent.Add(1)
	if n, err := io.CopyN(bw, data, args.Size); err != nil {
		if err == io.EOF {
			err = fmt.Errorf("the snapshot data ended after %d of %d bytes", n, args.Size)
		}
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	rpcErr, err := t.receive(c, raftInstallSnapshot, resp)
	if err != nil {
		return err
	}
	return rpcErr
}

// snapshotTimeout is the deadline of an InstallSnapshot of size bytes.
func snapshotTimeout(timeout time.Duration, size int64) time.Duration {
	if scaled := timeout * time.Duration(size/RaftSnapshotTimeoutScale); scaled > timeout {
		return scaled
	}
	return timeout
}

// Encoding buffers are pooled: a frame is built in one, written, and the
// buffer returned. Buffers that grew past raftPoolMax are dropped rather
// than kept.
const raftPoolMax = 8 << 20

var raftBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func getRaftBuf() *[]byte { return raftBufPool.Get().(*[]byte) }

func putRaftBuf(b *[]byte) {
	if cap(*b) > raftPoolMax {
		return
	}
	*b = (*b)[:0]
	raftBufPool.Put(b)
}
