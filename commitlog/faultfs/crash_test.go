package faultfs_test

import (
	"bytes"
	"errors"
	"maps"
	"math/rand"
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/raftlog/raftlog/commitlog/faultfs"
	"github.com/raftlog/raftlog/mmap"
)

func pattern(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func TestCrashDeterministic(t *testing.T) {
	// synced is written and synced, then overwritten in part and extended
	// without a sync.
	synced := pattern(1, 3*4096+100)
	unsynced := pattern(2, 2*4096+1000)
	wantKeep := slices.Clone(synced)
	copy(wantKeep[4096:], unsynced) // overwrites pages 1 to 3 and extends the file by 900 bytes
	wantKeep = append(wantKeep, unsynced[len(synced)-4096:]...)

	tests := []struct {
		name  string
		crash func(*faultfs.FS) *faultfs.FS
		want  []byte
	}{
		{"drop all", (*faultfs.FS).CrashDropAll, synced},
		{"keep all", (*faultfs.FS).CrashKeepAll, wantKeep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := newFS(t, 1)
			f := open(t, fs, "/d/f", rw)
			check(t, fs.SyncDir("/d"))
			write(t, f, 0, synced)
			check(t, f.Sync())
			write(t, f, 4096, unsynced)
			after := tt.crash(fs)
			if got := contents(t, after, "/d/f"); !bytes.Equal(got, tt.want) {
				t.Fatalf("after crash: %d bytes, want %d (equal prefix %d)", len(got), len(tt.want), commonPrefix(got, tt.want))
			}
		})
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestSyncedDataSurvives(t *testing.T) {
	for seed := int64(0); seed < 100; seed++ {
		fs := newFS(t, seed)
		f := open(t, fs, "/d/f", rw)
		check(t, fs.SyncDir("/d"))
		synced := pattern(seed, 2*4096+1000) // ends in the middle of page 2
		write(t, f, 0, synced)
		check(t, f.Sync())
		// Unsynced bytes share page 2 with synced ones, and add more pages.
		write(t, f, int64(len(synced)), pattern(seed+1000, 3*4096))
		got := contents(t, fs.Crash(), "/d/f")
		if len(got) < len(synced) || !bytes.Equal(got[:len(synced)], synced) {
			t.Fatalf("seed %d: synced bytes lost: %d bytes survive, equal prefix %d of %d",
				seed, len(got), commonPrefix(got, synced), len(synced))
		}
	}
}

func TestCrashIsReproducible(t *testing.T) {
	run := func(seed int64) []byte {
		fs := newFS(t, seed)
		f := open(t, fs, "/d/f", rw)
		check(t, fs.SyncDir("/d"))
		write(t, f, 0, pattern(1, 8*4096))
		check(t, f.Sync())
		write(t, f, 0, pattern(2, 8*4096))
		return contents(t, fs.Crash(), "/d/f")
	}
	for seed := int64(0); seed < 10; seed++ {
		if !bytes.Equal(run(seed), run(seed)) {
			t.Fatalf("seed %d: two crashes of the same history differ", seed)
		}
	}
}

// TestCrashOutcomes checks that across seeds every outcome of an unsynced
// page happens, including pages that are neither the old nor the new bytes
// (torn: a mix of both; garbage: some bytes of neither), and that bytes
// equal in both images never change.
func TestCrashOutcomes(t *testing.T) {
	const pages = 8
	oldData := pattern(1, pages*4096)
	newData := pattern(2, pages*4096)
	var lost, kept, torn, garbage int
	for seed := int64(0); seed < 200; seed++ {
		fs := newFS(t, seed)
		f := open(t, fs, "/d/f", rw)
		check(t, fs.SyncDir("/d"))
		write(t, f, 0, oldData)
		check(t, f.Sync())
		write(t, f, 0, newData)
		got := contents(t, fs.Crash(), "/d/f")
		if len(got) != len(oldData) {
			t.Fatalf("seed %d: length %d, want %d", seed, len(got), len(oldData))
		}
		for p := 0; p < pages; p++ {
			page := got[p*4096 : (p+1)*4096]
			switch {
			case bytes.Equal(page, oldData[p*4096:(p+1)*4096]):
				lost++
			case bytes.Equal(page, newData[p*4096:(p+1)*4096]):
				kept++
			case oldOrNew(page, oldData[p*4096:], newData[p*4096:]):
				torn++
			default:
				garbage++
			}
		}
		for i := range got {
			if oldData[i] == newData[i] && got[i] != oldData[i] {
				t.Fatalf("seed %d: byte %d equal in both images changed", seed, i)
			}
		}
	}
	t.Logf("pages lost %d, kept %d, torn %d, garbage %d", lost, kept, torn, garbage)
	if lost == 0 || kept == 0 || torn == 0 || garbage == 0 {
		t.Fatalf("an outcome never happened: lost %d, kept %d, torn %d, garbage %d", lost, kept, torn, garbage)
	}
}

// oldOrNew reports whether every byte of page is the old or the new one.
func oldOrNew(page, oldData, newData []byte) bool {
	for i, c := range page {
		if c != oldData[i] && c != newData[i] {
			return false
		}
	}
	return true
}

func TestCrashLength(t *testing.T) {
	// An unsynced append leaves either the durable length or the page
	// cache's; both happen across seeds.
	lengths := map[int]bool{}
	for seed := int64(0); seed < 50; seed++ {
		fs := newFS(t, seed)
		f := open(t, fs, "/d/f", rw)
		check(t, fs.SyncDir("/d"))
		write(t, f, 0, pattern(1, 100))
		check(t, f.Sync())
		check(t, f.Allocate(5000))
		got := contents(t, fs.Crash(), "/d/f")
		lengths[len(got)] = true
	}
	if len(lengths) != 2 || !lengths[100] || !lengths[5000] {
		t.Fatalf("lengths after crash %v, want 100 and 5000", lengths)
	}
}

func TestCrashNamespace(t *testing.T) {
	tests := []struct {
		name string
		// setup runs on a file system where /d/old holds "old" and is
		// durable; it returns the directory listing a crash must leave.
		setup func(t *testing.T, fs *faultfs.FS) []string
	}{
		{"unsynced create is lost", func(t *testing.T, fs *faultfs.FS) []string {
			check(t, open(t, fs, "/d/new", rw).Close())
			return []string{"old"}
		}},
		{"synced create survives", func(t *testing.T, fs *faultfs.FS) []string {
			check(t, open(t, fs, "/d/new", rw).Close())
			check(t, fs.SyncDir("/d"))
			return []string{"new", "old"}
		}},
		{"unsynced remove is undone", func(t *testing.T, fs *faultfs.FS) []string {
			check(t, fs.Remove("/d/old"))
			return []string{"old"}
		}},
		{"synced remove sticks", func(t *testing.T, fs *faultfs.FS) []string {
			check(t, fs.Remove("/d/old"))
			check(t, fs.SyncDir("/d"))
			return []string{}
		}},
		{"unsynced rename is undone", func(t *testing.T, fs *faultfs.FS) []string {
			check(t, fs.Rename("/d/old", "/d/renamed"))
			return []string{"old"}
		}},
		{"synced rename sticks", func(t *testing.T, fs *faultfs.FS) []string {
			check(t, fs.Rename("/d/old", "/d/renamed"))
			check(t, fs.SyncDir("/d"))
			return []string{"renamed"}
		}},
		{"sync of another directory does not help", func(t *testing.T, fs *faultfs.FS) []string {
			check(t, fs.MkdirAll("/e", 0o755))
			check(t, open(t, fs, "/d/new", rw).Close())
			check(t, fs.SyncDir("/e"))
			return []string{"old"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := int64(0); seed < 5; seed++ {
				fs := newFS(t, seed)
				f := open(t, fs, "/d/old", rw)
				write(t, f, 0, []byte("old"))
				check(t, f.Sync())
				check(t, f.Close())
				check(t, fs.SyncDir("/d"))
				want := tt.setup(t, fs)
				after := fs.Crash()
				names, err := after.ReadDir("/d")
				check(t, err)
				if !slices.Equal(names, want) {
					t.Fatalf("seed %d: ReadDir after crash = %q, want %q", seed, names, want)
				}
				for _, name := range names {
					if name == "new" {
						continue
					}
					if got := contents(t, after, "/d/"+name); string(got) != "old" {
						t.Fatalf("seed %d: %s holds %q after crash", seed, name, got)
					}
				}
			}
		})
	}
}

// TestCrashDirectories checks that a directory is an entry of its parent
// like a file: MkdirAll makes the directories it creates durable by syncing
// each parent, and a directory whose entry never became durable is lost in
// a crash with everything in it, even what was synced inside it.
func TestCrashDirectories(t *testing.T) {
	tests := []struct {
		name string
		// setup runs on an empty file system; it returns the listing of
		// each directory a crash must leave, nil for a directory that
		// must be gone.
		setup func(t *testing.T, fs *faultfs.FS) map[string][]string
	}{
		{"MkdirAll is durable", func(t *testing.T, fs *faultfs.FS) map[string][]string {
			check(t, fs.MkdirAll("/a/b/c", 0o755))
			return map[string][]string{"/a": {"b"}, "/a/b": {"c"}, "/a/b/c": {"f"}}
		}},
		{"failed parent sync loses the directory and its contents", func(t *testing.T, fs *faultfs.FS) map[string][]string {
			// The sync of / succeeds, that of /a fails: /a/b is made
			// but its entry is not durable.
			fs.Inject(faultfs.Fault{Op: faultfs.OpSyncDir, Path: "/a"})
			if err := fs.MkdirAll("/a/b/c", 0o755); !errors.Is(err, syscall.EIO) {
				t.Fatalf("MkdirAll with a failing sync of /a = %v, want EIO", err)
			}
			names, err := fs.ReadDir("/a")
			check(t, err)
			if !slices.Equal(names, []string{"b"}) {
				t.Fatalf("ReadDir(/a) after the failed MkdirAll = %q, want [b]", names)
			}
			// A second MkdirAll finds /a/b and leaves it as it is.
			check(t, fs.MkdirAll("/a/b/c", 0o755))
			return map[string][]string{"/": {"a"}, "/a": {}, "/a/b": nil, "/a/b/c": nil}
		}},
		{"SyncDir of the parent makes it durable", func(t *testing.T, fs *faultfs.FS) map[string][]string {
			fs.Inject(faultfs.Fault{Op: faultfs.OpSyncDir, Path: "/a"})
			if err := fs.MkdirAll("/a/b/c", 0o755); err == nil {
				t.Fatal("MkdirAll with a failing sync of /a succeeded")
			}
			check(t, fs.MkdirAll("/a/b/c", 0o755))
			check(t, fs.SyncDir("/a"))
			return map[string][]string{"/a": {"b"}, "/a/b": {"c"}, "/a/b/c": {"f"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := int64(0); seed < 5; seed++ {
				fs := faultfs.New(seed)
				want := tt.setup(t, fs)
				// A file synced, with its name, inside the deepest
				// directory.
				f := open(t, fs, "/a/b/c/f", rw)
				write(t, f, 0, []byte("data"))
				check(t, f.Sync())
				check(t, f.Close())
				check(t, fs.SyncDir("/a/b/c"))

				after := fs.Crash()
				for _, d := range slices.Sorted(maps.Keys(want)) {
					names, err := after.ReadDir(d)
					if want[d] == nil {
						if !errors.Is(err, os.ErrNotExist) {
							t.Fatalf("seed %d: ReadDir(%s) after crash = %q, %v; want it gone", seed, d, names, err)
						}
						continue
					}
					check(t, err)
					if !slices.Equal(names, want[d]) {
						t.Fatalf("seed %d: ReadDir(%s) after crash = %q, want %q", seed, d, names, want[d])
					}
				}
				if want["/a/b/c"] != nil {
					if got := contents(t, after, "/a/b/c/f"); string(got) != "data" {
						t.Fatalf("seed %d: /a/b/c/f holds %q after crash", seed, got)
					}
				}
			}
		})
	}
}

// TestCrashRemovedDirectory checks that Remove of an empty directory is
// durable once its parent is synced, and that until then a crash brings
// it back with the files its durable namespace still names; and that
// MkdirAll of the same path afterwards gives a new, empty directory.
func TestCrashRemovedDirectory(t *testing.T) {
	setup := func(fs *faultfs.FS) {
		check(t, fs.MkdirAll("/a/d", 0o755))
		f := open(t, fs, "/a/d/f", rw)
		write(t, f, 0, []byte("data"))
		check(t, f.Sync())
		check(t, f.Close())
		check(t, fs.SyncDir("/a/d"))
		if err := fs.Remove("/a/d"); !errors.Is(err, syscall.ENOTEMPTY) {
			t.Fatalf("Remove of a directory holding a file = %v, want ENOTEMPTY", err)
		}
		check(t, fs.Remove("/a/d/f"))
		check(t, fs.Remove("/a/d"))
		if _, err := fs.ReadDir("/a/d"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("ReadDir of a removed directory = %v", err)
		}
		if names, _ := fs.ReadDir("/a"); len(names) != 0 {
			t.Fatalf("ReadDir(/a) after the removal = %q", names)
		}
	}
	for seed := int64(0); seed < 3; seed++ {
		fs := faultfs.New(seed)
		setup(fs)
		after := fs.Crash() // nothing synced since: all comes back
		if names, err := after.ReadDir("/a/d"); err != nil || !slices.Equal(names, []string{"f"}) {
			t.Fatalf("seed %d: ReadDir(/a/d) after a crash before the parent's sync = %q, %v; want [f]", seed, names, err)
		}
		if got := contents(t, after, "/a/d/f"); string(got) != "data" {
			t.Fatalf("seed %d: /a/d/f holds %q", seed, got)
		}

		fs = faultfs.New(seed)
		setup(fs)
		check(t, fs.SyncDir("/a"))
		after = fs.Crash()
		if _, err := after.ReadDir("/a/d"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("seed %d: ReadDir(/a/d) after a crash after the parent's sync = %v; want it gone", seed, err)
		}

		fs = faultfs.New(seed)
		setup(fs)
		check(t, fs.MkdirAll("/a/d", 0o755)) // syncs /a
		after = fs.Crash()
		if names, err := after.ReadDir("/a/d"); err != nil || len(names) != 0 {
			t.Fatalf("seed %d: ReadDir(/a/d) made again = %q, %v; want it empty", seed, names, err)
		}
	}
	if err := faultfs.New(1).Remove("/"); err == nil {
		t.Fatal("Remove of / succeeded")
	}
}

// TestMkdirAllSyncsEachParent checks that MkdirAll syncs the parent of each
// directory it creates, and nothing when the directory exists.
func TestMkdirAllSyncsEachParent(t *testing.T) {
	fs := faultfs.New(1)
	for _, step := range []struct {
		dir   string
		syncs int64
	}{
		{"/a/b/c", 3},
		{"/a/b/c", 0},
		{"/a/b", 0},
		{"/a/b/c/d", 1},
		{"rel/x", 2},
	} {
		before := fs.SyncCount()
		check(t, fs.MkdirAll(step.dir, 0o755))
		if got := fs.SyncCount() - before; got != step.syncs {
			t.Errorf("MkdirAll(%s) made %d syncs, want %d", step.dir, got, step.syncs)
		}
	}
	after := fs.CrashDropAll()
	for _, d := range []string{"/a/b/c/d", "rel/x"} {
		if _, err := after.ReadDir(d); err != nil {
			t.Errorf("ReadDir(%s) after crash: %v", d, err)
		}
	}
}

func TestCrashedFSFails(t *testing.T) {
	fs := newFS(t, 1)
	f := open(t, fs, "/d/f", rw)
	write(t, f, 0, make([]byte, 8192))
	m, err := f.Map(8192)
	check(t, err)
	after := fs.Crash()

	ops := map[string]func() error{
		"OpenFile": func() error { _, err := fs.OpenFile("/d/f", os.O_RDWR, 0); return err },
		"Remove":   func() error { return fs.Remove("/d/f") },
		"Rename":   func() error { return fs.Rename("/d/f", "/d/g") },
		"MkdirAll": func() error { return fs.MkdirAll("/x", 0o755) },
		"ReadDir":  func() error { _, err := fs.ReadDir("/d"); return err },
		"SyncDir":  func() error { return fs.SyncDir("/d") },
		"Lock":     func() error { _, err := fs.Lock("/d/LOCK"); return err },
		"ReadAt":   func() error { _, err := f.ReadAt(make([]byte, 1), 0); return err },
		"WriteAt":  func() error { _, err := f.WriteAt([]byte("x"), 0); return err },
		"Size":     func() error { _, err := f.Size(); return err },
		"Allocate": func() error { return f.Allocate(1 << 20) },
		"Truncate": func() error { return f.Truncate(0) },
		"Sync":     func() error { return f.Sync() },
		"Map":      func() error { _, err := f.Map(1); return err },
		"Close":    func() error { return f.Close() },
		"Msync":    func() error { return m.Sync(0, 10) },
		"Advise":   func() error { return m.Advise(0, 10, mmap.Sequential) },
		"Mlock":    func() error { return m.Lock(0, 10) },
		"Unmap":    func() error { return m.Unmap() },
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, faultfs.ErrCrashed) {
			t.Errorf("%s on a crashed FS = %v, want ErrCrashed", name, err)
		}
	}
	// The new FS is independent of stores through the dead mapping.
	m.Bytes()[0] = 'z'
	if got := contents(t, after, "/d/f"); got != nil {
		t.Errorf("unsynced file survived: %d bytes", len(got))
	}
}
