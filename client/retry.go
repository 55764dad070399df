package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// action is what follows a failed attempt.
type action int

const (
	// stop: return the error.
	stop action = iota
	// again: back off, then try the same member.
	again
	// next: back off, then try the next known member.
	next
	// follow: try the leader the error names.
	follow
	// hint: try the member of the log the error names (its leader is
	// not known).
	hint
)

// classify decides what follows an attempt that failed with err. A
// repeatable request has no further effect when repeated (reads, appends
// tagged with a session); others are retried only when they certainly had
// no effect. ambiguous reports a request whose effect is unknown. leader
// is the member to follow or to take the hint of.
func classify(err error, repeatable bool) (act action, leader string, ambiguous bool) {
	var de *dialError
	var te *transport.Error
	switch {
	case tlsFailure(err):
		// The handshake failed, so nothing was served; another member
		// may hold a certificate that works.
		return next, "", false
	case errors.As(err, &de):
		return next, "", false // nothing was sent
	case errors.As(err, &te):
		switch te.Code {
		case transport.CodeNotLeader:
			if te.LeaderAddr != "" {
				return follow, te.LeaderAddr, false
			}
			if te.MemberAddr != "" {
				return hint, te.MemberAddr, false
			}
			return next, "", false
		case transport.CodeUnavailable:
			return next, "", false
		case transport.CodeBusy:
			if errors.Is(err, transport.ErrClosed) {
				// The member refused the whole connection (transport.Refuse):
				// it has as many open as it allows. Another has room.
				return next, "", false
			}
			return again, "", false // refused before it ran
		case transport.CodeNoSpace:
			// Refused before anything was stored; space may be freed
			// before the retries run out.
			return again, "", false
		case transport.CodeTimeout:
			if repeatable {
				return again, "", false
			}
			return stop, "", true
		case transport.CodeCanceled:
			// Not ours: the caller's context was checked first. The
			// member is likely shutting down.
			if repeatable {
				return next, "", false
			}
			return stop, "", true
		}
		// SessionExpired, PermissionDenied, FailedPrecondition and the
		// codes of bad requests: repeating cannot help.
		return stop, "", false
	case errors.Is(err, transport.ErrClosed):
		// The connection failed; the next attempt redials the member.
		if repeatable {
			return again, "", false
		}
		return stop, "", true
	case errors.Is(err, context.DeadlineExceeded):
		// No reply within RequestTimeout: the member may be gone without
		// a word (a half-open connection), so try another; a follower
		// sends us back to the leader if it still leads.
		if repeatable {
			return next, "", false
		}
		return stop, "", true
	case errors.Is(err, io.EOF):
		return again, "", false // a stream the member ended
	}
	return stop, "", false
}

// retrier runs the attempts of one operation: it picks members, counts
// attempts, backs off and decides when to give up. It belongs to the
// goroutine running the operation, or, for a request of appends, is
// guarded by pipeline.mu.
type retrier struct {
	c          *Client
	op         string       // the operation, for errors: "append", ...
	log        string       // the log named by the request, for errors; "" for the default log and none
	lr         *leaderRoute // the route of the operation's log (or of the catalog)
	named      bool         // the request is one a server older than named logs refuses
	rt         route        // which members the operation may go to
	member     string       // the member of toMember
	repeatable bool         // see classify
	start      time.Time    // first attempt
	deadline   time.Time    // start + RetryTimeout
	attempts   int          // attempts begun
	backoffs   int          // backoffs waited, the exponent of the next
	followed   []string     // the leaders NotLeader replies named and the operation went to without a wait
	// unreachable holds the members a connection to failed in this
	// operation (nothing was sent), and when.
	unreachable map[string]time.Time
	tried       []string // members tried, in the order first tried
	last        error    // the last attempt's error, naming its member
	best        error    // the most informative attempt's error (see rankOf), naming its member
	bestRank    rank     // the rank of best
	lastIsBest  bool     // last is best: the last attempt was the most informative
	// tlsRefused holds the members whose TLS handshake failed: once it
	// holds every known member, no retry can help.
	tlsRefused map[string]bool
	// redialed: the operation redialled a member at once after losing
	// its connection (see next).
	redialed bool
}

