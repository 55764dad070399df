package faultfs_test

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/raftlog/raftlog/commitlog/faultfs"
	"github.com/raftlog/raftlog/commitlog/vfs"
)

func TestInject(t *testing.T) {
	type call struct {
		name string
		do   func(t *testing.T, fs *faultfs.FS) error
	}
	withFile := func(name string, do func(f vfs.File) error) call {
		return call{name, func(t *testing.T, fs *faultfs.FS) error {
			f := open(t, fs, "/d/seg", rw)
			defer f.Close()
			return do(f)
		}}
	}
	write1 := withFile("write", func(f vfs.File) error {
		_, err := f.WriteAt([]byte("x"), 0)
		return err
	})

	tests := []struct {
		name  string
		fault faultfs.Fault
		call  call
		// want[i] says whether the i-th call must fail.
		want []bool
	}{
		{
			name:  "write EIO once after 2",
			fault: faultfs.Fault{Op: faultfs.OpWrite, After: 2, Err: syscall.EIO},
			call:  write1,
			want:  []bool{false, false, true, false, false},
		},
		{
			name:  "write sticky after 1",
			fault: faultfs.Fault{Op: faultfs.OpWrite, After: 1, Err: syscall.ENOSPC, Sticky: true},
			call:  write1,
			want:  []bool{false, true, true, true},
		},
		{
			name:  "path filter misses",
			fault: faultfs.Fault{Op: faultfs.OpWrite, Path: "other", Sticky: true},
			call:  write1,
			want:  []bool{false, false},
		},
		{
			name:  "path filter hits",
			fault: faultfs.Fault{Op: faultfs.OpWrite, Path: "seg"},
			call:  write1,
			want:  []bool{true, false},
		},
		{
			name:  "sync",
			fault: faultfs.Fault{Op: faultfs.OpSync, After: 1},
			call: withFile("sync", func(f vfs.File) error {
				return f.Sync()
			}),
			want: []bool{false, true, false},
		},
		{
			name:  "read",
			fault: faultfs.Fault{Op: faultfs.OpRead},
			call: withFile("read", func(f vfs.File) error {
				_, err := f.ReadAt(make([]byte, 0), 0)
				return err
			}),
			want: []bool{true, false},
		},
		{
			name:  "allocate",
			fault: faultfs.Fault{Op: faultfs.OpAllocate, Err: syscall.ENOSPC},
			call: withFile("allocate", func(f vfs.File) error {
				return f.Allocate(1 << 20)
			}),
			want: []bool{true, false},
		},
		{
			name:  "msync",
			fault: faultfs.Fault{Op: faultfs.OpMsync, After: 1},
			call: call{"msync", func(t *testing.T, fs *faultfs.FS) error {
				f := open(t, fs, "/d/seg", rw)
				defer f.Close()
				check(t, f.Allocate(10))
				m, err := f.Map(10)
				check(t, err)
				defer m.Unmap()
				return m.Sync(0, 10)
			}},
			want: []bool{false, true, false},
		},
		{
			name:  "create only when creating",
			fault: faultfs.Fault{Op: faultfs.OpCreate, Sticky: true},
			call: call{"create", func(t *testing.T, fs *faultfs.FS) error {
				f, err := fs.OpenFile("/d/seg", rw, 0)
				if err == nil {
					f.Close()
				}
				return err
			}},
			want: []bool{true, true},
		},
		{
			name:  "remove",
			fault: faultfs.Fault{Op: faultfs.OpRemove},
			call: call{"remove", func(t *testing.T, fs *faultfs.FS) error {
				check(t, open(t, fs, "/d/seg", rw).Close())
				return fs.Remove("/d/seg")
			}},
			want: []bool{true, false},
		},
		{
			name:  "rename matches the new name",
			fault: faultfs.Fault{Op: faultfs.OpRename, Path: "new"},
			call: call{"rename", func(t *testing.T, fs *faultfs.FS) error {
				check(t, open(t, fs, "/d/seg", rw).Close())
				return fs.Rename("/d/seg", "/d/new")
			}},
			want: []bool{true, false},
		},
		{
			name:  "syncdir",
			fault: faultfs.Fault{Op: faultfs.OpSyncDir, After: 2, Sticky: true},
			call: call{"syncdir", func(t *testing.T, fs *faultfs.FS) error {
				return fs.SyncDir("/d")
			}},
			want: []bool{false, false, true, true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := newFS(t, 1)
			fs.Inject(tt.fault)
			wantErr := tt.fault.Err
			if wantErr == nil {
				wantErr = syscall.EIO
			}
			for i, fail := range tt.want {
				err := tt.call.do(t, fs)
				if fail && !errors.Is(err, wantErr) {
					t.Fatalf("call %d: err = %v, want %v", i, err, wantErr)
				}
				if !fail && err != nil {
					t.Fatalf("call %d: unexpected error %v", i, err)
				}
			}
			fs.ClearFaults()
			if err := tt.call.do(t, fs); err != nil {
				t.Fatalf("after ClearFaults: %v", err)
			}
		})
	}
}

