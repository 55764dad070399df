package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/node"
	"github.com/raftlog/raftlog/transport"
)

// maxBenchDuration bounds a bench run: every append's latency is kept, 8
// bytes each, for exact percentiles.
const maxBenchDuration = 10 * time.Minute

// maxBenchClients bounds the concurrent appenders.
const maxBenchClients = 4096

// benchOptions are the flags of bench.
type benchOptions struct {
	cluster  clusterFlags // addrs empty with local
	local    bool
	flush    node.FlushMode // with local
	dir      string         // with local; "": a temporary directory
	clients  int
	inFlight int // > 0: one goroutine with this many AppendAsync in flight, instead of clients
	requests int // client.Options.MaxAppendRequests; 0: its default
	size     int64
	batch    int
	duration time.Duration
	json     bool
	log      string // the log appended to
}

// benchResult is the outcome of a bench run; --json prints it as is.
type benchResult struct {
	Target        string  `json:"target"` // "local" or the addresses
	Log           string  `json:"log"`
	Flush         string  `json:"flush,omitempty"`
	Clients       int     `json:"clients"`             // 0 with in_flight
	InFlight      int     `json:"in_flight,omitempty"` // appends in flight from one goroutine
	Requests      int     `json:"requests"`            // the client's MaxAppendRequests
	RecordSize    int     `json:"record_size"`
	Batch         int     `json:"batch"`
	Seconds       float64 `json:"seconds"`
	Appends       uint64  `json:"appends"`
	Records       uint64  `json:"records"`
	Errors        uint64  `json:"errors"`
	FirstError    string  `json:"first_error,omitempty"`
	RecordsPerSec float64 `json:"records_per_sec"`
	MiBPerSec     float64 `json:"mib_per_sec"`
	P50Micros     float64 `json:"p50_us"`
	P99Micros     float64 `json:"p99_us"`
	P999Micros    float64 `json:"p999_us"`
	MaxMicros     float64 `json:"max_us"`
}

// parseBench parses the flags of bench.
func parseBench(e *env, args []string) (*benchOptions, error) {
	o := &benchOptions{flush: node.FlushSync, clients: 16, size: 1024, batch: 1, duration: 10 * time.Second}
	fs := newFlagSet(e, "bench", "", `
Measures appends, for --duration, through one Go client: either --clients
goroutines, each with one append of --batch records of --size bytes in
flight (Append), or, with --in-flight N, one goroutine keeping N such
appends in flight (AppendAsync with a window of N). The client packs the
appends waiting into as few requests as it can, with at most --requests
requests in flight (1 by default, which keeps appends in order). A progress
line on stderr shows the acked records/s each second; then it prints the
acked records, records/s, MiB/s and the latency percentiles of the
appends, from every latency measured.

--local starts a 3-node cluster in this process, like demo, in a temporary
directory under $TMPDIR that is removed after.

Latencies are what the appenders see, queueing in the client included.
With --in-flight, an append's latency is taken when it and every append
before it have completed (so with --requests above 1, an append that
completes before an earlier one counts from when the earlier one does).`)
	o.cluster.define(fs)
	fs.BoolVar(&o.local, "local", false, "start a local 3-node cluster instead of using --addrs")
	fs.Var(flushValue{&o.flush}, "flush", "with --local, the nodes' flush `mode`: sync or async")
	fs.StringVar(&o.dir, "dir", "", "with --local, keep the data and logs in this new or empty `directory`")
	fs.IntVar(&o.clients, "clients", o.clients, "`number` of concurrent appenders, each with one append in flight")
	fs.IntVar(&o.inFlight, "in-flight", 0, "instead of --clients, one appender keeping this `number` of appends in flight")
	fs.IntVar(&o.requests, "requests", 0, "the most append `requests` the client keeps in flight (default 1: appends stay in order)")
	fs.Var(sizeValue{&o.size}, "size", "record `size` (1024, 4KiB)")
	fs.IntVar(&o.batch, "batch", o.batch, "`records` per append")
	fs.DurationVar(&o.duration, "duration", o.duration, "how long to append for, at most "+maxBenchDuration.String())
	fs.BoolVar(&o.json, "json", false, "print the result as one JSON object")
	logFlag(fs, &o.log, "append to")
	rest, err := fs.parse(args)
	if err != nil {
		return nil, err
	}
	if err := noArgs(rest); err != nil {
		return nil, err
	}
	flushGiven := fs.given("flush") || fs.given("dir")
	switch {
	case o.local && len(o.cluster.addrs) > 0:
		return nil, usagef("give --addrs or --local, not both")
	case !o.local && flushGiven:
		return nil, usagef("--flush and --dir apply to --local only")
	case o.clients < 1 || o.clients > maxBenchClients:
		return nil, usagef("--clients %d is outside [1, %d]", o.clients, maxBenchClients)
	case fs.given("in-flight") && fs.given("clients"):
		return nil, usagef("give --clients or --in-flight, not both")
	case fs.given("in-flight") && (o.inFlight < 1 || o.inFlight > client.MaxAppendWindow):
		return nil, usagef("--in-flight %d is outside [1, %d]", o.inFlight, client.MaxAppendWindow)
	case o.requests < 0 || o.requests > client.MaxAppendRequestsLimit:
		return nil, usagef("--requests %d is outside [1, %d]", o.requests, client.MaxAppendRequestsLimit)
	case o.size < 1:
		return nil, usagef("--size must be at least 1 byte")
	case o.batch < 1 || o.batch > transport.DefaultMaxAppendRecords:
		return nil, usagef("--batch %d is outside [1, %d]", o.batch, transport.DefaultMaxAppendRecords)
	case o.size*int64(o.batch) > transport.DefaultMaxFrameSize-64<<10:
		return nil, usagef("--batch %d of --size %s does not fit one request (%s)", o.batch, formatSize(o.size), formatSize(transport.DefaultMaxFrameSize))
	case o.duration <= 0 || o.duration > maxBenchDuration:
		return nil, usagef("--duration %v is outside (0, %v]", o.duration, maxBenchDuration)
	}
	if o.local {
		if o.cluster.timeout <= 0 {
			return nil, usagef("--timeout %v: want a positive duration", o.cluster.timeout)
		}
	} else if err := o.cluster.check(); err != nil {
		return nil, usagef("%v, or --local", err)
	}
	return o, nil
}

