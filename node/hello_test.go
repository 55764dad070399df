package node

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// helloLayer is a probeLayer on a loopback listener whose hellos say id
// and cluster; refusals it makes are sent to refused, if not nil.
func helloLayer(t *testing.T, id, cluster string, refused chan<- helloMsg) *probeLayer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newProbeLayer(&streamLayer{Listener: ln, dial: dialTCP}, func(probeRequest) probeAnswer { return probeAnswer{} }, &helloState{
		own: func() helloMsg { return helloMsg{ID: id, Addr: ln.Addr().String(), Cluster: cluster} },
		admit: func(peer, own helloMsg) string {
			if peer.Cluster != "" && own.Cluster != "" && peer.Cluster != own.Cluster {
				return "this node belongs to cluster " + own.Cluster
			}
			return ""
		},
		refused: func(_ net.Addr, peer, _ helloMsg, _ string) {
			if refused != nil {
				refused <- peer
			}
		},
	})
	t.Cleanup(func() { l.Close() })
	return l
}

// accepted returns the next connection l hands to raft.
func accepted(t *testing.T, l *probeLayer) net.Conn {
	t.Helper()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// carries checks that what is written on a dialled raft connection is
// read on the connection b accepts, and back. (b hands a connection to
// raft once its first bytes have come.)
func carries(t *testing.T, dialled net.Conn, b *probeLayer) {
	t.Helper()
	const req, resp = "\xf2rlt\x01request", "response"
	if _, err := dialled.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	acc := accepted(t, b)
	for _, p := range []struct {
		from, to net.Conn
		msg      string
	}{{nil, acc, req}, {acc, dialled, resp}} {
		if p.from != nil {
			if _, err := p.from.Write([]byte(p.msg)); err != nil {
				t.Fatal(err)
			}
		}
		p.to.SetReadDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, len(p.msg))
		if _, err := io.ReadFull(p.to, got); err != nil || string(got) != p.msg {
			t.Fatalf("read %q, %v; want %q", got, err, p.msg)
		}
	}
}

// Two nodes of one cluster, or a node that does not know its cluster yet
// (a new member): the hello passes and the connection is raft's.
func TestHelloSameCluster(t *testing.T) {
	const x = "0123456789abcdef0123456789abcdef"
	for _, c := range []struct{ dialler, acceptor string }{{x, x}, {"", x}, {x, ""}, {"", ""}} {
		a := helloLayer(t, "n1", c.dialler, nil)
		b := helloLayer(t, "n2", c.acceptor, nil)
		d, err := a.Dial(raft.ServerAddress(b.Addr().String()), 5*time.Second)
		if err != nil {
			t.Fatalf("clusters %q and %q: dial: %v", c.dialler, c.acceptor, err)
		}
		defer d.Close()
		carries(t, d, b)
	}
}

// A node of another cluster is refused on both ends: the dial fails
// naming both clusters, the acceptor reports the refusal and hands raft
// nothing, and serves its own cluster on.
func TestHelloRefusesAnotherCluster(t *testing.T) {
	const x, y = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	refused := make(chan helloMsg, 1)
	b := helloLayer(t, "n3", y, refused)
	a := helloLayer(t, "n1", x, nil)
	_, err := a.Dial(raft.ServerAddress(b.Addr().String()), 5*time.Second)
	if !errors.Is(err, ErrForeignCluster) || !strings.Contains(err.Error(), x) || !strings.Contains(err.Error(), y) || !strings.Contains(err.Error(), "n3") {
		t.Fatalf("dial of a node of another cluster: %v; want ErrForeignCluster naming n3 and both clusters", err)
	}
	if peer := <-refused; peer.ID != "n1" || peer.Cluster != x {
		t.Errorf("the acceptor refused %+v; want n1 of cluster %s", peer, x)
	}
	// A node of its own cluster gets the next connection raft accepts.
	own := helloLayer(t, "n2", y, nil)
	d, err := own.Dial(raft.ServerAddress(b.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	carries(t, d, b)
}

// oldNode listens as a node built before the hello: a connection opening
// with 'R' that is not a probe is closed unanswered; any other is raft's,
// and its first 8 bytes are sent to raftConns.
func oldNode(t *testing.T) (addr string, hellos func() int, raftConns <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	n := 0
	ch := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b := make([]byte, 8)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, b); err == nil {
				if b[0] == 'R' {
					mu.Lock()
					n++
					mu.Unlock()
				} else {
					ch <- string(b)
				}
			}
			c.Close()
		}
	}()
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }, ch
}

