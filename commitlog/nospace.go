package commitlog

import (
	"errors"
	"syscall"
)

// IsNoSpace reports whether err comes from a full file system: ErrNoSpace,
// or ENOSPC or EDQUOT from the file system. Such a write loses nothing and
// succeeds again once space is freed; any other write error is a failure.
func IsNoSpace(err error) bool {
	return errors.Is(err, ErrNoSpace) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
