package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
)

// One client keeps several append requests in flight
// (client.Options.MaxAppendRequests) through leader changes: requests at
// a deposed leader fail while later ones succeed at the next, and are
// retried after them; yet every append is stored once, and in the order it
// was submitted (transport.AppendRequest.After, transport.Turn); with one
// batch of appends in raft at a time, and with several.
func TestPipelinedAppendsKeepOrderThroughFailover(t *testing.T) {
	for _, batches := range []int{1, 4} {
		t.Run(fmt.Sprintf("batches-%d", batches), func(t *testing.T) {
			c := newTestCluster(t, 3, func(cfg *Config) {
				cfg.FaultInjection, cfg.AdminAddr, cfg.BatchesInFlight = true, "127.0.0.1:0", batches
			})
			pipelinedAppendsKeepOrder(t, c)
		})
	}
}

func pipelinedAppendsKeepOrder(t *testing.T, c *testCluster) {
	c.waitLeader()
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.ClientAddr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, addrs, &client.Options{
		RetryTimeout: 30 * time.Second, MinBackoff: 2 * time.Millisecond,
		MaxAppendRequests: 8, MaxInFlightAppends: 64,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	const total = 3000
	futs := make([]*client.AppendFuture, 0, total)
	submit := func(n int) {
		for range n {
			futs = append(futs, cl.AppendAsync(ctx, []byte(fmt.Sprintf("r%05d", len(futs)))))
		}
	}
	submit(total / 4)
	first := c.waitLeader()
	c.stop(first.ID()) // graceful: hands leadership over with requests in flight
	submit(total / 4)
	second := c.waitLeader()
	isolate(t, c, second)
	c.start(first.ID(), nil) // back, so the two outside the partition have a majority
	submit(total / 4)
	heal(t, c)
	submit(total - len(futs))
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	acked := make([]uint64, total)
	for i, f := range futs {
		idx, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		acked[i] = idx[0]
	}
	stored := map[string]uint64{}
	for _, r := range readAll(t, c.waitLeader(), false) {
		if prev, ok := stored[string(r.Data)]; ok {
			t.Fatalf("record %s stored twice, at %d and %d", r.Data, prev, r.Index)
		}
		stored[string(r.Data)] = r.Index
	}
	for i := range total {
		rec := fmt.Sprintf("r%05d", i)
		if stored[rec] != acked[i] {
			t.Fatalf("append %d acknowledged at %d, stored at %d", i, acked[i], stored[rec])
		}
		if i > 0 && acked[i] <= acked[i-1] {
			t.Fatalf("append %d stored at %d, before append %d at %d: out of submission order", i, acked[i], i-1, acked[i-1])
		}
	}
}
