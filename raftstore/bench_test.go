package raftstore

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
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

// BenchmarkStoreLogs stores batches of 1 KiB entries with SyncFlush.
func BenchmarkStoreLogs(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s, err := Open(b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			data := make([]byte, 1024)
			logs := make([]*raft.Log, batch)
			next := uint64(1)
			b.SetBytes(int64(batch * 1024))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range logs {
					logs[j] = &raft.Log{Index: next, Term: 1, Data: data}
					next++
				}
				if err := s.StoreLogs(logs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}
