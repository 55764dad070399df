//go:build linux || darwin

package vfs

import "os"

// allocateByWriting reserves blocks where fallocate is missing by writing
// zeroes over the part of the file past its current end.
func allocateByWriting(f *os.File, size int64) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	zero := make([]byte, 1<<20)
	for off := fi.Size(); off < size; {
		n := int64(len(zero))
		if size-off < n {
			n = size - off
		}
		if _, err := f.WriteAt(zero[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}
