package faultfs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/raftlog/raftlog/commitlog/faultfs"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/mmap"
)

// mapped returns a durable file of size zero bytes, synced, and a mapping
// of all of it.
func mapped(t *testing.T, fs *faultfs.FS, name string, size int) (vfs.File, vfs.Mapping) {
	t.Helper()
	f := open(t, fs, name, rw)
	check(t, f.Allocate(int64(size)))
	check(t, f.Sync())
	check(t, fs.SyncDir("/d"))
	m, err := f.Map(size)
	check(t, err)
	return f, m
}

func TestMappingSharesThePageCache(t *testing.T) {
	fs := newFS(t, 1)
	f, m := mapped(t, fs, "/d/f", 8192)
	b := m.Bytes()
	if len(b) != 8192 || cap(b) != 8192 {
		t.Fatalf("Bytes has len %d cap %d, want 8192", len(b), cap(b))
	}
	copy(b[100:], "through the mapping")
	p := make([]byte, 19)
	if _, err := f.ReadAt(p, 100); err != nil || string(p) != "through the mapping" {
		t.Fatalf("ReadAt sees %q, %v", p, err)
	}
	write(t, f, 5000, []byte("pwrite"))
	if string(b[5000:5006]) != "pwrite" {
		t.Fatalf("mapping sees %q after WriteAt", b[5000:5006])
	}
}

func TestMappedFileCannotChangeLength(t *testing.T) {
	fs := newFS(t, 1)
	f, m := mapped(t, fs, "/d/f", 4096)
	tests := []struct {
		name string
		op   func() error
		ok   bool
	}{
		{"write inside", func() error { _, err := f.WriteAt([]byte("x"), 4095); return err }, true},
		{"write past the end", func() error { _, err := f.WriteAt([]byte("xy"), 4095); return err }, false},
		{"allocate within", func() error { return f.Allocate(4096) }, true},
		{"allocate more", func() error { return f.Allocate(4097) }, false},
		{"truncate to the same size", func() error { return f.Truncate(4096) }, false},
		{"truncate shorter", func() error { return f.Truncate(10) }, false},
		{"open with O_TRUNC", func() error {
			_, err := fs.OpenFile("/d/f", rw|os.O_TRUNC, 0)
			return err
		}, false},
	}
	for _, tt := range tests {
		if err := tt.op(); (err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want success %v", tt.name, err, tt.ok)
		}
	}
	if size, _ := f.Size(); size != 4096 {
		t.Fatalf("size changed to %d while mapped", size)
	}
	check(t, m.Unmap())
	if err := m.Unmap(); err == nil {
		t.Fatal("second Unmap succeeded")
	}
	if err := m.Sync(0, 1); err == nil {
		t.Fatal("Sync after Unmap succeeded")
	}
	check(t, f.Truncate(10))
	check(t, f.Allocate(1<<16))
}

func TestMapSize(t *testing.T) {
	fs := newFS(t, 1)
	f := open(t, fs, "/d/f", rw)
	check(t, f.Allocate(100))
	for _, size := range []int{0, -1, 101} {
		if _, err := f.Map(size); err == nil {
			t.Errorf("Map(%d) of a 100-byte file succeeded", size)
		}
	}
	m, err := f.Map(100)
	check(t, err)
	check(t, f.Close())
	// The mapping outlives the file.
	check(t, m.Sync(0, 100))
	check(t, m.Unmap())
}

func TestMappingRanges(t *testing.T) {
	fs := newFS(t, 1)
	_, m := mapped(t, fs, "/d/f", 100)
	tests := []struct {
		off, n int
		ok     bool
	}{
		{0, 100, true},
		{99, 1, true},
		{100, 0, true},
		{0, 0, true},
		{-1, 1, false},
		{0, -1, false},
		{50, 51, false},
		{101, 0, false},
	}
	for _, tt := range tests {
		ops := map[string]func() error{
			"Sync":   func() error { return m.Sync(tt.off, tt.n) },
			"Advise": func() error { return m.Advise(tt.off, tt.n, mmap.WillNeed) },
			"Lock":   func() error { return m.Lock(tt.off, tt.n) },
			"Unlock": func() error { return m.Unlock(tt.off, tt.n) },
		}
		for name, op := range ops {
			if err := op(); (err == nil) != tt.ok {
				t.Errorf("%s(%d, %d) = %v, want success %v", name, tt.off, tt.n, err, tt.ok)
			}
		}
	}
	if err := m.Advise(0, 1, mmap.Advice(99)); err == nil {
		t.Error("unknown advice accepted")
	}
}

