package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

func fdatasync(f *os.File) error {
	// F_FULLFSYNC asks the drive to empty its cache too, which plain fsync
	// does not do on macOS.
	if _, err := unix.FcntlInt(f.Fd(), unix.F_FULLFSYNC, 0); err != nil {
		return f.Sync()
	}
	return nil
}

func allocate(f *os.File, size int64) error { return allocateByWriting(f, size) }

// writeBack does nothing: macOS has no sync_file_range, and the Sync that
// follows writes the range anyway.
func writeBack(*os.File, int64, int64) error { return nil }

// writeVAt writes the buffers one after the other.
func writeVAt(f *os.File, bufs [][]byte, off int64) error {
	for _, b := range bufs {
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}
