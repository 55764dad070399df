package node

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A probe asks a peer, over its raft port, what it knows of the cluster:
// whether it has raft state, its term and indexes, the leader, and whether
// the asking node is in its configuration. A node uses probes where raft
// alone cannot tell it what to do:
//
//   - a node with no raft state and a bootstrap list learns whether the
//     cluster is new, or ran without it and must be rejoined (bootstrap.go);
//   - a member that hears from no leader learns whether it was removed
//     (removed.go).
//
// The probe shares the raft port, so that it needs only the raft addresses
// a bootstrap list gives, and the raft port's TLS: probeLayer sits between
// the raft transport and the stream layer and answers connections that
// open with probeMagic. Neither raft transport starts a connection with
// 'R': the native one opens with the byte 0xF2 (transport/raftwire.go),
// hashicorp/raft's NetworkTransport with the RPC type, below 0x10.
//
// A probe is one request and one answer, each a JSON line.
const probeMagic = "RLPROBE1"

const (
	// probeMaxLine bounds a probe's request and answer lines.
	probeMaxLine = 4096
	// probeFirstByteTimeout bounds how long an accepted raft connection
	// may take to send its first byte.
	probeFirstByteTimeout = 10 * time.Second
	// probeServeTimeout bounds the serving of one probe.
	probeServeTimeout = 5 * time.Second
)

// probeRequest is the body of a probe.
type probeRequest struct {
	// ID is the asking node's id.
	ID string `json:"id"`
	// Addr is the asking node's raft address, set by a node deciding
	// whether to bootstrap: the answer's InConfig then requires the
	// configuration to name the node at that address, not only by its id
	// (another cluster's node may have the same id). Older nodes ignore
	// it.
	Addr string `json:"addr,omitempty"`
}

// probeAnswer is what a node tells a prober.
type probeAnswer struct {
	ID string `json:"id"`
	// Starting: raft has not started yet; the answer tells nothing else.
	Starting bool `json:"starting,omitempty"`
	// Deciding: the node has no raft state of a running cluster and waits
	// to learn whether to bootstrap a new one (bootstrap.go).
	Deciding bool `json:"deciding,omitempty"`
	// Joining: a new member, not yet a voter (rejoin.go).
	Joining bool `json:"joining,omitempty"`
	// Removed: the node learnt that it was removed from the cluster.
	Removed     bool   `json:"removed,omitempty"`
	Term        uint64 `json:"term"`
	LastIndex   uint64 `json:"last_index"`
	CommitIndex uint64 `json:"commit_index"`
	// Leader: the node leads.
	Leader   bool   `json:"leader,omitempty"`
	LeaderID string `json:"leader_id,omitempty"`
	// LeaderClientAddr is the leader's client address, when known.
	LeaderClientAddr string `json:"leader_client_addr,omitempty"`
	// ClientAddr is the node's own client address.
	ClientAddr string `json:"client_addr,omitempty"`
	// InConfig: the asking node is in this node's latest configuration
	// (at its address, when the request gave one).
	InConfig bool `json:"in_config,omitempty"`
}

// ranCluster reports whether the answer shows a cluster that has run: a
// log past the bootstrap configuration (index 1), or a state only a
// running cluster gives (joining, removed).
func (a probeAnswer) ranCluster() bool {
	return !a.Starting && (a.LastIndex > 1 || a.Joining || a.Removed)
}

// probeLayer is a raft.StreamLayer that answers probes and hands every
// other connection to raft.
type probeLayer struct {
	raft.StreamLayer
	answer func(probeRequest) probeAnswer
	hellos helloState // hello.go

	conns     chan net.Conn // raft's connections, sniffed
	done      chan struct{} // closed by Close or when the listener fails
	closeOnce sync.Once
	wg        sync.WaitGroup // the accept loop and connections being sniffed
}

