package faultfs

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/raftlog/raftlog/commitlog/vfs"
)

// ErrCrashed is the error, wrapped with the operation and path, that every
// call on a crashed FS, its files, mappings and locks returns.
var ErrCrashed = errors.New("faultfs: file system crashed")

var (
	errMapped     = errors.New("faultfs: file is memory-mapped, its length may not change")
	errCrossDir   = errors.New("faultfs: rename between directories is not supported")
	errRemoveRoot = errors.New("faultfs: removing a root directory is not supported")
	errNegOffset  = errors.New("faultfs: negative offset")
	errUnlocked   = errors.New("faultfs: lock already released")
	errBadRange   = errors.New("faultfs: range outside the mapping")
	errUnmapped   = errors.New("faultfs: mapping already unmapped")
	errBadAdvice  = errors.New("faultfs: unknown advice")
	errBadMapSize = errors.New("faultfs: mapping size must be positive and within the file")
)

// maxFileSize bounds the length of a file, so that a wild offset fails with
// EFBIG instead of exhausting memory.
const maxFileSize = 1 << 40

// FS is an in-memory file system with a page cache and a durable image per
// file and a volatile and a durable namespace per directory. It implements
// vfs.FS. Create one with New; the zero value is not usable.
type FS struct {
	mu sync.Mutex

	// crashed is set by Crash; every later operation fails. Guarded by mu.
	crashed bool
	// rng decides crash outcomes. Guarded by mu.
	rng *rand.Rand
	// dirs maps a cleaned directory path to the directory. The roots "/"
	// and "." always exist. Guarded by mu.
	dirs map[string]*dir
	// gone maps the path of a directory Remove removed to the directory,
	// until MkdirAll creates that path again: a crash brings it back,
	// with its durable namespace, while its parent's durable namespace
	// still names it. Guarded by mu.
	gone map[string]*dir
	// locked holds the inodes locked through Lock. Guarded by mu.
	locked map[*inode]bool
	// faults are the injected faults, in injection order. Guarded by mu.
	faults []*fault
	// capacity bounds used; zero means unlimited. Guarded by mu.
	capacity int64
	// used is the sum of len(data) over the inodes that are named in a
	// volatile namespace or referenced by a file, mapping or lock. Guarded
	// by mu.
	used int64
	// syncs counts successful File.Sync, Mapping.Sync and SyncDir calls.
	// Guarded by mu.
	syncs int64
	// onSync is called after each successful data sync. Guarded by mu.
	onSync func()
}

// dir is a directory: a volatile and a durable namespace, each of files
// and of subdirectories. Every map is guarded by FS.mu.
type dir struct {
	files   map[string]*inode
	durable map[string]*inode
	// subdirs and durableSubdirs hold the names of the directories in
	// this one: a directory survives a crash only if it is in its
	// parent's durableSubdirs (and its parent survives).
	subdirs        map[string]bool
	durableSubdirs map[string]bool
}

// inode is a file's contents. Every field is guarded by FS.mu, except that
// the bytes of data inside a live mapping are stored into by the mapping's
// users without a lock.
type inode struct {
	// data is the page cache: what reads and mappings see.
	data []byte
	// durable is what survives a crash.
	durable []byte
	// nlink counts the names of the inode in volatile namespaces.
	nlink int
	// refs counts open files, live mappings and held locks.
	refs int
	// maps counts live mappings; while positive, data must not be
	// reallocated or change length.
	maps int
	// freed is set once nlink and refs are both zero and len(data) has
	// been taken out of FS.used.
	freed bool
}

var _ vfs.FS = (*FS)(nil)

// New returns an empty file system holding only the directories "/" and
// ".". seed drives the outcome of Crash.
func New(seed int64) *FS {
	return newFS(rand.New(rand.NewSource(seed)))
}

func newFS(rng *rand.Rand) *FS {
	fs := &FS{
		rng:    rng,
		dirs:   make(map[string]*dir),
		gone:   make(map[string]*dir),
		locked: make(map[*inode]bool),
	}
	fs.dirs["/"] = newDir()
	fs.dirs["."] = newDir()
	return fs
}

