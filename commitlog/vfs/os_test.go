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