func newProbeLayer(inner raft.StreamLayer, answer func(probeRequest) probeAnswer, hellos *helloState) *probeLayer {
	l := &probeLayer{StreamLayer: inner, answer: answer, conns: make(chan net.Conn), done: make(chan struct{})}
	if hellos != nil {
		l.hellos.own, l.hellos.admit, l.hellos.refused = hellos.own, hellos.admit, hellos.refused
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

func (l *probeLayer) acceptLoop() {
	defer l.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := l.StreamLayer.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				l.shut()
				return
			}
			// A transient failure (too many open files): retry, as
			// net/http's server does.
			t := time.NewTimer(backoff)
			select {
			case <-l.done:
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		l.wg.Add(1)
		go l.sniff(c)
	}
}

// sniff reads a connection's first byte: a probe is answered here,
// anything else goes to raft.
func (l *probeLayer) sniff(c net.Conn) {
	defer l.wg.Done()
	c.SetReadDeadline(time.Now().Add(probeFirstByteTimeout))
	br := bufio.NewReaderSize(c, probeMaxLine)
	b, err := br.Peek(1)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	if b[0] == probeMagic[0] {
		// A probe or a hello: both magics are 8 bytes and open with 'R'.
		c.SetReadDeadline(time.Now().Add(probeFirstByteTimeout))
		m, err := br.Peek(len(probeMagic))
		c.SetReadDeadline(time.Time{})
		switch {
		case err == nil && string(m) == helloMagic:
			if !l.answerHello(c, br) {
				return
			}
		default:
			l.serve(c, br)
			return
		}
	}
	select {
	case l.conns <- &peekedConn{Conn: c, r: br}:
	case <-l.done:
		c.Close()
	}
}

// serve answers one probe and closes the connection.
func (l *probeLayer) serve(c net.Conn, br *bufio.Reader) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(probeServeTimeout))
	magic := make([]byte, len(probeMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != probeMagic {
		return
	}
	line, err := readLine(br)
	if err != nil {
		return
	}
	var req probeRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return
	}
	b, err := json.Marshal(l.answer(req))
	if err != nil {
		return
	}
	c.Write(append(b, '\n'))
}

// Accept implements net.Listener.
func (l *probeLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *probeLayer) Close() error {
	l.hellos.close()
	err := l.StreamLayer.Close()
	l.shut()
	l.wg.Wait()
	return err
}

func (l *probeLayer) shut() { l.closeOnce.Do(func() { close(l.done) }) }

// probe asks the node at the raft address addr.
func (l *probeLayer) probe(addr string, req probeRequest, timeout time.Duration) (probeAnswer, error) {
	var a probeAnswer
	c, err := l.StreamLayer.Dial(raft.ServerAddress(addr), timeout)
	if err != nil {
		return a, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	b, err := json.Marshal(req)
	if err != nil {
		return a, err
	}
	if _, err := c.Write(append(append([]byte(probeMagic), b...), '\n')); err != nil {
		return a, err
	}
	line, err := readLine(bufio.NewReaderSize(c, probeMaxLine))
	if err != nil {
		return a, fmt.Errorf("probe of %s: %w", addr, err)
	}
	if err := json.Unmarshal(line, &a); err != nil {
		return a, fmt.Errorf("probe of %s: %w", addr, err)
	}
	return a, nil
}

// errProbeLine is the error of a probe line longer than probeMaxLine.
var errProbeLine = errors.New("probe line too long")

// readLine reads one line of at most probeMaxLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, errProbeLine
	}
	return line, err
}

// peekedConn is a connection whose first bytes were read into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// probeResult is one peer's answer to a probe, or the error that took its
// place.
type probeResult struct {
	addr string
	a    probeAnswer
	err  error
}

// probeAll probes every address at once and returns the results in the
// order of addrs.
func (l *probeLayer) probeAll(addrs []string, req probeRequest, timeout time.Duration) []probeResult {
	res := make([]probeResult, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := l.probe(addr, req, timeout)
			res[i] = probeResult{addr: addr, a: a, err: err}
		}()
	}
	wg.Wait()
	return res
}

// probeAnswer tells a prober what this node knows.
func (n *Node) probeAnswer(req probeRequest) probeAnswer {
	a := probeAnswer{ID: n.cfg.ID, ClientAddr: n.clientAddr}
	r := n.raftRef.Load()
	if r == nil {
		a.Starting = true
		return a
	}
	a.Deciding = n.deciding.Load()
	a.Joining = n.joiningNow.Load()
	a.Removed = n.removed.Load()
	a.Term, a.LastIndex, a.CommitIndex = r.CurrentTerm(), r.LastIndex(), r.CommitIndex()
	a.Leader = r.State() == raft.Leader
	_, id := r.LeaderWithID()
	a.LeaderID = string(id)
	if id != "" {
		a.LeaderClientAddr = n.fsm.Member(string(id))
	}
	if f := r.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == req.ID && (req.Addr == "" || sameTCPAddr(string(s.Address), req.Addr)) {
				a.InConfig = true
			}
		}
	}
	return a
}
