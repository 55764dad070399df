package node

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// BenchmarkAppend appends 1 KiB records to an in-process 3-node cluster
// on loopback from 1, 16 and 64 concurrent appenders, each with one append
// outstanding, in sync and async flush mode. It reports acknowledged
// records/s and latency percentiles; node bench does the same against any
// cluster.
func BenchmarkAppend(b *testing.B) {
	for _, flush := range []FlushMode{FlushSync, FlushAsync} {
		for _, clients := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/clients=%d", flush, clients), func(b *testing.B) {
				benchAppend(b, flush, clients, false)
			})
		}
	}
}

// BenchmarkAppendGoClient is BenchmarkAppend/*/clients=64 through the Go
// client (leader following, sessions, retries) rather than a bare
// protocol connection.
func BenchmarkAppendGoClient(b *testing.B) {
	for _, flush := range []FlushMode{FlushSync, FlushAsync} {
		b.Run(fmt.Sprintf("%s/clients=64", flush), func(b *testing.B) {
			benchAppend(b, flush, 64, true)
		})
	}
}

func benchAppend(b *testing.B, flush FlushMode, clients int, goClient bool) {
	c := newBenchCluster(b, flush)
	leader := c.waitLeader()
	conn, err := transport.Dial(context.Background(), leader.ClientAddr(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	cl, err := client.Dial(context.Background(), []string{leader.ClientAddr()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	appendOne := func(rec []byte) error {
		if goClient {
			_, err := cl.Append(context.Background(), rec)
			return err
		}
		return conn.Call(context.Background(), transport.OpAppend, &transport.AppendRequest{Records: [][]byte{rec}}, &transport.AppendResponse{})
	}
	rec := make([]byte, 1024)
	var (
		next atomic.Int64
		mu   sync.Mutex
		lats []time.Duration
		wg   sync.WaitGroup
		fail atomic.Pointer[error]
	)
	b.SetBytes(int64(len(rec)))
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := appendOne(rec); err != nil {
					fail.Store(&err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if p := fail.Load(); p != nil {
		b.Fatal(*p)
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	pct := func(p float64) float64 { return float64(lats[int(p*float64(len(lats)-1))].Microseconds()) }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	b.ReportMetric(pct(0.5), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// newBenchCluster starts a 3-node cluster logging errors only.
func newBenchCluster(b *testing.B, flush FlushMode) *testCluster {
	b.Helper()
	c := &testCluster{t: b, dir: b.TempDir(), nodes: map[string]*Node{}, addrs: map[string][2]string{}}
	c.cfg = func(cfg *Config) {
		cfg.Flush = flush
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: testWriter{b}})
	}
	b.Cleanup(c.closeAll)
	first := c.start("n1", func(cfg *Config) { cfg.Bootstrap = []Peer{{ID: "n1", RaftAddr: "127.0.0.1:0"}} })
	c.waitLeader()
	for i := 2; i <= 3; i++ {
		c.start(fmt.Sprintf("n%d", i), func(cfg *Config) { cfg.Join = []string{first.ClientAddr()} })
	}
	for _, nd := range c.nodes {
		c.waitVoter(nd)
	}
	return c
}
