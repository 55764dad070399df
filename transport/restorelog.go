package transport

// RestoreLogRequest uploads part of a backup file (package backup) into
// the named log Log and, with Done, restores it: the log then holds the
// backup's records at their original indexes and its client sessions, and
// appends go on after the backup's index. The log's leader serves it;
// another node answers NotLeader as for a record operation. It is an admin
// operation under TLS.
//
// The log must exist (CreateLog) and hold no record. The parts go in
// order: Offset is the byte of the file Data starts at, and must be the
// number of bytes the leader holds already. The part at Offset 0 starts
// the restore: the leader marks the log as being restored (from then on
// the log refuses appends, reads, tails, trims and backups with
// FailedPrecondition, until the restore finishes) and starts a new upload.
// A part of an upload the node does not hold (its leadership moved, it
// restarted) gets FailedPrecondition: upload again from Offset 0. The part
// with Done set checks the whole file, restores it and answers once the
// log's raft group has committed it on a majority of its voters; the
// response says how many of its members hold it then. A restore that did
// not finish leaves the log marked: delete it and restore again.
type RestoreLogRequest struct {
	// Log names the log to restore into: a named log, not DefaultLog.
	Log string `msgpack:"log"`
	// Offset is the byte of the backup file Data begins at.
	Offset uint64 `msgpack:"offset"`
	// Data are the file's bytes from Offset; may be empty.
	Data []byte `msgpack:"data,omitempty"`
	// Done says the file ends after Data: restore it.
	Done bool `msgpack:"done,omitempty"`
}

// Validate checks the log name.
func (r *RestoreLogRequest) Validate(Limits) error { return checkNamedLog("restored", r.Log) }

// RestoreLogResponse answers a RestoreLogRequest.
type RestoreLogResponse struct {
	// Received is the number of bytes of the file the leader holds.
	Received uint64 `msgpack:"received"`
	// Once the restore is done: BackupIndex is the backup's index (the
	// last record restored is at or below it), Index the index of the
	// restore in the log (at least BackupIndex + 1: the log's next append
	// goes after it), and Replicas how many of the log's members held it
	// when the leader answered (at least a majority; the others catch up).
	BackupIndex uint64 `msgpack:"backup_index,omitempty"`
	Index       uint64 `msgpack:"index,omitempty"`
	Replicas    uint32 `msgpack:"replicas,omitempty"`
}
