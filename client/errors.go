package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// ErrClosed is returned, wrapped with the operation, by calls made after
// Close and by calls that Close interrupted; Tail.Next returns it after
// Tail.Close too.
var ErrClosed = errors.New("client: closed")

// ErrNoNamedLogs is returned, wrapped with the operation and the member's
// own error, when a member is older than named logs: it answered a log
// operation (CreateLog, ListLogs, DescribeLog, DeleteLog) with UnknownOp,
// or a request naming a log other than the default one with BadRequest
// for the unknown field "log". Nothing was done. Requests for the default
// log, through the Client's own methods or Log(transport.DefaultLog),
// work with such members.
var ErrNoNamedLogs = errors.New("this server does not serve named logs (it is older than them)")

// olderServer reports whether err is how a member older than named logs
// answers a request that names a log or a log operation.
func olderServer(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) {
		return false
	}
	switch te.Code {
	case transport.CodeUnknownOp:
		return true
	case transport.CodeBadRequest:
		// go-msgpack's words for a field the body's type does not have,
		// as such a member's DecodeBody reports them.
		return strings.HasSuffix(te.Message, "with key log")
	}
	return false
}

// RetryError reports an operation that was retried until RetryTimeout or
// its context ran out without succeeding. Its message is meant for people:
//
//	client: append: gave up after 12 attempts over 30s (tried 127.0.0.1:7001, 127.0.0.1:7002): 127.0.0.1:7001: transport: NoSpace: ...; last error: 127.0.0.1:7002: transport: NotLeader: ...
//
// Err is the most informative failure of all the attempts (see "Errors
// after retries" in the package documentation), not merely the last one:
// a member that refused the request for a reason outranks the NotLeader
// replies and timeouts that followed. RetryError unwraps to Err and, when
// the context ended the retries, to the context's error, so
// errors.Is(err, context.Canceled) and transport.ErrorCode(err) work; it
// does not unwrap to Last.
type RetryError struct {
	// Op names the operation: "append", "read", "tail", "join", "create
	// log", ...
	Op string
	// Log names the log the operation named; empty for the default log
	// and for operations that name none.
	Log string
	// Attempts is how many attempts were made.
	Attempts int
	// Elapsed is the time from the first attempt to giving up.
	Elapsed time.Duration
	// Tried lists the member addresses tried, in the order first tried.
	Tried []string
	// Err is the most informative attempt's error; it names the member.
	// Of equally informative ones it is the latest.
	Err error
	// Last is the last attempt's error when it is not Err, nil otherwise;
	// it names the member.
	Last error
	// Context is the context's error when the context ended the retries,
	// nil when RetryTimeout did.
	Context error

	what string // "no leader reachable", "no member reachable" or "gave up"
}

// Error formats e as shown in the type's documentation.
func (e *RetryError) Error() string {
	reason := e.what
	if e.Context != nil {
		reason = e.Context.Error()
	}
	s := "s"
	if e.Attempts == 1 {
		s = ""
	}
	msg := fmt.Sprintf("client: %s: %s after %d attempt%s over %v (tried %s): %v",
		opName(e.Op, e.Log), reason, e.Attempts, s, roundDuration(e.Elapsed), strings.Join(e.Tried, ", "), e.Err)
	if e.Last != nil {
		msg += "; last error: " + e.Last.Error()
	}
	return msg
}

// Unwrap returns the context's error, if any, and the most informative
// attempt's error.
func (e *RetryError) Unwrap() []error {
	if e.Context != nil {
		return []error{e.Context, e.Err}
	}
	return []error{e.Err}
}

// rank orders the failures of attempts by how much they tell the caller
// about why an operation cannot succeed; a RetryError reports the failure
// of the highest rank. The ranks are documented in doc.go.
type rank int

const (
	// rankSilent: the cluster said nothing definite: NotLeader, a request
	// or dial that timed out, a reply of Timeout or Canceled, Unavailable
	// or Busy without a reason.
	rankSilent rank = iota + 1
	// rankUnreachable: no answer because the member could not be reached
	// or dropped the connection: connection refused, reset, closed.
	rankUnreachable
	// rankReason: a member answered Unavailable or Busy with its reason
	// (no quorum, shutting down, too many requests in flight).
	rankReason
	// rankAtLimit: a member refused the connection because it has as many
	// client connections open as it allows.
	rankAtLimit
	// rankRefusal: a definite refusal: NoSpace, PermissionDenied, and TLS
	// failures (a certificate not trusted or not accepted, TLS spoken to a
	// member that does not).
	rankRefusal
)

// rankOf returns the rank of err, the failure of one attempt.
func rankOf(err error) rank {
	if tlsFailure(err) {
		return rankRefusal
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.Code {
		case transport.CodeNoSpace, transport.CodePermissionDenied:
			return rankRefusal
		case transport.CodeBusy:
			if errors.Is(err, transport.ErrClosed) {
				return rankAtLimit // a refusal of the whole connection
			}
			if te.Message != "" {
				return rankReason
			}
		case transport.CodeUnavailable:
			if te.Message != "" {
				return rankReason
			}
		}
		return rankSilent
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return rankSilent
	}
	return rankUnreachable
}

// tlsFailure reports whether err is a failed TLS handshake: the member's
// certificate was not trusted, the member refused ours (an alert from it),
// or one side does not speak TLS. Nothing was served over such a
// connection.
func tlsFailure(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		header   tls.RecordHeaderError
		alert    tls.AlertError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		op       *net.OpError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &header), errors.As(err, &alert),
		errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid):
		return true
	case errors.As(err, &op) && op.Op == "remote error":
		// crypto/tls reports an alert the member sent as a *net.OpError
		// with this Op: "remote error: tls: certificate required".
		return true
	}
	return false
}

// roundDuration rounds d for people: to the millisecond below a second, to
// the tenth of a second above.
func roundDuration(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// atAddr makes sure err names the member it came from: a dial error from
// the net package already does.
func atAddr(addr string, err error) error {
	if strings.Contains(err.Error(), addr) {
		return err
	}
	return fmt.Errorf("%s: %w", addr, err)
}

// listError is an error made of several, all of which it unwraps to.
type listError struct {
	msg  string
	errs []error
}

func (e *listError) Error() string   { return e.msg }
func (e *listError) Unwrap() []error { return e.errs }
