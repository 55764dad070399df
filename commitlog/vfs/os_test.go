//go:build linux || darwin

package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestMkdirAll checks the operating system's MkdirAll: it creates every
// missing directory, accepts one that exists, and refuses a path through a
// file. That it syncs each parent is not visible without a power loss; the
// faultfs tests check the same contract on the simulated disk.
func TestMkdirAll(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b", "c")
	for i := range 2 {
		if err := Default.MkdirAll(deep, 0o755); err != nil {
			t.Fatalf("MkdirAll, call %d: %v", i+1, err)
		}
		for _, d := range []string{filepath.Join(root, "a"), filepath.Join(root, "a", "b"), deep} {
			if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
				t.Fatalf("after MkdirAll, call %d: %s: %v", i+1, d, err)
			}
		}
	}
	file := filepath.Join(root, "a", "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, filepath.Join(file, "x")} {
		if err := Default.MkdirAll(p, 0o755); !errors.Is(err, syscall.ENOTDIR) {
			t.Errorf("MkdirAll(%s) = %v, want ENOTDIR", p, err)
		}
	}
}

// TestWriteVAt writes more buffers than one pwritev takes (IOV_MAX), some
// of them empty, at an offset, and checks that the file holds their
// concatenation there and nothing else changed.
func TestWriteVAt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := Default.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const off = 100
	prefix := []byte("0123456789")
	if _, err := f.WriteAt(prefix, off-int64(len(prefix))); err != nil {
		t.Fatal(err)
	}
	var bufs [][]byte
	var want []byte
	for i := range 2500 {
		b := make([]byte, i%7) // every seventh is empty
		for j := range b {
			b[j] = byte(i + j)
		}
		bufs = append(bufs, b)
		want = append(want, b...)
	}
	if err := f.WriteVAt(bufs, off); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != off+len(want) {
		t.Fatalf("file is %d bytes, want %d", len(got), off+len(want))
	}
	if string(got[off-len(prefix):off]) != string(prefix) {
		t.Errorf("the bytes before the write changed: %q", got[off-len(prefix):off])
	}
	for i := range want {
		if got[off+i] != want[i] {
			t.Fatalf("byte %d of the write is %d, want %d", i, got[off+i], want[i])
		}
	}
}
