package transport

import (
	"fmt"
	"net"
	"reflect"
)

// Op names an operation. Its values are wire format.
type Op uint16

// Operations. Each names its request and response types; Tail and Backup
// are the streaming ops.
const (
	// OpAppend appends records: AppendRequest, AppendResponse.
	OpAppend Op = 1
	// OpRead reads committed records: ReadRequest, ReadResponse.
	OpRead Op = 2
	// OpTail streams records as they commit: TailRequest, then TailItem
	// stream items.
	OpTail Op = 3
	// OpStatus describes the node: StatusRequest, StatusResponse.
	OpStatus Op = 4
	// OpJoin adds a voter: JoinRequest, JoinResponse.
	OpJoin Op = 5
	// OpRemove removes a server: RemoveRequest, RemoveResponse.
	OpRemove Op = 6
	// OpTransferLeadership hands leadership over:
	// TransferLeadershipRequest, TransferLeadershipResponse.
	OpTransferLeadership Op = 7
	// OpTrim drops records below an index: TrimRequest, TrimResponse.
	OpTrim Op = 8
	// OpBackup streams a backup of the log and the state (backup.go):
	// BackupRequest, then BackupItem stream items.
	OpBackup Op = 9
	// OpCreateLog creates a named log (logs.go): CreateLogRequest,
	// CreateLogResponse.
	OpCreateLog Op = 10
	// OpListLogs lists the cluster's logs: ListLogsRequest,
	// ListLogsResponse.
	OpListLogs Op = 11
	// OpDescribeLog describes one log, its members and indexes:
	// DescribeLogRequest, DescribeLogResponse.
	OpDescribeLog Op = 12
	// OpDeleteLog deletes a named log and its data on every member:
	// DeleteLogRequest, DeleteLogResponse.
	OpDeleteLog Op = 13
	// OpRestoreLog uploads a backup into a named log and restores it
	// (restorelog.go): RestoreLogRequest, RestoreLogResponse.
	OpRestoreLog Op = 14
)

// Request is implemented by every request type. Serve decodes a request
// and calls Validate before a Handler sees it.
type Request interface {
	// Validate checks the request against l (defaults applied) and returns
	// an *Error of code BadRequest or TooLarge. It may fill in fields whose
	// zero value means "the server's limit"; each type says which.
	Validate(l Limits) error
}

// opInfo describes one op for the dispatcher.
type opInfo struct {
	name    string
	stream  bool
	req     reflect.Type   // request struct type
	resp    reflect.Type   // response (or, for a stream, item) struct type
	respPtr reflect.Type   // pointer to resp
	newReq  func() Request // returns a pointer to a zero request
}

// opOf describes an op with request type Req and response (or item) type
// Resp.
func opOf[Req any, PReq interface {
	*Req
	Request
}, Resp any](name string, stream bool) opInfo {
	return opInfo{
		name:    name,
		stream:  stream,
		req:     reflect.TypeFor[Req](),
		resp:    reflect.TypeFor[Resp](),
		respPtr: reflect.TypeFor[*Resp](),
		newReq:  func() Request { return PReq(new(Req)) },
	}
}

var ops = [...]opInfo{
	OpAppend:             opOf[AppendRequest, *AppendRequest, AppendResponse]("Append", false),
	OpRead:               opOf[ReadRequest, *ReadRequest, ReadResponse]("Read", false),
	OpTail:               opOf[TailRequest, *TailRequest, TailItem]("Tail", true),
	OpStatus:             opOf[StatusRequest, *StatusRequest, StatusResponse]("Status", false),
	OpJoin:               opOf[JoinRequest, *JoinRequest, JoinResponse]("Join", false),
	OpRemove:             opOf[RemoveRequest, *RemoveRequest, RemoveResponse]("Remove", false),
	OpTransferLeadership: opOf[TransferLeadershipRequest, *TransferLeadershipRequest, TransferLeadershipResponse]("TransferLeadership", false),
	OpTrim:               opOf[TrimRequest, *TrimRequest, TrimResponse]("Trim", false),
	OpBackup:             opOf[BackupRequest, *BackupRequest, BackupItem]("Backup", true),
	OpCreateLog:          opOf[CreateLogRequest, *CreateLogRequest, CreateLogResponse]("CreateLog", false),
	OpListLogs:           opOf[ListLogsRequest, *ListLogsRequest, ListLogsResponse]("ListLogs", false),
	OpDescribeLog:        opOf[DescribeLogRequest, *DescribeLogRequest, DescribeLogResponse]("DescribeLog", false),
	OpDeleteLog:          opOf[DeleteLogRequest, *DeleteLogRequest, DeleteLogResponse]("DeleteLog", false),
	OpRestoreLog:         opOf[RestoreLogRequest, *RestoreLogRequest, RestoreLogResponse]("RestoreLog", false),
}

