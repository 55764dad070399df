package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// Client is a connection to a raftlog cluster. It is safe for concurrent
// use; see the package documentation.
type Client struct {
	opts   Options            // immutable, defaults applied
	ctx    context.Context    // immutable: bounds dials; cancelled by Close
	cancel context.CancelFunc // immutable
	done   chan struct{}      // immutable: closed by Close
	def    *logState          // immutable: the default log, which the Client's own methods use
	wg     sync.WaitGroup     // dial goroutines and the pipelines' senders

	mu      sync.Mutex           // guards the fields below and those of every leaderRoute; never held across a network call
	conns   map[string]*member   // per member address; nil once closed
	addrs   []string             // known member addresses: Dial's, then learned ones
	logs    map[string]*logState // the named logs used so far, by name
	catalog leaderRoute          // where CreateLog and DeleteLog go
}

// Dial returns a Client of the cluster whose members' client addresses
// (host:port) include addrs. It connects to the first member in addrs that
// answers, trying each in turn under RequestTimeout; nil opts means the
// defaults. When none answers, the error names every address and why.
// Requests follow the leader from there; addresses that members name as
// the leader are learned.
func Dial(ctx context.Context, addrs []string, opts *Options) (*Client, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	known, err := checkAddrs(addrs)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		opts:    o,
		ctx:     cctx,
		cancel:  cancel,
		done:    make(chan struct{}),
		conns:   make(map[string]*member),
		addrs:   known,
		logs:    make(map[string]*logState),
		catalog: leaderRoute{target: known[0]},
	}
	c.def = newLogState(c, "")
	c.def.route.target = known[0]
	var errs []error
	var msgs []string
	for _, addr := range known {
		actx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
		_, err := c.conn(actx, addr)
		cancel()
		if err == nil {
			c.mu.Lock()
			c.def.route.target = addr
			c.catalog.target = addr
			c.mu.Unlock()
			return c, nil
		}
		if ctx.Err() != nil {
			c.Close()
			return nil, fmt.Errorf("client: dial: %w", ctx.Err())
		}
		err = atAddr(addr, errors.Unwrap(err))
		errs = append(errs, err)
		msgs = append(msgs, err.Error())
	}
	c.Close()
	return nil, &listError{msg: "client: dial: no member reachable: " + strings.Join(msgs, "; "), errs: errs}
}

// checkAddrs returns addrs without repeats, or an error for an empty list
// or an address that is not host:port.
func checkAddrs(addrs []string) ([]string, error) {
	var known []string
	seen := make(map[string]bool)
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("client: dial: address %q is not host:port", a)
		}
		if !seen[a] {
			seen[a] = true
			known = append(known, a)
		}
	}
	if len(known) == 0 {
		return nil, errors.New("client: dial: no member addresses")
	}
	return known, nil
}

// isClosed reports whether Close has been called.
func (c *Client) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// do runs call, retrying as r says, and returns nil once an attempt
// succeeds or the error r gives up with.
func (c *Client) do(ctx context.Context, r *retrier, call func(ctx context.Context, conn *transport.Conn) error) error {
	for {
		addr := r.addr()
		r.begin(addr)
		err := c.attempt(ctx, r, addr, call)
		if err == nil {
			if r.rt == toLeader {
				c.confirm(r.lr, addr)
			}
			return nil
		}
		if err = r.failed(ctx, addr, err); err != nil {
			return err
		}
	}
}

// attempt makes one attempt at addr under the attempt's deadline.
func (c *Client) attempt(ctx context.Context, r *retrier, addr string, call func(ctx context.Context, conn *transport.Conn) error) error {
	start := time.Now()
	actx, cancel := context.WithDeadline(ctx, r.attemptDeadline())
	defer cancel()
	conn, err := c.conn(actx, addr)
	if err == nil {
		err = call(actx, conn)
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		if _, dial := err.(*dialError); !dial {
			err = fmt.Errorf("no reply within %v: %w", roundDuration(time.Since(start)), err)
		}
	}
	return err
}

