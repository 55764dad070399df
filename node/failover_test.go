package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// Appenders using the Go client keep going through leader changes (a
// graceful stop of the leader, then a leader cut off by a partition): the
// client follows the new leader, and every acknowledged append is stored
// exactly once, at the index it was acknowledged with.
func TestClientFollowsFailover(t *testing.T) {
	c := faultCluster(t)
	c.waitLeader()
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.ClientAddr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, addrs, &client.Options{RetryTimeout: 30 * time.Second, MinBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	const appenders, each = 8, 60
	var (
		mu    sync.Mutex
		acked = map[string]uint64{} // record -> index
		wg    sync.WaitGroup
		errs  = make(chan error, appenders)
	)
	progress := make(chan struct{}, appenders*each)
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				rec := fmt.Sprintf("a%d-%d", a, i)
				idx, err := cl.Append(ctx, []byte(rec))
				if err != nil {
					errs <- fmt.Errorf("append %s: %w", rec, err)
					return
				}
				mu.Lock()
				acked[rec] = idx[0]
				mu.Unlock()
				progress <- struct{}{}
			}
		}()
	}
	waitProgress := func(n int) {
		for range n {
			select {
			case <-progress:
			case err := <-errs:
				t.Fatal(err)
			case <-ctx.Done():
				t.Fatal("appends stalled")
			}
		}
	}
	waitProgress(100)
	first := c.waitLeader()
	c.stop(first.ID()) // graceful: hands leadership over
	waitProgress(100)
	second := c.waitLeader()
	isolate(t, c, second)
	c.start(first.ID(), nil) // back, so the two outside the partition have a majority
	waitProgress(100)
	heal(t, c)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	leader := c.waitLeader()
	seen := map[string]uint64{}
	for _, r := range readAll(t, leader, false) {
		if prev, ok := seen[string(r.Data)]; ok {
			t.Fatalf("record %s stored twice, at %d and %d", r.Data, prev, r.Index)
		}
		seen[string(r.Data)] = r.Index
	}
	if len(acked) != appenders*each {
		t.Fatalf("%d appends acknowledged, want %d", len(acked), appenders*each)
	}
	for rec, idx := range acked {
		if seen[rec] != idx {
			t.Fatalf("record %s acknowledged at %d, stored at %d", rec, idx, seen[rec])
		}
	}
}

// An append that reaches a follower during a failover waits out the
// election instead of being sent back to the leader that is gone: once the
// follower has not heard from its leader for three heartbeat intervals, it
// answers only when it knows the new leader (naming it), or serves the
// append if it won. Before, it named the old leader at once, and a client
// went back there and then backed off. (An election slower than the wait,
// on a loaded machine, gets a NotLeader naming nobody: still not the old
// leader.)
func TestFollowerWaitsOutTheElection(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.FaultInjection = true
		cfg.AdminAddr = "127.0.0.1:0"
		// raft times a silent leader out after 1 to 2 s; the follower's
		// wait begins after 300 ms.
		cfg.HeartbeatTimeout = time.Second
		cfg.ElectionTimeout = time.Second
	})
	old := c.waitLeader()
	f := c.follower()
	conn := dial(t, f)
	appendN(t, dial(t, old), "before", 3)
	isolate(t, c, old)
	waitFor(t, "the follower to stop hearing from its leader", func() bool {
		return time.Since(f.raft.LastContact()) > 400*time.Millisecond
	})
	if _, id := f.raft.LeaderWithID(); string(id) != old.ID() {
		t.Fatalf("the follower names %q as its leader before its heartbeat timeout; want the old leader %s", id, old.ID())
	}
	resp, err := call[transport.AppendResponse](t, conn, transport.OpAppend, &transport.AppendRequest{Records: [][]byte{[]byte("during")}})
	var te *transport.Error
	switch {
	case err == nil:
		if !f.IsLeader() || len(resp.Indexes) != 1 {
			t.Fatalf("append on %s answered %v, but it does not lead", f.ID(), resp.Indexes)
		}
	case errors.As(err, &te) && te.Code == transport.CodeNotLeader:
		if te.LeaderID == old.ID() {
			t.Fatalf("the follower answered NotLeader naming the old leader %s; want the new leader", te.LeaderID)
		}
		t.Logf("NotLeader naming %q", te.LeaderID)
	default:
		t.Fatal(err)
	}
	heal(t, c)
}
