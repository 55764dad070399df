// Package client is the Go client of a raftlog cluster: a Raft-replicated
// log whose members each serve the client protocol of package transport.
// It owns connections to members, leader following, retries with backoff
// and the session that lets the cluster store a retried append once.
//
// # Use
//
//	c, err := client.Dial(ctx, []string{"10.0.0.1:7001", "10.0.0.2:7001"}, nil)
//	idx, err := c.Append(ctx, []byte("hello"))              // raft indexes
//	f := c.AppendAsync(ctx, []byte("world"))                // returns at once
//	idx, err = f.Indexes(), f.Err()                         // wait for it
//	recs, next, err := c.Read(ctx, 1, client.ReadOptions{}) // linearizable
//	t := c.Tail(ctx, next, client.TailOptions{})            // follow the log
//	rec, err := t.Next()                                    // blocks
//
// # Named logs
//
// A cluster serves many logs, each its own raft group with its own
// leader. The Client's own record methods (Append, AppendAsync,
// TryAppendAsync, Flush, Read, Tail, Trim, Leader) use the default log,
// transport.DefaultLog, the single log of clusters older than named logs;
// Log(name) returns a handle with the same methods for another:
//
//	info, err := c.CreateLog(ctx, "orders", client.CreateLogOptions{Replicas: 3})
//	orders := c.Log("orders")
//	idx, err := orders.Append(ctx, []byte("order 1234 shipped"))
//	t := orders.Tail(ctx, 0, client.TailOptions{})
//
// CreateLog, ListLogs, DescribeLog and DeleteLog manage logs. The Client
// keeps, per log, the member believed to lead it, the pipeline of its
// appends with its own window (Options.MaxInFlightAppends and
// Options.MaxAppendRequests count per log) and its own session, so one
// log's leader change, outage or full window never holds up another's
// appends. Requests for the default log are those of the versions before
// named logs, and work with their servers; such a server refuses the rest,
// and the Client returns an error wrapping ErrNoNamedLogs.
//
// Exactly once holds per log, as below for the default log: each log's
// state machine keeps its own sessions, and the Client numbers the append
// requests of each log apart, from 1, with each log's own session base.
// The session id of the default log's appends is Options.ClientID; that of
// another log's is ClientID/name (a hash of ClientID in its place when
// that would be longer than transport.MaxIDLength), so that no server can
// ever mix two logs' sequence numbers in one session. A log deleted and
// created again under its name is a new log with no sessions: the Client's
// appends to it open a new session.
//
// # Asynchronous appends
//
// AppendAsync submits an append and returns an AppendFuture at once; its
// Done channel closes when the append has completed, and Indexes and Err
// then hold the outcome, the same as Append would have returned. One
// goroutine can so keep thousands of appends in flight, up to
// Options.MaxInFlightAppends (the window, shared with Append): when the
// window is full, AppendAsync (and Append) wait for room, and
// TryAppendAsync fails at once with ErrWindowFull. Flush waits for every
// append submitted before it. An append's context bounds it as it bounds
// Append: when the context ends first, the future fails at once with its
// error.
//
// The Client sends appends itself: they wait in a queue, and one goroutine
// packs those waiting into requests (up to 1,024 records and 4 MiB each)
// and sends them, at most Options.MaxAppendRequests at a time, over the
// connection to the leader; replies, timeouts and backoffs are handled as
// they come, without a goroutine per append or per request. So appends
// submitted while a request is in flight go together in the next one, which
// is what makes many appends in flight cheap for the cluster too. Append is
// AppendAsync and a wait for the future, so appends from many goroutines
// are packed the same way.
//
// # Order
//
// The records of one append are stored in the order given, at increasing
// indexes. Across appends, of the appends of one Client that succeed, one
// submitted earlier (its Append or AppendAsync call returned, or
// TryAppendAsync gave a future, before the other's began) is stored at
// lower indexes; appends submitted concurrently from several goroutines
// are ordered as they entered the queue. Retries and leader changes do not
// change that. With the default Options.MaxAppendRequests of 1, a request
// is sent only once the one before it has completed. With more, requests
// overlap, and each names the one before it that has not completed
// (transport.AppendRequest.After): the server proposes the appends of a
// connection in the order they arrived and stores a request only after
// the one it names, refusing it otherwise (Busy, retried), so the order
// holds through failures too; servers older than that field refuse such
// requests as malformed. Futures complete in submission order with one
// request in flight; with several, a later one may complete first. A
// future whose context ends completes at once. An append that fails
// promises nothing about where its records went, if anywhere: an attempt
// stranded at a deposed leader may still be stored after later appends,
// and an append split for being too large for the server (it goes again
// in requests of its own) is stored after the appends packed after it.
//
// # Leader following
//
// Appends, linearizable reads, tails and membership changes go to the
// member believed to lead (the log's, for the requests of a log; the
// catalog's, for CreateLog and DeleteLog). A follower answers them with
// NotLeader and, when it knows it, the leader's client address: the Client
// moves there at once (the first time in an operation; later redirects
// back off) and remembers the address. A NotLeader that names a member of
// the log instead (its leader not known) moves the log's requests there
// the same way, without taking that member for the leader. Without an
// address, and when a member cannot be reached or is Unavailable, the
// Client tries the next known member in turn. Each of these moves the
// requests of the one log (or the catalog) only. Stale reads and stale tails go to the member given or the one the
// Client talks to, and do not follow the leader.
//
// # Retries and duplicates
//
// Failed attempts are retried with exponential backoff and jitter, each
// under Options.RequestTimeout, until Options.RetryTimeout or the
// operation's context ends; the Client then returns a *RetryError naming
// the members tried, the number of attempts and the cause (see below).
// Error codes that retrying cannot help (BadRequest, TooLarge, Trimmed,
// NotFound, UnknownOp, UnsupportedVersion, Internal, SessionExpired,
// PermissionDenied, FailedPrecondition) are returned at once, wrapped, so
// errors.Is(err, &transport.Error{Code: c}) and transport.ErrorCode work:
// a log that does not exist is NotFound naming it, a duplicate CreateLog
// FailedPrecondition naming it.
//
// What a failed attempt leads to:
//   - NotLeader naming the leader: the leader, as above.
//   - NotLeader without one, Unavailable, a failure to connect, a TLS
//     handshake that failed (a certificate not trusted or refused), and
//     Busy for the whole connection (the member has as many client
//     connections open as it allows and refused ours): the next member.
//     Once every known member has failed the TLS handshake, the client
//     gives up at once: a certificate problem does not mend by waiting.
//   - Busy for one request (too many in flight on the connection) and
//     NoSpace (appends refused while too few members have free space): the
//     same member, after a backoff, until the retries run out.
//   - A lost connection or no reply within RequestTimeout: the same member
//     or the next, for requests that may be repeated (see below).
//
// Two of these go without a backoff, so that a leader's death costs the
// Client no wait of its own: the first redial after a lost connection in
// an operation (a member whose process died refuses it at once), and a
// move to a member the operation has not tried after a failure to
// connect. A follower that has just lost its leader holds the request
// until it knows the new one, and then names it or, having won, serves it.
//
// Every request of appends carries the Client's id (Options.ClientID) and
// a sequence number of its own, from 1, and every retry repeats both, and
// the same appends, so the cluster stores its records exactly once even
// when a leader committed them and then failed before replying, and
// answers the repeat with the original indexes. This holds while the
// sequence numbers in flight stay within the server's window (SeqWindow),
// which the Client ensures, and while no other Client uses the same id. An
// append that fails may or may not have been stored; appending the same
// records again is a new append, which may store them a second time. The
// one case where appends leave a request for others: a request that the
// member refused as too large (TooLarge) before any attempt of it could
// have stored anything is split, and each of its appends goes again in a
// request of its own, under a new sequence number.
//
// The cluster keeps the sessions of the 8,192 most recently active client
// ids (each with its last SeqWindow requests of appends, and at most
// 262,144 record indexes) and remembers the last 65,536 it evicted. Every
// request of appends also carries the Client's session base
// (transport.AppendRequest.Base): 1 while none of its appends may have been
// stored, then the oldest sequence number it has in flight. With it, the
// cluster refuses with SessionExpired, instead of storing a second time, a
// request it cannot check: a retry whose session was evicted, or a
// sequence number below the session's window. SessionExpired fails the
// request's appends at once; that attempt stored nothing. Read the log to
// learn what was stored, and go on with a new Client. An id the cluster
// neither holds nor remembers evicting has no entry in the log, and opens a
// new session. Left open: a Client whose session was evicted and then
// forgotten (73,728 newer sessions) while it retried a request may have
// that one stored twice.
//
// Reads, ListLogs and DescribeLog are retried like appends. Join, Remove,
// TransferLeadership, Trim, CreateLog and DeleteLog are retried only when
// they certainly did not run: after NotLeader,
// Unavailable or Busy replies, failures to connect and failed TLS
// handshakes. A lost connection or a timeout after such a request was sent
// is returned, as "outcome unknown". Backup is retried like a read until
// the first bytes of the backup arrive, and not after. Log.Restore follows
// the log's leader, uploading again from the start when the leadership
// moves during the upload; a failure of its last part leaves its outcome
// unknown.
//
// # Errors after retries
//
// The error a *RetryError reports (its Err, which it unwraps to) is the
// most informative failure of all the attempts, not merely the last: the
// NotLeader replies and timeouts of an election often come last and hide
// why the operation could not succeed. Failures rank, from most to least
// informative:
//
//  1. a definite refusal: NoSpace, PermissionDenied, a TLS failure (the
//     member's certificate is not trusted, the member refused ours, or
//     one side does not speak TLS);
//  2. Busy for the whole connection: a member at its connection limit;
//  3. Unavailable or Busy with the member's reason (no quorum, shutting
//     down, too many requests in flight);
//  4. a member that could not be reached or dropped the connection
//     (connection refused, reset or closed);
//  5. NotLeader, Timeout, Canceled, Unavailable without a reason, and
//     attempts or dials that got no reply within RequestTimeout.
//
// Of equally informative failures the latest is kept. When the last
// attempt's failure is not the one reported, RetryError.Last holds it and
// the message ends with "; last error: ...". An attempt cut short by
// RetryTimeout itself is not counted as a failure unless it was the only
// one. The message says "no leader reachable" (or "no member reachable")
// when the failure reported is of rank 4 or 5, and "gave up" otherwise.
//
// # Concurrency
//
// A Client is safe for use by any number of goroutines. It keeps one
// transport.Conn per member address, shared by every goroutine (a Conn
// pipelines requests), drops one that fails and dials again when next
// needed; no lock is held across a network call. At most
// Options.MaxInFlightAppends appends per log are in flight; more wait (see
// "Order" for the order they are stored in). An AppendFuture may be used
// from any goroutine. A Tail is used by one goroutine at a time, but may be
// closed from any. Close fails every call in flight and completes every
// AppendFuture.
//
// # What it does not do
//
// It does not discover members beyond those given and those named as
// leaders, balance reads across members, or set up TLS (Options.Dial can).
// The protocol has no keep-alive: a member that vanishes without closing
// its connections is noticed by RequestTimeout for requests, and for tails
// only by TCP keep-alive, which the default dialer turns on.
package client
