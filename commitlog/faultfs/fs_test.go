package faultfs_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/raftlog/raftlog/commitlog/faultfs"
	"github.com/raftlog/raftlog/commitlog/vfs"
)

const rw = os.O_RDWR | os.O_CREATE

// newFS returns a file system with the directory "/d".
func newFS(t *testing.T, seed int64) *faultfs.FS {
	t.Helper()
	fs := faultfs.New(seed)
	if err := fs.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	return fs
}

func open(t *testing.T, fs vfs.FS, name string, flag int) vfs.File {
	t.Helper()
	f, err := fs.OpenFile(name, flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func write(t *testing.T, f vfs.File, off int64, p []byte) {
	t.Helper()
	if n, err := f.WriteAt(p, off); err != nil || n != len(p) {
		t.Fatalf("WriteAt(%d bytes at %d) = %d, %v", len(p), off, n, err)
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// contents returns the whole of the named file, or nil if it does not
// exist.
func contents(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	check(t, err)
	defer f.Close()
	size, err := f.Size()
	check(t, err)
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return b
}

func TestOpenFileFlags(t *testing.T) {
	fs := newFS(t, 1)
	f := open(t, fs, "/d/exists", rw)
	write(t, f, 0, []byte("hello"))
	check(t, f.Close())

	tests := []struct {
		name    string
		path    string
		flag    int
		wantErr error
		want    string
	}{
		{"missing without create", "/d/missing", os.O_RDWR, os.ErrNotExist, ""},
		{"missing directory", "/nodir/f", rw, os.ErrNotExist, ""},
		{"a directory", "/d", os.O_RDONLY, syscall.EISDIR, ""},
		{"exclusive on existing", "/d/exists", rw | os.O_EXCL, os.ErrExist, ""},
		{"exclusive on new", "/d/new", rw | os.O_EXCL, nil, ""},
		{"existing keeps data", "/d/exists", os.O_RDONLY, nil, "hello"},
		{"uncleaned path", "/d/../d/./exists", os.O_RDONLY, nil, "hello"},
		{"truncate", "/d/exists", os.O_RDWR | os.O_TRUNC, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := fs.OpenFile(tt.path, tt.flag, 0o644)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("OpenFile = %v, want %v", err, tt.wantErr)
				}
				var pe *os.PathError
				if !errors.As(err, &pe) {
					t.Fatalf("error %T is not an *os.PathError", err)
				}
				return
			}
			check(t, err)
			defer f.Close()
			if f.Name() != tt.path {
				t.Errorf("Name() = %q, want %q", f.Name(), tt.path)
			}
			if got := contents(t, fs, tt.path); string(got) != tt.want {
				t.Errorf("contents %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAccessMode(t *testing.T) {
	fs := newFS(t, 1)
	check(t, open(t, fs, "/d/f", rw).Close())
	ro := open(t, fs, "/d/f", os.O_RDONLY)
	if _, err := ro.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EBADF) {
		t.Errorf("WriteAt on read-only file = %v, want EBADF", err)
	}
	if _, err := ro.Map(1); err == nil {
		t.Error("Map of read-only file succeeded")
	}
	wo := open(t, fs, "/d/f", os.O_WRONLY)
	if _, err := wo.ReadAt(make([]byte, 1), 0); !errors.Is(err, syscall.EBADF) {
		t.Errorf("ReadAt on write-only file = %v, want EBADF", err)
	}
	check(t, wo.Close())
	if err := wo.Close(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
	if _, err := wo.Size(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Size after Close = %v, want ErrClosed", err)
	}
}

func TestReadAtEOF(t *testing.T) {
	fs := newFS(t, 1)
	f := open(t, fs, "/d/f", rw)
	write(t, f, 0, []byte("0123456789"))
	tests := []struct {
		off     int64
		size    int
		want    string
		wantErr error
	}{
		{0, 10, "0123456789", nil},
		{2, 3, "234", nil},
		{8, 5, "89", io.EOF},
		{10, 1, "", io.EOF},
		{20, 1, "", io.EOF},
		{20, 0, "", nil},
	}
	for _, tt := range tests {
		p := make([]byte, tt.size)
		n, err := f.ReadAt(p, tt.off)
		if string(p[:n]) != tt.want || err != tt.wantErr {
			t.Errorf("ReadAt(%d bytes at %d) = %q, %v; want %q, %v", tt.size, tt.off, p[:n], err, tt.want, tt.wantErr)
		}
	}
	if _, err := f.ReadAt(make([]byte, 1), -1); err == nil {
		t.Error("ReadAt at a negative offset succeeded")
	}
}

func TestGrowAndShrink(t *testing.T) {
	fs := newFS(t, 1)
	f := open(t, fs, "/d/f", rw)
	write(t, f, 4, []byte("abcd"))
	if got := contents(t, fs, "/d/f"); !bytes.Equal(got, []byte("\x00\x00\x00\x00abcd")) {
		t.Fatalf("after a write past the end: %q", got)
	}
	check(t, f.Allocate(6)) // shorter than the file: no change
	check(t, f.Allocate(12))
	if size, _ := f.Size(); size != 12 {
		t.Fatalf("Size after Allocate(12) = %d", size)
	}
	check(t, f.Truncate(5))
	check(t, f.Truncate(8))
	// Bytes cut by the truncation come back as zeroes.
	if got := contents(t, fs, "/d/f"); !bytes.Equal(got, []byte("\x00\x00\x00\x00a\x00\x00\x00")) {
		t.Fatalf("after truncate and regrow: %q", got)
	}
}

func TestNamespace(t *testing.T) {
	fs := newFS(t, 1)
	check(t, fs.MkdirAll("/d/sub/deeper", 0o755))
	check(t, fs.MkdirAll("/d/sub", 0o755))
	for _, name := range []string{"/d/b", "/d/a", "/d/c"} {
		check(t, open(t, fs, name, rw).Close())
	}
	check(t, fs.Rename("/d/c", "/d/a")) // replaces a
	check(t, fs.Remove("/d/b"))
	names, err := fs.ReadDir("/d")
	check(t, err)
	if want := []string{"a", "sub"}; !slices.Equal(names, want) {
		t.Errorf("ReadDir = %q, want %q", names, want)
	}

	if err := fs.Remove("/d/b"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Remove of a missing file = %v", err)
	}
	if err := fs.Rename("/d/b", "/d/x"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Rename of a missing file = %v", err)
	}
	if err := fs.Rename("/d/a", "/d/sub/a"); err == nil {
		t.Error("Rename across directories succeeded")
	}
	if err := fs.Remove("/d/sub"); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Errorf("Remove of a directory that is not empty = %v, want ENOTEMPTY", err)
	}
	if err := fs.MkdirAll("/d/a/x", 0o755); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("MkdirAll under a file = %v, want ENOTDIR", err)
	}
	if _, err := fs.ReadDir("/nope"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadDir of a missing directory = %v", err)
	}
	if err := fs.SyncDir("/nope"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("SyncDir of a missing directory = %v", err)
	}
}

func TestRemovedFileStaysOpen(t *testing.T) {
	fs := newFS(t, 1)
	f := open(t, fs, "/d/f", rw)
	check(t, fs.Remove("/d/f"))
	write(t, f, 0, []byte("still here"))
	p := make([]byte, 10)
	if _, err := f.ReadAt(p, 0); err != nil || string(p) != "still here" {
		t.Fatalf("ReadAt after Remove = %q, %v", p, err)
	}
	check(t, f.Close())
}

func TestLock(t *testing.T) {
	fs := newFS(t, 1)
	l, err := fs.Lock("/d/LOCK")
	check(t, err)
	if _, err := fs.Lock("/d/LOCK"); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("second Lock = %v, want EWOULDBLOCK", err)
	}
	if names, _ := fs.ReadDir("/d"); !slices.Equal(names, []string{"LOCK"}) {
		t.Fatalf("Lock did not create the file: %q", names)
	}
	check(t, l.Close())
	if err := l.Close(); err == nil {
		t.Fatal("second Close of a lock succeeded")
	}
	l2, err := fs.Lock("/d/LOCK")
	check(t, err)

	// Crash releases every lock.
	check(t, fs.SyncDir("/d"))
	after := fs.Crash()
	if err := l2.Close(); !errors.Is(err, faultfs.ErrCrashed) {
		t.Fatalf("Close of a lock of a crashed FS = %v", err)
	}
	l3, err := after.Lock("/d/LOCK")
	check(t, err)
	check(t, l3.Close())
}