func (op Op) info() (opInfo, bool) {
	if op == 0 || int(op) >= len(ops) {
		return opInfo{}, false
	}
	return ops[op], true
}

// Valid reports whether op is an operation of this version.
func (op Op) Valid() bool { _, ok := op.info(); return ok }

// Streaming reports whether op answers with a stream of items.
func (op Op) Streaming() bool { i, _ := op.info(); return i.stream }

// String returns the name of op.
func (op Op) String() string {
	if i, ok := op.info(); ok {
		return i.name
	}
	return fmt.Sprintf("Op(%d)", uint16(op))
}

// NewRequest returns a pointer to a zero request of op's type, or false
// for an unknown op.
func NewRequest(op Op) (Request, bool) {
	i, ok := op.info()
	if !ok {
		return nil, false
	}
	return i.newReq(), true
}

// MaxIDLength is the longest node id, client id or address, in bytes.
// It is wire format.
const MaxIDLength = 256

// Record is one record as reads return it.
type Record struct {
	// Index is the record's raft index, its position in the log.
	Index uint64 `msgpack:"index"`
	// Data is the record as appended.
	Data []byte `msgpack:"data"`
	// AppendedAt is when the leader appended the record, in Unix
	// nanoseconds; 0 when unknown.
	AppendedAt int64 `msgpack:"appended_at,omitempty"`
}

// AppendRequest appends records. The reply comes after they commit.
//
// A client that tags appends with a ClientID and increasing Seq numbers
// (one Seq per request) may retry a request after a timeout or a leader
// change: the server stores it once and answers the retry with the
// original indexes.
type AppendRequest struct {
	// ClientID identifies the client session for duplicate suppression;
	// empty means no suppression.
	ClientID string `msgpack:"client_id,omitempty"`
	// Seq numbers the request within the session, from 1; 0 when ClientID
	// is empty.
	Seq uint64 `msgpack:"seq,omitempty"`
	// Base is the client's promise about its session: it will never send
	// a sequence number below Base again, and Base 1 says that none of its
	// appends that finished (other than this one) may have been stored.
	// It lets a server that no longer holds, or never held, the session
	// tell a new append from a retry: without it (0, an older client) the
	// server can only guess. At most Seq; 0 when ClientID is empty.
	Base uint64 `msgpack:"base,omitempty"`
	// After, when not 0, is the sequence number of an earlier append of
	// the same session that must be stored before this one: the server
	// stores this one only if After is stored already, or was proposed
	// before it by the same leader in the same term (a request earlier on
	// the same connection, see Turn), and otherwise refuses it with Busy,
	// storing nothing, for the client to retry once After has completed.
	// It lets a client keep several appends in flight and still have them
	// stored in the order it sent them. At most Seq-1; 0 without ClientID.
	After uint64 `msgpack:"after,omitempty"`
	// Records are the records to append, in order; at least one.
	Records [][]byte `msgpack:"records"`
	// Log names the log (see logs.go); empty for the default log, and
	// left out of the body then, so that the request is the one a server
	// older than named logs reads. "default" names the default log too.
	Log string `msgpack:"log,omitempty"`
}

