package raftstore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/commitlog"
)

// fillStore stores n entries of size bytes in batches of 64.
func fillStore(b *testing.B, s *Store, n, size int) {
	b.Helper()
	batch := make([]*raft.Log, 0, 64)
	data := make([]byte, size)
	for i := 1; i <= n; i++ {
		batch = append(batch, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: data})
		if len(batch) == 64 || i == n {
			if err := s.StoreLogs(batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// BenchmarkGetLog reads 1 KiB entries at random indexes over 200,000.
func BenchmarkGetLog(b *testing.B) {
	s, err := Open(b.TempDir(), &Options{Flush: AsyncFlush})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n = 200000
	fillStore(b, s, n, 1024)
	var out raft.Log
	x := uint64(88172645463325252)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if err := s.GetLog(1+x%n, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStableVote makes the three durable stable writes of a raft
// vote, as hashicorp/raft does on both sides of an election: the new
// term, then the vote's term and candidate.
func BenchmarkStableVote(b *testing.B) {
	s, err := Open(b.TempDir(), &Options{Flush: SyncFlush})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	cand := []byte("127.0.0.1:7000")
	for i := 0; b.Loop(); i++ {
		term := uint64(i + 1)
		if err := s.SetUint64([]byte("CurrentTerm"), term); err != nil {
			b.Fatal(err)
		}
		if err := s.SetUint64([]byte("LastVoteTerm"), term); err != nil {
			b.Fatal(err)
		}
		if err := s.Set([]byte("LastVoteCand"), cand); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreLogs stores batches of 1 KiB entries with SyncFlush.
func BenchmarkStoreLogs(b *testing.B) {
	for _, c := range []struct {
		batch, size int
		flush       FlushMode
	}{
		{1, 1 << 10, SyncFlush},
		{64, 1 << 10, SyncFlush},
		{64, 16 << 10, SyncFlush},
		{64, 1 << 10, AsyncFlush},
		{64, 16 << 10, AsyncFlush},
	} {
		mode := "sync"
		if c.flush == AsyncFlush {
			mode = "async"
		}
		b.Run(fmt.Sprintf("batch=%d/size=%d/%s", c.batch, c.size, mode), func(b *testing.B) {
			s, err := Open(b.TempDir(), &Options{Flush: c.flush})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			data := make([]byte, c.size)
			logs := make([]*raft.Log, c.batch)
			next := uint64(1)
			b.SetBytes(int64(c.batch * c.size))
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				for j := range logs {
					logs[j] = &raft.Log{Index: next, Term: 1, Data: data}
					next++
				}
				if err := s.StoreLogs(logs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*c.batch)/b.Elapsed().Seconds(), "entries/s")
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU returns the CPU time the process has used, user and system:
// on a machine where the disk or the page cache sets the pace, the time
// per operation says little about what the store's code costs.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// gcCounter counts the commit log's records and syncs (Options.Metrics).
type gcCounter struct{ appends, syncs atomic.Uint64 }

func (c *gcCounter) IncCounter(name string, delta uint64) {
	switch name {
	case commitlog.MetricAppends:
		c.appends.Add(delta)
	case commitlog.MetricSyncs:
		c.syncs.Add(delta)
	}
}

func (c *gcCounter) Observe(string, float64) {}

// BenchmarkGroupCommit has 1, 8 and 64 groups of one DB call StoreLogs of
// 16 x 1 KiB at once, each from a goroutine of its own as raft has one
// StoreLogs caller per group, with SyncFlush: b.N calls in all. It reports
// entries/s over all groups and the commit log's records per fdatasync,
// which show one sync completing the calls of many groups (the shared
// group commit); the checkpoint's syncs are not counted.
func BenchmarkGroupCommit(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("groups=%d", n), func(b *testing.B) {
			c := &gcCounter{}
			db, err := OpenDB(b.TempDir(), &Options{Metrics: c, NoGoMetrics: true})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			stores := make([]*Store, n)
			for g := range stores {
				if stores[g], err = db.Store(uint64(g + 1)); err != nil {
					b.Fatal(err)
				}
				fillStore(b, stores[g], 16, 1024) // creates its index file
			}
			data := make([]byte, 1024)
			var calls atomic.Int64
			appends0, syncs0 := c.appends.Load(), c.syncs.Load()
			b.ResetTimer()
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for _, s := range stores {
				wg.Add(1)
				go func(s *Store) {
					defer wg.Done()
					next := uint64(17)
					logs := make([]*raft.Log, 16)
					for calls.Add(1) <= int64(b.N) {
						for j := range logs {
							logs[j] = &raft.Log{Index: next, Term: 1, Data: data}
							next++
						}
						if err := s.StoreLogs(logs); err != nil {
							errs <- err
							return
						}
					}
				}(s)
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			records, syncs := c.appends.Load()-appends0, c.syncs.Load()-syncs0
			b.ReportMetric(float64(b.N*16)/b.Elapsed().Seconds(), "entries/s")
			if syncs > 0 {
				b.ReportMetric(float64(records)/float64(syncs), "records/fdatasync")
			}
		})
	}
}
