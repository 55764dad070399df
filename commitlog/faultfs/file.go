package faultfs

import (
	"errors"
	"io"
	"os"
	"syscall"

	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/mmap"
)

// file is an open file of an FS. It implements vfs.File.
type file struct {
	// fs, ino, name, read, write and append are set by OpenFile and never
	// change; read, write and append come from the open flags.
	fs                  *FS
	ino                 *inode
	name                string
	read, write, append bool
	// closed is set by Close. Guarded by fs.mu.
	closed bool
}

var _ vfs.File = (*file)(nil)

// check returns an error if the FS crashed or the file is closed. fs.mu
// must be held.
func (f *file) check(op string) error {
	if err := f.fs.live(op, f.name); err != nil {
		return err
	}
	if f.closed {
		return pathErr(op, f.name, os.ErrClosed)
	}
	return nil
}

// ReadAt reads from the page cache, with os.File's io.EOF semantics.
func (f *file) ReadAt(p []byte, off int64) (int, error) {
	fs := f.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := f.check("read"); err != nil {
		return 0, err
	}
	if !f.read {
		return 0, pathErr("read", f.name, syscall.EBADF)
	}
	if off < 0 {
		return 0, pathErr("read", f.name, errNegOffset)
	}
	if err := fs.fault(OpRead, f.name); err != nil {
		return 0, pathErr("read", f.name, err)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= int64(len(f.ino.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.ino.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt writes into the page cache, growing the file if needed. Growing a
// mapped file fails, as does growing past the capacity; a failed write
// changes nothing.
func (f *file) WriteAt(p []byte, off int64) (int, error) {
	fs := f.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := f.check("write"); err != nil {
		return 0, err
	}
	if !f.write {
		return 0, pathErr("write", f.name, syscall.EBADF)
	}
	if f.append {
		return 0, pathErr("write", f.name, errors.New("faultfs: WriteAt on a file opened with O_APPEND"))
	}
	if off < 0 {
		return 0, pathErr("write", f.name, errNegOffset)
	}
	if err := fs.fault(OpWrite, f.name); err != nil {
		return 0, pathErr("write", f.name, err)
	}
	if off > maxFileSize {
		return 0, pathErr("write", f.name, syscall.EFBIG)
	}
	if end := off + int64(len(p)); end > int64(len(f.ino.data)) {
		if err := fs.resize(f.ino, end, "write", f.name); err != nil {
			return 0, err
		}
	}
	return copy(f.ino.data[off:], p), nil
}

// WriteVAt writes the concatenation of bufs as one WriteAt: one fault
// check, and all of it or nothing.
func (f *file) WriteVAt(bufs [][]byte, off int64) error {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	p := make([]byte, 0, n)
	for _, b := range bufs {
		p = append(p, b...)
	}
	_, err := f.WriteAt(p, off)
	return err
}

// Name returns the name the file was opened with.
func (f *file) Name() string { return f.name }

// Size returns the length of the page cache.
func (f *file) Size() (int64, error) {
	fs := f.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := f.check("stat"); err != nil {
		return 0, err
	}
	return int64(len(f.ino.data)), nil
}

// Allocate extends the page cache with zeroes to at least size bytes.
// Growing a mapped file fails.
func (f *file) Allocate(size int64) error {
	fs := f.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := f.check("allocate"); err != nil {
		return err
	}
	if !f.write {
		return pathErr("allocate", f.name, syscall.EBADF)
	}
	if size < 0 {
		return pathErr("allocate", f.name, syscall.EINVAL)
	}
	if err := fs.fault(OpAllocate, f.name); err != nil {
		return pathErr("allocate", f.name, err)
	}
	if size <= int64(len(f.ino.data)) {
		return nil
	}
	return fs.resize(f.ino, size, "allocate", f.name)
}

// Truncate sets the length of the page cache. It fails while the file is
// mapped, whatever the size.
func (f *file) Truncate(size int64) error {
	fs := f.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := f.check("truncate"); err != nil {
		return err
	}
	if !f.write {
		return pathErr("truncate", f.name, syscall.EBADF)
	}
	if size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	if err := fs.fault(OpTruncate, f.name); err != nil {
		return pathErr("truncate", f.name, err)
	}
	if f.ino.maps > 0 {
		return pathErr("truncate", f.name, errMapped)
	}
	return fs.resize(f.ino, size, "truncate", f.name)
}

// Sync copies the whole page cache, content and length, to the durable
// image. It reads every byte of the file, mapped ones included.
func (f *file) Sync() error {
	fs := f.fs
	fs.mu.Lock()
	if err := f.check("sync"); err != nil {
		fs.mu.Unlock()
		return err
	}
	if err := fs.fault(OpSync, f.name); err != nil {
		fs.mu.Unlock()
		return pathErr("sync", f.name, err)
	}
	f.ino.durable = append(f.ino.durable[:0], f.ino.data...)
	fs.syncs++
	hook := fs.onSync
	fs.mu.Unlock()
	if hook != nil {
		hook()
	}
	return nil
}

// WriteBack checks that the file is open and the range valid, and does
// nothing else: it makes nothing durable, in the model as on Linux.
func (f *file) WriteBack(off, n int64) error {
	fs := f.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := f.check("sync_file_range"); err != nil {
		return err
	}
	if off < 0 || n < 0 {
		return pathErr("sync_file_range", f.name, syscall.EINVAL)
	}
	return nil
}

// Map returns a mapping of the first size bytes of the page cache: its
// Bytes are the page cache itself. The file must be open for reading and
// writing, and size must be positive and at most the file's length.
func (f *file) Map(size int) (vfs.Mapping, error) {
	fs := f.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := f.check("mmap"); err != nil {
		return nil, err
	}
	if !f.read || !f.write {
		return nil, pathErr("mmap", f.name, syscall.EACCES)
	}
	if size <= 0 || size > len(f.ino.data) {
		return nil, pathErr("mmap", f.name, errBadMapSize)
	}
	if err := fs.fault(OpMap, f.name); err != nil {
		return nil, pathErr("mmap", f.name, err)
	}
	f.ino.maps++
	f.ino.refs++
	return &mapping{fs: fs, ino: f.ino, name: f.name, b: f.ino.data[:size:size], live: true}, nil
}

// Close closes the file. Its mappings stay valid until unmapped.
func (f *file) Close() error {
	fs := f.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := f.check("close"); err != nil {
		return err
	}
	f.closed = true
	f.ino.refs--
	fs.release(f.ino)
	return nil
}

// mapping is a mapping of the start of a file's page cache. It implements
// vfs.Mapping.
type mapping struct {
	// fs, ino and name are set by Map and never change.
	fs   *FS
	ino  *inode
	name string
	// b aliases the start of ino.data. Its bytes are owned by the
	// mapping's users, who touch disjoint ranges without a lock.
	b []byte
	// live is cleared by Unmap. Guarded by fs.mu.
	live bool
}

var _ vfs.Mapping = (*mapping)(nil)

// check returns an error if the FS crashed, the mapping is gone or [off,
// off+n) is not inside it. fs.mu must be held.
func (m *mapping) check(op string, off, n int) error {
	if err := m.fs.live(op, m.name); err != nil {
		return err
	}
	if !m.live {
		return pathErr(op, m.name, errUnmapped)
	}
	if off < 0 || n < 0 || off > len(m.b)-n {
		return pathErr(op, m.name, errBadRange)
	}
	return nil
}

// Bytes returns the mapped page cache, not a copy.
func (m *mapping) Bytes() []byte { return m.b }

// Sync copies exactly the bytes [off, off+n) of the mapping to the durable
// image, lengthening it to off+n if it was shorter. It reads no byte
// outside that range. An empty range does nothing and is not counted.
func (m *mapping) Sync(off, n int) error {
	fs := m.fs
	fs.mu.Lock()
	if err := m.check("msync", off, n); err != nil {
		fs.mu.Unlock()
		return err
	}
	if n == 0 {
		fs.mu.Unlock()
		return nil
	}
	if err := fs.fault(OpMsync, m.name); err != nil {
		fs.mu.Unlock()
		return pathErr("msync", m.name, err)
	}
	end := off + n
	if len(m.ino.durable) < end {
		m.ino.durable = resized(m.ino.durable, end)
	}
	copy(m.ino.durable[off:end], m.b[off:end])
	fs.syncs++
	hook := fs.onSync
	fs.mu.Unlock()
	if hook != nil {
		hook()
	}
	return nil
}

// Advise checks the range and advice and does nothing else.
func (m *mapping) Advise(off, n int, advice mmap.Advice) error {
	fs := m.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := m.check("madvise", off, n); err != nil {
		return err
	}
	switch advice {
	case mmap.Normal, mmap.Random, mmap.Sequential, mmap.WillNeed, mmap.DontNeed:
		return nil
	}
	return pathErr("madvise", m.name, errBadAdvice)
}

// Lock checks the range and does nothing else.
func (m *mapping) Lock(off, n int) error {
	fs := m.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return m.check("mlock", off, n)
}

// Unlock checks the range and does nothing else.
func (m *mapping) Unlock(off, n int) error {
	fs := m.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return m.check("munlock", off, n)
}

// Unmap ends the mapping; the file may change length again once it has no
// live mapping. A second Unmap fails.
func (m *mapping) Unmap() error {
	fs := m.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := m.check("munmap", 0, 0); err != nil {
		return err
	}
	m.live = false
	m.ino.maps--
	m.ino.refs--
	fs.release(m.ino)
	return nil
}