// Validate checks the record count and sizes and the session fields.
func (r *AppendRequest) Validate(l Limits) error {
	l = l.fill()
	if err := checkLogField(r.Log); err != nil {
		return err
	}
	switch {
	case len(r.Records) == 0:
		return errorf(CodeBadRequest, "append of no records")
	case len(r.Records) > l.MaxAppendRecords:
		return errorf(CodeTooLarge, "append of %d records, limit %d", len(r.Records), l.MaxAppendRecords)
	case len(r.ClientID) > MaxIDLength:
		return errorf(CodeBadRequest, "client id of %d bytes, limit %d", len(r.ClientID), MaxIDLength)
	case r.ClientID == "" && r.Seq != 0:
		return errorf(CodeBadRequest, "sequence number without a client id")
	case r.ClientID != "" && r.Seq == 0:
		return errorf(CodeBadRequest, "client id without a sequence number")
	case r.Base > r.Seq:
		return errorf(CodeBadRequest, "session base %d is above the sequence number %d", r.Base, r.Seq)
	case r.After != 0 && r.After >= r.Seq:
		return errorf(CodeBadRequest, "append %d to follow %d, which is not earlier", r.Seq, r.After)
	}
	for i, rec := range r.Records {
		if len(rec) > l.MaxRecordSize {
			return errorf(CodeTooLarge, "record %d is %d bytes, limit %d", i, len(rec), l.MaxRecordSize)
		}
	}
	return nil
}

// AppendResponse reports where appended records went.
type AppendResponse struct {
	// Indexes are the raft indexes of the records, in request order. They
	// increase but need not be contiguous.
	Indexes []uint64 `msgpack:"indexes"`
	// Duplicate is true when the request repeated one already stored; the
	// indexes are those of the original.
	Duplicate bool `msgpack:"duplicate,omitempty"`
}

// ReadRequest reads committed records from an index. Reads are
// linearizable unless Stale is set. Indexes that hold raft's own entries
// are skipped.
type ReadRequest struct {
	// From is the first index to read; 0 means the first retained record.
	// An index below the first retained record fails with Trimmed.
	From uint64 `msgpack:"from,omitempty"`
	// MaxRecords bounds the records returned; 0 means the server's limit.
	MaxRecords uint32 `msgpack:"max_records,omitempty"`
	// MaxBytes bounds the record data returned; 0 means the server's limit.
	// At least one record is returned when one is available, even one
	// larger than MaxBytes.
	MaxBytes uint32 `msgpack:"max_bytes,omitempty"`
	// Stale allows any node to answer from its own log without confirming
	// leadership: faster, but possibly behind.
	Stale bool `msgpack:"stale,omitempty"`
	// Log names the log (see logs.go); empty for the default log, and
	// left out of the body then, so that the request is the one a server
	// older than named logs reads. "default" names the default log too.
	Log string `msgpack:"log,omitempty"`
}

// Validate checks the log name and the bounds against l, and replaces
// zero bounds by l's.
func (r *ReadRequest) Validate(l Limits) error {
	if err := checkLogField(r.Log); err != nil {
		return err
	}
	return checkReadBounds(&r.MaxRecords, &r.MaxBytes, l)
}

// checkReadBounds checks and fills the bounds of a Read or Tail.
func checkReadBounds(records, bytes *uint32, l Limits) error {
	l = l.fill()
	if uint64(*records) > uint64(l.MaxReadRecords) {
		return errorf(CodeBadRequest, "max records %d exceeds the limit %d", *records, l.MaxReadRecords)
	}
	if uint64(*bytes) > uint64(l.MaxReadBytes) {
		return errorf(CodeBadRequest, "max bytes %d exceeds the limit %d", *bytes, l.MaxReadBytes)
	}
	if *records == 0 {
		*records = uint32(l.MaxReadRecords)
	}
	if *bytes == 0 {
		*bytes = uint32(l.MaxReadBytes)
	}
	return nil
}

// ReadResponse carries records read.
type ReadResponse struct {
	// Records are in index order; empty when none is committed at or past
	// the index asked for.
	Records []Record `msgpack:"records"`
	// Next is the index to read from next.
	Next uint64 `msgpack:"next"`
}

