package client

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrClosed is returned, wrapped with the operation, by calls made after
// Close and by calls that Close interrupted; Tail.Next returns it after
// Tail.Close too.
var ErrClosed = errors.New("client: closed")

// RetryError reports an operation that was retried until RetryTimeout or
// its context ran out without succeeding. Its message is meant for people:
//
//	client: append: no leader reachable after 12 attempts over 30s (tried 127.0.0.1:7001, 127.0.0.1:7002): dial tcp 127.0.0.1:7002: connect: connection refused
//
// It unwraps to the last attempt's error and, when the context ended the
// retries, to the context's error, so errors.Is(err, context.Canceled) and
// transport.ErrorCode(err) work.
type RetryError struct {
	// Op names the operation: "append", "read", "tail", "join", ...
	Op string
	// Attempts is how many attempts were made.
	Attempts int
	// Elapsed is the time from the first attempt to giving up.
	Elapsed time.Duration
	// Tried lists the member addresses tried, in the order first tried.
	Tried []string
	// Err is the last attempt's error; it names the member.
	Err error
	// Context is the context's error when the context ended the retries,
	// nil when RetryTimeout did.
	Context error

	what string // "no leader reachable" or "no member reachable"
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
	return fmt.Sprintf("client: %s: %s after %d attempt%s over %v (tried %s): %v",
		e.Op, reason, e.Attempts, s, roundDuration(e.Elapsed), strings.Join(e.Tried, ", "), e.Err)
}

// Unwrap returns the context's error, if any, and the last attempt's error.
func (e *RetryError) Unwrap() []error {
	if e.Context != nil {
		return []error{e.Context, e.Err}
	}
	return []error{e.Err}
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