func TestInjectedErrorsChangeNothing(t *testing.T) {
	fs := newFS(t, 1)
	f := open(t, fs, "/d/f", rw)
	check(t, fs.SyncDir("/d"))
	write(t, f, 0, []byte("durable"))
	check(t, f.Sync())

	fs.Inject(faultfs.Fault{Op: faultfs.OpWrite, Sticky: true})
	fs.Inject(faultfs.Fault{Op: faultfs.OpSync, Sticky: true})
	fs.Inject(faultfs.Fault{Op: faultfs.OpAllocate, Sticky: true})
	fs.Inject(faultfs.Fault{Op: faultfs.OpTruncate, Sticky: true})
	fs.Inject(faultfs.Fault{Op: faultfs.OpRemove, Sticky: true})
	fs.Inject(faultfs.Fault{Op: faultfs.OpRename, Sticky: true})
	fs.Inject(faultfs.Fault{Op: faultfs.OpCreate, Sticky: true})
	if _, err := f.WriteAt([]byte("changed, and longer"), 0); err == nil {
		t.Fatal("write succeeded")
	}
	if err := f.Allocate(1 << 20); err == nil {
		t.Fatal("allocate succeeded")
	}
	if err := f.Truncate(0); err == nil {
		t.Fatal("truncate succeeded")
	}
	if err := fs.Remove("/d/f"); err == nil {
		t.Fatal("remove succeeded")
	}
	if err := fs.Rename("/d/f", "/d/g"); err == nil {
		t.Fatal("rename succeeded")
	}
	if _, err := fs.OpenFile("/d/new", rw, 0); err == nil {
		t.Fatal("create succeeded")
	}
	if got := contents(t, fs, "/d/f"); string(got) != "durable" {
		t.Fatalf("file holds %q after failed calls", got)
	}
	if names, _ := fs.ReadDir("/d"); len(names) != 1 {
		t.Fatalf("ReadDir = %q after failed calls", names)
	}
	fs.ClearFaults()
	write(t, f, 0, []byte("changed"))
	fs.Inject(faultfs.Fault{Op: faultfs.OpSync})
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync = %v, want EIO", err)
	}
	if got := contents(t, fs.CrashDropAll(), "/d/f"); string(got) != "durable" {
		t.Fatalf("a failed sync made %q durable", got)
	}
}

func TestSeveralFaultsDue(t *testing.T) {
	fs := newFS(t, 1)
	f := open(t, fs, "/d/f", rw)
	fs.Inject(faultfs.Fault{Op: faultfs.OpWrite, Err: syscall.EIO})
	fs.Inject(faultfs.Fault{Op: faultfs.OpWrite, Err: syscall.ENOSPC})
	for _, want := range []error{syscall.EIO, syscall.ENOSPC, nil} {
		_, err := f.WriteAt([]byte("x"), 0)
		if want == nil && err != nil || !errors.Is(err, want) {
			t.Fatalf("WriteAt = %v, want %v", err, want)
		}
	}
}

// TestNoSpace: under the faults of NoSpace, creating a file and Allocate
// fail with ENOSPC, every time, for the paths given only; opening a file
// that exists, writing within its length and syncing work; ClearFaults
// ends it.
func TestNoSpace(t *testing.T) {
	fs := newFS(t, 1)
	f := open(t, fs, "/d/f", rw)
	check(t, f.Allocate(100))
	check(t, fs.MkdirAll("/e", 0o755))
	other := open(t, fs, "/e/g", rw)
	for _, fault := range faultfs.NoSpace("/d/") {
		fs.Inject(fault)
	}
	isENOSPC := func(what string, err error) {
		t.Helper()
		var pe *os.PathError
		if !errors.As(err, &pe) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("%s: %v, want *os.PathError with ENOSPC", what, err)
		}
	}
	for range 2 {
		_, err := fs.OpenFile("/d/new", rw, 0o644)
		isENOSPC("create", err)
		isENOSPC("allocate", f.Allocate(200))
		isENOSPC("allocate within the length", f.Allocate(50))
	}
	if names, err := fs.ReadDir("/d"); err != nil || len(names) != 1 {
		t.Fatalf("ReadDir = %q, %v after failed creations, want only f", names, err)
	}
	g, err := fs.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o644)
	check(t, err)
	check(t, g.Close())
	write(t, f, 10, []byte("still"))
	check(t, f.Sync())
	check(t, other.Allocate(1000))
	if size, _ := f.Size(); size != 100 {
		t.Fatalf("size %d after failed allocations, want 100", size)
	}
	fs.ClearFaults()
	check(t, f.Allocate(200))
	check(t, open(t, fs, "/d/new", rw).Close())
}

func TestCapacity(t *testing.T) {
	fs := newFS(t, 1)
	fs.SetCapacity(10000)
	a := open(t, fs, "/d/a", rw)
	b := open(t, fs, "/d/b", rw)
	check(t, a.Allocate(6000))
	isENOSPC := func(err error) {
		t.Helper()
		var pe *os.PathError
		if !errors.As(err, &pe) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("err = %v, want *os.PathError with ENOSPC", err)
		}
	}
	isENOSPC(b.Allocate(4001))
	_, err := b.WriteAt(make([]byte, 10), 3995)
	isENOSPC(err)
	isENOSPC(a.Truncate(10001))
	if size, _ := b.Size(); size != 0 {
		t.Fatalf("failed growth left size %d", size)
	}
	check(t, b.Allocate(4000))
	// Overwriting within the file needs no space.
	write(t, b, 0, make([]byte, 4000))

	// Shrinking and removing give space back.
	check(t, a.Truncate(1000))
	check(t, b.Allocate(9000))
	check(t, b.Close())
	check(t, fs.Remove("/d/b"))
	check(t, a.Allocate(10000))
	_, err = a.WriteAt([]byte("x"), 10000)
	isENOSPC(err)

	fs.SetCapacity(0)
	check(t, a.Allocate(1<<20))
}