func newDir() *dir {
	return &dir{
		files:          make(map[string]*inode),
		durable:        make(map[string]*inode),
		subdirs:        make(map[string]bool),
		durableSubdirs: make(map[string]bool),
	}
}

// syncDir makes d's volatile namespace durable. mu must be held.
func (fs *FS) syncDir(d *dir) {
	d.durable = maps.Clone(d.files)
	d.durableSubdirs = maps.Clone(d.subdirs)
	fs.syncs++
}

func pathErr(op, path string, err error) error {
	return &os.PathError{Op: op, Path: path, Err: err}
}

// live returns an error if fs has crashed. mu must be held.
func (fs *FS) live(op, path string) error {
	if fs.crashed {
		return pathErr(op, path, ErrCrashed)
	}
	return nil
}

// release gives ino's space back once no name, file, mapping or lock
// refers to it. mu must be held.
func (fs *FS) release(ino *inode) {
	if ino.nlink == 0 && ino.refs == 0 && !ino.freed {
		ino.freed = true
		fs.used -= int64(len(ino.data))
	}
}

// resize changes the length of ino's page cache to size, zero-filling any
// growth, subject to the mapping rule and the capacity. On error nothing
// changes. mu must be held.
func (fs *FS) resize(ino *inode, size int64, op, name string) error {
	n := int64(len(ino.data))
	if size == n {
		return nil
	}
	if ino.maps > 0 {
		return pathErr(op, name, errMapped)
	}
	if size > maxFileSize {
		return pathErr(op, name, syscall.EFBIG)
	}
	if size > n && fs.capacity > 0 && fs.used+(size-n) > fs.capacity {
		return pathErr(op, name, syscall.ENOSPC)
	}
	ino.data = resized(ino.data, int(size))
	if !ino.freed {
		fs.used += size - n
	}
	return nil
}

// resized returns b with length n, reusing its array when it can; bytes
// past len(b) are zero.
func resized(b []byte, n int) []byte {
	if n <= len(b) {
		return b[:n]
	}
	old := len(b)
	b = slices.Grow(b, n-old)[:n]
	clear(b[old:])
	return b
}

// lookup splits name into its directory and base name. It fails if the
// directory does not exist or if name is itself a directory. mu must be
// held.
func (fs *FS) lookup(op, name string) (*dir, string, error) {
	key := filepath.Clean(name)
	if _, ok := fs.dirs[key]; ok {
		return nil, "", pathErr(op, name, syscall.EISDIR)
	}
	d := fs.dirs[filepath.Dir(key)]
	if d == nil {
		return nil, "", pathErr(op, name, os.ErrNotExist)
	}
	return d, filepath.Base(key), nil
}

// open finds or creates the inode for name according to flag. mu must be
// held.
func (fs *FS) open(name string, flag int) (*inode, error) {
	d, base, err := fs.lookup("open", name)
	if err != nil {
		return nil, err
	}
	ino := d.files[base]
	switch {
	case ino == nil && flag&os.O_CREATE == 0:
		return nil, pathErr("open", name, os.ErrNotExist)
	case ino == nil:
		if err := fs.fault(OpCreate, name); err != nil {
			return nil, pathErr("open", name, err)
		}
		ino = &inode{nlink: 1}
		d.files[base] = ino
	case flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, pathErr("open", name, os.ErrExist)
	}
	return ino, nil
}

// OpenFile opens the named file. It honours O_CREATE, O_EXCL, O_TRUNC (even
// with O_RDONLY, as Linux does) and the access mode (O_RDONLY, O_WRONLY,
// O_RDWR); perm is ignored, and WriteAt fails on a file opened with
// O_APPEND, as it does for os.File. A new name
// is durable only after SyncDir of its directory. O_TRUNC of a mapped file
// fails.
func (fs *FS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.live("open", name); err != nil {
		return nil, err
	}
	if err := fs.fault(OpOpen, name); err != nil {
		return nil, pathErr("open", name, err)
	}
	ino, err := fs.open(name, flag)
	if err != nil {
		return nil, err
	}
	if flag&os.O_TRUNC != 0 {
		// A mapped file is not empty, so this fails before anything
		// changes; a file open just created is empty, so it cannot fail.
		if err := fs.resize(ino, 0, "open", name); err != nil {
			return nil, err
		}
	}
	ino.refs++
	acc := flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	return &file{
		fs:     fs,
		ino:    ino,
		name:   name,
		read:   acc != os.O_WRONLY,
		write:  acc != os.O_RDONLY,
		append: flag&os.O_APPEND != 0,
	}, nil
}