// A node of an older version closes a hello unanswered: the dialler dials
// again without one, at every dial.
func TestHelloToAnOlderNode(t *testing.T) {
	addr, hellos, raftConns := oldNode(t)
	a := helloLayer(t, "n1", "0123456789abcdef0123456789abcdef", nil)
	for i := range 2 {
		d, err := a.Dial(raft.ServerAddress(addr), 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d of an older node: %v", i, err)
		}
		if _, err := d.Write([]byte("\xf2rlt\x01abc")); err != nil {
			t.Fatal(err)
		}
		if got := <-raftConns; got != "\xf2rlt\x01abc" {
			t.Fatalf("the older node read %q", got)
		}
		d.Close()
	}
	if got := hellos(); got != 2 {
		t.Errorf("the older node got %d hellos over two dials; want 2", got)
	}
	if ph, ok := a.hellos.peer(raft.ServerAddress(addr)); !ok || ph.answered {
		t.Errorf("the outcome of the hello to an older node: %+v, %v; want it unanswered", ph, ok)
	}
	// A node of this version at the same address later answers.
	b := helloLayer(t, "n2", "", nil)
	d, err := a.Dial(raft.ServerAddress(b.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if ph, ok := a.hellos.peer(raft.ServerAddress(b.Addr().String())); !ok || !ph.answered || ph.cluster != "" {
		t.Errorf("the outcome of the hello to a node of this version: %+v, %v; want answered, no cluster", ph, ok)
	}
}

// The default log's leader sets no cluster id while a member runs an
// older version (it would miss the id for good, and name another once
// upgraded and leading) or has not answered since the leader started;
// takes the id its members name; and sets none when they name several.
func TestChooseClusterID(t *testing.T) {
	const x, y = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	servers := []raft.Server{{ID: "n1", Address: "a1"}, {ID: "n2", Address: "a2"}, {ID: "n3", Address: "a3"}}
	for _, c := range []struct {
		name  string
		heard map[raft.ServerAddress]peerHello
		want  string // an id, "new" for a new one, or what the refusal says
	}{
		{"all answered, none knows an id", map[raft.ServerAddress]peerHello{"a2": {answered: true}, "a3": {answered: true}}, "new"},
		{"one older member", map[raft.ServerAddress]peerHello{"a2": {answered: true}, "a3": {}}, "n3 at a3 runs a version that does not keep the cluster's id"},
		{"one not reached", map[raft.ServerAddress]peerHello{"a2": {answered: true}}, "has not reached n3 at a3"},
		{"one names an id", map[raft.ServerAddress]peerHello{"a2": {answered: true, cluster: x}, "a3": {answered: true}}, x},
		{"both name one", map[raft.ServerAddress]peerHello{"a2": {answered: true, cluster: x}, "a3": {answered: true, cluster: x}}, x},
		{"they name two", map[raft.ServerAddress]peerHello{"a2": {answered: true, cluster: x}, "a3": {answered: true, cluster: y}}, "name different cluster ids"},
	} {
		id, why := chooseClusterID("n1", servers, func(a raft.ServerAddress) (peerHello, bool) { ph, ok := c.heard[a]; return ph, ok })
		switch c.want {
		case "new":
			if why != "" || id.IsZero() || id.String() == x || id.String() == y {
				t.Errorf("%s: %v, %q; want a new id", c.name, id, why)
			}
		case x, y:
			if why != "" || id.String() != c.want {
				t.Errorf("%s: %v, %q; want %s", c.name, id, why, c.want)
			}
		default:
			if !id.IsZero() || !strings.Contains(why, c.want) {
				t.Errorf("%s: %v, %q; want no id, because %s", c.name, id, why, c.want)
			}
		}
	}
	if id, why := chooseClusterID("n1", servers[:1], func(raft.ServerAddress) (peerHello, bool) { return peerHello{}, false }); why != "" || id.IsZero() {
		t.Errorf("a cluster of one: %v, %q; want a new id", id, why)
	}
	// Nonvoters hold nothing back (one gone for good would hold the id
	// for ever), but the id one names is taken.
	withNonvoters := append(servers[:2:2], raft.Server{Suffrage: raft.Nonvoter, ID: "n4", Address: "a4"}, raft.Server{Suffrage: raft.Nonvoter, ID: "n5", Address: "a5"})
	heard := map[raft.ServerAddress]peerHello{"a2": {answered: true}, "a5": {answered: true, cluster: y}}
	if id, why := chooseClusterID("n1", withNonvoters, func(a raft.ServerAddress) (peerHello, bool) { ph, ok := heard[a]; return ph, ok }); why != "" || id.String() != y {
		t.Errorf("a nonvoter not reached and one naming an id: %v, %q; want %s", id, why, y)
	}
}

// A node of an older version dials without a hello: its connection is
// raft's, unchecked.
func TestHelloFromAnOlderNode(t *testing.T) {
	b := helloLayer(t, "n2", "0123456789abcdef0123456789abcdef", nil)
	d, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	carries(t, d, b)
}

// The rules by which a node admits a raft connection (hello.go): by
// cluster id when both ends know theirs, else by the node's bootstrap list
// (or raft configuration), else all.
func TestAdmitPeer(t *testing.T) {
	const x, y = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	list := []Peer{{ID: "n1", RaftAddr: "127.0.0.1:7001"}, {ID: "n2", RaftAddr: "127.0.0.1:7002"}}
	for _, c := range []struct {
		name      string
		bootstrap []Peer
		peer, own helloMsg
		refused   string // a part of the reason, "" for admitted
	}{
		{"same cluster", nil, helloMsg{ID: "n9", Cluster: x}, helloMsg{Cluster: x}, ""},
		{"another cluster", list, helloMsg{ID: "n1", Addr: "127.0.0.1:7001", Cluster: x}, helloMsg{Cluster: y}, "belongs to cluster " + y},
		{"no id here, a member by the list", list, helloMsg{ID: "n2", Addr: "127.0.0.1:7002", Cluster: x}, helloMsg{}, ""},
		{"no id there, a member by the list", list, helloMsg{ID: "n2", Addr: "127.0.0.1:7002"}, helloMsg{Cluster: x}, ""},
		{"a member's id at another address", list, helloMsg{ID: "n1", Addr: "127.0.0.1:9001", Cluster: x}, helloMsg{}, "has n1 at 127.0.0.1:7001, not at 127.0.0.1:9001"},
		{"an id not in the list", list, helloMsg{ID: "n3", Addr: "127.0.0.1:7003"}, helloMsg{}, "n3 is not in this node's bootstrap list"},
		{"no list, no configuration: a new member", nil, helloMsg{ID: "n3", Addr: "127.0.0.1:7003", Cluster: x}, helloMsg{}, ""},
	} {
		n := &Node{cfg: Config{Bootstrap: c.bootstrap, Logger: discardLogger()}}
		got := n.admitPeer(c.peer, c.own)
		if (got == "") != (c.refused == "") || !strings.Contains(got, c.refused) {
			t.Errorf("%s: admitPeer says %q; want %q", c.name, got, c.refused)
		}
	}
}

// The rules of a new member (joinid.go): while it has not asked its join
// target it admits no one; by the target's member list when the target
// named no cluster id; and a node with neither list nor configuration
// takes the first cluster id a hello it admits names, and refuses others.
func TestAdmitPeerJoining(t *testing.T) {
	const x, y = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	n1 := helloMsg{ID: "n1", Addr: "127.0.0.1:7001"}
	named := func(m helloMsg, cluster string) helloMsg { m.Cluster = cluster; return m }
	type step struct {
		peer    helloMsg
		refused string // a part of the reason, "" for admitted
	}
	for _, c := range []struct {
		name  string
		setup func(n *Node)
		steps []step
	}{
		{"waiting for the join target", func(n *Node) { n.setJoinWaiting(true) }, []step{
			{named(n1, x), whyJoining},
			{n1, whyJoining},
		}},
		{"the join target's members", func(n *Node) {
			n.clusterIDs.join.members = []Peer{{ID: "n1", RaftAddr: "127.0.0.1:7001"}}
		}, []step{
			{helloMsg{ID: "n7", Addr: "127.0.0.1:7007", Cluster: y}, "n7 is not in this node's join target's member list"},
			{helloMsg{ID: "n1", Addr: "127.0.0.1:9001"}, "has n1 at 127.0.0.1:7001, not at 127.0.0.1:9001"},
			{n1, ""},
			{named(n1, x), ""},
			{named(n1, y), "belongs to cluster " + x},
		}},
		{"an operator's new member", nil, []step{
			{helloMsg{ID: "n7", Addr: "127.0.0.1:7007"}, ""},
			{named(n1, x), ""},
			{helloMsg{ID: "a1", Addr: "127.0.0.1:8001", Cluster: y}, "belongs to cluster " + x},
			{helloMsg{ID: "n2", Addr: "127.0.0.1:7002", Cluster: x}, ""},
			{helloMsg{ID: "n3", Addr: "127.0.0.1:7003", Cluster: "not hex"}, "its hello names cluster"},
		}},
	} {
		n := &Node{cfg: Config{Logger: discardLogger()}}
		if c.setup != nil {
			c.setup(n)
		}
		for i, s := range c.steps {
			got := n.admitPeer(s.peer, helloMsg{})
			if (got == "") != (s.refused == "") || !strings.Contains(got, s.refused) {
				t.Errorf("%s, step %d (%+v): admitPeer says %q; want %q", c.name, i, s.peer, got, s.refused)
			}
		}
	}
}

// A peer whose process is stopped (SIGSTOP) accepts a connection in its
// kernel and never answers the hello: the layer's Close ends the dial at
// once, so that a node's stop does not wait out the dial's timeout.
func TestHelloDialEndsAtClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	arrived := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			arrived <- c // held open, never read: a stopped process
		}
	}()
	a := helloLayer(t, "n1", "0123456789abcdef0123456789abcdef", nil)
	done := make(chan error, 1)
	go func() {
		c, err := a.Dial(raft.ServerAddress(ln.Addr().String()), time.Hour)
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	c := <-arrived
	defer c.Close()
	start := time.Now()
	a.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a dial whose hello went unanswered succeeded")
		}
	case <-time.After(time.Minute):
		t.Fatalf("the dial still waits for the hello's answer %v after the layer closed", time.Since(start))
	}
}