// TailRequest streams committed records from an index, as they commit,
// until the client cancels. Each stream item is a TailItem; the stream ends
// with an Error (for example Trimmed, NotLeader or Canceled).
type TailRequest struct {
	// From is the first index to stream; 0 means the first retained record.
	From uint64 `msgpack:"from,omitempty"`
	// MaxRecords bounds the records per item; 0 means the server's limit.
	MaxRecords uint32 `msgpack:"max_records,omitempty"`
	// MaxBytes bounds the record data per item; 0 means the server's limit.
	MaxBytes uint32 `msgpack:"max_bytes,omitempty"`
	// Stale allows a follower to serve the stream from its own log.
	Stale bool `msgpack:"stale,omitempty"`
	// Log names the log (see logs.go); empty for the default log, and
	// left out of the body then, so that the request is the one a server
	// older than named logs reads. "default" names the default log too.
	Log string `msgpack:"log,omitempty"`
}

// Validate checks the log name and the per-item bounds against l, and
// replaces zero bounds by l's.
func (r *TailRequest) Validate(l Limits) error {
	if err := checkLogField(r.Log); err != nil {
		return err
	}
	return checkReadBounds(&r.MaxRecords, &r.MaxBytes, l)
}

// TailItem is one stream item of a Tail.
type TailItem struct {
	// Records are in index order; at least one.
	Records []Record `msgpack:"records"`
	// Next is the index the stream continues from.
	Next uint64 `msgpack:"next"`
}

// StatusRequest asks a node to describe itself.
type StatusRequest struct {
	// Details asks for StatusResponse.Details too: the node's version and
	// settings. A node older than this field refuses a request that sets
	// it, as any body with an unknown field, with BadRequest; ask it again
	// without. (A reply carries Details only when asked, so that a caller
	// older than the field, which would refuse the unknown field in the
	// reply, never gets it.)
	Details bool `msgpack:"details,omitempty"`
}

// Validate accepts every StatusRequest.
func (*StatusRequest) Validate(Limits) error { return nil }

// StatusResponse describes a node.
type StatusResponse struct {
	// NodeID is the answering node's id.
	NodeID string `msgpack:"node_id" json:"node_id"`
	// Role is the node's raft state: Follower, Candidate, Leader or Shutdown;
	// or Deciding (no raft state yet: learning whether to bootstrap a new
	// cluster or rejoin a running one), or Removed (removed from the cluster).
	Role string `msgpack:"role" json:"role"`
	// Voting says the node grants and requests votes. It is false while
	// the node decides whether to bootstrap, while a new member (or one
	// that lost its data) catches up before its promotion, and once it was
	// removed, whatever its raft configuration says.
	Voting bool `msgpack:"voting,omitempty" json:"voting"`
	// LeaderID is the leader's node id, empty when unknown.
	LeaderID string `msgpack:"leader_id,omitempty" json:"leader_id,omitempty"`
	// LeaderAddr is the leader's client address, empty when unknown.
	LeaderAddr string `msgpack:"leader_addr,omitempty" json:"leader_addr,omitempty"`
	// ClusterID is the id of the node's cluster (32 hex digits), empty
	// while the node does not know it and from nodes older than it. Two
	// nodes of one cluster say the same.
	ClusterID string `msgpack:"cluster_id,omitempty" json:"cluster_id,omitempty"`
	// Term is the node's current raft term.
	Term uint64 `msgpack:"term" json:"term"`
	// FirstIndex is the first retained index, 0 when the log is empty.
	FirstIndex uint64 `msgpack:"first_index" json:"first_index"`
	// LastIndex is the last index in the node's log.
	LastIndex uint64 `msgpack:"last_index" json:"last_index"`
	// CommitIndex is the highest index the node knows is committed.
	CommitIndex uint64 `msgpack:"commit_index" json:"commit_index"`
	// AppliedIndex is the highest index the node has applied.
	AppliedIndex uint64 `msgpack:"applied_index" json:"applied_index"`
	// Store holds figures of the node's storage.
	Store StoreStatus `msgpack:"store" json:"store"`
	// Members lists the cluster's servers as the node's raft configuration
	// has them.
	Members []Member `msgpack:"members,omitempty" json:"members,omitempty"`
	// Refusing, on the leader, says why it refuses appends now (for
	// example "NoSpace: n2, n3 below their free-space reserve ..."); empty
	// when it accepts them, and on other nodes.
	Refusing string `msgpack:"refusing,omitempty" json:"refusing,omitempty"`
	// Details holds the node's version and settings when the request
	// asked for them (StatusRequest.Details); nil otherwise.
	Details *StatusDetails `msgpack:"details,omitempty" json:"details,omitempty"`
}

