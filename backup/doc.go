// Package backup reads and writes raftlog backup files: a consistent copy
// of a cluster's retained log and of its state machine's state as of one
// raft index, which "node backup" takes from a running cluster and "node
// restore" seeds the nodes of a new cluster from (package node).
//
// # Format
//
// format.go describes the file in one place: a header naming the format
// version, the index the backup covers, that entry's term and the first
// retained index; a frame naming the log and its settings (replicas,
// retention), which version 1 files, all of the default log, lack; a
// frame holding the state; frames of entries; an end
// frame counting the entries and carrying a checksum of the whole file.
// Every frame carries a CRC-32C of its payload and one of its own header.
//
// # Guarantees
//
// A Reader returns the state and entries only as far as they check out,
// and returns io.EOF only once the end frame has been read and every
// count and checksum matched: a caller that acts on entries before EOF
// (restore writes them as they come) must be ready to undo that work when
// Next fails. A file that is cut short fails with an error wrapping
// ErrTruncated; damage (a flipped bit, a frame out of place, bytes after
// the end) with ErrCorrupt; a file that is no backup with ErrNotBackup; a
// version or flags this package does not read with ErrUnsupportedVersion.
// Each error names the byte offset where the file went wrong. A Reader
// never allocates much more than the bytes it has read.
//
// A Writer writes the header, the log and the state at once, then entries in
// frames of about 1 MiB, and the end frame at Close; it checks that
// entries come in increasing index order within [Floor, Index].
//
// Concurrency: a Reader or Writer belongs to one goroutine.
package backup

import "errors"

// Sentinel errors; test them with errors.Is.
var (
	// ErrNotBackup: the file does not start with Magic.
	ErrNotBackup = errors.New("backup: not a raftlog backup file")
	// ErrUnsupportedVersion: the file's format version or flags are not
	// ones this package reads.
	ErrUnsupportedVersion = errors.New("backup: unsupported format version")
	// ErrCorrupt: the file is damaged: a checksum, a count or the order of
	// its parts is wrong.
	ErrCorrupt = errors.New("backup: corrupt file")
	// ErrTruncated: the file ends before its end frame.
	ErrTruncated = errors.New("backup: truncated file")
)
