package commitlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/raftlog/raftlog/commitlog/vfs"
)

// openTest opens a log in a fresh temporary directory with small segments.
func openTest(t testing.TB, opts *Options) *Log {
	t.Helper()
	l, err := Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// payloadFor returns a deterministic payload for record i of size n.
func payloadFor(i, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewSource(int64(i)))
	r.Read(b)
	if n >= 8 {
		copy(b, fmt.Sprintf("%08d", i%100000000))
	}
	return b
}

func readAll(t testing.TB, l *Log, from int64) []Record {
	t.Helper()
	it := l.NewIterator(from)
	defer it.Close()
	var out []Record
	for {
		r, err := it.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("iterate from %d: %v", from, err)
		}
		out = append(out, r)
	}
}

func TestAppendReadIterate(t *testing.T) {
	for _, wp := range []WritePath{WritePwrite, WriteMmap} {
		t.Run(fmt.Sprint("writepath=", wp), func(t *testing.T) {
			dir := t.TempDir()
			opts := &Options{SegmentSize: 8192, WritePath: wp}
			l, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			var positions []int64
			var want [][]byte
			for i := 0; i < 200; i++ {
				p := payloadFor(i, i*37%1500)
				pos, err := l.Append(p)
				if err != nil {
					t.Fatal(err)
				}
				if n := len(positions); n > 0 && pos <= positions[n-1] {
					t.Fatalf("position %d after %d", pos, positions[n-1])
				}
				positions = append(positions, pos)
				want = append(want, p)
			}
			batch := [][]byte{payloadFor(1000, 10), payloadFor(1001, 3000), payloadFor(1002, 0), payloadFor(1003, 5000)}
			bpos, err := l.AppendBatch(batch)
			if err != nil {
				t.Fatal(err)
			}
			positions = append(positions, bpos...)
			want = append(want, batch...)
			if l.Durable() != l.End() {
				t.Fatalf("sync append returned with durable %d < end %d", l.Durable(), l.End())
			}
			check := func(l *Log) {
				t.Helper()
				for i, pos := range positions {
					r, err := l.Read(pos)
					if err != nil {
						t.Fatalf("read %d: %v", pos, err)
					}
					if !bytes.Equal(r.Payload, want[i]) || r.Position != pos {
						t.Fatalf("record %d at %d differs", i, pos)
					}
				}
				got := readAll(t, l, 0)
				if len(got) != len(want) {
					t.Fatalf("iterated %d records, want %d", len(got), len(want))
				}
				for i := range got {
					if got[i].Position != positions[i] || !bytes.Equal(got[i].Payload, want[i]) {
						t.Fatalf("iterated record %d differs", i)
					}
				}
			}
			check(l)
			// A returned payload is a copy.
			r, _ := l.Read(positions[5])
			r.Payload[0] ^= 0xff
			if r2, _ := l.Read(positions[5]); !bytes.Equal(r2.Payload, want[5]) {
				t.Fatal("modifying a read payload changed the log")
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			segs, _ := filepath.Glob(filepath.Join(dir, "0*"))
			if len(segs) < 10 {
				t.Fatalf("only %d segments for ~170 KiB in 8 KiB segments", len(segs))
			}
			for _, s := range segs {
				if len(filepath.Base(s)) != 20 {
					t.Fatalf("segment name %q", s)
				}
			}
			l, err = Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if info := l.Recovery(); info.Crashed || info.Records != 0 {
				t.Fatalf("clean reopen reported %+v", info)
			}
			check(l)
			// Appends continue after reopen.
			pos, err := l.Append([]byte("after reopen"))
			if err != nil || pos != positions[len(positions)-1]+recordSize(len(want[len(want)-1])) && pos%8192 != 0 {
				t.Fatalf("append after reopen at %d: %v", pos, err)
			}
		})
	}
}

func TestSegmentNamesAreOffsets(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, &Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := l.Append(make([]byte, 3000)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	names, _ := vfs.Default.ReadDir(dir)
	var got []int64
	for _, n := range names {
		if b, ok := parseSegmentName(n); ok {
			got = append(got, b)
		}
	}
	for i, b := range got {
		if b != int64(i)*4096 {
			t.Fatalf("segment %d named %d, want %d", i, b, i*4096)
		}
	}
	if len(got) < 10 {
		t.Fatalf("%d segments, want at least 10 (one record each)", len(got))
	}
}

func TestRecordTooLarge(t *testing.T) {
	l := openTest(t, &Options{SegmentSize: 4096})
	if _, err := l.Append(make([]byte, 4096-HeaderSize)); err != nil {
		t.Fatalf("a record filling a segment exactly: %v", err)
	}
	end := l.End()
	_, err := l.AppendBatch([][]byte{[]byte("ok"), make([]byte, 4096-HeaderSize+1)})
	if !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("got %v, want ErrRecordTooLarge", err)
	}
	if l.End() != end {
		t.Fatal("a refused batch wrote something")
	}
}

func TestFillerAndShortGap(t *testing.T) {
	l := openTest(t, &Options{SegmentSize: 4096})
	// Leave 40 bytes: a filler fits. Then leave 10: none does.
	p1, _ := l.Append(make([]byte, 4096-40-HeaderSize))
	p2, _ := l.Append(make([]byte, 100))
	if p1 != 0 || p2 != 4096 {
		t.Fatalf("positions %d %d", p1, p2)
	}
	p3, _ := l.Append(make([]byte, 4096-100-HeaderSize-HeaderSize-10))
	p4, _ := l.Append([]byte("x"))
	if p4 != 8192 {
		t.Fatalf("record after short gap at %d (p3 %d)", p4, p3)
	}
	got := readAll(t, l, 0)
	if len(got) != 4 {
		t.Fatalf("%d records", len(got))
	}
	if _, err := l.Read(4096 - 40); !errors.Is(err, ErrInvalidPosition) {
		t.Fatalf("reading a filler: %v", err)
	}
}

func TestTruncateAndDeleteBefore(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentSize: 4096}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	var pos []int64
	for i := 0; i < 40; i++ {
		p, err := l.Append(payloadFor(i, 500))
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	if err := l.Truncate(pos[30] + 1); !errors.Is(err, ErrInvalidPosition) {
		t.Fatalf("truncate inside a record: %v", err)
	}
	if err := l.Truncate(pos[25]); err != nil {
		t.Fatal(err)
	}
	if l.End() != pos[25] {
		t.Fatalf("end %d after truncate to %d", l.End(), pos[25])
	}
	if _, err := l.Read(pos[26]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read past truncation: %v", err)
	}
	np, err := l.Append([]byte("new"))
	if err != nil || np != pos[25] {
		t.Fatalf("append after truncate at %d: %v", np, err)
	}
	n, err := l.DeleteBefore(pos[20])
	if err != nil || n == 0 {
		t.Fatalf("delete before: %d %v", n, err)
	}
	first := l.First()
	if first > pos[20] || first%4096 != 0 {
		t.Fatalf("first %d", first)
	}
	if _, err := l.Read(pos[0]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read deleted: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := readAll(t, l, l.First())
	last := got[len(got)-1]
	if string(last.Payload) != "new" || last.Position != pos[25] {
		t.Fatalf("last record after reopen %q at %d", last.Payload, last.Position)
	}
	for _, r := range got[:len(got)-1] {
		i := 0
		fmt.Sscanf(string(r.Payload[:8]), "%d", &i)
		if !bytes.Equal(r.Payload, payloadFor(i, 500)) || i >= 25 {
			t.Fatalf("record %d wrong after truncate+reopen", i)
		}
	}
}

func TestConcurrentAppendersAndReaders(t *testing.T) {
	l := openTest(t, &Options{SegmentSize: 64 << 10})
	const writers, per = 8, 200
	var wg sync.WaitGroup
	type rec struct {
		pos int64
		p   []byte
	}
	results := make([][]rec, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				p := payloadFor(w*per+i, 100+i%900)
				pos, err := l.Append(p)
				if err != nil {
					t.Error(err)
					return
				}
				results[w] = append(results[w], rec{pos, p})
				// Read back something written by this goroutine.
				r, err := l.Read(results[w][i/2].pos)
				if err != nil || !bytes.Equal(r.Payload, results[w][i/2].p) {
					t.Errorf("read back: %v", err)
					return
				}
			}
		}(w)
	}
	wg.Add(1)
	go func() { // a reader deleting and iterating alongside
		defer wg.Done()
		for i := 0; i < 20; i++ {
			it := l.NewIterator(l.First())
			for {
				if _, err := it.Next(); err != nil {
					if !errors.Is(err, io.EOF) && !errors.Is(err, ErrNotFound) {
						t.Error(err)
					}
					break
				}
			}
			it.Close()
		}
	}()
	wg.Wait()
	seen := map[int64]bool{}
	for _, rs := range results {
		for _, r := range rs {
			if seen[r.pos] {
				t.Fatalf("position %d given twice", r.pos)
			}
			seen[r.pos] = true
			got, err := l.Read(r.pos)
			if err != nil || !bytes.Equal(got.Payload, r.p) {
				t.Fatalf("record at %d: %v", r.pos, err)
			}
		}
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []Options{
		{SegmentSize: 1000},
		{SegmentSize: 4097},
		{Flush: FlushMode(7)},
		{WritePath: WritePath(9)},
		{SyncFlushTimeout: -1},
		{RetentionBytes: -5},
	} {
		if _, err := Open(t.TempDir(), &o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}

func TestSecondOpenIsRefused(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l2, err := Open(dir, nil); err == nil {
		l2.Close()
		t.Fatal("a second Open of the same directory succeeded")
	}
}

func TestCloseTwiceAndUseAfterClose(t *testing.T) {
	l, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	if _, err := l.Append([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(l.Dir(), abortName)); !os.IsNotExist(err) {
		t.Fatalf("abort marker left after clean close: %v", err)
	}
}
