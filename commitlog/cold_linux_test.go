//go:build linux

package commitlog

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlog/raftlog/internal/pagecache"
)

// isSegment reports whether path names a segment file.
func isSegment(path string) bool {
	_, ok := parseSegmentName(filepath.Base(path))
	return ok
}

// segmentsCached returns how many bytes of the segment files in dir are in
// the page cache.
func segmentsCached(t *testing.T, dir string) int64 {
	t.Helper()
	n, err := pagecache.ResidentDir(dir, isSegment)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitCached waits, up to a generous deadline, until at least want bytes
// of the segments in dir are in the page cache, and fails the test with
// what is cached otherwise. Read-ahead is asynchronous.
func waitCached(t *testing.T, dir string, want int64, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := segmentsCached(t, dir)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d KiB of the segments cached after 10 s, want at least %d KiB", what, got>>10, want>>10)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestColdReads opens a log whose files are not in the page cache and
// checks what reading it brings in: one Read (and the open) only the pages
// they touch, not a read-ahead window around them (up to read_ahead_kb,
// 8 MiB on some disks, which made the first read of a cold record take
// milliseconds); Reads in order and an Iterator the pages ahead of them.
func TestColdReads(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentSize: 16 << 20, Flush: AsyncFlushUnsafe, Preallocate: PreallocateSparse}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	var pos []int64
	for i := range 12000 {
		p, err := l.Append(payloadFor(i, 1000))
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pagecache.Evict(dir); err != nil {
		t.Fatal(err)
	}
	if n := segmentsCached(t, dir); n > 0 {
		t.Skipf("%d KiB of the segments stay cached after eviction: %s keeps files in memory", n>>10, dir)
	}

	l, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Read(pos[6000]); err != nil {
		t.Fatal(err)
	}
	const touched = 64 << 10 // the last record (checked by Open), one record, and their neighbours
	if n := segmentsCached(t, dir); n > touched {
		t.Fatalf("opening the log and reading one record brought %d KiB of the segments into the page cache, want at most %d KiB", n>>10, touched>>10)
	}

	// 300 KiB read in order: read-ahead brings in at least 256 KiB more.
	for i := 6001; i < 6300; i++ {
		if _, err := l.Read(pos[i]); err != nil {
			t.Fatal(err)
		}
	}
	waitCached(t, dir, pos[6300]-pos[6000]+256<<10, "after Reads in order")

	before := segmentsCached(t, dir)
	it := l.NewIterator(pos[10000])
	defer it.Close()
	for range 3 {
		if _, err := it.Next(); err != nil {
			t.Fatal(err)
		}
	}
	waitCached(t, dir, before+raMinWindow-4096, "after an Iterator's first records")
}
