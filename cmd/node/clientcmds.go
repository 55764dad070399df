package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/node"
	"github.com/raftlog/raftlog/transport"
)

// clusterFlags are the flags of every command that talks to a cluster.
// They fall back to RAFTLOG_ADDRS and RAFTLOG_TIMEOUT; the flags of the
// operations themselves do not.
type clusterFlags struct {
	addrs   []string
	timeout time.Duration
	tlsCA   string
	tlsCert string
	tlsKey  string
	tls     *tls.Config // set by check when --tls-ca is given
}

// define defines the flags on fs.
func (cf *clusterFlags) define(fs *flagSet) {
	cf.timeout = 30 * time.Second
	fs.Var(addrsValue{&cf.addrs}, "addrs", "client addresses of cluster members, `host:port,...`: one that answers is enough")
	fs.DurationVar(&cf.timeout, "timeout", cf.timeout, "give up after retrying for this `duration` (an unreachable cluster, no leader)")
	fs.StringVar(&cf.tlsCA, "tls-ca", "", "connect with TLS, trusting the CA certificates in this PEM `file`")
	fs.StringVar(&cf.tlsCert, "tls-cert", "", "the client certificate PEM `file`, for clusters that require mutual TLS")
	fs.StringVar(&cf.tlsKey, "tls-key", "", "the client certificate's private key PEM `file`")
	fs.fromEnv("addrs", "timeout", "tls-ca", "tls-cert", "tls-key")
}

// check reports missing or invalid cluster flags.
func (cf *clusterFlags) check() error {
	if len(cf.addrs) == 0 {
		return usagef("no cluster address: give --addrs host:port,... or set %s", envName("addrs"))
	}
	if cf.timeout <= 0 {
		return usagef("--timeout %v: want a positive duration", cf.timeout)
	}
	conf, err := clientTLS(cf.tlsCA, cf.tlsCert, cf.tlsKey)
	if err != nil {
		return err
	}
	cf.tls = conf
	return nil
}

// clientTLS builds the TLS configuration of a client from PEM files, or
// nil without a CA file.
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" {
		if certFile != "" || keyFile != "" {
			return nil, usagef("--tls-cert and --tls-key need --tls-ca")
		}
		return nil, nil
	}
	pool, err := node.LoadCertPool(caFile)
	if err != nil {
		return nil, usagef("--tls-ca: %v", err)
	}
	conf := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" || keyFile != "" {
		kp, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, usagef("--tls-cert/--tls-key: %v", err)
		}
		conf.Certificates = []tls.Certificate{kp}
	}
	return conf, nil
}

// tlsDialer dials a member with TLS, checking its certificate against the
// host of its address.
func tlsDialer(conf *tls.Config) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		c := conf.Clone()
		c.ServerName = host
		d := &tls.Dialer{Config: c}
		return d.DialContext(ctx, "tcp", addr)
	}
}

// options returns the client options the flags ask for.
func (cf *clusterFlags) options() *client.Options {
	o := &client.Options{RequestTimeout: min(cf.timeout, 10*time.Second), RetryTimeout: cf.timeout}
	if cf.tls != nil {
		o.Dial = tlsDialer(cf.tls)
	}
	return o
}

// dial connects to the cluster.
func (cf *clusterFlags) dial(ctx context.Context) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	return client.Dial(ctx, cf.addrs, cf.options())
}

// parseClusterCmd parses the flags of a command that talks to a cluster
// and takes no arguments.
func parseClusterCmd(fs *flagSet, cf *clusterFlags, args []string) error {
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(rest); err != nil {
		return err
	}
	return cf.check()
}

// parseRecordCmd is parseClusterCmd for read and tail, whose --quote and
// --json ask for two formats.
func parseRecordCmd(fs *flagSet, cf *clusterFlags, args []string, quote, asJSON *bool) error {
	if err := parseClusterCmd(fs, cf, args); err != nil {
		return err
	}
	if *quote && *asJSON {
		return usagef("give --quote or --json, not both")
	}
	return nil
}

// maxLine is the longest line append --stdin reads.
const maxLine = transport.DefaultMaxFrameSize

// appendBatchBytes is how many bytes of lines append --stdin sends in one
// request at most (unless one line is longer).
const appendBatchBytes = 1 << 20

