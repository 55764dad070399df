package faultfs

import (
	"bytes"
	"maps"
	"math/rand"
	"path/filepath"
	"slices"
)

const (
	// pageSize is the unit in which Crash decides whether unsynced bytes
	// reached the disk.
	pageSize = 4096
	// sectorSize is the unit of a torn page: the disk writes whole
	// sectors.
	sectorSize = 512
)

// crashMode says how Crash treats bytes that were not synced.
type crashMode int

const (
	crashRandom crashMode = iota
	crashDropAll
	crashKeepAll
)

// Crash simulates a power loss: it returns a new FS holding what would be
// on the disk, with the outcome of every unsynced page drawn from fs's
// seeded generator (see the package documentation), and kills fs so that
// every later call on it, its files, mappings and locks fails with
// ErrCrashed. Crash must not run while a goroutine stores into a mapping of
// fs. It panics if fs has already crashed.
func (fs *FS) Crash() *FS { return fs.crash(crashRandom) }

// CrashDropAll is Crash where nothing unsynced reached the disk: every file
// holds exactly its durable image, length included.
func (fs *FS) CrashDropAll() *FS { return fs.crash(crashDropAll) }

// CrashKeepAll is Crash where every file's page cache reached the disk,
// length included, though the namespace is still the durable one: an
// unsynced creation is lost even so.
func (fs *FS) CrashKeepAll() *FS { return fs.crash(crashKeepAll) }

func (fs *FS) crash(mode crashMode) *FS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.crashed {
		panic("faultfs: Crash of a file system that has already crashed")
	}
	fs.crashed = true

	nfs := newFS(rand.New(rand.NewSource(fs.rng.Int63())))
	nfs.capacity = fs.capacity
	// Walk directories and names in sorted order so that the generator is
	// consumed in the same order for the same seed and calls.
	recovered := make(map[*inode]*inode)
	// A parent's path sorts before its children's, so a directory is
	// reached after its parent: it survives if its parent did and the
	// parent's durable namespace names it.
	// A removed directory (fs.gone) comes back like one that is not.
	dirOf := func(key string) *dir {
		if d := fs.dirs[key]; d != nil {
			return d
		}
		return fs.gone[key]
	}
	keys := append(slices.Collect(maps.Keys(fs.dirs)), slices.Collect(maps.Keys(fs.gone))...)
	slices.Sort(keys) // the two never share a path
	for _, key := range keys {
		d := dirOf(key)
		if !isRoot(key) {
			parent := nfs.dirs[filepath.Dir(key)]
			if parent == nil || !dirOf(filepath.Dir(key)).durableSubdirs[filepath.Base(key)] {
				continue
			}
			parent.subdirs[filepath.Base(key)] = true
			parent.durableSubdirs[filepath.Base(key)] = true
		}
		nd := newDir()
		for _, name := range slices.Sorted(maps.Keys(d.durable)) {
			old := d.durable[name]
			ino := recovered[old]
			if ino == nil {
				data := fs.survivor(old, mode)
				ino = &inode{data: data, durable: slices.Clone(data)}
				recovered[old] = ino
				nfs.used += int64(len(data))
			}
			ino.nlink++
			nd.files[name] = ino
			nd.durable[name] = ino
		}
		nfs.dirs[key] = nd
	}
	return nfs
}

// isRoot reports whether key names a directory that every FS has.
func isRoot(key string) bool { return key == "/" || key == "." }

// survivor returns what a crash leaves of ino, as a new slice. fs.mu must
// be held.
func (fs *FS) survivor(ino *inode, mode crashMode) []byte {
	switch mode {
	case crashDropAll:
		return slices.Clone(ino.durable)
	case crashKeepAll:
		return slices.Clone(ino.data)
	}
	size := len(ino.durable)
	if len(ino.data) != size && fs.rng.Intn(2) == 0 {
		size = len(ino.data)
	}
	out := make([]byte, size)
	oldPage := make([]byte, pageSize)
	newPage := make([]byte, pageSize)
	for start := 0; start < size; start += pageSize {
		end := min(start+pageSize, size)
		o, n := oldPage[:end-start], newPage[:end-start]
		window(o, ino.durable, start)
		window(n, ino.data, start)
		dst := out[start:end]
		copy(dst, o)
		if !bytes.Equal(o, n) {
			fs.resolve(dst, o, n)
		}
	}
	return out
}

// window fills dst with b[off:off+len(dst)], reading b as zero past its end.
func window(dst, b []byte, off int) {
	clear(dst)
	if off < len(b) {
		copy(dst, b[off:])
	}
}

// resolve decides the fate of one page on which the durable bytes o and
// the page-cache bytes n differ; dst holds o on entry. Every byte of dst
// on which o and n agree keeps that value. fs.mu must be held.
func (fs *FS) resolve(dst, o, n []byte) {
	switch r := fs.rng.Intn(8); {
	case r < 3:
		// Lost: dst already holds the durable bytes.
	case r < 6:
		// Reached the disk.
		copy(dst, n)
	case r == 6:
		// Torn: a prefix of the sectors was written.
		sectors := (len(dst) + sectorSize - 1) / sectorSize
		k := fs.rng.Intn(2)
		if sectors > 1 {
			k = 1 + fs.rng.Intn(sectors-1)
		}
		copy(dst, n[:min(k*sectorSize, len(n))])
	default:
		// Garbage over a random sub-range of the span of differing bytes.
		if fs.rng.Intn(2) == 0 {
			copy(dst, n)
		}
		first, last := 0, len(o)-1
		for o[first] == n[first] {
			first++
		}
		for o[last] == n[last] {
			last--
		}
		a := first + fs.rng.Intn(last-first+1)
		b := a + 1 + fs.rng.Intn(last-a+1)
		for i := a; i < b; i++ {
			if o[i] != n[i] {
				dst[i] = byte(fs.rng.Intn(256))
			}
		}
	}
}
