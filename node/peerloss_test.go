package node

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// peerLossLayer reports a refused dial with the address, and an accepted
// connection the peer ended with "", once; the node's own close of a
// connection, and a dial that connects, report nothing.
func TestPeerLossLayer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan raft.ServerAddress, 16)
	l := &peerLossLayer{
		StreamLayer: &streamLayer{Listener: ln, dial: dialTCP},
		lost:        func(a raft.ServerAddress) { reports <- a },
	}
	defer l.Close()
	none := func(what string) {
		t.Helper()
		select {
		case a := <-reports:
			t.Fatalf("%s reported %q", what, a)
		default:
		}
	}

	// A peer that closes its end: reported once, however often it is read.
	c, err := l.Dial(raft.ServerAddress(ln.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	none("a dial that connected")
	in, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	for range 2 {
		if _, err := in.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("read after the peer closed: %v, want EOF", err)
		}
	}
	if a := <-reports; a != "" {
		t.Fatalf("an accepted connection's end reported %q, want \"\"", a)
	}
	none("a second read of the ended connection")
	in.Close()

	// The node's own close of an accepted connection: nothing.
	c, err = l.Dial(raft.ServerAddress(ln.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	if _, err := in.Read(make([]byte, 1)); err == nil {
		t.Fatal("read of a closed connection succeeded")
	}
	none("the node's own close")

	// A port nothing listens on: the dial is refused and reported with its
	// address.
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := raft.ServerAddress(gone.Addr().String())
	gone.Close()
	if _, err := l.Dial(addr, time.Second); err == nil {
		t.Fatalf("dial of %s, closed, connected", addr)
	}
	if a := <-reports; a != addr {
		t.Fatalf("a refused dial reported %q, want %q", a, addr)
	}
}

// peerLosses gathers reports until they are taken, and one wake-up stands
// for any number of them.
func TestPeerLosses(t *testing.T) {
	p := newPeerLosses()
	p.report("a:1")
	p.report("")
	p.report("a:1")
	select {
	case <-p.wake:
	default:
		t.Fatal("no wake-up after reports")
	}
	select {
	case <-p.wake:
		t.Fatal("a second wake-up for the same reports")
	default:
	}
	got := p.take()
	if len(got) != 2 || !got["a:1"] || !got[""] {
		t.Fatalf("took %v, want a:1 and \"\"", got)
	}
	if got := p.take(); len(got) != 0 {
		t.Fatalf("took %v again", got)
	}
}