// StatusDetails describes what a node runs: its build and its settings.
type StatusDetails struct {
	// Version is the raftlog module version the node was built from: a
	// release ("v1.2.0"), a pseudo-version naming the commit
	// ("v0.0.0-20260509183000-bd96097abcde+dirty"), or "(devel)" when the
	// build recorded none.
	Version string `msgpack:"version" json:"version"`
	// Commit is the revision of the source tree the binary was built
	// from, empty when the build recorded none.
	Commit string `msgpack:"commit,omitempty" json:"commit,omitempty"`
	// Modified says the source tree had uncommitted changes.
	Modified bool `msgpack:"modified,omitempty" json:"modified,omitempty"`
	// GoVersion is the Go toolchain that built the binary ("go1.26.8").
	GoVersion string `msgpack:"go_version" json:"go_version"`
	// Platform is the binary's GOOS/GOARCH ("linux/amd64").
	Platform string `msgpack:"platform" json:"platform"`
	// Flush is the node's flush mode: "sync" or "async".
	Flush string `msgpack:"flush" json:"flush"`
	// Settings are the node's settings that differ from their defaults,
	// as its operator gave them (for "node serve", its flags without the
	// dashes), sorted by name; empty when all are defaults or the
	// embedder did not say.
	Settings []Setting `msgpack:"settings,omitempty" json:"settings,omitempty"`
}

// Setting is one setting of a node.
type Setting struct {
	// Name names the setting ("retention-age").
	Name string `msgpack:"name" json:"name"`
	// Value is its value as text ("168h0m0s").
	Value string `msgpack:"value" json:"value"`
}

// Member is a server of the cluster.
type Member struct {
	// NodeID is the server's id.
	NodeID string `msgpack:"node_id" json:"node_id"`
	// RaftAddr is its raft address.
	RaftAddr string `msgpack:"raft_addr" json:"raft_addr"`
	// ClientAddr is its client address, empty when not yet known.
	ClientAddr string `msgpack:"client_addr,omitempty" json:"client_addr,omitempty"`
	// Voter is false for a non-voting server.
	Voter bool `msgpack:"voter,omitempty" json:"voter,omitempty"`
}

// StoreStatus holds figures of a node's storage.
type StoreStatus struct {
	// Segments is the number of commit-log segment files.
	Segments uint64 `msgpack:"segments" json:"segments"`
	// Bytes is the size of the retained log on disk.
	Bytes uint64 `msgpack:"bytes" json:"bytes"`
	// Written is the commit-log offset written up to.
	Written uint64 `msgpack:"written" json:"written"`
	// Flushed is the commit-log offset durable up to.
	Flushed uint64 `msgpack:"flushed" json:"flushed"`
	// FreeBytes is the free space of the data dir's file system, as last
	// read (at most a quarter second old); 0 when unknown.
	FreeBytes uint64 `msgpack:"free_bytes,omitempty" json:"free_bytes"`
	// ReserveBytes is the free space the node keeps in reserve (its
	// --min-free); 0 when it keeps none.
	ReserveBytes uint64 `msgpack:"reserve_bytes,omitempty" json:"reserve_bytes"`
	// BelowReserve is true while FreeBytes is below ReserveBytes: the node
	// cannot be counted on to store appends.
	BelowReserve bool `msgpack:"below_reserve,omitempty" json:"below_reserve"`
}