// cmdAppend is "node append".
func cmdAppend(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var stdin bool
	var logName string
	batch, inFlight := 100, 16
	fs := newFlagSet(e, "append", "[record ...]", `
Appends records, given as arguments or read as lines from stdin, and prints
the index of each, one a line, once the cluster has committed it.

With --stdin, a line is sent as soon as it is read, together with the
lines already read after it, up to --batch lines per append; while
--in-flight appends are in flight, the lines read meanwhile wait and go
together. The client packs the appends waiting into as few requests as it
can and sends one request at a time, so the lines are stored in input
order. Indexes are printed in input order, as the lines commit.
When an append fails, the command sends nothing more and fails, naming its
lines: the lines before them were stored (their indexes are printed); those
after them were not, or may have been if they were already in flight.
SIGINT (Ctrl-C) or SIGTERM stops it at once, even while it waits for
input: it sends nothing more, waits up to 5s for the appends in flight,
prints the indexes of those acknowledged, says on stderr which lines were
appended and which may or may not have been, and exits with status 130.`)
	cf.define(fs)
	fs.BoolVar(&stdin, "stdin", false, "append the lines of stdin (without their line ends) instead of arguments")
	fs.IntVar(&batch, "batch", batch, "with --stdin, send up to this many `lines` in one append")
	fs.IntVar(&inFlight, "in-flight", inFlight, "with --stdin, keep up to this many `appends` in flight")
	logFlag(fs, &logName, "append to")
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := checkLogFlag(logName); err != nil {
		return err
	}
	switch {
	case stdin && len(rest) > 0:
		return usagef("give records as arguments or --stdin, not both")
	case !stdin && len(rest) == 0:
		return usagef("no records: give them as arguments or use --stdin")
	case batch < 1 || batch > transport.DefaultMaxAppendRecords:
		return usagef("--batch %d is outside [1, %d]", batch, transport.DefaultMaxAppendRecords)
	case inFlight < 1 || inFlight > client.MaxAppendWindow:
		return usagef("--in-flight %d is outside [1, %d]", inFlight, client.MaxAppendWindow)
	}
	if err := cf.check(); err != nil {
		return err
	}
	opts := cf.options()
	opts.MaxInFlightAppends = inFlight
	dctx, cancel := context.WithTimeout(ctx, cf.timeout)
	c, err := client.Dial(dctx, cf.addrs, opts)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	lg := c.Log(logName)
	w := bufio.NewWriter(e.stdout)
	defer w.Flush()
	if !stdin {
		recs := make([][]byte, len(rest))
		for i, r := range rest {
			recs[i] = []byte(r)
		}
		idx, err := lg.Append(ctx, recs...)
		if err != nil {
			return err
		}
		for _, i := range idx {
			fmt.Fprintln(w, i)
		}
		return nil
	}
	return appendLines(ctx, lg, e.stdin, w, batch, inFlight)
}

// interruptGrace bounds how long an interrupted append --stdin waits for
// the appends in flight to complete, so that it can report them.
const interruptGrace = 5 * time.Second

