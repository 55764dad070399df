package transport

// BackupRequest asks the leader for a backup: a consistent copy of the
// retained log and of the state machine's state as of one committed index,
// at least the commit index when the request arrived, so that it holds
// every append acknowledged before. The stream items carry the bytes of a
// backup file (package backup documents the format) in order; the stream
// ends normally once the file is complete. A node that does not lead
// answers NotLeader. With TLS it is an admin operation.
//
// A backup forces a snapshot of the state and keeps the entries it copies
// on disk until it ends, even if a trim drops them meanwhile, unless the
// client takes nothing for a minute: then trims go ahead, and the backup
// fails if it misses an entry.
type BackupRequest struct{}

// Validate accepts every BackupRequest.
func (*BackupRequest) Validate(Limits) error { return nil }

// BackupItem is one stream item of a Backup: the next bytes of the file.
// Items are at most 1 MiB and split the file anywhere, not at its frames.
type BackupItem struct {
	// Data are the file's next bytes; never empty.
	Data []byte `msgpack:"data"`
}
