package commitlog

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync is fdatasync(2), what the log's own syncs use on Linux.
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
