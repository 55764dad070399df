package node

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

func post(t *testing.T, n *Node, path string) {
	t.Helper()
	resp, err := http.Post("http://"+n.AdminAddr()+path, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", path, resp.Status)
	}
}

func faultCluster(t *testing.T) *testCluster {
	return newTestCluster(t, 3, func(cfg *Config) {
		cfg.FaultInjection = true
		cfg.AdminAddr = "127.0.0.1:0"
	})
}

// Cutting the leader off makes the others elect a new one; healing brings
// the old leader back as a follower holding everything committed.
func TestPartitionedLeaderIsReplaced(t *testing.T) {
	c := faultCluster(t)
	old := c.waitLeader()
	appendN(t, dial(t, old), "before", 5)
	var others []string
	for _, n := range c.nodes {
		if n != old {
			others = append(others, n.RaftAddr())
		}
	}
	post(t, old, "/fault/partition?peers="+url.QueryEscape(strings.Join(others, ",")))
	for _, n := range c.nodes {
		if n != old {
			post(t, n, "/fault/partition?peers="+url.QueryEscape(old.RaftAddr()))
		}
	}
	var now *Node
	waitFor(t, "a new leader", func() bool {
		for _, n := range c.nodes {
			if n != old && n.IsLeader() {
				now = n
				return true
			}
		}
		return false
	})
	idx := appendN(t, dial(t, now), "after", 5)
	// The old leader cannot commit: its appends time out or fail.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := dial(t, old).Call(ctx, transport.OpAppend, &transport.AppendRequest{Records: [][]byte{[]byte("lost")}}, &transport.AppendResponse{})
	cancel()
	if err == nil {
		t.Fatal("a partitioned leader acknowledged an append")
	}
	for _, n := range c.nodes {
		post(t, n, "/fault/partition?peers=")
	}
	waitCaughtUp(t, old, idx[len(idx)-1])
	got := readAll(t, old, true)
	want := readAll(t, now, false)
	sameRecords(t, "old leader after healing", got, want)
	for _, r := range got {
		if string(r.Data) == "lost" {
			t.Fatal("an unacknowledged append from the partitioned leader is in the log")
		}
	}
}

// A node whose disk fails stops rather than acknowledge; the others go on
// with every acknowledged record.
func TestFailedDiskStopsNode(t *testing.T) {
	c := faultCluster(t)
	leader := c.waitLeader()
	idx := appendN(t, dial(t, leader), "r", 5)
	post(t, leader, "/fault/disk")
	conn := dial(t, leader)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := conn.Call(ctx, transport.OpAppend, &transport.AppendRequest{Records: [][]byte{[]byte("x")}}, &transport.AppendResponse{})
	if err == nil {
		t.Fatal("a node with a failed disk acknowledged an append")
	}
	select {
	case <-leader.Done():
	case <-ctx.Done():
		t.Fatal("node did not stop after its disk failed")
	}
	if leader.Err() == nil {
		t.Fatal("stopped node reports no error")
	}
	leader.Close() // already stopping; waits until it has
	delete(c.nodes, leader.ID())
	now := c.waitLeader()
	got := readAll(t, now, false)
	for i, want := range idx {
		if got[i].Index != want {
			t.Fatalf("record %d at %d, want %d", i, got[i].Index, want)
		}
	}
}
