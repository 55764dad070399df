package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// logState is what a Client keeps of one log: where its requests go, and
// its appends' pipeline and session.
type logState struct {
	c        *Client    // immutable
	name     string     // immutable: the log field of its requests; "" for the default log
	clientID string     // immutable: the session id of its appends
	seqs     *seqWindow // immutable: sequence numbers of its append requests
	pipe     *pipeline  // immutable: sends its appends
	// stored is set once an append to the log may have been stored; until
	// then every append tells the server its session is new
	// (sessionBase).
	stored atomic.Bool
	// running is set once the pipeline's sender has been started (at the
	// first append, under Client.mu).
	running atomic.Bool
	route   leaderRoute // guarded by Client.mu
}

// newLogState returns the state of the log whose log field is name.
func newLogState(c *Client, name string) *logState {
	l := &logState{
		c:        c,
		name:     name,
		clientID: sessionID(c.opts.ClientID, name),
		seqs:     newSeqWindow(c.opts.MaxAppendRequests),
	}
	l.pipe = newPipeline(l)
	return l
}

// sessionID returns the client id of the appends a Client whose id is
// clientID makes to the log whose log field is name: clientID itself for
// the default log, so that its session is what it was before named logs;
// clientID/name for another log (clientID's SHA-256, in hex, in place of
// clientID when that would be too long). Every log's state machine keeps
// sessions of its own, so the ids need not differ; they do so that the
// appends of two logs can never meet in one session, whatever a server
// keeps, and so that a server's logs tell them apart.
func sessionID(clientID, name string) string {
	if name == "" {
		return clientID
	}
	if len(clientID)+1+len(name) > transport.MaxIDLength {
		h := sha256.Sum256([]byte(clientID))
		clientID = hex.EncodeToString(h[:])
	}
	return clientID + "/" + name
}

// named reports whether requests of l name a log, which servers older than
// named logs refuse.
func (l *logState) named() bool { return l.name != "" }

// logName returns the log's name: transport.DefaultLog for the default log.
func (l *logState) logName() string { return transport.LogName(l.name) }

// startSender starts the pipeline's sender unless it runs already, or the
// Client is closed (the pipeline then fails every append).
func (l *logState) startSender() {
	if l.running.Load() {
		return
	}
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns == nil || l.running.Load() {
		return // closed: Close has waited for the senders already
	}
	l.running.Store(true)
	c.wg.Add(1)
	go l.pipe.run()
}

// sessionBase returns the session base an append carries
// (transport.AppendRequest.Base): 1 while none of the log's appends may
// have been stored, so that a cluster that holds no session of the Client
// on the log knows it is new; then the oldest sequence number still in
// flight, below which the Client never sends again.
func (l *logState) sessionBase() uint64 {
	if !l.stored.Load() {
		return 1
	}
	return l.seqs.oldest()
}

// retrier returns the retrier of the operation op on l.
func (l *logState) retrier(op string, rt route, member string, repeatable bool) *retrier {
	return l.c.newRetrier(op, l.name, &l.route, l.named(), rt, member, repeatable)
}

func (l *logState) append(ctx context.Context, records [][]byte) ([]uint64, error) {
	f, _ := l.pipe.submit(ctx, records, true, false)
	select {
	case <-f.done:
	case <-ctx.Done():
		l.pipe.cancel(f, ctx.Err())
		<-f.done
	}
	return f.indexes, f.err
}

func (l *logState) read(ctx context.Context, from uint64, opts ReadOptions) ([]transport.Record, uint64, error) {
	rt, addr := toLeader, ""
	switch {
	case opts.Stale && opts.Addr != "":
		rt, addr = toMember, opts.Addr
	case opts.Stale:
		rt = toAny
	case opts.Addr != "":
		return nil, 0, fmt.Errorf("client: %s: ReadOptions.Addr is set without Stale", opName("read", l.name))
	}
	req := &transport.ReadRequest{Log: l.name, From: from, MaxRecords: opts.MaxRecords, MaxBytes: opts.MaxBytes, Stale: opts.Stale}
	var resp transport.ReadResponse
	err := l.c.do(ctx, l.retrier("read", rt, addr, true), func(ctx context.Context, conn *transport.Conn) error {
		resp = transport.ReadResponse{}
		return conn.Call(ctx, transport.OpRead, req, &resp)
	})
	if err != nil {
		return nil, 0, err
	}
	return resp.Records, resp.Next, nil
}