// appendLines appends the lines of r and prints their indexes to w in
// input order as they commit. A line is sent as soon as it is read, with
// the lines already read after it, up to batch lines (or appendBatchBytes)
// per append; while inFlight appends are in flight, the lines read wait
// and go together once one completes. It stops at the first append that
// fails. When ctx ends (SIGINT, SIGTERM) it stops reading and sending at
// once, waits up to interruptGrace for the appends in flight, prints the
// indexes of those acknowledged and returns an error wrapping
// errInterrupted that says which lines were appended.
func appendLines(ctx context.Context, lg *client.Log, r io.Reader, w *bufio.Writer, batch, inFlight int) error {
	// The appends run on actx, not ctx, so that an interrupt leaves those
	// in flight to complete; actx ends after a failure (nothing more is
	// stored) or once an interrupted command has waited long enough.
	actx, cancelAppends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelAppends()

	// The reader goroutine blocks in reads of r; this one never does, so
	// that it sends what was read at once and sees an interrupt at once.
	quit := make(chan struct{})
	defer close(quit)
	in := make(chan []byte, batch)
	var readErr error // set before in is closed
	go func() {
		defer close(in)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), maxLine)
		for sc.Scan() {
			select {
			case in <- append([]byte(nil), sc.Bytes()...):
			case <-quit:
				return
			}
		}
		readErr = sc.Err()
	}()

	type sent struct {
		f           *client.AppendFuture
		first, last int // its lines, from 1
	}
	var (
		pending     []sent   // sent, in input order, not yet printed
		recs        [][]byte // read, not yet sent
		size        int      // the bytes of recs
		read        int      // lines read
		sentThrough int      // the last line sent
		acked       int      // the last line printed: lines 1-acked were appended
		eof         bool     // in is closed
		interrupted bool
		failed      error
	)
	full := func() bool { return len(recs) >= batch || size >= appendBatchBytes }
	take := func(l []byte) {
		read++
		recs = append(recs, l)
		size += len(l)
	}
	// collect prints the appends completed at the front of pending.
	collect := func() {
		for len(pending) > 0 && failed == nil {
			s := pending[0]
			select {
			case <-s.f.Done():
			default:
				return
			}
			if err := s.f.Err(); err != nil {
				failed = fmt.Errorf("stdin lines %d-%d: %w", s.first, s.last, err)
				cancelAppends() // what was not sent yet never is
				return
			}
			for _, i := range s.f.Indexes() {
				w.WriteString(strconv.FormatUint(i, 10))
				w.WriteByte('\n')
			}
			acked, pending = s.last, pending[1:]
		}
	}
	for {
		collect()
		if failed != nil {
			break
		}
		if len(recs) > 0 && !eof {
		more: // the lines already read go with it
			for !full() {
				select {
				case l, ok := <-in:
					if !ok {
						eof = true
						break more
					}
					take(l)
				default:
					break more
				}
			}
		}
		if len(recs) > 0 && len(pending) < inFlight {
			pending = append(pending, sent{lg.AppendAsync(actx, recs...), sentThrough + 1, read})
			sentThrough, recs, size = read, nil, 0
			continue
		}
		if eof && len(recs) == 0 && len(pending) == 0 {
			break
		}
		var lines <-chan []byte
		if !eof && !full() {
			lines = in
		}
		var front <-chan struct{}
		if len(pending) > 0 {
			front = pending[0].f.Done()
		}
		w.Flush() // before waiting: show what is done
		select {
		case l, ok := <-lines:
			if ok {
				take(l)
			} else {
				eof = true
			}
		case <-front:
		case <-ctx.Done():
			interrupted = true
		}
		if interrupted {
			break
		}
	}
	if interrupted {
		t := time.AfterFunc(interruptGrace, cancelAppends)
		defer t.Stop()
	}
	// After a failure the appends in flight were cancelled: they complete
	// at once, unprinted.
	for _, s := range pending {
		<-s.f.Done()
		collect()
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if interrupted {
		return interruptReport(acked, sentThrough, read, failed)
	}
	if failed != nil {
		return failed
	}
	if readErr != nil {
		if errors.Is(readErr, bufio.ErrTooLong) {
			return fmt.Errorf("stdin line %d is longer than %s (the lines before it were appended)", read+1, formatSize(maxLine))
		}
		return fmt.Errorf("reading stdin after line %d (the lines before it were appended): %w", read, readErr)
	}
	return nil
}

// interruptReport is the error of an interrupted append --stdin that had
// read lines 1-read, sent lines 1-sent, of which lines 1-acked were
// appended; failed is the error of the first append that failed, if one
// did.
func interruptReport(acked, sent, read int, failed error) error {
	var b strings.Builder
	if acked > 0 {
		fmt.Fprintf(&b, "stdin lines 1-%d were appended (their indexes are printed)", acked)
	} else {
		b.WriteString("no stdin line was appended")
	}
	if sent > acked {
		fmt.Fprintf(&b, "; lines %d-%d were sent but not acknowledged: they may or may not have been stored", acked+1, sent)
		if failed != nil && !errors.Is(failed, context.Canceled) {
			fmt.Fprintf(&b, " (%v)", failed)
		}
	}
	if read > sent {
		fmt.Fprintf(&b, "; lines %d-%d were read but not sent", sent+1, read)
	}
	return fmt.Errorf("%w: %s", errInterrupted, b.String())
}