// Remove removes the named file from its directory's volatile namespace,
// or the named directory, which must be empty (no file or subdirectory in
// its volatile namespace), from its parent's. Open files and mappings of
// a file stay usable. The removal is durable only after SyncDir of the
// parent directory: until then a crash brings a removed directory back
// with what its durable namespace names.
func (fs *FS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.live("remove", name); err != nil {
		return err
	}
	if err := fs.fault(OpRemove, name); err != nil {
		return pathErr("remove", name, err)
	}
	d, base, err := fs.lookup("remove", name)
	if err != nil {
		if errors.Is(err, syscall.EISDIR) {
			return fs.removeDir(name)
		}
		return err
	}
	ino := d.files[base]
	if ino == nil {
		return pathErr("remove", name, os.ErrNotExist)
	}
	delete(d.files, base)
	ino.nlink--
	fs.release(ino)
	return nil
}

// removeDir removes the empty directory name. mu must be held.
func (fs *FS) removeDir(name string) error {
	key := filepath.Clean(name)
	d := fs.dirs[key]
	if isRoot(key) {
		return pathErr("remove", name, errRemoveRoot)
	}
	if len(d.files) > 0 || len(d.subdirs) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	delete(fs.dirs, key)
	delete(fs.dirs[filepath.Dir(key)].subdirs, filepath.Base(key))
	fs.gone[key] = d
	return nil
}