// newRetrier returns the retrier of an operation named op (as errors name
// it) on the log named log ("" for the default log, or an operation on no
// log) that goes to the members of lr as rt says; named says that the
// request is one that a server older than named logs refuses: it names a
// log other than the default one, or is a log operation.
func (c *Client) newRetrier(op, log string, lr *leaderRoute, named bool, rt route, member string, repeatable bool) *retrier {
	now := time.Now()
	return &retrier{
		c:          c,
		op:         op,
		log:        log,
		lr:         lr,
		named:      named,
		rt:         rt,
		member:     member,
		repeatable: repeatable,
		start:      now,
		deadline:   now.Add(c.opts.RetryTimeout),
	}
}

// name names the operation in errors: "append", `append (log "orders")`.
func (r *retrier) name() string { return opName(r.op, r.log) }

// opName names the operation op on the log named log in errors: op alone
// for the default log; `append (log "orders")`, or `delete log "orders"`
// for the log operations, otherwise.
func opName(op, log string) string {
	switch {
	case log == "":
		return op
	case strings.HasSuffix(op, " log"):
		return fmt.Sprintf("%s %q", op, log)
	}
	return fmt.Sprintf("%s (log %q)", op, log)
}

// addr returns the member for the next attempt.
func (r *retrier) addr() string {
	if r.rt == toMember {
		return r.member
	}
	return r.c.current(r.lr)
}

// begin counts an attempt at addr.
func (r *retrier) begin(addr string) {
	r.attempts++
	for _, a := range r.tried {
		if a == addr {
			return
		}
	}
	r.tried = append(r.tried, addr)
}

// attemptDeadline returns when an attempt starting now must end: after
// RequestTimeout, but not after the retries' deadline.
func (r *retrier) attemptDeadline() time.Time {
	d := time.Now().Add(r.c.opts.RequestTimeout)
	if d.After(r.deadline) {
		return r.deadline
	}
	return d
}

// failed decides what follows the attempt at addr that failed with err:
// it returns nil to try again, after waiting for any backoff, or the
// error the operation returns.
func (r *retrier) failed(ctx context.Context, addr string, err error) error {
	if r.c.isClosed() || errors.Is(err, ErrClosed) {
		return fmt.Errorf("client: %s: %w", r.name(), ErrClosed)
	}
	if ctx.Err() != nil {
		return r.giveUp(ctx.Err())
	}
	d, now, err := r.next(addr, err)
	if err != nil || now {
		return err
	}
	return r.wait(ctx, d)
}

// next decides what follows the attempt at addr that failed with err,
// without waiting: another attempt at once (now), one after the backoff d,
// or none, and the error the operation returns. It moves the Client's
// target as the failure says. Closing and the operation's context are
// the caller's to check.
func (r *retrier) next(addr string, err error) (d time.Duration, now bool, _ error) {
	c := r.c
	act, leader, ambiguous := classify(err, r.repeatable)
	if (act == follow || act == hint) && r.rt == toMember {
		act = stop
	}
	if de := (*dialError)(nil); errors.As(err, &de) {
		if r.unreachable == nil {
			r.unreachable = map[string]time.Time{}
		}
		r.unreachable[addr] = time.Now()
	}
	if (act == follow || act == hint) && leader != addr && r.justUnreachable(leader) {
		// The member names one this operation could not connect to a
		// moment ago: a leader whose process is gone, named by a member
		// that has not noticed yet. Another member may know better.
		act = next
	}
	if act == stop {
		if r.named && olderServer(err) {
			return 0, false, fmt.Errorf("client: %s: %w (%s: %w)", r.name(), ErrNoNamedLogs, addr, err)
		}
		if ambiguous {
			return 0, false, fmt.Errorf("client: %s: outcome unknown: %w", r.name(), atAddr(addr, err))
		}
		return 0, false, fmt.Errorf("client: %s: %w", r.name(), atAddr(addr, err))
	}
	pastDeadline := !time.Now().Before(r.deadline)
	r.note(addr, err, pastDeadline && errors.Is(err, context.DeadlineExceeded))
	if pastDeadline {
		return 0, false, r.giveUp(nil)
	}
	if tlsFailure(err) {
		if r.tlsRefused == nil {
			r.tlsRefused = map[string]bool{}
		}
		r.tlsRefused[addr] = true
		if r.rt == toMember || c.allKnownIn(r.tlsRefused) {
			// Every member refused the handshake, or failed it: a
			// certificate problem that waiting does not mend.
			return 0, false, r.giveUp(nil)
		}
	}
	switch act {
	case follow, hint:
		if act == follow {
			c.follow(r.lr, leader)
		} else {
			c.hint(r.lr, leader)
		}
		// A redirect to a leader no reply named before goes at once: the
		// first, and the one a member gives once it knows the new leader
		// after a failover (the replies before may have named the old
		// one). A leader named again waits for the backoff, so that
		// members naming each other cannot keep the client spinning.
		if leader != addr && !slices.Contains(r.followed, leader) {
			r.followed = append(r.followed, leader)
			return 0, true, nil
		}
	case again:
		// A lost connection: the member's process may be gone (its
		// sockets closed when it died), and a dial says so at once,
		// refused; or the connection alone failed. Either way, one
		// redial goes without a wait.
		if !r.redialed && errors.Is(err, transport.ErrClosed) {
			r.redialed = true
			return 0, true, nil
		}
	case next:
		if r.rt != toMember {
			c.advance(r.lr, addr, r.justUnreachable)
			// A member that refused the connection (its process is
			// gone, most likely) sends the operation on at once to a
			// member it has not tried: a survivor that holds it until
			// it knows the new leader (replica.Leading), or names it.
			// Each member is tried so once, then the backoff applies.
			if de := (*dialError)(nil); errors.As(err, &de) && !slices.Contains(r.tried, c.current(r.lr)) {
				return 0, true, nil
			}
		}
	}
	d = c.backoff(r.backoffs)
	r.backoffs++
	if rem := time.Until(r.deadline); d > rem {
		d = rem
	}
	return d, false, nil
}

