package node

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// A raft connection between two nodes begins with a hello that names each
// side's cluster, and a node refuses the raft traffic of another cluster.
// Raft alone accepts an AppendEntries or a RequestVote from anyone who
// reaches its port: a node of another cluster that still has this node's
// address in its configuration (the operator reused a host and port, and
// both clusters call their nodes n1, n2, n3) could make this node follow
// its leader and cut this node's log to its own, losing records this
// cluster acknowledged. etcd checks a cluster id in every raft message,
// Kafka's KRaft in every quorum request; here the raft port checks it once
// per connection.
//
// The cluster's id is in the catalog (catalog.State.ClusterID), set by the
// default log's leader once (clusterid.go). The dialling side writes
//
//	"RLHELLO1" {"id": "<node id>", "addr": "<its raft address>",
//	            "cluster": "<cluster id, or empty>"} "\n"
//
// and waits for the accepting side's answer, a JSON line of the same
// shape. The acceptor admits the connection (Node.admitPeer):
//
//   - never, while the acceptor joins a cluster through a join target it
//     has not yet asked which cluster that is (joinid.go);
//   - when both sides know their cluster: if it is the same (a new member
//     knows the id of the cluster it joins from its join target, before
//     its catalog does);
//   - else (a cluster bootstrapped a moment ago, or upgraded from a version
//     without ids, whose leader has not set one yet): if the dialler's id
//     and address are a member's in the acceptor's raft configuration, or
//     its bootstrap list while it has no configuration, or the members its
//     join target listed; a node with none of these (a new member that an
//     operator adds, before the leader's first entry) admits all, and
//     takes the cluster id of the first hello it admits that names one
//     for its own, refusing others from then on.
//
// A connection not admitted gets an answer with "refused" saying why, and
// is closed; the dialler fails the dial with that reason. Otherwise the
// connection goes on as raft's.
//
// Nodes built before the hello take it for a broken probe and close the
// connection without a word: a dialler that gets no answer dials again,
// at once, without a hello. (It tries the hello at every dial: a peer that
// merely crashed while it answered must not be taken for an older node
// for long.) A connection that opens without a hello (an older node's) is
// accepted, unchecked. The check so protects a cluster whose nodes all
// run this version or later.
const helloMagic = "RLHELLO1"

// helloMsg is a hello and its answer.
type helloMsg struct {
	// ID is the sender's node id.
	ID string `json:"id"`
	// Addr is the sender's raft address, as it advertises it.
	Addr string `json:"addr,omitempty"`
	// Cluster is the sender's cluster id (catalog.ClusterID.String), empty
	// while it does not know it.
	Cluster string `json:"cluster,omitempty"`
	// Refused, in an answer, says why the acceptor closes the connection.
	Refused string `json:"refused,omitempty"`
}

// errNoHello is a dial's hello that the peer closed the connection on
// without an answer: a node of an older version.
var errNoHello = errors.New("the peer answered no hello")

// ErrForeignCluster is a raft connection refused because its two ends
// belong to different clusters.
var ErrForeignCluster = errors.New("node: a node of another cluster")

// helloState is what a probeLayer knows for its hellos.
type helloState struct {
	// own returns this node's hello; nil turns hellos off.
	own func() helloMsg
	// admit returns why a connection whose hello is peer may not go on,
	// "" if it may. nil admits all.
	admit func(peer, own helloMsg) string
	// refused is called when the layer refuses an accepted connection
	// (admit said why). It must not block.
	refused func(remote net.Addr, peer, own helloMsg, why string)

	// The connections dialled whose hello is under way, which the layer's
	// Close closes: a peer whose process is stopped (SIGSTOP) accepts the
	// connection in its kernel and never answers, and the node's stop
	// must not wait out the dial's timeout.
	mu      sync.Mutex
	closed  bool                  // guarded by mu
	pending map[net.Conn]struct{} // guarded by mu
	// peers is what the last hello this node said to each raft address
	// heard back (peerHello), so that the leader sets the cluster's id
	// only once every member runs a version that keeps it, and takes an
	// id its peers already hold (clusterid.go). Guarded by mu.
	peers map[raft.ServerAddress]peerHello
}

// peerHello is the outcome of the last hello said to a peer.
type peerHello struct {
	// answered: the peer answered (it runs this version or later); false:
	// it closed the connection unanswered (an older version).
	answered bool
	cluster  string // the cluster id the peer's answer named, if any
}

// maxPeerHellos bounds helloState.peers: past it, the outcomes are
// forgotten and learnt again at the next dials.
const maxPeerHellos = 4096

