package transport

// BackupRequest asks a log's leader for a backup: a consistent copy of the
// log's retained records and of its state machine's state as of one
// committed index,
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
//
// Log names the log as record operations do (logs.go): a request without
// it backs up the default log, as before named logs, and a server older
// than named-log backups refuses one that names a log with BadRequest.
type BackupRequest struct {
	// Log names the log (see logs.go); empty for the default log, and
	// then left out of the body.
	Log string `msgpack:"log,omitempty"`
}

// Validate checks the log name.
func (r *BackupRequest) Validate(Limits) error { return checkLogField(r.Log) }

// BackupItem is one stream item of a Backup: the next bytes of the file.
// Items are at most 1 MiB and split the file anywhere, not at its frames.
type BackupItem struct {
	// Data are the file's next bytes; never empty.
	Data []byte `msgpack:"data"`
}