// unreachableFor is how long a member a connection to failed is passed
// over: long enough for a failover (an election and the news of it), short
// enough for a restarted member to be asked again within the operation.
const unreachableFor = time.Second

// justUnreachable reports whether a connection to addr failed in this
// operation within unreachableFor.
func (r *retrier) justUnreachable(addr string) bool {
	at, ok := r.unreachable[addr]
	return ok && time.Since(at) < unreachableFor
}

// note records err, the failure of the attempt at addr, as the last one
// and, unless an earlier one was more informative, as the one to report.
// An attempt cut short by the retries' deadline says nothing new: it is
// recorded only if it is the first.
func (r *retrier) note(addr string, err error, cutShort bool) {
	if cutShort && r.last != nil {
		return
	}
	e := atAddr(addr, err)
	r.last = e
	r.lastIsBest = false
	if k := rankOf(err); r.best == nil || k >= r.bestRank {
		r.best, r.bestRank, r.lastIsBest = e, k, true
	}
}

// wait waits for the backoff d before the next attempt.
func (r *retrier) wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return r.giveUp(ctx.Err())
	case <-r.c.done:
		return fmt.Errorf("client: %s: %w", r.name(), ErrClosed)
	}
	return r.expired()
}

// expired returns the error to give up with once RetryTimeout has passed,
// nil before.
func (r *retrier) expired() error {
	if !time.Now().Before(r.deadline) {
		return r.giveUp(nil)
	}
	return nil
}

// giveUp returns the error of an operation whose retries ran out: because
// ctx ended (ctxErr) or RetryTimeout passed (ctxErr nil).
func (r *retrier) giveUp(ctxErr error) error {
	if r.best == nil {
		return fmt.Errorf("client: %s: %w", r.name(), ctxErr)
	}
	what := "no member reachable"
	switch {
	case r.bestRank > rankUnreachable:
		what = "gave up" // a member answered, or refused for a reason
	case r.rt == toLeader:
		what = "no leader reachable"
	}
	re := &RetryError{
		Op:       r.op,
		Log:      r.log,
		Attempts: r.attempts,
		Elapsed:  time.Since(r.start),
		Tried:    r.tried,
		Err:      r.best,
		Context:  ctxErr,
		what:     what,
	}
	if !r.lastIsBest {
		re.Last = r.last
	}
	return re
}

// backoff returns the wait after n earlier backoffs: MinBackoff doubled n
// times, at most MaxBackoff, less a random part of up to half.
func (c *Client) backoff(n int) time.Duration {
	d := c.opts.MaxBackoff
	if n < 32 {
		if b := c.opts.MinBackoff << n; b > 0 && b < d {
			d = b
		}
	}
	return d/2 + rand.N(d/2+1)
}
