package node

import (
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// Random bytes, truncated frames and valid frames with garbage bodies sent
// to a live node only cost their own connections: a well-behaved client
// keeps appending and reading throughout, and the node serves afterwards.
func TestGarbageToLiveNode(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	leader := c.waitLeader()
	good := dial(t, leader)
	rng := rand.New(rand.NewPCG(1, 2))
	valid, err := transport.AppendFrame(nil, transport.Frame{Type: transport.FrameRequest, Op: transport.OpAppend, ID: 1,
		Body: mustEncode(t, &transport.AppendRequest{Records: [][]byte{[]byte("ok")}})})
	if err != nil {
		t.Fatal(err)
	}
	var appended int
	for i := range 200 {
		var junk []byte
		switch i % 4 {
		case 0: // random bytes
			junk = make([]byte, rng.IntN(200))
			for j := range junk {
				junk[j] = byte(rng.Uint32())
			}
		case 1: // a valid frame cut short
			junk = valid[:rng.IntN(len(valid))]
		case 2: // a valid header with a random body
			junk = append([]byte(nil), valid...)
			for j := 16; j < len(junk); j++ {
				junk[j] = byte(rng.Uint32())
			}
		case 3: // a valid frame with one byte flipped
			junk = append([]byte(nil), valid...)
			junk[rng.IntN(len(junk))] ^= byte(1 + rng.IntN(255))
		}
		nc, err := net.Dial("tcp", leader.ClientAddr())
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		nc.Write(junk)
		if i%2 == 0 {
			nc.Close() // hang up at once, or leave it to the server's timeouts
		} else {
			defer nc.Close()
		}
		if i%10 == 0 {
			appendN(t, good, "good", 1)
			appended++
		}
	}
	got := readAll(t, leader, false)
	n := 0
	for _, r := range got {
		if string(r.Data) == "good-0" {
			n++
		}
	}
	if n != appended {
		t.Fatalf("%d good records stored, want %d", n, appended)
	}
	// Junk that happens to be a valid Append (a flipped byte inside the
	// record) is stored like any other request; nothing else is checked.
}

func mustEncode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := transport.EncodeBody(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
