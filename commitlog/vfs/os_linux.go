package vfs

import (
	"errors"
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
