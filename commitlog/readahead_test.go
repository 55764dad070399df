package commitlog

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/raftlog/raftlog/commitlog/faultfs"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/mmap"
)

// advice is one Advise call seen by adviceFS.
type advice struct {
	file   string
	off, n int
	advice mmap.Advice
}

// adviceFS is a vfs.FS that records every Advise call on its mappings.
type adviceFS struct {
	vfs.FS
	mu    sync.Mutex
	calls []advice // mu
}

func (a *adviceFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := a.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return adviceFile{File: f, fs: a, name: name}, nil
}

// take returns the calls recorded so far and forgets them.
func (a *adviceFS) take() []advice {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.calls
	a.calls = nil
	return out
}

type adviceFile struct {
	vfs.File
	fs   *adviceFS
	name string
}

func (f adviceFile) Map(size int) (vfs.Mapping, error) {
	m, err := f.File.Map(size)
	if err != nil {
		return nil, err
	}
	return adviceMapping{Mapping: m, fs: f.fs, name: f.name}, nil
}

type adviceMapping struct {
	vfs.Mapping
	fs   *adviceFS
	name string
}

func (m adviceMapping) Advise(off, n int, a mmap.Advice) error {
	m.fs.mu.Lock()
	m.fs.calls = append(m.fs.calls, advice{m.name, off, n, a})
	m.fs.mu.Unlock()
	return m.Mapping.Advise(off, n, a)
}

// willNeed returns the MADV_WILLNEED calls among calls.
func willNeed(calls []advice) []advice {
	var out []advice
	for _, c := range calls {
		if c.advice == mmap.WillNeed {
			out = append(out, c)
		}
	}
	return out
}

func TestWindowGrowsAndStops(t *testing.T) {
	var w window
	type step struct{ pos, wantOff, wantN int64 }
	const limit = 8 << 20
	for i, s := range []step{
		{1000, 1000, raMinWindow},                                   // first: from the reader on
		{1000 + raMinWindow/2 - 1, 0, 0},                            // more than half a window ahead still
		{1000 + raMinWindow/2, 1000 + raMinWindow, 2 * raMinWindow}, // doubled, after the last
		{1000 + raMinWindow, 0, 0},
	} {
		off, n := w.next(s.pos, limit)
		if off != s.wantOff || n != s.wantN {
			t.Fatalf("step %d: next(%d) = %d, %d; want %d, %d", i, s.pos, off, n, s.wantOff, s.wantN)
		}
	}
	// Close behind the end of what is written, nothing is asked for
	// until a window's worth is.
	var tail window
	if off, n := tail.next(1<<20, 1<<20+raMinWindow-4096); n != 0 {
		t.Fatalf("a reader %d bytes behind the end asked for %d bytes from %d", raMinWindow-4096, n, off)
	}
	if off, n := tail.next(1<<20, 1<<20+raMinWindow); off != 1<<20 || n != raMinWindow {
		t.Fatalf("a reader a window behind the end asked for %d bytes from %d", n, off)
	}
	// The window stops growing at raMaxWindow and never passes limit.
	var got []int64
	for pos := int64(0); pos < limit; pos += 4096 {
		if _, n := w.next(pos, limit); n > 0 {
			got = append(got, n)
		}
	}
	if w.end > limit || w.end <= limit-raMinWindow {
		t.Fatalf("read ahead up to %d, want the limit %d or less than %d bytes before it", w.end, limit, raMinWindow)
	}
	largest := int64(0)
	for _, n := range got {
		if n > raMaxWindow {
			t.Fatalf("window of %d bytes, more than raMaxWindow", n)
		}
		largest = max(largest, n)
	}
	if largest != raMaxWindow {
		t.Fatalf("windows %v never reached raMaxWindow", got)
	}
}

