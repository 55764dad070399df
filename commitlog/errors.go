package commitlog

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by the log wrap one of these with the
// file and offset involved; test them with errors.Is.
var (
	// ErrCorrupt reports a record or file that fails its checks where the
	// log knows durable data must be. The error names the file and offset.
	ErrCorrupt = errors.New("commitlog: corrupt")
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("commitlog: log is closed")
	// ErrRecordTooLarge is returned for a record that cannot fit in one
	// segment. Nothing of the batch holding it is written.
	ErrRecordTooLarge = errors.New("commitlog: record larger than a segment")
	// ErrSyncTimeout is returned by a synchronous append whose sync did not
	// complete within Options.SyncFlushTimeout. The record was written and
	// may still become durable; the caller must not assume either outcome.
	ErrSyncTimeout = errors.New("commitlog: timed out waiting for sync")
	// ErrNotFound is returned when reading a position below the first
	// retained byte or at or past the end of the log.
	ErrNotFound = errors.New("commitlog: no record at position")
	// ErrInvalidPosition is returned for a position inside the log that is
	// not the start of a record.
	ErrInvalidPosition = errors.New("commitlog: position is not the start of a record")
	// ErrNoSpace wraps the file system's ENOSPC when a new segment cannot be
	// created. Nothing of the failed append is written and the log stays
	// usable: appends succeed again once space is freed.
	ErrNoSpace = errors.New("commitlog: no space left for a new segment")
	// ErrFailed wraps the first failed write, fsync or msync. Once it is
	// returned the log accepts no more writes; reopen it to recover.
	ErrFailed = errors.New("commitlog: log failed")
	// ErrTruncated is returned to a WaitDurable whose bytes a Truncate
	// removed before they became durable: they will never be.
	ErrTruncated = errors.New("commitlog: truncated before it was durable")
)

// corruptError builds an ErrCorrupt naming the file and offset.
func corruptError(path string, fileOffset int64, reason error) error {
	return fmt.Errorf("%w: record in %s at offset %d: %v", ErrCorrupt, path, fileOffset, reason)
}
