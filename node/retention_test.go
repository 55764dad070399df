package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// appendN appends n records "<prefix>-<i>" one request at a time and
// returns their indexes.
func appendN(t *testing.T, conn *transport.Conn, prefix string, n int) []uint64 {
	t.Helper()
	var idx []uint64
	for i := range n {
		resp, err := call[transport.AppendResponse](t, conn, transport.OpAppend,
			&transport.AppendRequest{Records: [][]byte{[]byte(fmt.Sprintf("%s-%d", prefix, i))}})
		if err != nil {
			t.Fatal(err)
		}
		idx = append(idx, resp.Indexes...)
	}
	return idx
}

// readAll reads every record from a node, from its first retained index.
func readAll(t *testing.T, n *Node, stale bool) []transport.Record {
	t.Helper()
	conn := dial(t, n)
	var out []transport.Record
	var from uint64
	for range 1000 {
		rr, err := call[transport.ReadResponse](t, conn, transport.OpRead, &transport.ReadRequest{From: from, Stale: stale})
		if err != nil {
			t.Fatalf("read %s from %d: %v", n.ID(), from, err)
		}
		out = append(out, rr.Records...)
		if len(rr.Records) == 0 {
			return out
		}
		from = rr.Next
	}
	t.Fatal("read did not end")
	return nil
}

// waitCaughtUp waits until n has applied at least index.
func waitCaughtUp(t *testing.T, n *Node, index uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		applied, ch := n.fsm.AppliedCh()
		if applied >= index {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s applied %d, want %d", n.ID(), applied, index)
		}
	}
}

func sameRecords(t *testing.T, who string, got, want []transport.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", who, len(got), len(want))
	}
	for i := range got {
		if got[i].Index != want[i].Index || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Fatalf("%s: record %d is %q at %d, want %q at %d", who, i, got[i].Data, got[i].Index, want[i].Data, want[i].Index)
		}
	}
}

// A trim is replicated; a node that joins after it, and a node whose data
// dir was wiped, get every retained record through a snapshot whose stream
// carries them.
func TestTrimLateJoinerAndWipedNode(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	conn := dial(t, leader)
	idx := appendN(t, conn, "r", 300)
	below := idx[100]
	tr, err := call[transport.TrimResponse](t, conn, transport.OpTrim, &transport.TrimRequest{Below: below})
	if err != nil {
		t.Fatal(err)
	}
	more := appendN(t, conn, "s", 50)
	want := readAll(t, leader, false)
	if len(want) != 250 || want[0].Index != below {
		t.Fatalf("after trim below %d: %d records from %d", below, len(want), want[0].Index)
	}
	if _, err := call[transport.ReadResponse](t, conn, transport.OpRead, &transport.ReadRequest{From: idx[50]}); transport.ErrorCode(err) != transport.CodeTrimmed {
		t.Fatalf("read below the floor: %v, want Trimmed", err)
	}
	// Every node deletes the trimmed entries once its snapshot covers the
	// trim.
	for _, n := range c.nodes {
		waitCaughtUp(t, n, tr.Index)
		waitFor(t, fmt.Sprintf("%s deletes below %d", n.ID(), below), func() bool { return n.view.First() >= below })
	}

	n4 := c.start("n4", func(cfg *Config) { cfg.Join = []string{leader.ClientAddr()} })
	waitCaughtUp(t, n4, more[len(more)-1])
	sameRecords(t, "n4", readAll(t, n4, true), want)
	if first := n4.view.First(); first != below {
		t.Fatalf("n4 holds the log from %d, want %d", first, below)
	}
	if first, last := replica.Bounds(n4.view.Archive.Load()); first != below || last < tr.Index {
		t.Fatalf("n4's archive holds [%d, %d]: the snapshot did not bring the retained records", first, last)
	}

	// Wipe a follower's data dir and bring it back under the same id.
	var victim string
	for id, n := range c.nodes {
		if n != leader && id != "n4" {
			victim = id
			break
		}
	}
	dir := c.nodes[victim].cfg.DataDir
	c.stop(victim)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	last := appendN(t, conn, "u", 10)
	back := c.start(victim, func(cfg *Config) { cfg.Join = []string{leader.ClientAddr()} })
	waitCaughtUp(t, back, last[len(last)-1])
	want = readAll(t, leader, false)
	sameRecords(t, victim+" after wipe", readAll(t, back, true), want)
}

// waitFor polls cond, waiting on applied-index changes between polls, for
// at most 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		timer := time.NewTimer(20 * time.Millisecond)
		<-timer.C
	}
}