// trimmedError is err, the error of a read or tail of lg from index from,
// unless it says that from was trimmed: then it names the first record
// the log holds and how to read from there.
func trimmedError(ctx context.Context, lg *client.Log, from uint64, stale bool, err error) error {
	var te *transport.Error
	if !errors.As(err, &te) || te.Code != transport.CodeTrimmed {
		return err
	}
	what := fmt.Sprintf("index %d was trimmed (by retention, node trim or a restore)", from)
	recs, _, ferr := lg.Read(ctx, 0, client.ReadOptions{MaxRecords: 1, Stale: stale})
	switch {
	case ferr != nil:
		return fmt.Errorf("%s: %w", what, err)
	case len(recs) == 0:
		return fmt.Errorf("%s, and the log holds no record now: read on later, or --from 0", what)
	}
	first := recs[0].Index
	return fmt.Errorf("%s: the first record the log holds is at index %d: read on with --from %d (or --from 0, the first record held)", what, first, first)
}

// recordPrinter prints records as index<TAB>data lines, or as JSON lines.
type recordPrinter struct {
	w     *bufio.Writer
	quote bool // data as a Go-quoted string
	json  bool // a recordJSON object a line
}

// recordJSON is a record as read --json and tail --json print it, one a
// line.
type recordJSON struct {
	// Index is the record's index.
	Index uint64 `json:"index"`
	// AppendedAt is when the leader appended it, RFC 3339 in UTC with
	// nanoseconds; left out when unknown.
	AppendedAt string `json:"appended_at,omitempty"`
	// Data is the record, base64 (standard, padded), whatever it holds:
	// records are bytes, and this way every record prints, and decodes
	// back, the same way.
	Data string `json:"data"`
}

// recordFormatFlags defines --quote and --json on fs.
func recordFormatFlags(fs *flagSet, quote, asJSON *bool) {
	fs.BoolVar(quote, "quote", false, "print data as Go-quoted strings (for binary records)")
	fs.BoolVar(asJSON, "json", false, `print a JSON object a line, for scripts: {"index":N,"appended_at":"RFC 3339 time","data":"base64"}`)
}

// print writes r as one line.
func (p *recordPrinter) print(r transport.Record) {
	if p.json {
		j := recordJSON{Index: r.Index, Data: base64.StdEncoding.EncodeToString(r.Data)}
		if r.AppendedAt != 0 {
			j.AppendedAt = time.Unix(0, r.AppendedAt).UTC().Format(time.RFC3339Nano)
		}
		b, _ := json.Marshal(j) // cannot fail: strings and a number
		p.w.Write(b)
		p.w.WriteByte('\n')
		return
	}
	p.w.WriteString(strconv.FormatUint(r.Index, 10))
	p.w.WriteByte('\t')
	if p.quote {
		p.w.WriteString(strconv.Quote(string(r.Data)))
	} else {
		p.w.Write(r.Data)
	}
	p.w.WriteByte('\n')
}