// cmdBench is "node bench".
func cmdBench(ctx context.Context, e *env, args []string) error {
	o, err := parseBench(e, args)
	if err != nil {
		return err
	}
	res, err := runBench(ctx, o, e.stderr)
	if res != nil {
		if perr := printBench(e.stdout, res, o.json); perr != nil && err == nil {
			err = perr
		}
		if err == nil && res.Errors > 0 {
			err = fmt.Errorf("%d appends failed; the first: %s", res.Errors, res.FirstError)
		}
	}
	return err
}

// runBench runs a benchmark, writing progress to progress. It returns the
// result, also when ctx ended early, or an error when it could not run.
func runBench(ctx context.Context, o *benchOptions, progress io.Writer) (*benchResult, error) {
	res := &benchResult{Log: cmp.Or(o.log, transport.DefaultLog), Clients: o.clients, RecordSize: int(o.size), Batch: o.batch}
	addrs := o.cluster.addrs
	if o.local {
		dir, remove, err := tempOrGiven(o.dir, "raftlog-bench-")
		if err != nil {
			return nil, err
		}
		defer remove()
		logs, err := os.Create(filepath.Join(dir, "nodes.log"))
		if err != nil {
			return nil, err
		}
		defer logs.Close()
		kept := "kept after"
		if o.dir == "" {
			kept = "removed after"
		}
		fmt.Fprintf(progress, "starting a local 3-node cluster in %s (flush %s; node logs in nodes.log there; %s)\n", dir, o.flush, kept)
		lc, err := startLocalCluster(ctx, dir, o.flush, logs)
		if err != nil {
			return nil, err
		}
		defer lc.close()
		addrs = lc.clientAddrs()
		res.Target, res.Flush = "local", string(o.flush)
	} else {
		res.Target = strings.Join(addrs, ",")
	}
	opts := o.cluster.options()
	opts.MaxInFlightAppends = o.clients
	if o.inFlight > 0 {
		opts.MaxInFlightAppends = o.inFlight
		res.Clients, res.InFlight = 0, o.inFlight
	}
	opts.MaxAppendRequests = o.requests
	res.Requests = cmp.Or(o.requests, client.DefaultMaxAppendRequests)
	dctx, cancel := context.WithTimeout(ctx, o.cluster.timeout)
	c, err := client.Dial(dctx, addrs, opts)
	cancel()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	g := c.Log(o.log)

	data := make([]byte, o.size)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	recs := make([][]byte, o.batch)
	for i := range recs {
		recs[i] = data // read-only: every record may share it
	}
	// One append first, outside the measurement: it waits for a leader.
	if _, err := g.Append(ctx, recs...); err != nil {
		return nil, fmt.Errorf("first append to log %s: %w", res.Log, err)
	}

	tally := &benchTally{batch: uint64(o.batch)}
	var (
		wg   sync.WaitGroup
		lats = make([][]time.Duration, max(o.clients, 1))
		stop = make(chan struct{})
		done = make(chan struct{})
	)
	start := time.Now()
	timer := time.AfterFunc(o.duration, func() { close(stop) })
	defer timer.Stop()
	if o.inFlight > 0 {
		lats = lats[:1]
		wg.Go(func() { lats[0] = benchAsync(ctx, g, o.inFlight, recs, stop, tally) })
	} else {
		for w := range o.clients {
			wg.Go(func() { lats[w] = benchAppends(ctx, g, recs, stop, tally) })
		}
	}
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	progressed := false
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-tick.C:
			el := time.Since(start).Seconds()
			n := tally.acked.Load()
			fmt.Fprintf(progress, "\r%4.0fs  %d records acked, %.0f records/s   ", el, n, float64(n)/el)
			progressed = true
		}
	}
	elapsed := time.Since(start)
	if progressed {
		fmt.Fprintln(progress)
	}

	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	res.Seconds = elapsed.Seconds()
	res.Appends = uint64(len(all))
	res.Records = tally.acked.Load()
	res.Errors = tally.errors.Load()
	res.FirstError = tally.firstError
	res.RecordsPerSec = float64(res.Records) / elapsed.Seconds()
	res.MiBPerSec = res.RecordsPerSec * float64(o.size) / (1 << 20)
	res.P50Micros = micros(percentile(all, 0.50))
	res.P99Micros = micros(percentile(all, 0.99))
	res.P999Micros = micros(percentile(all, 0.999))
	if len(all) > 0 {
		res.MaxMicros = micros(all[len(all)-1])
	}
	return res, nil
}

