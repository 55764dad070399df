package transport

import (
	"errors"
	"fmt"
	"strings"
)

// Code classifies an Error. Its values are wire format.
type Code uint16

// Error codes.
const (
	// CodeBadRequest: the request is malformed or fails validation. Do not
	// retry it unchanged.
	CodeBadRequest Code = 1
	// CodeUnknownOp: the server does not know the op, for example an older
	// server.
	CodeUnknownOp Code = 2
	// CodeUnsupportedVersion: the server does not speak the frame's
	// protocol version. Error.Version names the one it speaks.
	CodeUnsupportedVersion Code = 3
	// CodeTooLarge: a frame, record or response exceeds a limit.
	CodeTooLarge Code = 4
	// CodeBusy: the connection already has the most requests in flight the
	// server allows. Retry once one of them completes.
	CodeBusy Code = 5
	// CodeNotLeader: the node is not the leader (of the log the request
	// names, or of the catalog for the log operations). Error.LeaderID and
	// Error.LeaderAddr name the leader's client address when it is known;
	// for a request that names a log, Error.MemberID and Error.MemberAddr
	// may name a member of the log to ask instead when the leader is not
	// known.
	CodeNotLeader Code = 6
	// CodeTimeout: the request did not complete in time. Its effect, for an
	// Append, is unknown; retry with the same client id and sequence number.
	CodeTimeout Code = 7
	// CodeUnavailable: the node cannot serve now (no quorum, shutting down).
	CodeUnavailable Code = 8
	// CodeNotFound: no such record, node, index (for example past the end
	// of the log) or log (the message names it).
	CodeNotFound Code = 9
	// CodeTrimmed: the requested index is below the first retained record.
	CodeTrimmed Code = 10
	// CodeCanceled: the client cancelled the request or its connection.
	CodeCanceled Code = 11
	// CodeInternal: the server failed, for example a handler panicked.
	CodeInternal Code = 12
	// CodeNoSpace: appends are refused because too few members can store
	// them (their data dirs are below the free-space reserve); the message
	// names them. Reads are served; retry once space is freed.
	CodeNoSpace Code = 13
	// CodeSessionExpired: an append carries a client id and sequence
	// number that the cluster can no longer check for duplicates (the
	// client's session was evicted or never seen, and the sequence number
	// is not the session's first). The append was not stored; a client
	// that does not know whether its earlier appends were stored must read
	// the log to find out, then continue under a new client id.
	CodeSessionExpired Code = 14
	// CodePermissionDenied: the caller's identity may not perform the
	// operation (for example a client that is not an admin asking for a
	// trim). Do not retry it unchanged.
	CodePermissionDenied Code = 15
	// CodeFailedPrecondition: the request is valid but the cluster is not in
	// a state where it makes sense (for example a leadership transfer to
	// the node that already leads). Do not retry it unchanged.
	CodeFailedPrecondition Code = 16
)

var codeNames = [...]string{
	CodeBadRequest:         "BadRequest",
	CodeUnknownOp:          "UnknownOp",
	CodeUnsupportedVersion: "UnsupportedVersion",
	CodeTooLarge:           "TooLarge",
	CodeBusy:               "Busy",
	CodeNotLeader:          "NotLeader",
	CodeTimeout:            "Timeout",
	CodeUnavailable:        "Unavailable",
	CodeNotFound:           "NotFound",
	CodeTrimmed:            "Trimmed",
	CodeCanceled:           "Canceled",
	CodeInternal:           "Internal",
	CodeNoSpace:            "NoSpace",
	CodeSessionExpired:     "SessionExpired",
	CodePermissionDenied:   "PermissionDenied",
	CodeFailedPrecondition: "FailedPrecondition",
}

// String returns the name of c.
func (c Code) String() string {
	if c >= CodeBadRequest && c <= CodeFailedPrecondition {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", uint16(c))
}

// Error is the body of an Error frame and the error a Conn returns for it.
// Handlers return one to choose the code a client sees; any other error
// reaches the client as Internal (or Canceled or Timeout for context errors).
type Error struct {
	// Code classifies the error.
	Code Code `msgpack:"code"`
	// Message is for people; programs look at Code.
	Message string `msgpack:"message,omitempty"`
	// LeaderID is the current leader's node id, for NotLeader, when known.
	LeaderID string `msgpack:"leader_id,omitempty"`
	// LeaderAddr is the current leader's client address, for NotLeader,
	// when known.
	LeaderAddr string `msgpack:"leader_addr,omitempty"`
	// Version is the protocol version the server speaks, for
	// UnsupportedVersion.
	Version uint8 `msgpack:"version,omitempty"`
	// MemberID is, for NotLeader to a request that names a log (its log
	// field is set) or to a log operation, the node id of a member of that
	// log when its leader is not known: a node that hosts the log, and may
	// know its leader, to ask next. Servers never set it (nor MemberAddr)
	// in answers to other requests: clients older than named logs, which
	// send no others, refuse a body with fields they do not know.
	MemberID string `msgpack:"member_id,omitempty"`
	// MemberAddr is the client address of the member MemberID names.
	MemberAddr string `msgpack:"member_addr,omitempty"`
}

// Error formats e as "transport: <code>: <message> (leader <id> at <addr>)",
// or "(member <id> at <addr>)" for a member hint.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("transport: ")
	b.WriteString(e.Code.String())
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.LeaderID != "" || e.LeaderAddr != "" {
		fmt.Fprintf(&b, " (leader %q at %q)", e.LeaderID, e.LeaderAddr)
	}
	if e.MemberID != "" || e.MemberAddr != "" {
		fmt.Fprintf(&b, " (member %q at %q)", e.MemberID, e.MemberAddr)
	}
	if e.Code == CodeUnsupportedVersion && e.Version != 0 {
		fmt.Fprintf(&b, " (server speaks version %d)", e.Version)
	}
	return b.String()
}

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, &Error{Code: CodeNotLeader}) tests for a code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// ErrorCode returns the code of the first *Error in err's chain, or 0 when
// there is none.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// errorf builds an *Error.
func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