// TestReadAheadFollowsSequentialReads reads a segment in order, at random,
// and in two interleaved streams, and checks when Read asks the kernel to
// read ahead.
func TestReadAheadFollowsSequentialReads(t *testing.T) {
	fs := &adviceFS{FS: faultfs.New(1)}
	l := openTest(t, &Options{FS: fs, SegmentSize: 16 << 20, Flush: AsyncFlushUnsafe})
	var pos []int64
	for i := range 8000 {
		p, err := l.Append(payloadFor(i, 1000))
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	calls := fs.take()
	// Every segment is mapped for random access.
	random := map[string]bool{}
	for _, c := range calls {
		if c.advice == mmap.Random && c.off == 0 && c.n == 16<<20 {
			random[strings.TrimSuffix(c.file, tmpSuffix)] = true // prepared under a temporary name
		}
	}
	for _, s := range l.Segments() {
		if !random[s.Path] {
			t.Errorf("segment %s was not advised MADV_RANDOM (advice: %v)", s.Path, calls)
		}
	}

	read := func(i int) {
		t.Helper()
		if _, err := l.Read(pos[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Scattered reads ask for nothing.
	for _, i := range []int{10, 5000, 300, 7000, 2000, 60, 4000} {
		read(i)
	}
	if got := willNeed(fs.take()); len(got) > 0 {
		t.Fatalf("random reads asked for read-ahead: %v", got)
	}
	// Reads in order do, from the second on, in growing windows after
	// what the reader has read.
	for i := 1000; i < 1500; i++ {
		read(i)
	}
	got := willNeed(fs.take())
	if len(got) < 3 {
		t.Fatalf("500 reads in order asked for read-ahead %d times: %v", len(got), got)
	}
	if got[0].off != int(pos[1002]) || got[0].n != raMinWindow {
		t.Fatalf("first read-ahead %+v, want %d bytes from %d", got[0], raMinWindow, pos[1002])
	}
	for i := 1; i < len(got); i++ {
		if got[i].off != got[i-1].off+got[i-1].n || got[i].n < got[i-1].n {
			t.Fatalf("read-ahead %d %+v does not follow %+v", i, got[i], got[i-1])
		}
	}
	// Two readers in order at once both get theirs.
	for i := 0; i < 300; i++ {
		read(3000 + i)
		read(6000 + i)
	}
	got = willNeed(fs.take())
	var low, high bool
	for _, c := range got {
		low = low || (c.off > int(pos[3000]) && c.off < int(pos[3400]))
		high = high || (c.off > int(pos[6000]) && c.off < int(pos[6400]))
	}
	if !low || !high {
		t.Fatalf("two streams: read-ahead %v, want some for each", got)
	}
}

// TestIteratorAndRecoveryReadAhead checks that an Iterator reads ahead
// from its first record, and that recovery reads ahead of the tail it
// scans after a crash (and reads nothing ahead after a clean close).
func TestIteratorAndRecoveryReadAhead(t *testing.T) {
	base := faultfs.New(1)
	fs := &adviceFS{FS: base}
	opts := crashOptions(base, 16<<20, AsyncFlushUnsafe, WritePwrite)
	opts.FS = fs
	l, err := Open(crashTestDir, &opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4000 {
		if _, err := l.Append(payloadFor(i, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	fs.take()
	it := l.NewIterator(l.First())
	for range 3 {
		if _, err := it.Next(); err != nil {
			t.Fatal(err)
		}
	}
	it.Close()
	got := willNeed(fs.take())
	if len(got) != 1 || got[0].off != 0 || got[0].n != raMinWindow {
		t.Fatalf("an Iterator's first records asked for %v, want one read-ahead of %d bytes from 0", got, raMinWindow)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	end := l.End()

	// A crash: the checkpoint (hourly here) still says nothing is durable.
	crashSettle(l)
	after := base.CrashKeepAll()
	l.Close()
	fs2 := &adviceFS{FS: after}
	opts.FS = fs2
	l2, err := Open(crashTestDir, &opts)
	if err != nil {
		t.Fatal(err)
	}
	if info := l2.Recovery(); !info.Crashed || info.Records != 4000 {
		t.Fatalf("recovery %+v, want a crash with 4000 records to scan", info)
	}
	got = willNeed(fs2.take())
	var covered int
	for _, c := range got {
		if strings.HasSuffix(c.file, segmentName(0)) {
			covered += c.n
		}
	}
	if covered < int(end)/2 {
		t.Fatalf("recovery scanned %d bytes and read ahead %d: %v", end, covered, got)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	// A clean open scans nothing and reads nothing ahead.
	fs3 := &adviceFS{FS: after}
	opts.FS = fs3
	l3, err := Open(crashTestDir, &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Close()
	if got := willNeed(fs3.take()); len(got) > 0 {
		t.Fatalf("a clean open read ahead: %v", got)
	}
}

// TestWriteMmapReadsAhead checks that appends through the mapping ask for
// the pages ahead of them: the mapping is advised for random access, and
// a store into a page that is not cached reads it in first, one page per
// fault otherwise.
func TestWriteMmapReadsAhead(t *testing.T) {
	fs := &adviceFS{FS: faultfs.New(1)}
	l := openTest(t, &Options{FS: fs, SegmentSize: 16 << 20, Flush: AsyncFlushUnsafe, WritePath: WriteMmap})
	fs.take()
	for i := range 1000 {
		if _, err := l.Append(payloadFor(i, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	end := int(l.End())
	var ahead int
	for _, c := range willNeed(fs.take()) {
		if c.off+c.n > end {
			ahead = max(ahead, c.off+c.n)
		}
	}
	if ahead == 0 {
		t.Fatalf("1000 appends through the mapping up to %d asked for no read-ahead past it", end)
	}
}
