package pagecache

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestEvictAndResident writes a file, which leaves it in the page cache,
// evicts it and reads part of it back.
func TestEvictAndResident(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	const size = 1 << 20
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := Resident(path); err != nil || n != size {
		t.Fatalf("a file just written: %d bytes resident, %v; want %d", n, err, size)
	}
	if err := Evict(dir); err != nil {
		t.Fatal(err)
	}
	n, err := ResidentDir(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n == size {
		t.Skipf("%s keeps its files in memory (tmpfs?): nothing can be evicted", dir)
	}
	if n != 0 {
		t.Fatalf("%d bytes resident after Evict", n)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if n, err := ResidentDir(dir, func(string) bool { return false }); err != nil || n != 0 {
		t.Fatalf("nothing matched: %d, %v", n, err)
	}
	if n, err := Resident(path); err != nil || n == 0 || n == size {
		t.Fatalf("after reading 4 KiB: %d bytes resident, %v", n, err)
	}
}
