package commitlog

import (
	"errors"
	"syscall"
)

// isNoSpace reports whether err comes from a full file system.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
