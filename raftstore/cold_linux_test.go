//go:build linux

package raftstore

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/internal/pagecache"
)

// cachedBytes returns how many bytes of the files under dir that match
// are in the page cache.
func cachedBytes(t *testing.T, dir string, match func(string) bool) int64 {
	t.Helper()
	n, err := pagecache.ResidentDir(dir, match)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// isLogOrIndex matches the commit-log segments and the index files, whose
// names are 20 digits.
func isLogOrIndex(path string) bool {
	name := filepath.Base(path)
	return len(name) == 20 && strings.Trim(name, "0123456789") == ""
}

// TestColdOpen opens a store of 100,000 entries whose files are not in the
// page cache, as after a reboot, and checks what opening it and reading
// from it bring into the cache. Opening it and one GetLog in the middle
// read only the pages they touch: before, every first touch of a mapped
// segment or index file read a whole read-ahead window around it (up to
// read_ahead_kb, 8 MiB on some virtual disks), which made Open and the
// first GetLog of an entry take milliseconds. GetLogs in order read the
// index ahead of them.
func TestColdOpen(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{Flush: AsyncFlush, SegmentSize: 16 << 20}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100_000
	batch := make([]*raft.Log, 0, 64)
	for i := uint64(1); i <= n; i++ {
		batch = append(batch, ctEntry(i, 1, 200))
		if len(batch) == cap(batch) || i == n {
			if err := s.StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pagecache.Evict(dir); err != nil {
		t.Fatal(err)
	}
	if c := cachedBytes(t, dir, isLogOrIndex); c > 0 {
		t.Skipf("%d KiB stay cached after eviction: %s keeps files in memory", c>>10, dir)
	}

	s, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if last, err := s.LastIndex(); err != nil || last != n {
		t.Fatalf("LastIndex %d, %v", last, err)
	}
	var out raft.Log
	const mid = n/2 + 123
	if err := s.GetLog(mid, &out); err != nil || out.Index != mid {
		t.Fatalf("GetLog(%d): index %d, %v", mid, out.Index, err)
	}
	// Open reads the last record of the log and the first and last entry
	// of the group, each through its index slot: with GetLog, 4 index
	// pages and about 6 pages of segments, and their neighbours.
	const touched = 96 << 10
	if c := cachedBytes(t, dir, isLogOrIndex); c > touched {
		t.Fatalf("Open and one GetLog brought %d KiB of the segments and index files into the page cache, want at most %d KiB", c>>10, touched>>10)
	}

	// GetLogs in order: the whole index file holding them is read ahead.
	for i := uint64(mid + 1); i < mid+100; i++ {
		if err := s.GetLog(i, &out); err != nil || out.Index != i {
			t.Fatalf("GetLog(%d): index %d, %v", i, out.Index, err)
		}
	}
	index := filepath.Join(dir, indexDirName, indexFileName(0), indexFileName(fileBase(mid)))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := cachedBytes(t, dir, func(p string) bool { return p == index })
		if c == indexFileSize {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 100 GetLogs in order, %d KiB of the %d KiB of %s cached after 10 s", c>>10, indexFileSize>>10, index)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
