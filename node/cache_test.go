package node

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// The logs of a node share one bound on the raft entries they keep in
// memory: with four logs of 7.5 MiB each, the node's caches hold at most
// replica.DefaultCacheBytes together (each log alone would keep all of
// its 60 entries), /metrics says how much, and the share of a deleted log
// goes to the others.
func TestRaftCacheSharedByLogs(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) { cfg.AdminAddr = "127.0.0.1:0" })
	n := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	names := []string{transport.DefaultLog, "a", "b", "c"}
	for _, name := range names[1:] {
		if _, err := cl.CreateLog(ctx, name, client.CreateLogOptions{Replicas: 1}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	rec := bytes.Repeat([]byte("x"), 128<<10)
	for _, name := range names {
		for range 60 {
			if _, err := cl.Log(name).Append(ctx, rec); err != nil {
				t.Fatalf("append to %s: %v", name, err)
			}
		}
	}
	held := n.cache.Held()
	if held > replica.DefaultCacheBytes || held < replica.DefaultCacheBytes/2 {
		t.Errorf("the caches of 4 logs of 7.5 MiB each hold %d bytes, want at most %d and at least half of it", held, replica.DefaultCacheBytes)
	}
	// The node may store an entry of its own (a catalog or membership
	// entry) at any time, so compare the gauge with the caches while they
	// stand still around the scrape.
	for attempt := 0; ; attempt++ {
		before := n.cache.Held()
		got := cacheMetric(t, n)
		after := n.cache.Held()
		if before != after && attempt < 20 {
			continue
		}
		if got != float64(before) {
			t.Errorf("raftlog_raft_cache_bytes %v, the caches hold %d", got, before)
		}
		break
	}

	for _, name := range names[1:] {
		if _, err := cl.DeleteLog(ctx, name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	// What stays is the default log's share, a quarter (give or take an
	// entry: each share holds the whole entries that fit).
	entry := int64(len(rec) + 96)
	waitForIn(t, time.Minute, "the deleted logs' replicas to give their caches up", func() bool { return n.cache.Held() <= held/4+entry })
	// The default log alone now gets the whole budget: it caches all of
	// its next 60 entries.
	for range 60 {
		if _, err := cl.Log(transport.DefaultLog).Append(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := n.cache.Held(), int64(60*(len(rec)+96)); got < want {
		t.Errorf("the default log alone caches %d bytes, want at least %d (its last 60 entries)", got, want)
	}
}

// cacheMetric returns raftlog_raft_cache_bytes from n's /metrics.
func cacheMetric(t *testing.T, n *Node) float64 {
	t.Helper()
	_, body := get(t, n, "/metrics")
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(line, "raftlog_raft_cache_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("raftlog_raft_cache_bytes %q: %v", v, err)
			}
			return f
		}
	}
	t.Fatal("/metrics has no raftlog_raft_cache_bytes")
	return 0
}