// benchTally counts the appends of a bench run; its methods may be called
// from any goroutine.
type benchTally struct {
	batch      uint64        // immutable: records per append
	acked      atomic.Uint64 // records acked
	errors     atomic.Uint64 // appends failed
	errOnce    sync.Once     // sets firstError once
	firstError string        // set by errOnce; read once every appender is done
}

// failed counts err, the failure of an append that ctx did not end.
func (t *benchTally) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	t.errors.Add(1)
	t.errOnce.Do(func() { t.firstError = err.Error() })
}

// benchAppends appends recs with Append, one at a time, until stop is
// closed, ctx ends or an append fails, and returns the latencies.
func benchAppends(ctx context.Context, g *client.Log, recs [][]byte, stop <-chan struct{}, tally *benchTally) []time.Duration {
	var lats []time.Duration
	for {
		select {
		case <-stop:
			return lats
		case <-ctx.Done():
			return lats
		default:
		}
		t0 := time.Now()
		_, err := g.Append(ctx, recs...)
		lat := time.Since(t0)
		if err != nil {
			tally.failed(ctx, err)
			return lats // an appender stops at its first failure
		}
		lats = append(lats, lat)
		tally.acked.Add(tally.batch)
	}
}

// benchAsync appends recs with AppendAsync, keeping inFlight appends in
// flight, until stop is closed, ctx ends or an append fails; it waits for
// the appends in flight and returns the latencies. A second goroutine
// takes the futures in submission order and times each as it finds it
// complete.
func benchAsync(ctx context.Context, g *client.Log, inFlight int, recs [][]byte, stop <-chan struct{}, tally *benchTally) []time.Duration {
	type sent struct {
		f  *client.AppendFuture
		t0 time.Time
	}
	queue := make(chan sent, inFlight)
	var lats []time.Duration
	var failed atomic.Bool
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for s := range queue {
			<-s.f.Done()
			lat := time.Since(s.t0)
			if err := s.f.Err(); err != nil {
				tally.failed(ctx, err)
				failed.Store(true) // the appender stops at its first failure
				continue
			}
			lats = append(lats, lat)
			tally.acked.Add(tally.batch)
		}
	}()
loop:
	for !failed.Load() {
		select {
		case <-stop:
			break loop
		case <-ctx.Done():
			break loop
		default:
		}
		f := g.AppendAsync(ctx, recs...) // waits while inFlight are in flight
		// Timed from here, like an Append, which never waits for room.
		queue <- sent{f, time.Now()}
	}
	close(queue)
	<-collected
	return lats
}

// percentile returns the q-quantile of sorted by the nearest-rank method,
// 0 when sorted is empty.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// micros returns d in microseconds.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// printBench writes r as a table, or as one JSON object.
func printBench(w io.Writer, r *benchResult, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	target := r.Target
	if r.Flush != "" {
		target = "a local 3-node cluster, flush " + r.Flush
	}
	if r.Log != "" && r.Log != transport.DefaultLog {
		target = "log " + r.Log + " of " + target
	}
	us := func(v float64) time.Duration {
		return time.Duration(v * float64(time.Microsecond)).Round(time.Microsecond)
	}
	who := fmt.Sprintf("%d clients", r.Clients)
	if r.InFlight > 0 {
		who = fmt.Sprintf("%d appends in flight", r.InFlight)
	}
	_, err := fmt.Fprintf(w, `%s (%d requests), %s records, %d per append, for %.1fs against %s
acked records   %d (%d appends)
records/s       %.0f
MiB/s           %.2f
latency p50     %v
latency p99     %v
latency p99.9   %v
latency max     %v
`, who, r.Requests, formatSize(int64(r.RecordSize)), r.Batch, r.Seconds, target,
		r.Records, r.Appends, r.RecordsPerSec, r.MiBPerSec,
		us(r.P50Micros), us(r.P99Micros), us(r.P999Micros), us(r.MaxMicros))
	if err == nil && r.Errors > 0 {
		_, err = fmt.Fprintf(w, "errors          %d (first: %s)\n", r.Errors, r.FirstError)
	}
	return err
}
