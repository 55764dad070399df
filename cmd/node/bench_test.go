package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/node"
)

// BenchmarkAppendAsync compares, through one Client and on an in-process
// 3-node cluster on loopback (flush sync), 1 KiB appends from N goroutines
// each calling Append with one goroutine keeping N appends in flight with
// AppendAsync, for N of 64 and 1,024; and AppendAsync with 4 requests in
// flight instead of 1. It reports acked records/s; allocs/op is per append
// and counts the whole process, the three nodes included.
//
//	go test -run x -bench AppendAsync -benchtime 5000x ./cmd/node
func BenchmarkAppendAsync(b *testing.B) {
	ctx := context.Background()
	lc, err := startLocalCluster(ctx, b.TempDir(), node.FlushSync, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	defer lc.close()
	for _, n := range []int{64, 1024} {
		for _, mode := range []struct {
			name     string
			async    bool
			requests int
		}{
			{"goroutines", false, 1},
			{"async", true, 1},
			{"async-4req", true, 4},
		} {
			b.Run(fmt.Sprintf("%s=%d", mode.name, n), func(b *testing.B) {
				benchAppendAsync(b, lc, n, mode.async, mode.requests)
			})
		}
	}
}

func benchAppendAsync(b *testing.B, lc *localCluster, n int, async bool, requests int) {
	ctx := context.Background()
	c, err := client.Dial(ctx, lc.clientAddrs(), &client.Options{MaxInFlightAppends: n, MaxAppendRequests: requests})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rec := make([]byte, 1024)
	if _, err := c.Append(ctx, rec); err != nil { // finds the leader
		b.Fatal(err)
	}
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if async {
		ring := make([]*client.AppendFuture, n)
		for i := range b.N {
			if f := ring[i%n]; f != nil {
				if err := f.Err(); err != nil {
					b.Fatal(err)
				}
			}
			ring[i%n] = c.AppendAsync(ctx, rec)
		}
		for _, f := range ring {
			if f != nil {
				if err := f.Err(); err != nil {
					b.Fatal(err)
				}
			}
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		var fail atomic.Pointer[error]
		for range n {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					if _, err := c.Append(ctx, rec); err != nil {
						fail.Store(&err)
						return
					}
				}
			})
		}
		wg.Wait()
		if p := fail.Load(); p != nil {
			b.Fatal(*p)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
}
