package node

import (
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

func followerOf(c *testCluster, leader *Node) *Node {
	for _, n := range c.nodes {
		if n != leader {
			return n
		}
	}
	return nil
}

// A follower refuses writes and linearizable reads with the leader's
// client address, and serves stale reads from its own log.
func TestFollowerRedirectsAndStaleReads(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	idx := appendN(t, dial(t, leader), "r", 5)
	f := followerOf(c, leader)
	fc := dial(t, f)
	for _, tc := range []struct {
		op  transport.Op
		req any
	}{
		{transport.OpAppend, &transport.AppendRequest{Records: [][]byte{[]byte("x")}}},
		{transport.OpRead, &transport.ReadRequest{}},
		{transport.OpTrim, &transport.TrimRequest{Below: 2}},
		{transport.OpJoin, &transport.JoinRequest{NodeID: "x", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}},
	} {
		_, err := call[struct{}](t, fc, tc.op, tc.req)
		var te *transport.Error
		if !asError(err, &te) || te.Code != transport.CodeNotLeader || te.LeaderAddr != leader.ClientAddr() || te.LeaderID != leader.ID() {
			t.Fatalf("%v on a follower: %v, want NotLeader naming %s at %s", tc.op, err, leader.ID(), leader.ClientAddr())
		}
	}
	waitCaughtUp(t, f, idx[len(idx)-1])
	got := readAll(t, f, true)
	if len(got) != 5 || got[4].Index != idx[4] || string(got[4].Data) != "r-4" {
		t.Fatalf("stale read from follower: %+v", got)
	}
}

func asError(err error, te **transport.Error) bool {
	e, ok := err.(*transport.Error)
	if ok {
		*te = e
	}
	return ok
}

// An Append retried with the same client id and sequence number is stored
// once and answered with the original indexes, also after the cluster
// restarts (sessions are in snapshots and replayed).
func TestDuplicateAppendStoredOnce(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	conn := dial(t, leader)
	req := &transport.AppendRequest{ClientID: "client-1", Seq: 1, Records: [][]byte{[]byte("a"), []byte("b")}}
	first, err := call[transport.AppendResponse](t, conn, transport.OpAppend, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := call[transport.AppendResponse](t, conn, transport.OpAppend, req)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || !slices.Equal(again.Indexes, first.Indexes) || first.Duplicate {
		t.Fatalf("first %+v, retry %+v", first, again)
	}
	last := appendN(t, conn, "pad", 40)
	// Snapshot every node and restart them all: the session must survive
	// in the snapshot's state.
	ids := []string{}
	for id, n := range c.nodes {
		waitCaughtUp(t, n, last[len(last)-1])
		if err := n.Raft().Snapshot().Error(); err != nil {
			t.Fatalf("snapshot %s: %v", id, err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		c.stop(id)
	}
	for _, id := range ids {
		c.start(id, nil)
	}
	leader = c.waitLeader()
	conn = dial(t, leader)
	third, err := call[transport.AppendResponse](t, conn, transport.OpAppend, req)
	if err != nil {
		t.Fatal(err)
	}
	if !third.Duplicate || !slices.Equal(third.Indexes, first.Indexes) {
		t.Fatalf("retry after restart: %+v, want %v", third, first.Indexes)
	}
	n := 0
	for _, r := range readAll(t, leader, false) {
		if string(r.Data) == "a" || string(r.Data) == "b" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("records a and b stored %d times in all, want 2", n)
	}
}

// Tail streams the log from an index and then records as they commit.
func TestTailFollowsCommits(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	conn := dial(t, leader)
	idx := appendN(t, conn, "old", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := conn.OpenStream(ctx, transport.OpTail, &transport.TailRequest{From: idx[1]}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var got []string
	conn2 := dial(t, leader)
	appendErr := make(chan error, 1)
	go func() {
		for i := range 20 {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := conn2.Call(ctx, transport.OpAppend, &transport.AppendRequest{Records: [][]byte{[]byte(fmt.Sprintf("new-%d", i))}}, &transport.AppendResponse{})
			cancel()
			if err != nil {
				appendErr <- err
				return
			}
		}
		appendErr <- nil
	}()
	for len(got) < 22 {
		var item transport.TailItem
		if err := st.Recv(&item); err != nil {
			t.Fatalf("after %d records: %v", len(got), err)
		}
		for _, r := range item.Records {
			got = append(got, string(r.Data))
		}
	}
	if err := <-appendErr; err != nil {
		t.Fatal(err)
	}
	want := []string{"old-1", "old-2"}
	for i := range 20 {
		want = append(want, fmt.Sprintf("new-%d", i))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("tail got %q", got)
	}
}

// A non-stale tail ends with NotLeader when its node loses leadership, so
// the client resumes at the new leader.
func TestTransferLeadershipEndsTail(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	conn := dial(t, leader)
	appendN(t, conn, "r", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := conn.OpenStream(ctx, transport.OpTail, &transport.TailRequest{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	target := followerOf(c, leader)
	if _, err := call[transport.TransferLeadershipResponse](t, conn, transport.OpTransferLeadership,
		&transport.TransferLeadershipRequest{Target: target.ID()}); err != nil {
		t.Fatal(err)
	}
	for {
		var item transport.TailItem
		err := st.Recv(&item)
		if err == nil {
			continue
		}
		if transport.ErrorCode(err) != transport.CodeNotLeader || err == io.EOF {
			t.Fatalf("tail ended with %v, want NotLeader", err)
		}
		break
	}
	if now := c.waitLeader(); now != target {
		t.Fatalf("leader is %s, want %s", now.ID(), target.ID())
	}
}

// Remove takes a node out of the configuration; the rest keep working.
func TestRemoveNode(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	conn := dial(t, leader)
	victim := followerOf(c, leader)
	if _, err := call[transport.RemoveResponse](t, conn, transport.OpRemove, &transport.RemoveRequest{NodeID: victim.ID()}); err != nil {
		t.Fatal(err)
	}
	if leader.voters() != 2 {
		t.Fatalf("%d voters after remove", leader.voters())
	}
	if _, err := call[transport.RemoveResponse](t, conn, transport.OpRemove, &transport.RemoveRequest{NodeID: "nobody"}); transport.ErrorCode(err) != transport.CodeNotFound {
		t.Fatalf("remove of a stranger: %v", err)
	}
	c.stop(victim.ID())
	appendN(t, conn, "after", 5)
	if _, err := call[transport.TrimResponse](t, conn, transport.OpTrim, &transport.TrimRequest{Below: 1 << 40}); transport.ErrorCode(err) != transport.CodeBadRequest {
		t.Fatalf("trim past the end: %v", err)
	}
}