// cmdRead is "node read".
func cmdRead(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var from uint64
	var maxRecs uint32
	var stale, quote, asJSON bool
	var logName string
	fs := newFlagSet(e, "read", "", `
Prints committed records from an index on, one a line: index<TAB>data,
page after page (each as large as the node allows: 4096 records or 8MiB by
default) to the end of the log. Every record committed before the read
began is printed; records appended while it runs may be, or may be left
for the next read or for 'node tail'. With --max, it stops after that many
records and, when more follow, says on stderr from which index to read on.
Reads are linearizable (served by the leader) unless --stale is given.
With --json, each line is a JSON object: the index, the time the leader
appended the record, and its data in base64.`)
	cf.define(fs)
	fs.Uint64Var(&from, "from", 0, "the first `index` to read; 0: the first retained record")
	fs.Var(uint32Value{&maxRecs}, "max", "print at most this many `records`; 0: all, up to the end of the log")
	fs.BoolVar(&stale, "stale", false, "let the first reachable member in --addrs answer from its own log, leader or not (may be behind)")
	recordFormatFlags(fs, &quote, &asJSON)
	logFlag(fs, &logName, "read")
	if err := parseRecordCmd(fs, &cf, args, &quote, &asJSON); err != nil {
		return err
	}
	if err := checkLogFlag(logName); err != nil {
		return err
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	lg := c.Log(logName)
	p := &recordPrinter{w: bufio.NewWriter(e.stdout), quote: quote, json: asJSON}
	defer p.w.Flush()
	next, printed := from, uint32(0)
	var end uint64 // the last index to print; 0 until the first page came
	for {
		var want uint32 // 0: the server's limit
		if maxRecs > 0 && maxRecs-printed < transport.DefaultMaxReadRecords {
			want = maxRecs - printed + 1 // one more, to tell whether more follow
		}
		recs, nx, err := lg.Read(ctx, next, client.ReadOptions{MaxRecords: want, Stale: stale})
		if err != nil {
			return trimmedError(ctx, lg, next, stale, err)
		}
		if len(recs) == 0 {
			break
		}
		if end == 0 {
			end = readEnd(ctx, c, lg, recs[len(recs)-1].Index)
		}
		for _, r := range recs {
			if r.Index > end {
				return p.w.Flush()
			}
			if printed == maxRecs && maxRecs > 0 {
				if err := p.w.Flush(); err != nil {
					return err
				}
				fmt.Fprintf(e.stderr, "node read: stopped after %d records (--max); more follow from index %d: read on with --from %d\n", printed, r.Index, r.Index)
				return nil
			}
			p.print(r)
			printed++
		}
		if nx <= next {
			return fmt.Errorf("read from %d: the cluster returned next index %d", next, nx)
		}
		if nx > end {
			break
		}
		next = nx
	}
	return p.w.Flush()
}

// readEnd returns the last index a read prints: the last index in the log
// of the member that served its first page (whose last record was at index
// last), asked right after that page. That member's log holds everything
// it had committed (or, for a stale read, applied) when it served the
// page, so nothing committed before the read began is left out, and the
// read ends even while appends go on. If the member does not answer, the
// read goes on until a page comes back empty. For a named log, lg, it is
// the last index of the log as its leader has it.
func readEnd(ctx context.Context, c *client.Client, lg *client.Log, last uint64) uint64 {
	if lg.Name() != transport.DefaultLog {
		d, err := lg.Describe(ctx)
		if err != nil {
			return math.MaxUint64
		}
		return max(d.LastIndex, last)
	}
	st, err := c.Status(ctx, "") // the member reads go to
	if err != nil {
		return math.MaxUint64
	}
	return max(st.LastIndex, last)
}

// cmdTail is "node tail".
func cmdTail(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var from uint64
	var stale, quote, asJSON bool
	var logName string
	fs := newFlagSet(e, "tail", "", `
Prints records from an index on as they commit, one a line (index<TAB>data,
or with --json a JSON object as 'node read --json' prints), until Ctrl-C.
The stream follows leader changes and reconnects after failures; it gives
up after --timeout without progress.`)
	cf.define(fs)
	fs.Uint64Var(&from, "from", 0, "the first `index` to print; 0: the first retained record")
	fs.BoolVar(&stale, "stale", false, "let the first reachable member in --addrs serve the stream from its own log, leader or not")
	recordFormatFlags(fs, &quote, &asJSON)
	logFlag(fs, &logName, "tail")
	if err := parseRecordCmd(fs, &cf, args, &quote, &asJSON); err != nil {
		return err
	}
	if err := checkLogFlag(logName); err != nil {
		return err
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	lg := c.Log(logName)
	t := lg.Tail(ctx, from, client.TailOptions{Stale: stale})
	defer t.Close()
	p := &recordPrinter{w: bufio.NewWriter(e.stdout), quote: quote, json: asJSON}
	next := from
	for {
		r, err := t.Next()
		if err != nil {
			p.w.Flush()
			if ctx.Err() != nil {
				return nil // Ctrl-C: the normal end
			}
			return trimmedError(ctx, lg, next, stale, err)
		}
		next = r.Index + 1
		p.print(r)
		if err := p.w.Flush(); err != nil {
			return err
		}
	}
}

// statusRow is one row of the status table: a node's status, or why its
// address did not give one.
type statusRow struct {
	addr string
	st   *transport.StatusResponse // nil when err is set
	err  error
}

// statusJSON is a statusRow as status --json prints it.
type statusJSON struct {
	Addr       string `json:"addr"`
	Error      string `json:"error,omitempty"`
	NodeID     string `json:"node_id,omitempty"`
	Role       string `json:"role,omitempty"`
	LeaderID   string `json:"leader_id,omitempty"`
	LeaderAddr string `json:"leader_addr,omitempty"`
	ClusterID  string `json:"cluster_id,omitempty"`
	Term       uint64 `json:"term,omitempty"`
	First      uint64 `json:"first_index"`
	Last       uint64 `json:"last_index"`
	Commit     uint64 `json:"commit_index"`
	Applied    uint64 `json:"applied_index"`
	Segments   uint64 `json:"segments"`
	Bytes      uint64 `json:"bytes"`
	// Details are the node's version and settings; nil from a node older
	// than them.
	Details *transport.StatusDetails `json:"details,omitempty"`
}

// json returns r as status --json prints it.
func (r statusRow) json() statusJSON {
	j := statusJSON{Addr: r.addr}
	if r.err != nil {
		j.Error = r.err.Error()
		return j
	}
	s := r.st
	j.NodeID, j.Role, j.LeaderID, j.LeaderAddr, j.Term = s.NodeID, s.Role, s.LeaderID, s.LeaderAddr, s.Term
	j.ClusterID = s.ClusterID
	j.First, j.Last, j.Commit, j.Applied = s.FirstIndex, s.LastIndex, s.CommitIndex, s.AppliedIndex
	j.Segments, j.Bytes = s.Store.Segments, s.Store.Bytes
	j.Details = s.Details
	return j
}

// clustersOf lists the cluster ids the answering rows name, each with its
// nodes ("<id>: n1, n2"), in the order first seen; nodes that do not know
// theirs (or are older than cluster ids) are left out.
func clustersOf(rows []statusRow) []string {
	var ids []string
	nodes := map[string][]string{}
	for _, r := range rows {
		if r.err != nil || r.st.ClusterID == "" {
			continue
		}
		id := r.st.ClusterID
		if _, ok := nodes[id]; !ok {
			ids = append(ids, id)
		}
		nodes[id] = append(nodes[id], r.st.NodeID)
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id + ": " + strings.Join(nodes[id], ", ")
	}
	return out
}

// writeStatusTable writes rows as an aligned table with a header. A row
// with an error shows it after the address.
func writeStatusTable(w io.Writer, rows []statusRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tNODE\tROLE\tLEADER\tTERM\tFIRST\tLAST\tCOMMIT\tAPPLIED\tSEGMENTS\tBYTES")
	for _, r := range rows {
		if r.err != nil {
			// The error is not a cell: it must not widen the columns.
			fmt.Fprintf(tw, "%s\terror: %v\n", r.addr, r.err)
			continue
		}
		s := r.st
		leader := s.LeaderID
		if leader == "" {
			leader = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n",
			r.addr, s.NodeID, s.Role, leader, s.Term, s.FirstIndex, s.LastIndex,
			s.CommitIndex, s.AppliedIndex, s.Store.Segments, formatSize(int64(min(s.Store.Bytes, 1<<62))))
	}
	return tw.Flush()
}

// writeDetailsTable writes the version, flush mode and settings of the
// nodes of rows that answered, a row per node, as an aligned table with a
// header. A node older than these details gets a row that says so.
func writeDetailsTable(w io.Writer, rows []statusRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tVERSION\tCOMMIT\tGO\tFLUSH\tSETTINGS")
	for _, r := range rows {
		if r.err != nil {
			continue
		}
		d := r.st.Details
		if d == nil {
			fmt.Fprintf(tw, "%s\t(an older version, which does not report these)\n", r.st.NodeID)
			continue
		}
		commit := d.Commit
		switch {
		case commit == "":
			commit = "-"
		case len(commit) > 12:
			commit = commit[:12]
		}
		if d.Modified && d.Commit != "" {
			commit += "+dirty"
		}
		settings := make([]string, len(d.Settings))
		for i, s := range d.Settings {
			settings[i] = "--" + s.Name + "=" + s.Value
		}
		if len(settings) == 0 {
			settings = []string{"(all defaults)"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.st.NodeID, d.Version, commit, d.GoVersion, d.Flush, strings.Join(settings, " "))
	}
	return tw.Flush()
}

// queryStatus asks every address in addrs for its status, at once. With
// c nil (no member answered a dial), each address is dialled alone, so
// that its row shows its own error.
func queryStatus(ctx context.Context, c *client.Client, addrs []string, opts *client.Options) []statusRow {
	rows := make([]statusRow, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[i].addr = a
			cc := c
			if cc == nil {
				var err error
				if cc, err = client.Dial(ctx, []string{a}, opts); err != nil {
					rows[i].err = err
					return
				}
				defer cc.Close()
			}
			rows[i].st, rows[i].err = cc.Status(ctx, a)
		}()
	}
	wg.Wait()
	return rows
}

// otherMembers returns the client addresses of members that answering
// nodes list and rows do not hold yet, so that status covers the whole
// cluster from any one address.
func otherMembers(rows []statusRow) []string {
	have := map[string]bool{}
	for _, r := range rows {
		have[r.addr] = true
		if r.st != nil {
			have[r.st.NodeID] = true
		}
	}
	var more []string
	for _, r := range rows {
		if r.st == nil {
			continue
		}
		for _, m := range r.st.Members {
			if m.ClientAddr != "" && !have[m.ClientAddr] && !have[m.NodeID] {
				have[m.ClientAddr] = true
				more = append(more, m.ClientAddr)
			}
		}
	}
	return more
}

// cmdStatus is "node status".
func cmdStatus(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var asJSON bool
	var logName string
	fs := newFlagSet(e, "status", "", `
Asks every address in --addrs, and every other member the answering nodes
list, for its node's status and prints a table for the whole cluster: node
id, role, leader, term, first/last/commit/applied index, segments and bytes
of the commit log (these figures are the default log's). An address that
does not answer gets a row with the error, and the exit status is then 1.
A second table shows every log of the cluster, the default log included,
as its leader describes it: state, leader, replicas (voters in its raft
group that the catalog places it on / the replicas it asks for), members
(others than leader and followers with their role, such as Nonvoter while
a new replica catches up or Leaving while a moved one is removed),
first/last/commit index and bytes; a log whose leader does not answer gets
a row with the error, and the exit status is then 1 (a cluster older than
named logs has no such table). A third table shows each node's version,
commit, Go version, flush mode, and the flags it was started with (on the
command line or from RAFTLOG_* variables) whose values differ from the
defaults.

With --log NAME, it prints that log's row and a table of its members with
their role and whether each has caught up. --json prints the nodes' rows
as a JSON array, or with --log the log as 'node log info --json' does.`)
	cf.define(fs)
	fs.BoolVar(&asJSON, "json", false, "print a JSON array of the nodes' rows (with --log: the log as a JSON object) instead of tables")
	fs.StringVar(&logName, "log", "", "show only the log of this `name` (see 'node log list'), with its members")
	if err := parseClusterCmd(fs, &cf, args); err != nil {
		return err
	}
	oneLog := fs.given("log")
	if oneLog {
		if err := checkLogFlag(logName); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	opts := cf.options()
	c, err := client.Dial(ctx, cf.addrs, opts)
	if err == nil {
		defer c.Close()
	}
	if oneLog {
		if err != nil {
			return err
		}
		if err := statusOfLog(ctx, e.stdout, c, logName, asJSON); !errors.Is(err, errNoLogView) {
			return err
		}
		// An older cluster: the default log is what the nodes' table shows.
	}
	rows := queryStatus(ctx, c, cf.addrs, opts)
	rows = append(rows, queryStatus(ctx, c, otherMembers(rows), opts)...)
	var logs []logRow
	var logsErr error
	if c != nil && !asJSON && !oneLog {
		logs, logsErr = queryLogs(ctx, c, cf.timeout)
		if errors.Is(logsErr, client.ErrNoNamedLogs) {
			logs, logsErr = nil, nil // an older cluster: the nodes' table is the default log's
		}
	}
	if asJSON {
		out := make([]statusJSON, len(rows))
		for i, r := range rows {
			out[i] = r.json()
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		if err := writeStatusTable(e.stdout, rows); err != nil {
			return err
		}
		switch {
		case logsErr != nil:
			fmt.Fprintf(e.stdout, "\nlogs: error: %v\n", logsErr)
		case len(logs) > 0:
			fmt.Fprintln(e.stdout)
			if err := writeLogsTable(e.stdout, logs); err != nil {
				return err
			}
		}
		if slices.ContainsFunc(rows, func(r statusRow) bool { return r.err == nil }) {
			fmt.Fprintln(e.stdout)
			if err := writeDetailsTable(e.stdout, rows); err != nil {
				return err
			}
		}
	}
	failed := 0
	for _, r := range rows {
		if r.err != nil {
			failed++
		}
	}
	var problems []string
	if failed > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d addresses did not answer", failed, len(rows)))
	}
	if logsErr != nil {
		problems = append(problems, fmt.Sprintf("listing the logs: %v", logsErr))
	}
	if n := logFailures(logs); n > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d logs had no leader that answered", n, len(logs)))
	}
	if c := clustersOf(rows); len(c) > 1 {
		problems = append(problems, fmt.Sprintf("the addresses answer for %d clusters (%s): nodes of one cluster refuse the raft connections of another; check --addrs",
			len(c), strings.Join(c, "; ")))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// cmdJoin is "node join".
func cmdJoin(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var req transport.JoinRequest
	fs := newFlagSet(e, "join", "", `
Adds a node to the cluster, through the leader: as a nonvoter, which the node
asks to have promoted to voter once it has caught up. A server of the same
id (a member that lost its data dir) is removed first. The node must be
running ('node serve' without --bootstrap or --join waits for this). 'node
serve --join' does the same by itself. The leader asks the node's status
first, and refuses (FailedPrecondition) a node that names another
cluster's id: one whose raft address another cluster's configuration
still names may have followed that cluster's leader.`)
	cf.define(fs)
	fs.StringVar(&req.NodeID, "id", "", "the joining node's `id` (required)")
	fs.Var(addrValue{&req.RaftAddr}, "raft-addr", "the joining node's raft `host:port` (required)")
	fs.Var(addrValue{&req.ClientAddr}, "client-addr", "the joining node's client `host:port` (required)")
	if err := parseClusterCmd(fs, &cf, args); err != nil {
		return err
	}
	switch {
	case req.NodeID == "":
		return usagef("no node id: give --id")
	case req.RaftAddr == "":
		return usagef("no raft address: give --raft-addr")
	case req.ClientAddr == "":
		return usagef("no client address: give --client-addr")
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	req.Fresh = true
	idx, err := c.Join(ctx, req)
	if err != nil {
		return err
	}
	if idx == 0 {
		fmt.Fprintf(e.stdout, "%s is a member already\n", req.NodeID)
		return nil
	}
	fmt.Fprintf(e.stdout, "%s joined the cluster (configuration change at index %d)\n", req.NodeID, idx)
	return nil
}

// cmdRemove is "node remove".
func cmdRemove(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var id string
	fs := newFlagSet(e, "remove", "", `
Removes a node from the cluster, through the leader. Stop the node after;
its data dir cannot serve another cluster.`)
	cf.define(fs)
	fs.StringVar(&id, "id", "", "the `id` of the node to remove (required; never taken from the environment)")
	if err := parseClusterCmd(fs, &cf, args); err != nil {
		return err
	}
	if id == "" {
		return usagef("no node id: give --id")
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	idx, err := c.Remove(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "removed %s (configuration change at index %d)\n", id, idx)
	return nil
}

// cmdTransfer is "node transfer".
func cmdTransfer(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var to string
	fs := newFlagSet(e, "transfer", "", `
Asks the leader to hand leadership over to another voter: the one named by
--to, or one raft chooses.`)
	cf.define(fs)
	fs.StringVar(&to, "to", "", "the `id` of the node to hand leadership to; empty: raft chooses")
	if err := parseClusterCmd(fs, &cf, args); err != nil {
		return err
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.TransferLeadership(ctx, to); err != nil {
		return err
	}
	if to == "" {
		fmt.Fprintln(e.stdout, "leadership handed over")
	} else {
		fmt.Fprintf(e.stdout, "leadership handed over to %s\n", to)
	}
	return nil
}

// cmdTrim is "node trim".
func cmdTrim(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var below uint64
	var logName string
	fs := newFlagSet(e, "trim", "", `
Drops every record of a log below an index, on every node. It cannot be
undone.`)
	cf.define(fs)
	fs.Uint64Var(&below, "below", 0, "the first `index` to keep (required; never taken from the environment)")
	logFlag(fs, &logName, "trim")
	if err := parseClusterCmd(fs, &cf, args); err != nil {
		return err
	}
	if below == 0 {
		return usagef("no index: give --below N, the first index to keep")
	}
	if err := checkLogFlag(logName); err != nil {
		return err
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	idx, err := c.Log(logName).Trim(ctx, below)
	if err != nil {
		return err
	}
	if logName != transport.DefaultLog {
		fmt.Fprintf(e.stdout, "trimmed the records of log %s below index %d (trim command at index %d)\n", logName, below, idx)
		return nil
	}
	fmt.Fprintf(e.stdout, "trimmed the records below index %d (trim command at index %d)\n", below, idx)
	return nil
}
