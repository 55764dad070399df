//go:build linux || darwin

package mmap

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func mapTemp(t *testing.T, size int) (*os.File, []byte) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	b, err := Map(f.Fd(), 0, size, ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	return f, b
}

func TestStoresReachTheFile(t *testing.T) {
	size := 4 * PageSize
	f, b := mapTemp(t, size)
	msg := []byte("hello through the mapping")
	off := PageSize + 100
	copy(b[off:], msg)
	if err := Sync(b, off, len(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := f.ReadAt(got, int64(off)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("read %q through the file, want %q", got, msg)
	}
	// pwrite is visible through the mapping: one page cache.
	if _, err := f.WriteAt([]byte("pwrite"), 10); err != nil {
		t.Fatal(err)
	}
	if string(b[10:16]) != "pwrite" {
		t.Fatalf("mapping holds %q after pwrite", b[10:16])
	}
	if err := Unmap(b); err != nil {
		t.Fatal(err)
	}
}

func TestAdviseAndLock(t *testing.T) {
	_, b := mapTemp(t, 2*PageSize)
	defer Unmap(b)
	for _, a := range []Advice{Normal, Random, Sequential, WillNeed} {
		if err := Advise(b, 1, PageSize, a); err != nil {
			t.Fatalf("advice %d: %v", a, err)
		}
	}
	if err := Advise(b, 0, 1, Advice(99)); err == nil {
		t.Fatal("unknown advice accepted")
	}
	if err := Lock(b, 0, len(b)); err != nil {
		t.Skipf("mlock not permitted here: %v", err)
	}
	if err := Unlock(b, 0, len(b)); err != nil {
		t.Fatal(err)
	}
}

func TestBadArguments(t *testing.T) {
	f, b := mapTemp(t, PageSize)
	defer Unmap(b)
	if _, err := Map(f.Fd(), 1, PageSize, ReadOnly); err == nil {
		t.Fatal("unaligned offset accepted")
	}
	if _, err := Map(f.Fd(), 0, 0, ReadOnly); err == nil {
		t.Fatal("zero length accepted")
	}
	if err := Sync(b, PageSize-1, 2); err == nil {
		t.Fatal("range past the mapping accepted")
	}
	if err := Sync(b, 0, 0); err != nil {
		t.Fatalf("empty sync: %v", err)
	}
}
