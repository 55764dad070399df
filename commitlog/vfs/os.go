//go:build linux || darwin

package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/raftlog/raftlog/mmap"
	"golang.org/x/sys/unix"
)

// Default is the operating system's file system.
var Default FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// MkdirAll creates dir and its missing parents, top down, and syncs the
// parent of each directory it creates, so that a power loss cannot undo
// it. A directory that exists already is left as it is.
func (o osFS) MkdirAll(dir string, perm os.FileMode) error {
	var missing []string // deepest first
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return &os.PathError{Op: "mkdir", Path: p, Err: syscall.ENOTDIR}
			}
			break
		}
		if !errors.Is(err, os.ErrNotExist) || filepath.Dir(p) == p {
			return err
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		if err := os.Mkdir(p, perm); err != nil {
			// Created meanwhile by someone else, who may not have synced
			// its parent yet: sync it here too.
			if fi, serr := os.Stat(p); serr != nil || !fi.IsDir() {
				return err
			}
		}
		if err := o.SyncDir(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}

func (osFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	sort.Strings(names)
	return names, nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s (is another process using this directory?): %w", name, err)
	}
	return f, nil
}

type osFile struct {
	f *os.File
}

func (o *osFile) ReadAt(p []byte, off int64) (int, error)  { return o.f.ReadAt(p, off) }
func (o *osFile) WriteAt(p []byte, off int64) (int, error) { return o.f.WriteAt(p, off) }
func (o *osFile) Name() string                             { return o.f.Name() }
func (o *osFile) Truncate(size int64) error                { return o.f.Truncate(size) }
func (o *osFile) Close() error                             { return o.f.Close() }
func (o *osFile) Sync() error                              { return fdatasync(o.f) }

func (o *osFile) Size() (int64, error) {
	fi, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (o *osFile) Allocate(size int64) error { return allocate(o.f, size) }

func (o *osFile) WriteBack(off, n int64) error { return writeBack(o.f, off, n) }

func (o *osFile) WriteVAt(bufs [][]byte, off int64) error { return writeVAt(o.f, bufs, off) }

func (o *osFile) Map(size int) (Mapping, error) {
	b, err := mmap.Map(o.f.Fd(), 0, size, mmap.ReadWrite)
	if err != nil {
		return nil, err
	}
	return osMapping(b), nil
}

type osMapping []byte

func (m osMapping) Bytes() []byte                          { return m }
func (m osMapping) Sync(off, n int) error                  { return mmap.Sync(m, off, n) }
func (m osMapping) Lock(off, n int) error                  { return mmap.Lock(m, off, n) }
func (m osMapping) Unlock(off, n int) error                { return mmap.Unlock(m, off, n) }
func (m osMapping) Unmap() error                           { return mmap.Unmap(m) }
func (m osMapping) Advise(off, n int, a mmap.Advice) error { return mmap.Advise(m, off, n, a) }