// Append appends records, in order, and returns their raft indexes once
// they are committed. The records must not be modified until Append
// returns. It is AppendAsync followed by a wait for the future: the
// records may go in one request with other appends.
//
// Append tags the request carrying the records with the Client's id and a
// sequence number of its own and retries it with the same ones after
// connection failures, leader changes and the retryable error codes, so
// the cluster stores it exactly once and answers a repeat with the
// original indexes. When Append returns an error, the records may or may
// not have been stored, unless the error carries a code the server only
// answers with before storing anything (BadRequest, TooLarge). At most
// Options.MaxInFlightAppends appends are in flight; further calls wait
// for their turn.
//
// Append appends to the default log; Log(name).Append appends to another.
func (c *Client) Append(ctx context.Context, records ...[]byte) ([]uint64, error) {
	return c.def.append(ctx, records)
}

// ReadOptions configure a Read.
type ReadOptions struct {
	// MaxRecords bounds the records returned; 0 means the server's limit.
	MaxRecords uint32
	// MaxBytes bounds the record data returned; 0 means the server's
	// limit. At least one record is returned when one is available.
	MaxBytes uint32
	// Stale lets a member answer from its own log without confirming that
	// it leads: faster, and served by followers, but possibly behind.
	Stale bool
	// Addr is the member to read from when Stale is set; "" means the
	// member the Client talks to, or another one if that one fails. It must
	// be "" unless Stale is set.
	Addr string
}

// Read returns committed records from index from on (0: the first
// retained record) and the index to read from next. Records is empty when
// nothing is committed at or past from. A read below the first retained
// record fails with Trimmed.
//
// A read is linearizable and goes to the leader, unless opts.Stale is set:
// then it goes to opts.Addr, or to the member the Client talks to, and does
// not follow the leader. Reads are retried like appends.
//
// Read reads the default log; Log(name).Read reads another.
func (c *Client) Read(ctx context.Context, from uint64, opts ReadOptions) (records []transport.Record, next uint64, err error) {
	return c.def.read(ctx, from, opts)
}

// Status describes the member at addr, or the member the Client talks to
// when addr is "". It makes one attempt under RequestTimeout, reusing the
// Client's connection to the member or opening one that the Client keeps:
// it reports on one member and neither retries nor follows the leader. A
// leader address in the reply is remembered.
//
// The reply carries the member's details (version and settings,
// StatusResponse.Details), except from a member older than them: such a
// member refuses to be asked for them (BadRequest), and Status asks it
// again without.
func (c *Client) Status(ctx context.Context, addr string) (*transport.StatusResponse, error) {
	if addr == "" {
		addr = c.current(&c.def.route)
	}
	actx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	conn, err := c.conn(actx, addr)
	resp := new(transport.StatusResponse)
	if err == nil {
		err = conn.Call(actx, transport.OpStatus, &transport.StatusRequest{Details: true}, resp)
		if transport.ErrorCode(err) == transport.CodeBadRequest {
			*resp = transport.StatusResponse{}
			err = conn.Call(actx, transport.OpStatus, &transport.StatusRequest{}, resp)
		}
	}
	if err != nil {
		if c.isClosed() {
			return nil, fmt.Errorf("client: status: %w", ErrClosed)
		}
		return nil, fmt.Errorf("client: status: %w", atAddr(addr, err))
	}
	if resp.LeaderAddr != "" {
		c.learn(resp.LeaderAddr)
	}
	return resp, nil
}

// callLeader sends a request that only the leader (of the default log
// unless r says otherwise) serves and that must not run twice: it is
// retried only after NotLeader, Unavailable and Busy replies and failures
// to connect, when it certainly did not run.
func callLeader[Resp any](ctx context.Context, c *Client, name string, op transport.Op, req any) (*Resp, error) {
	return call[Resp](ctx, c, c.newRetrier(name, "", &c.def.route, false, toLeader, "", false), op, req)
}

