package transport

// Named logs: the log field of the record operations, the operations that
// manage logs, and how errors name a log's leader. Everything here is wire
// format; protocol.go's "Logs" section sums it up.

import (
	"time"
	"unicode/utf8"
)

// DefaultLog is the name of the default log: the log of a request that
// names none. It always exists and cannot be created or deleted.
const DefaultLog = "default"

// MaxLogNameLength is the longest log name, in bytes. It is wire format.
const MaxLogNameLength = 64

// logNameRule is what CheckLogName's errors say a log name is.
const logNameRule = "a log name is 1 to 64 characters of A-Z, a-z, 0-9, _ and - (ASCII), starting with a letter or a digit"

// CheckLogName returns nil if name is a valid log name: 1 to
// MaxLogNameLength characters of A-Z, a-z, 0-9, '_' and '-', starting with
// a letter or a digit. Names are case-sensitive. Otherwise it returns an
// *Error of code BadRequest that says what is wrong, and the rule.
func CheckLogName(name string) error {
	if name == "" {
		return errorf(CodeBadRequest, "log name is empty: %s", logNameRule)
	}
	// The characters first: a name of 64 characters, one of them not
	// ASCII, is refused for that character, not for its 65 bytes.
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:])
		c := name[i]
		switch {
		case r == utf8.RuneError && size <= 1:
			return errorf(CodeBadRequest, "log name %q holds the byte %#x (not UTF-8): %s", name, c, logNameRule)
		case i == 0 && !isAlnum(c):
			return errorf(CodeBadRequest, "log name %q starts with %q: %s", name, r, logNameRule)
		case r >= utf8.RuneSelf || !isAlnum(c) && c != '_' && c != '-':
			return errorf(CodeBadRequest, "log name %q holds %q: %s", name, r, logNameRule)
		}
		i += size
	}
	if len(name) > MaxLogNameLength {
		return errorf(CodeBadRequest, "log name of %d characters, limit %d: %s", len(name), MaxLogNameLength, logNameRule)
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// LogName returns the name of the log that the log field f of a request
// means: DefaultLog for "", f otherwise.
func LogName(f string) string {
	if f == "" {
		return DefaultLog
	}
	return f
}

// LogField returns the log field a request naming the log name carries:
// "" for the default log, so that the field is left out and a server
// older than named logs reads the request; name otherwise.
func LogField(name string) string {
	if name == DefaultLog {
		return ""
	}
	return name
}

// checkLogField checks the log field of a record operation: empty, or a
// valid name.
func checkLogField(f string) error {
	if f == "" {
		return nil
	}
	return CheckLogName(f)
}

// checkNamedLog checks the name of a log to create or delete: valid, and
// not the default log.
func checkNamedLog(what, name string) error {
	if err := CheckLogName(name); err != nil {
		return err
	}
	if name == DefaultLog {
		return errorf(CodeBadRequest, "the %s log always exists and cannot be %s", DefaultLog, what)
	}
	return nil
}

// Replica counts a log may have. The zero value in CreateLogRequest means
// the cluster's default.
var validReplicas = [...]uint32{1, 3, 5}

// Log states (LogInfo.State).
const (
	// LogActive: the log serves appends and reads.
	LogActive = "active"
	// LogDeleting: the log was deleted and its members are dropping its
	// data; record operations on it get NotFound.
	LogDeleting = "deleting"
)

// LogInfo describes a log as the cluster's catalog records it.
type LogInfo struct {
	// Name is the log's name.
	Name string `msgpack:"name" json:"name"`
	// ID is the log's number, never reused; the default log's is 0.
	ID uint64 `msgpack:"id" json:"id"`
	// Replicas is how many nodes hold the log: 1, 3 or 5.
	Replicas uint32 `msgpack:"replicas" json:"replicas"`
	// RetentionBytes, when not 0, is the most bytes of records the log
	// keeps: older records are trimmed away.
	RetentionBytes uint64 `msgpack:"retention_bytes,omitempty" json:"retention_bytes,omitempty"`
	// RetentionAge, when not 0, is how long the log keeps a record, in
	// nanoseconds on the wire.
	RetentionAge time.Duration `msgpack:"retention_age,omitempty" json:"retention_age,omitempty"`
	// State is LogActive or LogDeleting.
	State string `msgpack:"state" json:"state"`
	// Members are the node ids of the nodes that are to hold the log (the
	// catalog's replica set), in the catalog's order: the first is the
	// preferred leader.
	Members []string `msgpack:"members,omitempty" json:"members,omitempty"`
	// LeaderID is the node id of the log's leader when the answering node
	// knows it (it hosts the log), empty otherwise.
	LeaderID string `msgpack:"leader_id,omitempty" json:"leader_id,omitempty"`
}

// CreateLogRequest creates a log. The catalog's leader serves it; another
// node answers NotLeader naming the catalog's leader. A name that exists
// already, deleting or not, gets FailedPrecondition naming it, as does a
// replica count larger than the cluster's active nodes.
type CreateLogRequest struct {
	// Name is the new log's name (see CheckLogName); not DefaultLog.
	Name string `msgpack:"name"`
	// Replicas is how many nodes hold the log: 1, 3 or 5; 0 means the
	// cluster's default (3).
	Replicas uint32 `msgpack:"replicas,omitempty"`
	// RetentionBytes, when not 0, bounds the bytes of records the log
	// keeps.
	RetentionBytes uint64 `msgpack:"retention_bytes,omitempty"`
	// RetentionAge, when not 0, bounds how long the log keeps a record;
	// in nanoseconds on the wire, not negative.
	RetentionAge time.Duration `msgpack:"retention_age,omitempty"`
}

// Validate checks the name, the replica count and the retention.
func (r *CreateLogRequest) Validate(Limits) error {
	if err := checkNamedLog("created", r.Name); err != nil {
		return err
	}
	if r.RetentionAge < 0 {
		return errorf(CodeBadRequest, "negative retention age %v", r.RetentionAge)
	}
	if r.Replicas == 0 {
		return nil
	}
	for _, n := range validReplicas {
		if r.Replicas == n {
			return nil
		}
	}
	return errorf(CodeBadRequest, "%d replicas: a log has 1, 3 or 5", r.Replicas)
}

// CreateLogResponse reports a created log: committed to the catalog, its
// members chosen. Its raft group starts on them soon after; until it has
// a leader, record operations on it get NotLeader or Unavailable.
type CreateLogResponse struct {
	// Log is the new log as the catalog records it.
	Log LogInfo `msgpack:"log"`
}

// ListLogsRequest lists the cluster's logs. The default log's leader
// answers from its catalog, which holds every create and delete it
// acknowledged; a node that follows a live leader answers NotLeader naming
// it, and one that knows no live leader (an election, a partition)
// answers from its own copy, which may be behind. (Nodes before
// 2026-12-04 answer from their own copy always.)
type ListLogsRequest struct {
	// Local asks the node to answer from its own copy of the catalog,
	// leader or not (as a stale read does): what that node holds. Nodes
	// before 2026-12-04 refuse a request that sets it, as one with an
	// unknown field.
	Local bool `msgpack:"local,omitempty"`
}

// Validate accepts every ListLogsRequest.
func (*ListLogsRequest) Validate(Limits) error { return nil }

// ListLogsResponse lists logs.
type ListLogsResponse struct {
	// Logs are every log of the cluster, the default log included and
	// those being deleted, sorted by name.
	Logs []LogInfo `msgpack:"logs"`
}

// DescribeLogRequest describes one log: its catalog record, and how its
// raft group stands. The log's leader knows the group best (raftlog's
// nodes answer as its leader once a quorum has confirmed that they lead
// it); another node answers NotLeader naming it (or a member of the log),
// or, if it cannot find one, what it knows itself. An unknown name gets
// NotFound naming it.
type DescribeLogRequest struct {
	// Name names the log; empty for the default log.
	Name string `msgpack:"name,omitempty"`
	// Local asks a node that holds a replica of the log to describe its
	// own replica, leader or not: LastIndex and CommitIndex are then that
	// replica's (a log's leader asks so whether a member it adds has
	// caught up). A node that holds none answers as without Local.
	Local bool `msgpack:"local,omitempty"`
}

// Validate checks the name.
func (r *DescribeLogRequest) Validate(Limits) error { return checkLogField(r.Name) }

// DescribeLogResponse describes a log.
type DescribeLogResponse struct {
	// Log is the catalog's record of the log.
	Log LogInfo `msgpack:"log"`
	// LeaderAddr is the client address of the log's leader, empty when
	// unknown.
	LeaderAddr string `msgpack:"leader_addr,omitempty"`
	// FirstIndex is the log's first retained index, 0 when it is empty.
	FirstIndex uint64 `msgpack:"first_index"`
	// LastIndex is the last index of the log as the answering node has it.
	LastIndex uint64 `msgpack:"last_index"`
	// CommitIndex is the highest index the answering node knows is
	// committed.
	CommitIndex uint64 `msgpack:"commit_index"`
	// Bytes is the size of the log's retained records on the answering
	// node.
	Bytes uint64 `msgpack:"bytes"`
	// Members are the log's replicas: the catalog's members and any other
	// server of the log's raft configuration, in the catalog's order then
	// by node id.
	Members []LogMember `msgpack:"members,omitempty"`
	// ConfigIndex is at or above the index of the raft configuration the
	// members' roles come from (raftlog's nodes give the last index they
	// read after the configuration); when the log's leader answers, that
	// configuration is committed if ConfigIndex is at most CommitIndex.
	// 0 when unknown.
	ConfigIndex uint64 `msgpack:"config_index,omitempty"`
}

// Roles of a log's member (LogMember.Role).
const (
	// RoleLeader: the member leads the log's raft group.
	RoleLeader = "Leader"
	// RoleFollower: a voter that does not lead.
	RoleFollower = "Follower"
	// RoleNonvoter: a member being added, catching up before it is
	// promoted to voter.
	RoleNonvoter = "Nonvoter"
	// RolePending: the catalog names the member but the group's
	// configuration does not hold it yet.
	RolePending = "Pending"
	// RoleLeaving: the group's configuration holds the member but the
	// catalog no longer names it: a replica being moved away.
	RoleLeaving = "Leaving"
	// RoleUnknown: the answering node does not know the member's state (it
	// does not lead the log).
	RoleUnknown = "Unknown"
)

// LogMember is one replica of a log.
type LogMember struct {
	// NodeID is the member's node id.
	NodeID string `msgpack:"node_id" json:"node_id"`
	// ClientAddr is its client address, empty when unknown.
	ClientAddr string `msgpack:"client_addr,omitempty" json:"client_addr,omitempty"`
	// Role is one of the Role constants.
	Role string `msgpack:"role" json:"role"`
	// CaughtUp says the member's log holds every entry the leader has
	// committed, as the leader last heard; false when unknown (raftlog's
	// nodes know it of the leader only).
	CaughtUp bool `msgpack:"caught_up,omitempty" json:"caught_up"`
}

// DeleteLogRequest deletes a log: the catalog marks it deleting, its raft
// group stops, and every member drops its data. It cannot be undone. The
// catalog's leader serves it; an unknown name gets NotFound naming it.
type DeleteLogRequest struct {
	// Name names the log; not DefaultLog.
	Name string `msgpack:"name"`
}

// Validate checks the name.
func (r *DeleteLogRequest) Validate(Limits) error { return checkNamedLog("deleted", r.Name) }

// DeleteLogResponse reports a deletion committed to the catalog. The log
// leaves ListLogs then (a server may list it as deleting for a while);
// its members drop its data after, a member that is down when it comes
// back.
type DeleteLogResponse struct {
	// Log is the log's catalog record, in state LogDeleting.
	Log LogInfo `msgpack:"log"`
}

// NotFoundLog is the error a server answers a request naming the log name
// with when the log does not exist (or is being deleted): NotFound, the
// message naming the log.
func NotFoundLog(name string) *Error {
	return errorf(CodeNotFound, "log %q does not exist", name)
}

// DuplicateLog is the error a server answers a CreateLogRequest with when
// the name exists already: FailedPrecondition, the message naming the
// log.
func DuplicateLog(name string) *Error {
	return errorf(CodeFailedPrecondition, "log %q exists already", name)
}
