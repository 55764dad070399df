package main

import (
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
	size     int64
	batch    int
	duration time.Duration
	json     bool
}

// benchResult is the outcome of a bench run; --json prints it as is.
type benchResult struct {
	Target        string  `json:"target"` // "local" or the addresses
	Flush         string  `json:"flush,omitempty"`
	Clients       int     `json:"clients"`
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
Measures appends: --clients goroutines share one client (which pipelines
their requests), each with one append of --batch records of --size bytes in
flight, for --duration. A progress line on stderr shows the acked records/s
each second; then it prints the acked records, records/s, MiB/s and the
latency percentiles of the appends, from every latency measured.

--local starts a 3-node cluster in this process, like demo, in a temporary
directory under $TMPDIR that is removed after.

Latencies are what the appenders see, queueing in the client included: a
connection carries at most 128 requests at once (the server's default
limit), so beyond 128 clients appends wait for a slot.`)
	o.cluster.define(fs)
	fs.BoolVar(&o.local, "local", false, "start a local 3-node cluster instead of using --addrs")
	fs.Var(flushValue{&o.flush}, "flush", "with --local, the nodes' flush `mode`: sync or async")
	fs.StringVar(&o.dir, "dir", "", "with --local, keep the data and logs in this new or empty `directory`")
	fs.IntVar(&o.clients, "clients", o.clients, "`number` of concurrent appenders, each with one append in flight")
	fs.Var(sizeValue{&o.size}, "size", "record `size` (1024, 4KiB)")
	fs.IntVar(&o.batch, "batch", o.batch, "`records` per append")
	fs.DurationVar(&o.duration, "duration", o.duration, "how long to append for, at most "+maxBenchDuration.String())
	fs.BoolVar(&o.json, "json", false, "print the result as one JSON object")
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
	res := &benchResult{Clients: o.clients, RecordSize: int(o.size), Batch: o.batch}
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
	dctx, cancel := context.WithTimeout(ctx, o.cluster.timeout)
	c, err := client.Dial(dctx, addrs, opts)
	cancel()
	if err != nil {
		return nil, err
	}
	defer c.Close()

	data := make([]byte, o.size)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	recs := make([][]byte, o.batch)
	for i := range recs {
		recs[i] = data // read-only: every record may share it
	}
	// One append first, outside the measurement: it waits for a leader.
	if _, err := c.Append(ctx, recs...); err != nil {
		return nil, fmt.Errorf("first append: %w", err)
	}

	var (
		acked    atomic.Uint64
		errCount atomic.Uint64
		errOnce  sync.Once
		wg       sync.WaitGroup
		lats     = make([][]time.Duration, o.clients)
		stop     = make(chan struct{})
		done     = make(chan struct{})
	)
	start := time.Now()
	timer := time.AfterFunc(o.duration, func() { close(stop) })
	defer timer.Stop()
	for w := range o.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				t0 := time.Now()
				_, err := c.Append(ctx, recs...)
				lat := time.Since(t0)
				if err != nil {
					if ctx.Err() == nil {
						errCount.Add(1)
						errOnce.Do(func() { res.FirstError = err.Error() })
					}
					return // an appender stops at its first failure
				}
				lats[w] = append(lats[w], lat)
				acked.Add(uint64(o.batch))
			}
		}()
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
			n := acked.Load()
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
	res.Records = acked.Load()
	res.Errors = errCount.Load()
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
	us := func(v float64) time.Duration {
		return time.Duration(v * float64(time.Microsecond)).Round(time.Microsecond)
	}
	_, err := fmt.Fprintf(w, `%d clients, %s records, %d per append, for %.1fs against %s
acked records   %d (%d appends)
records/s       %.0f
MiB/s           %.2f
latency p50     %v
latency p99     %v
latency p99.9   %v
latency max     %v
`, r.Clients, formatSize(int64(r.RecordSize)), r.Batch, r.Seconds, target,
		r.Records, r.Appends, r.RecordsPerSec, r.MiBPerSec,
		us(r.P50Micros), us(r.P99Micros), us(r.P999Micros), us(r.MaxMicros))
	if err == nil && r.Errors > 0 {
		_, err = fmt.Fprintf(w, "errors          %d (first: %s)\n", r.Errors, r.FirstError)
	}
	return err
}
