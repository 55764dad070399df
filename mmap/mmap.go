//go:build linux || darwin

// Package mmap is a thin wrapper over the memory-mapping system calls of
// golang.org/x/sys/unix: Map, Unmap, Sync (msync of a range), Advise
// (madvise) and Lock/Unlock (mlock). It knows nothing of records or files
// beyond a file descriptor.
//
// Durability: stores through a shared mapping reach the page cache at once
// and become visible to every other mapping and to read(2) of the same file,
// but they are durable only after Sync of the range that holds them returns
// nil. A failed Sync leaves the durability of the range unknown; callers must
// not retry and carry on.
//
// Concurrency: the functions keep no state and are safe to call from many
// goroutines. Touching a mapping after Unmap faults the process (SIGSEGV),
// and touching bytes of a mapping past the end of its file raises SIGBUS:
// callers own the lifetime of each mapping and must make sure no goroutine
// still reads it when they unmap it, and must never shrink a mapped file.
package mmap

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Prot says whether a mapping may be written.
type Prot int

const (
	// ReadOnly maps the pages for reading only; a store faults.
	ReadOnly Prot = iota
	// ReadWrite maps the pages for reading and writing. The file must have
	// been opened for writing.
	ReadWrite
)

// Advice is a hint to the kernel about how a mapping will be used.
type Advice int

const (
	// Normal is the default read-ahead behaviour.
	Normal Advice = iota
	// Random disables read-ahead: pages will be touched in random order.
	Random
	// Sequential asks for aggressive read-ahead and early reclaim.
	Sequential
	// WillNeed asks the kernel to read the pages in ahead of use.
	WillNeed
	// DontNeed tells the kernel the pages will not be touched soon; for a
	// shared file mapping their contents stay intact.
	DontNeed
)

// PageSize is the system's memory page size in bytes.
var PageSize = os.Getpagesize()

// Map maps length bytes of the file open on fd, starting at offset, shared
// with every other mapping of the file. offset must be a multiple of
// PageSize and length must be positive. The file must be at least
// offset+length bytes long for the whole mapping to be usable.
func Map(fd uintptr, offset int64, length int, prot Prot) ([]byte, error) {
	if length <= 0 {
		return nil, fmt.Errorf("mmap: invalid length %d", length)
	}
	if offset < 0 || offset%int64(PageSize) != 0 {
		return nil, fmt.Errorf("mmap: offset %d is not a multiple of the page size %d", offset, PageSize)
	}
	p := unix.PROT_READ
	if prot == ReadWrite {
		p |= unix.PROT_WRITE
	}
	b, err := unix.Mmap(int(fd), offset, length, p, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: map %d bytes at %d: %w", length, offset, err)
	}
	return b, nil
}

// Unmap removes a mapping returned by Map. b must be the whole slice that
// Map returned. After Unmap no byte of b may be touched.
func Unmap(b []byte) error {
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("mmap: unmap: %w", err)
	}
	return nil
}

// pageRange widens [off, off+n) of b to whole pages, as msync, madvise and
// mlock require page-aligned addresses. The returned slice stays inside b.
func pageRange(b []byte, off, n int) ([]byte, error) {
	if off < 0 || n < 0 || off+n > len(b) {
		return nil, fmt.Errorf("mmap: range [%d, %d) outside mapping of %d bytes", off, off+n, len(b))
	}
	start := off - off%PageSize
	return b[start : off+n], nil
}

// Sync writes the pages holding b[off:off+n] to stable storage and waits
// until the device reports them written (msync with MS_SYNC). b must be a
// slice returned by Map, so that b[0] is page-aligned. A zero-length range
// does nothing.
func Sync(b []byte, off, n int) error {
	if n == 0 {
		return nil
	}
	r, err := pageRange(b, off, n)
	if err != nil {
		return err
	}
	if err := unix.Msync(r, unix.MS_SYNC); err != nil {
		return fmt.Errorf("mmap: msync %d bytes at %d: %w", n, off, err)
	}
	return nil
}

// Advise passes advice about b[off:off+n] to the kernel (madvise).
func Advise(b []byte, off, n int, advice Advice) error {
	if n == 0 {
		return nil
	}
	r, err := pageRange(b, off, n)
	if err != nil {
		return err
	}
	var a int
	switch advice {
	case Normal:
		a = unix.MADV_NORMAL
	case Random:
		a = unix.MADV_RANDOM
	case Sequential:
		a = unix.MADV_SEQUENTIAL
	case WillNeed:
		a = unix.MADV_WILLNEED
	case DontNeed:
		a = unix.MADV_DONTNEED
	default:
		return fmt.Errorf("mmap: unknown advice %d", advice)
	}
	if err := unix.Madvise(r, a); err != nil {
		return fmt.Errorf("mmap: madvise %d bytes at %d: %w", n, off, err)
	}
	return nil
}

// Lock locks the pages holding b[off:off+n] in memory (mlock), faulting them
// in first. It fails with EPERM or ENOMEM when RLIMIT_MEMLOCK is too small.
func Lock(b []byte, off, n int) error {
	if n == 0 {
		return nil
	}
	r, err := pageRange(b, off, n)
	if err != nil {
		return err
	}
	if err := unix.Mlock(r); err != nil {
		return fmt.Errorf("mmap: mlock %d bytes at %d: %w", n, off, err)
	}
	return nil
}

// Unlock undoes Lock for the pages holding b[off:off+n] (munlock).
func Unlock(b []byte, off, n int) error {
	if n == 0 {
		return nil
	}
	r, err := pageRange(b, off, n)
	if err != nil {
		return err
	}
	if err := unix.Munlock(r); err != nil {
		return fmt.Errorf("mmap: munlock %d bytes at %d: %w", n, off, err)
	}
	return nil
}
