// Package pagecache empties the page cache of a directory's files and
// counts how much of a file is cached, so that tests and benchmarks can
// check what a cold start reads. It is for tests and the bench program
// only, and works on Linux only: elsewhere every function returns
// ErrUnsupported.
//
// Evict drops only clean pages that no process maps, so the files must be
// closed (or at least unmapped) first; it syncs them to make their pages
// clean. On a file system that keeps its files in memory (tmpfs) nothing
// can be evicted: callers check with Resident and skip.
//
// Concurrency: the functions keep no state and may be called from many
// goroutines.
package pagecache

import "errors"

// ErrUnsupported is returned on systems other than Linux.
var ErrUnsupported = errors.New("pagecache: only supported on Linux")