// JoinRequest adds a node to the cluster as a voter. Send it to the leader.
type JoinRequest struct {
	// NodeID is the joining node's raft server id.
	NodeID string `msgpack:"node_id"`
	// RaftAddr is the joining node's raft address, host:port.
	RaftAddr string `msgpack:"raft_addr"`
	// ClientAddr is the joining node's client address, host:port.
	ClientAddr string `msgpack:"client_addr"`
	// Fresh says the node has no raft state: it is a new member, or one
	// that lost its data. The leader then removes any server of the same
	// id and adds the node as a nonvoter, which asks for promotion once it
	// has caught up. Without Fresh, a member already a voter only records
	// its client address, a nonvoter is promoted, and an unknown node is
	// added as a nonvoter.
	Fresh bool `msgpack:"fresh,omitempty"`
	// Register says the node is a member recording its client address, as
	// every node does after it starts: the leader records the address of a
	// member, and refuses (FailedPrecondition) a node that is not one, for
	// example one that was removed, instead of adding it.
	Register bool `msgpack:"register,omitempty"`
}

// Validate checks that the id and both addresses are present and sane.
func (r *JoinRequest) Validate(Limits) error {
	if err := checkID("node id", r.NodeID); err != nil {
		return err
	}
	if err := checkAddr("raft address", r.RaftAddr); err != nil {
		return err
	}
	return checkAddr("client address", r.ClientAddr)
}

// JoinResponse reports a completed join.
type JoinResponse struct {
	// Index is the raft index of the configuration change.
	Index uint64 `msgpack:"index"`
}

// RemoveRequest removes a node from the cluster. Send it to the leader.
type RemoveRequest struct {
	// NodeID is the raft server id to remove.
	NodeID string `msgpack:"node_id"`
}

// Validate checks the node id.
func (r *RemoveRequest) Validate(Limits) error { return checkID("node id", r.NodeID) }

// RemoveResponse reports a completed removal.
type RemoveResponse struct {
	// Index is the raft index of the configuration change.
	Index uint64 `msgpack:"index"`
}

// TransferLeadershipRequest asks the leader to hand leadership to another
// voter.
type TransferLeadershipRequest struct {
	// Target is the node id to hand over to; empty lets raft choose.
	Target string `msgpack:"target,omitempty"`
}

// Validate checks the target's length.
func (r *TransferLeadershipRequest) Validate(Limits) error {
	if r.Target == "" {
		return nil
	}
	return checkID("target", r.Target)
}

// TransferLeadershipResponse reports a completed transfer. It has no fields.
type TransferLeadershipResponse struct{}

// TrimRequest drops every record below an index, on every node. Send it to
// the leader.
type TrimRequest struct {
	// Below is the first index to keep; at least 1.
	Below uint64 `msgpack:"below"`
	// Log names the log (see logs.go); empty for the default log, and
	// left out of the body then, so that the request is the one a server
	// older than named logs reads. "default" names the default log too.
	Log string `msgpack:"log,omitempty"`
}

// Validate checks the log name and that Below is set.
func (r *TrimRequest) Validate(Limits) error {
	if err := checkLogField(r.Log); err != nil {
		return err
	}
	if r.Below == 0 {
		return errorf(CodeBadRequest, "trim below index 0")
	}
	return nil
}

// TrimResponse reports a committed trim.
type TrimResponse struct {
	// Index is the raft index of the trim command.
	Index uint64 `msgpack:"index"`
}

// Credit is the body of a Credit frame.
type Credit struct {
	// Items is how many more stream items the server may send.
	Items uint32 `msgpack:"items"`
}

func checkID(what, id string) error {
	if id == "" {
		return errorf(CodeBadRequest, "%s is empty", what)
	}
	if len(id) > MaxIDLength {
		return errorf(CodeBadRequest, "%s of %d bytes, limit %d", what, len(id), MaxIDLength)
	}
	return nil
}

func checkAddr(what, addr string) error {
	if err := checkID(what, addr); err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return errorf(CodeBadRequest, "%s %q is not host:port", what, addr)
	}
	return nil
}
