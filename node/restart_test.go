package node

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"

	"github.com/raftlog/raftlog/transport"
)

// After the whole cluster stops, two of three nodes restarted form a
// quorum, elect a leader and serve every acknowledged record; a node
// restarted alone serves what it knew committed as stale reads.
func TestRestartQuorum(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	idx := appendN(t, dial(t, leader), "r", 20)
	want := readAll(t, leader, false)
	for _, n := range c.nodes {
		waitCaughtUp(t, n, idx[len(idx)-1])
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		c.stop(id)
	}
	alone := c.start("n1", nil)
	// Alone, it has applied nothing yet (raft replays committed entries
	// once a leader tells it the commit index); a stale read returns a
	// prefix of the log, possibly empty, and nothing else.
	stale := readAll(t, alone, true)
	if len(stale) > len(want) {
		t.Fatalf("n1 restarted alone serves %d records, want up to %d", len(stale), len(want))
	}
	sameRecords(t, "n1 restarted alone, stale", stale, want[:len(stale)])
	c.start("n2", nil)
	now := c.waitLeader()
	sameRecords(t, "after restart", readAll(t, now, false), want)
}

// A node closed while appends wait for raft closes. hashicorp/raft v1.8.0
// never answers an Apply still in its queue when it shuts down (the
// replica queues with BatchApplyCh), and may queue one that comes after
// (hashicorp/raft#498): an append that waited on such a future held the
// client listener, and Close (SIGTERM) waited for good (cluster-test
// TestRandomized seed 51, sigterm-restart). Here the leader's syncs are
// held while appends come, so that its raft leader loop is storing one
// batch when Close shuts raft down and the others are proposed after.
func TestCloseWithAppendsInFlight(t *testing.T) {
	for round := range 3 {
		c := newTestCluster(t, 1, func(cfg *Config) { cfg.FaultInjection = true })
		leader := c.waitLeader()
		appendN(t, dial(t, leader), "before", 5)
		before := batchRecords(leader)
		stall := make(chan struct{})
		leader.faults.fs.stall.Store(&stall)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				conn, err := transport.Dial(ctx, leader.ClientAddr(), nil)
				if err != nil {
					return
				}
				defer conn.Close()
				var resp transport.AppendResponse
				conn.Call(ctx, transport.OpAppend, &transport.AppendRequest{Records: [][]byte{[]byte(fmt.Sprintf("w%d", w))}}, &resp)
			}()
		}
		// Raft's leader loop waits for a sync, in its store, with the
		// first batch; the other appends are handed to raft after it,
		// and wait in raft's queue.
		waitFor(t, "every append handed to raft, and a sync held", func() bool {
			return batchRecords(leader)-before >= 8 && leader.faults.fs.stalled.Load() > 0
		})
		closed := make(chan error, 1)
		go func() { closed <- leader.Close() }()
		waitFor(t, "raft shutting down", func() bool { return leader.raft.State() == raft.Shutdown })
		close(stall)
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: Close did not return within 30 s of raft's shutdown while appends were in flight", round)
		}
		wg.Wait()
		c.closeAll()
	}
}

// batchRecords returns how many records n's proposers have handed raft
// (raftlog_append_batch_records' sum).
func batchRecords(n *Node) float64 {
	var m dto.Metric
	if err := n.metrics.batch.Write(&m); err != nil {
		return -1
	}
	return m.GetHistogram().GetSampleSum()
}