// Rename renames a file within one directory, replacing newname if it
// exists. A rename between two directories fails. The rename is durable
// only after SyncDir of the directory.
func (fs *FS) Rename(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	linkErr := func(err error) error {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	if fs.crashed {
		return linkErr(ErrCrashed)
	}
	if err := fs.fault(OpRename, oldname, newname); err != nil {
		return linkErr(err)
	}
	oldKey, newKey := filepath.Clean(oldname), filepath.Clean(newname)
	if filepath.Dir(oldKey) != filepath.Dir(newKey) {
		return linkErr(errCrossDir)
	}
	if _, ok := fs.dirs[oldKey]; ok {
		return linkErr(syscall.EISDIR)
	}
	if _, ok := fs.dirs[newKey]; ok {
		return linkErr(syscall.EISDIR)
	}
	d := fs.dirs[filepath.Dir(oldKey)]
	if d == nil {
		return linkErr(os.ErrNotExist)
	}
	oldBase, newBase := filepath.Base(oldKey), filepath.Base(newKey)
	ino := d.files[oldBase]
	if ino == nil {
		return linkErr(os.ErrNotExist)
	}
	if oldBase == newBase {
		return nil
	}
	if target := d.files[newBase]; target != nil {
		target.nlink--
		fs.release(target)
	}
	d.files[newBase] = ino
	delete(d.files, oldBase)
	return nil
}

// MkdirAll creates a directory and its missing parents and makes each one
// durable, as vfs.FS requires: for every directory it creates, top down, it
// makes the entry in the parent and then syncs the parent, as SyncDir
// would (counted by SyncCount, and failed by an OpSyncDir fault on the
// parent). A failed sync ends the call with its error and leaves the
// directories made so far in place, not durable, as on a real disk. A
// directory that already exists is left as it is. perm is ignored.
func (fs *FS) MkdirAll(dirname string, perm os.FileMode) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.live("mkdir", dirname); err != nil {
		return err
	}
	if err := fs.fault(OpMkdirAll, dirname); err != nil {
		return pathErr("mkdir", dirname, err)
	}
	var missing []string
	for p := filepath.Clean(dirname); fs.dirs[p] == nil; p = filepath.Dir(p) {
		missing = append(missing, p)
	}
	// Check every component before creating any.
	for _, p := range missing {
		if parent := fs.dirs[filepath.Dir(p)]; parent != nil && parent.files[filepath.Base(p)] != nil {
			return pathErr("mkdir", p, syscall.ENOTDIR)
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		parentName := filepath.Dir(p)
		parent := fs.dirs[parentName]
		fs.dirs[p] = newDir()
		delete(fs.gone, p)
		parent.subdirs[filepath.Base(p)] = true
		if err := fs.fault(OpSyncDir, parentName); err != nil {
			return pathErr("syncdir", parentName, err)
		}
		fs.syncDir(parent)
	}
	return nil
}

// ReadDir returns the sorted names of the files in dirname's volatile
// namespace and of its subdirectories.
func (fs *FS) ReadDir(dirname string) ([]string, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.live("readdir", dirname); err != nil {
		return nil, err
	}
	if err := fs.fault(OpReadDir, dirname); err != nil {
		return nil, pathErr("readdir", dirname, err)
	}
	key := filepath.Clean(dirname)
	d := fs.dirs[key]
	if d == nil {
		if pd := fs.dirs[filepath.Dir(key)]; pd != nil && pd.files[filepath.Base(key)] != nil {
			return nil, pathErr("readdir", dirname, syscall.ENOTDIR)
		}
		return nil, pathErr("readdir", dirname, os.ErrNotExist)
	}
	names := slices.Collect(maps.Keys(d.files))
	names = slices.AppendSeq(names, maps.Keys(d.subdirs))
	slices.Sort(names)
	return names, nil
}

// SyncDir makes dirname's volatile namespace durable: its creations,
// renames and removals, of files and of subdirectories, survive a later
// crash.
func (fs *FS) SyncDir(dirname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.live("syncdir", dirname); err != nil {
		return err
	}
	if err := fs.fault(OpSyncDir, dirname); err != nil {
		return pathErr("syncdir", dirname, err)
	}
	d := fs.dirs[filepath.Clean(dirname)]
	if d == nil {
		return pathErr("syncdir", dirname, os.ErrNotExist)
	}
	fs.syncDir(d)
	return nil
}

// Lock takes an exclusive lock on the named file, creating it if missing.
// It fails with an error wrapping syscall.EWOULDBLOCK while the file is
// locked, until the returned Closer is closed. Crash releases every lock.
func (fs *FS) Lock(name string) (io.Closer, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.live("lock", name); err != nil {
		return nil, err
	}
	if err := fs.fault(OpLock, name); err != nil {
		return nil, pathErr("lock", name, err)
	}
	ino, err := fs.open(name, os.O_CREATE|os.O_RDWR)
	if err != nil {
		return nil, err
	}
	if fs.locked[ino] {
		return nil, pathErr("lock", name, fmt.Errorf("faultfs: already locked: %w", syscall.EWOULDBLOCK))
	}
	fs.locked[ino] = true
	ino.refs++
	return &lock{fs: fs, ino: ino, name: name}, nil
}

// lock is a lock taken by FS.Lock.
type lock struct {
	// fs, ino and name are set by Lock and never change.
	fs   *FS
	ino  *inode
	name string
	// released is set by Close. Guarded by fs.mu.
	released bool
}

// Close releases the lock.
func (l *lock) Close() error {
	fs := l.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.live("unlock", l.name); err != nil {
		return err
	}
	if l.released {
		return pathErr("unlock", l.name, errUnlocked)
	}
	l.released = true
	delete(fs.locked, l.ino)
	l.ino.refs--
	fs.release(l.ino)
	return nil
}

// SetCapacity bounds the total length of all files: a WriteAt, Allocate or
// Truncate that would take it past bytes fails with an *os.PathError
// wrapping syscall.ENOSPC and changes nothing. Zero or less means
// unlimited. Lowering the capacity below the current total makes every
// later growth fail but shrinks nothing.
func (fs *FS) SetCapacity(bytes int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.capacity = max(bytes, 0)
}

// SyncCount returns the number of File.Sync, Mapping.Sync and SyncDir calls
// that have succeeded on fs.
func (fs *FS) SyncCount() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.syncs
}

// OnSync sets a hook that is called after each successful File.Sync and
// Mapping.Sync of a non-empty range, from the goroutine that synced, once
// the FS is unlocked, so the hook may call into fs (even Crash). nil
// removes the hook.
func (fs *FS) OnSync(hook func()) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.onSync = hook
}