func (l *logState) trim(ctx context.Context, below uint64) (uint64, error) {
	resp, err := call[transport.TrimResponse](ctx, l.c, l.retrier("trim", toLeader, "", false), transport.OpTrim, &transport.TrimRequest{Log: l.name, Below: below})
	if err != nil {
		return 0, err
	}
	return resp.Index, nil
}

// Log is one log of the cluster, as Client.Log returns it. Its methods
// are the Client's record methods (Append, AppendAsync, TryAppendAsync,
// Flush, Read, Tail, Trim, Leader, Backup) for this log, with the same guarantees,
// and may be called from any goroutine. See "Named logs" in the package
// documentation.
type Log struct {
	l   *logState // immutable; nil when err is set
	err error     // immutable: why the name is not a log's
}

// Log returns the log named name: transport.DefaultLog (or "") for the
// default log, whose Log does what the Client's own methods do, or a log
// created with CreateLog. A name that no log can have (see
// transport.CheckLogName) makes every method fail with BadRequest; a
// name that no log has makes them fail with NotFound, from the cluster.
//
// The Client keeps, per log, the member believed to lead it, a pipeline
// of appends (with its own window of Options.MaxInFlightAppends and
// Options.MaxAppendRequests) and a session: calling Log again with the
// same name returns a Log sharing them. The state of the logs used stays
// until Close.
func (c *Client) Log(name string) *Log {
	field := transport.LogField(name)
	if field == "" {
		return &Log{l: c.def}
	}
	if err := transport.CheckLogName(name); err != nil {
		return &Log{err: fmt.Errorf("client: log: %w", err)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.logs[name]
	if l == nil {
		l = newLogState(c, name)
		l.route.target = c.def.route.target
		if c.conns == nil {
			l.pipe.closed = true // Close has been: nothing is sent
		}
		c.logs[name] = l
	}
	return &Log{l: l}
}

// Name returns the log's name; transport.DefaultLog for the default log.
func (g *Log) Name() string {
	if g.l == nil {
		return ""
	}
	return g.l.logName()
}

// Append appends records to the log, as Client.Append does to the default
// log.
func (g *Log) Append(ctx context.Context, records ...[]byte) ([]uint64, error) {
	if g.err != nil {
		return nil, g.err
	}
	return g.l.append(ctx, records)
}

// AppendAsync appends records to the log, as Client.AppendAsync does to
// the default log: it returns at once with a future.
func (g *Log) AppendAsync(ctx context.Context, records ...[]byte) *AppendFuture {
	if g.err != nil {
		return failedFuture(g.err)
	}
	f, _ := g.l.pipe.submit(ctx, records, true, true)
	return f
}

// TryAppendAsync is AppendAsync, except that it returns ErrWindowFull, and
// no future, instead of waiting when the log's window is full.
func (g *Log) TryAppendAsync(ctx context.Context, records ...[]byte) (*AppendFuture, error) {
	if g.err != nil {
		return failedFuture(g.err), nil
	}
	return g.l.pipe.submit(ctx, records, false, true)
}

// Flush waits until every append to the log submitted before it has
// completed, as Client.Flush does for the default log.
func (g *Log) Flush(ctx context.Context) error {
	if g.err != nil {
		return g.err
	}
	return g.l.pipe.flush(ctx)
}

// Read reads the log, as Client.Read reads the default log.
func (g *Log) Read(ctx context.Context, from uint64, opts ReadOptions) (records []transport.Record, next uint64, err error) {
	if g.err != nil {
		return nil, 0, g.err
	}
	return g.l.read(ctx, from, opts)
}

// Tail streams the log's records as they commit, as Client.Tail does for
// the default log. With an invalid name, its Next fails.
func (g *Log) Tail(ctx context.Context, from uint64, opts TailOptions) *Tail {
	if g.err != nil {
		return &Tail{err: g.err}
	}
	return g.l.tail(ctx, from, opts)
}

// Trim drops every record of the log below index below, as Client.Trim
// does for the default log.
func (g *Log) Trim(ctx context.Context, below uint64) (uint64, error) {
	if g.err != nil {
		return 0, g.err
	}
	return g.l.trim(ctx, below)
}

// Leader returns the client address of the member believed to lead the
// log, "" when not known.
func (g *Log) Leader() string {
	if g.err != nil {
		return ""
	}
	return g.l.c.leaderOf(&g.l.route)
}

// Describe describes the log, as Client.DescribeLog does.
func (g *Log) Describe(ctx context.Context) (*transport.DescribeLogResponse, error) {
	if g.err != nil {
		return nil, g.err
	}
	return g.l.describe(ctx)
}

func (l *logState) describe(ctx context.Context) (*transport.DescribeLogResponse, error) {
	// To the member believed to lead the log, which knows its group best,
	// following NotLeader; a member that answers is not taken for the
	// leader (it may answer what it knows itself), the leader it names is.
	r := l.c.newRetrier("describe log", l.name, &l.route, true, toAny, "", true)
	resp, err := call[transport.DescribeLogResponse](ctx, l.c, r, transport.OpDescribeLog, &transport.DescribeLogRequest{Name: l.name})
	if err != nil {
		return nil, err
	}
	if resp.LeaderAddr != "" {
		l.c.follow(&l.route, resp.LeaderAddr)
	}
	return resp, nil
}

// CreateLogOptions configure a new log.
type CreateLogOptions struct {
	// Replicas is how many nodes hold the log: 1, 3 or 5; 0 means the
	// cluster's default (3).
	Replicas int
	// RetentionBytes, when not 0, bounds the bytes of records the log
	// keeps: older records are trimmed away.
	RetentionBytes uint64
	// RetentionAge, when not 0, bounds how long the log keeps a record.
	RetentionAge time.Duration
}

// CreateLog creates the log name (see transport.CheckLogName for the
// names allowed; not transport.DefaultLog) and returns it as the cluster's
// catalog records it, with the members chosen for it. It goes to the
// catalog's leader and is retried, as Join is, only when it certainly did
// not run: after a lost connection or a timeout it fails with "outcome
// unknown", and ListLogs tells whether the log was created. A name that
// exists already fails with FailedPrecondition naming it; a cluster older
// than named logs with an error wrapping ErrNoNamedLogs.
func (c *Client) CreateLog(ctx context.Context, name string, opts CreateLogOptions) (*transport.LogInfo, error) {
	req := &transport.CreateLogRequest{Name: name, RetentionBytes: opts.RetentionBytes, RetentionAge: opts.RetentionAge}
	if opts.Replicas < 0 || opts.Replicas > 5 {
		return nil, fmt.Errorf("client: create log: %d replicas: a log has 1, 3 or 5", opts.Replicas)
	}
	req.Replicas = uint32(opts.Replicas)
	if err := req.Validate(transport.Limits{}); err != nil {
		return nil, fmt.Errorf("client: create log: %w", err)
	}
	r := c.newRetrier("create log", name, &c.catalog, true, toLeader, "", false)
	resp, err := call[transport.CreateLogResponse](ctx, c, r, transport.OpCreateLog, req)
	if err != nil {
		return nil, err
	}
	return &resp.Log, nil
}

// ListLogs returns every log of the cluster, the default log and those
// being deleted included, sorted by name. It follows NotLeader to the
// default log's leader, whose catalog holds every create and delete it
// acknowledged; a member that knows no live leader answers from its own
// copy, which may be behind. It is retried like a read.
func (c *Client) ListLogs(ctx context.Context) ([]transport.LogInfo, error) {
	r := c.newRetrier("list logs", "", &c.catalog, true, toAny, "", true)
	resp, err := call[transport.ListLogsResponse](ctx, c, r, transport.OpListLogs, &transport.ListLogsRequest{})
	if err != nil {
		return nil, err
	}
	return resp.Logs, nil
}

// DescribeLog describes the log name (transport.DefaultLog or "" for the
// default log): its catalog record, its leader, indexes and bytes, and its
// members with their roles and whether each has caught up. It goes to the
// member believed to lead the log and follows NotLeader, and is retried
// like a read; the leader it names becomes the one the log's requests go
// to. An unknown name fails with NotFound naming it.
func (c *Client) DescribeLog(ctx context.Context, name string) (*transport.DescribeLogResponse, error) {
	return c.Log(name).Describe(ctx)
}

// DeleteLog deletes the log name and every record of it, on every member;
// it cannot be undone (and not transport.DefaultLog). It returns once the
// catalog has recorded the deletion; the members drop the log's data
// after. It goes to the catalog's leader and is retried as CreateLog is.
// An unknown name fails with NotFound naming it.
func (c *Client) DeleteLog(ctx context.Context, name string) (*transport.LogInfo, error) {
	req := &transport.DeleteLogRequest{Name: name}
	if err := req.Validate(transport.Limits{}); err != nil {
		return nil, fmt.Errorf("client: delete log: %w", err)
	}
	r := c.newRetrier("delete log", name, &c.catalog, true, toLeader, "", false)
	resp, err := call[transport.DeleteLogResponse](ctx, c, r, transport.OpDeleteLog, req)
	if err != nil {
		return nil, err
	}
	return &resp.Log, nil
}