func TestMappingSyncIsExact(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			fs := newFS(t, 1)
			_, m := mapped(t, fs, "/d/f", 3*4096)
			b := m.Bytes()
			copy(b[10:], "synced-1")
			copy(b[4090:], "synced-2 across a page boundary")
			copy(b[8000:], "unsynced")
			check(t, m.Sync(10, 8))
			check(t, m.Sync(4090, 31))
			want := make([]byte, 3*4096)
			copy(want[10:], "synced-1")
			copy(want[4090:], "synced-2 across a page boundary")
			var after *faultfs.FS
			if keep {
				copy(want[8000:], "unsynced")
				after = fs.CrashKeepAll()
			} else {
				after = fs.CrashDropAll()
			}
			if got := contents(t, after, "/d/f"); !bytes.Equal(got, want) {
				t.Fatalf("after crash: equal prefix %d of %d", commonPrefix(got, want), len(want))
			}
		})
	}
}

func TestMappingSyncExtendsDurableLength(t *testing.T) {
	fs := newFS(t, 1)
	f := open(t, fs, "/d/f", rw)
	check(t, fs.SyncDir("/d"))
	check(t, f.Allocate(4096)) // not synced: the durable length is 0
	m, err := f.Map(4096)
	check(t, err)
	copy(m.Bytes()[100:], "abc")
	check(t, m.Sync(100, 3))
	want := make([]byte, 103)
	copy(want[100:], "abc")
	if got := contents(t, fs.CrashDropAll(), "/d/f"); !bytes.Equal(got, want) {
		t.Fatalf("after crash %q, want %q", got, want)
	}
}

// TestConcurrentMappingStores has goroutines store into adjacent ranges of
// one mapping, deliberately not aligned to words, each syncing exactly its
// own range while its neighbours store. Run with -race.
func TestConcurrentMappingStores(t *testing.T) {
	const (
		writers = 8
		chunk   = 37
		rounds  = 50
	)
	fs := newFS(t, 1)
	f, m := mapped(t, fs, "/d/f", writers*rounds*chunk)
	b := m.Bytes()
	syncs := fs.SyncCount()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				off := (r*writers + w) * chunk
				for i := range chunk {
					b[off+i] = byte(w + 1)
				}
				if err := m.Sync(off, chunk); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	// Reads and writes of the file go through the lock; touch a range no
	// one maps into concurrently.
	other := open(t, fs, "/d/other", rw)
	wg.Go(func() {
		for i := range 100 {
			if _, err := other.WriteAt([]byte{byte(i)}, int64(i)); err != nil {
				t.Error(err)
			}
			if _, err := f.Size(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if got := fs.SyncCount() - syncs; got != writers*rounds {
		t.Errorf("SyncCount grew by %d, want %d", got, writers*rounds)
	}
	got := contents(t, fs.CrashDropAll(), "/d/f")
	for i, c := range got {
		if want := byte((i/chunk)%writers + 1); c != want {
			t.Fatalf("byte %d = %d after crash, want %d", i, c, want)
		}
	}
}

func TestOnSync(t *testing.T) {
	fs := newFS(t, 1)
	f, m := mapped(t, fs, "/d/f", 4096)
	synced := make(chan struct{}, 10)
	fs.OnSync(func() { synced <- struct{}{} })
	before := fs.SyncCount()
	errc := make(chan error, 1)
	go func() { errc <- errors.Join(m.Sync(0, 10), f.Sync()) }()
	check(t, <-errc)
	// The hook ran before each Sync returned.
	if len(synced) != 2 {
		t.Fatalf("OnSync called %d times, want 2", len(synced))
	}
	<-synced
	<-synced
	check(t, fs.SyncDir("/d")) // counted, but not a data sync
	if got := fs.SyncCount() - before; got != 3 {
		t.Fatalf("SyncCount grew by %d, want 3", got)
	}
	select {
	case <-synced:
		t.Fatal("OnSync called for SyncDir")
	default:
	}

	// The hook runs unlocked, so it may crash the file system.
	var after *faultfs.FS
	fs.OnSync(func() { after = fs.Crash() })
	check(t, f.Sync())
	if after == nil {
		t.Fatal("hook did not run")
	}
	if err := f.Sync(); !errors.Is(err, faultfs.ErrCrashed) {
		t.Fatalf("Sync after the hook crashed = %v", err)
	}
	if got := contents(t, after, "/d/f"); len(got) != 4096 {
		t.Fatalf("file after crash has %d bytes", len(got))
	}
}
