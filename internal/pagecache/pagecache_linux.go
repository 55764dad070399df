//go:build linux

package pagecache

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Evict syncs every regular file under dir and drops its pages from the
// page cache (posix_fadvise POSIX_FADV_DONTNEED). Nothing else on the
// machine is touched.
func Evict(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return fmt.Errorf("pagecache: sync %s: %w", path, err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			return fmt.Errorf("pagecache: fadvise %s: %w", path, err)
		}
		return nil
	})
}

// Resident returns how many bytes of the file at path are in the page
// cache, in whole pages (mincore over a read-only mapping of it).
func Resident(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || info.Size() == 0 {
		return 0, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(info.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("pagecache: map %s: %w", path, err)
	}
	defer unix.Munmap(m)
	page := int64(os.Getpagesize())
	vec := make([]byte, (info.Size()+page-1)/page)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return 0, fmt.Errorf("pagecache: mincore %s: %w", path, errno)
	}
	var n int64
	for _, v := range vec {
		if v&1 != 0 {
			n += page
		}
	}
	return n, nil
}

// ResidentDir returns how many bytes of the regular files under dir for
// which match returns true (every file when match is nil) are in the page
// cache.
func ResidentDir(dir string, match func(path string) bool) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || (match != nil && !match(path)) {
			return err
		}
		n, err := Resident(path)
		total += n
		return err
	})
	return total, err
}
