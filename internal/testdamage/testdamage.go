// Package testdamage damages commit-log files the way a failing disk
// might, and tells whether a directory changed, for the tests of repair.
// It is for tests only.
//
// Concurrency: its functions touch only the files named; tests that call
// them on different files may run at once.
package testdamage

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/raftlog/raftlog/commitlog"
)

// FlipLastPayloadByte flips bits of the last payload byte of the
// commit-log record at offset off of the segment file path.
func FlipLastPayloadByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var h [commitlog.HeaderSize]byte
	if _, err := f.ReadAt(h[:], off); err != nil {
		t.Fatal(err)
	}
	at := off + commitlog.HeaderSize + int64(binary.LittleEndian.Uint32(h[4:8])) - 1
	b := []byte{0}
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x55
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

// TreeDigest hashes the names and contents of every file under dir.
func TreeDigest(t testing.TB, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		fmt.Fprintf(h, "%s %d\n", path, len(b))
		h.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}
