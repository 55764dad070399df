//go:build !linux

package commitlog

import "os"

// datasync falls back to fsync where fdatasync is missing.
func datasync(f *os.File) error { return f.Sync() }