// heard records the outcome of a hello said to addr.
func (h *helloState) heard(addr raft.ServerAddress, ph peerHello) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.peers == nil || len(h.peers) >= maxPeerHellos {
		h.peers = map[raft.ServerAddress]peerHello{}
	}
	h.peers[addr] = ph
}

// peer returns the outcome of the last hello said to addr; false when
// none was said since the node started.
func (h *helloState) peer(addr raft.ServerAddress) (peerHello, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ph, ok := h.peers[addr]
	return ph, ok
}

// track adds c to the pending hellos; false when the layer is closed.
func (h *helloState) track(c net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	if h.pending == nil {
		h.pending = map[net.Conn]struct{}{}
	}
	h.pending[c] = struct{}{}
	return true
}

func (h *helloState) untrack(c net.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.pending, c)
}

// close closes the pending hellos' connections, and those to come.
func (h *helloState) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for c := range h.pending {
		c.Close()
	}
	h.pending = nil
}

// Dial implements raft.StreamLayer: it dials addr and says hello (see the
// top of this file).
func (l *probeLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	h := &l.hellos
	if h.own == nil {
		return l.StreamLayer.Dial(addr, timeout)
	}
	c, err := l.StreamLayer.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	if !h.track(c) {
		c.Close()
		return nil, net.ErrClosed
	}
	hc, peer, err := sayHello(c, addr, h.own(), timeout)
	h.untrack(c)
	switch {
	case err == nil:
		h.heard(addr, peerHello{answered: true, cluster: peer.Cluster})
		return hc, nil
	case errors.Is(err, errNoHello):
		h.heard(addr, peerHello{})
		c.Close()
		return l.StreamLayer.Dial(addr, timeout)
	default:
		c.Close()
		return nil, err
	}
}

// sayHello says own's hello on c, a connection to addr, and reads the
// answer; it returns c to go on with and the peer's answer, or an error
// (errNoHello: the peer closed c without an answer).
func sayHello(c net.Conn, addr raft.ServerAddress, own helloMsg, timeout time.Duration) (net.Conn, helloMsg, error) {
	var peer helloMsg
	b, err := json.Marshal(own)
	if err != nil {
		return nil, peer, err
	}
	if timeout <= 0 {
		timeout = probeServeTimeout
	}
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(append(append([]byte(helloMagic), b...), '\n')); err != nil {
		return nil, peer, fmt.Errorf("node: hello to %s: %w", addr, err)
	}
	br := bufio.NewReaderSize(c, probeMaxLine)
	line, err := readLine(br)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return nil, peer, errNoHello
		}
		return nil, peer, fmt.Errorf("node: hello to %s: %w", addr, err)
	}
	if err := json.Unmarshal(line, &peer); err != nil {
		return nil, peer, fmt.Errorf("node: hello to %s: its answer %q: %w", addr, line, err)
	}
	if peer.Refused != "" {
		return nil, peer, fmt.Errorf("%w: %s at %s (cluster %s) refused the raft connection of this node, %s of cluster %s: %s",
			ErrForeignCluster, orUnknown(peer.ID), addr, orUnknown(peer.Cluster), own.ID, orUnknown(own.Cluster), peer.Refused)
	}
	c.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &peekedConn{Conn: c, r: br}, peer, nil
	}
	return c, peer, nil
}

// answerHello reads the hello of an accepted connection whose first bytes
// are helloMagic and answers it; it reports whether the connection may go
// on as raft's (if not, it has closed it).
func (l *probeLayer) answerHello(c net.Conn, br *bufio.Reader) bool {
	c.SetDeadline(time.Now().Add(probeServeTimeout))
	if _, err := br.Discard(len(helloMagic)); err != nil {
		c.Close()
		return false
	}
	line, err := readLine(br)
	var peer helloMsg
	if err == nil {
		err = json.Unmarshal(line, &peer)
	}
	if err != nil {
		c.Close()
		return false
	}
	own := helloMsg{}
	if l.hellos.own != nil {
		own = l.hellos.own()
	}
	ans := own
	if l.hellos.admit != nil {
		ans.Refused = l.hellos.admit(peer, own)
	}
	b, err := json.Marshal(ans)
	if err == nil {
		_, err = c.Write(append(b, '\n'))
	}
	if err != nil || ans.Refused != "" {
		if ans.Refused != "" && l.hellos.refused != nil {
			l.hellos.refused(c.RemoteAddr(), peer, own, ans.Refused)
		}
		c.Close()
		return false
	}
	c.SetDeadline(time.Time{})
	return true
}

// orUnknown returns s, or "(unknown)" for an empty s.
func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