// call sends a request, retrying it as r says.
func call[Resp any](ctx context.Context, c *Client, r *retrier, op transport.Op, req any) (*Resp, error) {
	resp := new(Resp)
	err := c.do(ctx, r, func(ctx context.Context, conn *transport.Conn) error {
		*resp = *new(Resp)
		return conn.Call(ctx, op, req, resp)
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// Join adds a node to the cluster as a voter and returns the raft index of
// the configuration change. Like Remove, TransferLeadership and Trim, it
// goes to the leader and is retried only when it certainly did not run:
// after NotLeader, Unavailable or Busy, or a failure to connect. An error
// that says "outcome unknown" (a lost connection, a timeout) leaves it to
// the caller to check, with Status, whether the change happened.
func (c *Client) Join(ctx context.Context, req transport.JoinRequest) (uint64, error) {
	resp, err := callLeader[transport.JoinResponse](ctx, c, "join", transport.OpJoin, &req)
	if err != nil {
		return 0, err
	}
	return resp.Index, nil
}

// Remove removes the node nodeID from the cluster and returns the raft
// index of the configuration change. It is retried as Join is.
func (c *Client) Remove(ctx context.Context, nodeID string) (uint64, error) {
	resp, err := callLeader[transport.RemoveResponse](ctx, c, "remove", transport.OpRemove, &transport.RemoveRequest{NodeID: nodeID})
	if err != nil {
		return 0, err
	}
	return resp.Index, nil
}

// TransferLeadership asks the leader to hand leadership to the voter whose
// node id is target, or to one raft chooses when target is "". It is
// retried as Join is. Once it succeeds the leader is no longer known; the
// next request finds the new one.
func (c *Client) TransferLeadership(ctx context.Context, target string) error {
	_, err := callLeader[transport.TransferLeadershipResponse](ctx, c, "transfer leadership", transport.OpTransferLeadership, &transport.TransferLeadershipRequest{Target: target})
	if err != nil {
		return err
	}
	c.forgetLeader(&c.def.route)
	return nil
}

// Trim drops every record of the default log below index below on every
// member and returns the raft index of the trim command. It is retried as
// Join is. Log(name).Trim trims another log.
func (c *Client) Trim(ctx context.Context, below uint64) (uint64, error) {
	return c.def.trim(ctx, below)
}

// Leader returns the client address of the member believed to lead the
// default log: the last one that served a leader's request or that a
// member named as the leader. It returns "" when the leader is not known,
// for example before the first such request. Log(name).Leader is another
// log's.
func (c *Client) Leader() string { return c.leaderOf(&c.def.route) }

// Close closes every connection. Calls in flight, and later calls, return
// an error wrapping ErrClosed; so do the Next calls of every Tail, and
// every AppendFuture not yet complete completes with it (Flush first to
// wait for them). Close waits for dials in progress to end and may be
// called more than once.
func (c *Client) Close() error {
	c.mu.Lock()
	members := c.conns
	c.conns = nil
	logs := []*logState{c.def}
	if members != nil {
		close(c.done)
		for _, l := range c.logs {
			logs = append(logs, l)
		}
	}
	c.mu.Unlock()
	if members == nil {
		return nil
	}
	c.cancel()
	for _, l := range logs {
		l.pipe.close()
	}
	closeConns(members)
	c.wg.Wait()
	return nil
}

// refusedBeforeStoring reports whether an append attempt that failed with
// err certainly stored nothing: the server answers these codes before it
// proposes anything.
func refusedBeforeStoring(err error) bool {
	switch transport.ErrorCode(err) {
	case transport.CodeBadRequest, transport.CodeTooLarge, transport.CodeNotLeader, transport.CodeBusy,
		transport.CodeNoSpace, transport.CodeSessionExpired, transport.CodeUnknownOp, transport.CodeUnsupportedVersion:
		return true
	}
	return false
}
