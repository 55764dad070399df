package vfs

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
		}
		return nil
	}
}

func allocate(f *os.File, size int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		if err == unix.EINTR {
			continue
		}
		if errors.Is(err, unix.EOPNOTSUPP) {
			return allocateByWriting(f, size)
		}
		if err != nil {
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
		}
		return nil
	}
}

func writeBack(f *os.File, off, n int64) error {
	const flags = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
	for {
		err := unix.SyncFileRange(int(f.Fd()), off, n, flags)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: err}
		}
		return nil
	}
}

// iovMax is the most buffers one pwritev takes (IOV_MAX).
const iovMax = 1024

// writeVAt writes bufs with pwritev, IOV_MAX buffers at a time, going on
// after a short write.
func writeVAt(f *os.File, bufs [][]byte, off int64) error {
	for len(bufs) > 0 {
		batch := bufs[:min(len(bufs), iovMax)]
		n, err := unix.Pwritev(int(f.Fd()), batch, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "pwritev", Path: f.Name(), Err: err}
		}
		if n == 0 {
			return &os.PathError{Op: "pwritev", Path: f.Name(), Err: io.ErrShortWrite}
		}
		off += int64(n)
		// Drop what was written, keeping the rest of a buffer cut short.
		for n > 0 {
			if n < len(bufs[0]) {
				rest := bufs[0][n:]
				bufs = append([][]byte{rest}, bufs[1:]...)
				break
			}
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
	}
	return nil
}
