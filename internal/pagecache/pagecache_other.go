//go:build !linux

package pagecache

// Evict returns ErrUnsupported.
func Evict(string) error { return ErrUnsupported }

// Resident returns ErrUnsupported.
func Resident(string) (int64, error) { return 0, ErrUnsupported }

// ResidentDir returns ErrUnsupported.
func ResidentDir(string, func(string) bool) (int64, error) { return 0, ErrUnsupported }
