package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// The named-logs benchmark (`bench logs`, issue #15's targets): the same
// three `node serve` processes as `bench cluster`, serving N named logs of
// 3 replicas with their leaders spread over the nodes, one client per log
// keeping a window of appends in flight; next to the default log alone in
// the same run. Then a failover: SIGKILL of a node leading several logs
// under a light load on every log (logs_failover.go). See README.md.

// logsConfig is what the flags of `bench logs` select.
type logsConfig struct {
	dir          string        // parent of the run's temporary directory
	keep         bool          // keep the run's directory
	duration     time.Duration // measured window of each cell
	warmup       time.Duration // appending before the window, not counted
	rounds       int           // repetitions of every throughput cell; figures are medians
	counts       []int         // numbers of named logs of the throughput cells
	flush        string        // the nodes' --flush
	window       int           // appends in flight per log
	size         int           // bytes of a record
	throughput   bool          // run the throughput cells
	failover     bool          // run the failover
	failoverLogs int           // named logs of the failover
	maxprocs     int           // GOMAXPROCS of the node processes; 0: Go's default
	failoverReps int           // SIGKILLs of each failover setup
	nodeBin      string        // a built cmd/node; "" builds one
	json         bool
	seed         uint64
	pprof        []int  // profile every node over the windows of the cells of these many named logs (0: the default log alone)
	pprofDir     string // where profiles go
}

// logsSpreadWait bounds the wait for every log to have a leader and for
// the leaders to be spread, after creating the logs and after a restart.
const logsSpreadWait = 90 * time.Second

// logsMain is `bench logs`; it returns the exit status.
func logsMain(args []string) int {
	cfg, err := parseLogsFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench logs:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runLogs(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench logs:", err)
		return 1
	}
	return 0
}

// parseLogsFlags turns the command line of `bench logs` into a config.
func parseLogsFlags(args []string) (*logsConfig, error) {
	fs := flag.NewFlagSet("bench logs", flag.ContinueOnError)
	cfg := &logsConfig{}
	var counts, only, pprof string
	var quick bool
	fs.StringVar(&cfg.dir, "dir", os.TempDir(), "create the run's temporary directory (removed at the end) under `path`: every node's data goes there")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the run's directory (data and node logs)")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "measured window of each throughput cell")
	fs.DurationVar(&cfg.warmup, "warmup", 2*time.Second, "appending before each measured window, not counted")
	fs.IntVar(&cfg.rounds, "rounds", 1, "repeat every throughput cell this many times and report the median")
	fs.StringVar(&counts, "logs", "1,8,64", "comma-separated `counts` of named logs of the throughput cells (the default log alone always runs too)")
	fs.StringVar(&cfg.flush, "flush", "sync", "the nodes' --flush: sync or async")
	fs.IntVar(&cfg.window, "in-flight", 64, "appends in flight per log (AppendAsync with this window)")
	fs.IntVar(&cfg.size, "size", 1<<10, "bytes of a record")
	fs.StringVar(&only, "only", "all", "what to run: throughput, failover or all")
	fs.IntVar(&cfg.failoverLogs, "failover-logs", 8, "named logs of the failover")
	fs.IntVar(&cfg.failoverReps, "failover-reps", 5, "SIGKILLs of the failover, each setup (gaps are medians over them)")
	fs.IntVar(&cfg.maxprocs, "server-gomaxprocs", 0, "run every node process with GOMAXPROCS=`n` (0: Go's default, the cores)")
	fs.StringVar(&cfg.nodeBin, "node-bin", "", "the raftlog node `binary` to run; default: go build ../cmd/node into the run's directory")
	fs.BoolVar(&cfg.json, "json", false, "print the results as one JSON object instead of Markdown")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the record payloads")
	fs.StringVar(&pprof, "pprof", "", "take a CPU profile of every node over the measured window of the cells of these comma-separated `counts` of named logs (0: the default log alone), each round")
	fs.StringVar(&cfg.pprofDir, "pprof-dir", ".", "the `directory` -pprof writes logs<N>-<node>[-round<R>].pprof to")
	fs.BoolVar(&quick, "quick", false, "smoke run: 1s windows after 500ms of warm-up, logs 1,8, 2 failover repetitions (explicit flags still win)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		quickDefault(set, "duration", &cfg.duration, time.Second)
		quickDefault(set, "warmup", &cfg.warmup, 500*time.Millisecond)
		quickDefault(set, "logs", &counts, "1,8")
		quickDefault(set, "failover-reps", &cfg.failoverReps, 2)
	}
	var err error
	if cfg.counts, err = parseLogCounts(counts); err != nil {
		return nil, err
	}
	switch only {
	case "all", "":
		cfg.throughput, cfg.failover = true, true
	case "throughput":
		cfg.throughput = true
	case "failover":
		cfg.failover = true
	default:
		return nil, fmt.Errorf("-only %q: want throughput, failover or all", only)
	}
	switch {
	case cfg.duration <= 0 || cfg.duration > maxCellDuration:
		return nil, fmt.Errorf("-duration %v is outside (0, %v]", cfg.duration, maxCellDuration)
	case cfg.warmup < 0:
		return nil, fmt.Errorf("-warmup %v is negative", cfg.warmup)
	case cfg.rounds < 1:
		return nil, errors.New("-rounds must be at least 1")
	case cfg.flush != "sync" && cfg.flush != "async":
		return nil, fmt.Errorf("-flush %q: want sync or async", cfg.flush)
	case cfg.window < 1 || cfg.window > raftlogMaxInFlight:
		return nil, fmt.Errorf("-in-flight %d is outside [1, %d]", cfg.window, raftlogMaxInFlight)
	case cfg.size < 8 || cfg.size > 1<<20:
		return nil, fmt.Errorf("-size %d is outside [8, 1 MiB]", cfg.size)
	case cfg.failoverLogs < 3 || cfg.failoverLogs > maxBenchLogs:
		return nil, fmt.Errorf("-failover-logs %d is outside [3, %d] (a node must lead at least 2 logs)", cfg.failoverLogs, maxBenchLogs)
	case cfg.failoverReps < 1:
		return nil, errors.New("-failover-reps must be at least 1")
	}
	if pprof != "" {
		for _, f := range strings.Split(pprof, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || !cfg.throughput || (n != 0 && !slices.Contains(cfg.counts, n)) {
				return nil, fmt.Errorf("-pprof %q: %q is not a throughput cell of this run (the default log alone: 0; -logs %s)", pprof, f, counts)
			}
			cfg.pprof = append(cfg.pprof, n)
		}
		if err := checkProfiling(cfg.duration, cfg.pprofDir); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// maxBenchLogs bounds -logs: a node holds at most 435 logs (raftstore's
// group limit), the default log included.
const maxBenchLogs = 400

// parseLogCounts parses -logs.
func parseLogCounts(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxBenchLogs {
			return nil, fmt.Errorf("-logs: %q is not a count of logs in [1, %d]", f, maxBenchLogs)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// logNames returns the names of n named logs, or the default log's alone
// for n = 0.
func logNames(n int) []string {
	if n == 0 {
		return []string{transport.DefaultLog}
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%03d", i+1)
	}
	return names
}

// runLogs runs the throughput cells and the failover and prints the
// report.
func runLogs(ctx context.Context, cfg *logsConfig, out, progress io.Writer) (err error) {
	base, err := os.MkdirTemp(cfg.dir, "raftbench-logs-")
	if err != nil {
		return err
	}
	if cfg.keep {
		fmt.Fprintln(progress, "keeping", base)
	} else {
		defer func() {
			if rerr := os.RemoveAll(base); err == nil {
				err = rerr
			}
		}()
	}
	e := &clusterEnv{procs: &procSet{}, nodeBin: cfg.nodeBin, maxprocs: cfg.maxprocs, progress: progress}
	defer func() {
		if serr := e.procs.stopAll(); err == nil {
			err = serr
		}
	}()
	version := "the binary " + e.nodeBin
	if e.nodeBin == "" {
		root, err := repoRoot(ctx)
		if err != nil {
			return fmt.Errorf("finding the raftlog module to build cmd/node (or give -node-bin): %w", err)
		}
		version = gitVersion(ctx, root)
		if e.nodeBin, err = buildNode(ctx, root, filepath.Join(base, "bin"), progress); err != nil {
			return err
		}
	}

	rep := &logsReport{cfg: cfg, machine: describeMachine(base), dir: base, version: version}
	var problems []string
	if cfg.throughput {
		cells := append([]int{0}, cfg.counts...)
		for round := range cfg.rounds {
			for _, n := range cells {
				if err := ctx.Err(); err != nil {
					return err
				}
				fmt.Fprintf(progress, "round %d/%d, %s: ", round+1, cfg.rounds, cellTitle(n))
				c, err := runLogsCell(ctx, cfg, e, base, n, round)
				if err != nil {
					fmt.Fprintln(progress, "FAILED:", err)
					if ctx.Err() != nil {
						return ctx.Err()
					}
					problems = append(problems, fmt.Sprintf("round %d, %s: %v", round+1, cellTitle(n), err))
				} else {
					fmt.Fprintf(progress, "%s records/s, p50 %s, p99 %s, server CPU %s per 1,000, %s records per fdatasync\n",
						fmtCount(c.RecordsPerSec), fmtSeconds(c.P50), fmtSeconds(c.P99), fmtSeconds(c.ServerCPUPer1k), fmtPer(c.PerFsync))
				}
				if c != nil {
					rep.cells = append(rep.cells, c)
				}
			}
		}
	}
	if cfg.failover {
		for _, n := range []int{0, cfg.failoverLogs} {
			if err := ctx.Err(); err != nil {
				return err
			}
			fmt.Fprintf(progress, "failover, %s:\n", cellTitle(n))
			f, err := runFailover(ctx, cfg, e, base, n)
			if err != nil {
				fmt.Fprintln(progress, "  FAILED:", err)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				problems = append(problems, fmt.Sprintf("failover, %s: %v", cellTitle(n), err))
			}
			if f != nil {
				rep.failovers = append(rep.failovers, f)
			}
		}
	}
	rep.problems = problems
	if err := rep.print(out); err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d parts failed: %s", len(problems), strings.Join(problems, "; "))
	}
	return nil
}

// cellTitle names the cell of n named logs (0: the default log alone).
func cellTitle(n int) string {
	switch n {
	case 0:
		return "default log alone"
	case 1:
		return "1 named log"
	}
	return fmt.Sprintf("%d named logs", n)
}

// logsCell is what one throughput cell measured; -json prints it as is.
// Latencies are in seconds, of the records acked in the window; CPU is
// user plus system seconds of the three nodes over the window.
type logsCell struct {
	Round          int        `json:"round"`
	Logs           int        `json:"logs"` // named logs; 0: the default log alone
	Seconds        float64    `json:"seconds"`
	Acked          int        `json:"acked"`
	RecordsPerSec  float64    `json:"records_per_sec"`
	P50            float64    `json:"p50_s"`
	P99            float64    `json:"p99_s"`
	P999           float64    `json:"p999_s"`
	ServerCPU      float64    `json:"server_cpu_s"`
	ServerCPUPer1k float64    `json:"server_cpu_s_per_1k"`
	ClientCPU      float64    `json:"client_cpu_s"`      // of the bench process, which runs the clients
	PerFsync       float64    `json:"records_per_fsync"` // over the three nodes: Σ appends ÷ Σ fsyncs
	Nodes          []nodeCell `json:"nodes"`
	Errors         int        `json:"errors"`
	FirstError     string     `json:"first_error,omitempty"`
	ReadBack       int        `json:"read_back"`      // acked records read back and matched, every log
	Unacked        int        `json:"unacked_stored"` // records read back that no ack names
	SetupSeconds   float64    `json:"setup_s"`        // creating the logs and waiting for spread leaders
}

// nodeCell is one node's figures in a cell.
type nodeCell struct {
	ID       string  `json:"id"`
	Leads    int     `json:"leads"`   // logs of the cell it led at the start of the window
	Appends  float64 `json:"appends"` // raftlog_store_appends_total over the window
	Fsyncs   float64 `json:"fsyncs"`  // raftlog_store_fsyncs_total over the window
	PerFsync float64 `json:"records_per_fsync"`
	PeakRSS  int64   `json:"peak_rss_bytes"` // the process's largest resident set, at the end of the window
}

// runLogsCell starts a fresh cluster, creates n named logs of 3 replicas
// (none for n = 0: the default log alone), waits until every log has a
// leader and the leaders are spread, and runs one client per log with the
// window of appends in flight: warm-up, then the measured window. It reads
// every acked record back and stops the cluster.
func runLogsCell(ctx context.Context, cfg *logsConfig, e *clusterEnv, base string, n, round int) (_ *logsCell, err error) {
	dir, finish, err := e.cellDir(base, fmt.Sprintf("logs%d-", n), cfg.keep)
	if err != nil {
		return nil, err
	}
	defer finish(&err)
	setup := time.Now()
	profile := slices.Contains(cfg.pprof, n)
	c, err := startRaftlog(ctx, e, dir, cfg.flush, profile)
	if err != nil {
		return nil, err
	}
	names := logNames(n)
	preferred, err := c.createLogs(ctx, names)
	if err != nil {
		return nil, err
	}
	leaders, err := c.waitSpread(ctx, names, preferred, logsSpreadWait)
	if err != nil {
		return nil, err
	}
	res := &logsCell{Round: round + 1, Logs: n, SetupSeconds: time.Since(setup).Seconds()}
	for _, nd := range c.nodes {
		res.Nodes = append(res.Nodes, nodeCell{ID: nd.id, Leads: countLeads(leaders, names, nd.id)})
	}

	// One Client per log: the "one client per log", and each log
	// then goes the way the default log goes alone (its own connection,
	// pipeline and session), so the cells differ only in the logs.
	clients := make([]*raftlogClient, len(names))
	defer func() {
		for _, rc := range clients {
			if rc != nil {
				if cerr := rc.close(); err == nil {
					err = cerr
				}
			}
		}
	}()
	for i, name := range names {
		cl, err := client.Dial(ctx, c.clientAddrs(), raftlogClientOptions(cfg.window))
		if err != nil {
			return nil, err
		}
		clients[i] = &raftlogClient{c: cl, l: cl.Log(name)}
	}

	recs := newRecords(cfg.size, cfg.seed+uint64(round))
	var phase atomic.Int32
	stop := make(chan struct{})
	tallies := make([]*tally, len(names))
	var wg sync.WaitGroup
	for i, rc := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tallies[i] = rc.run(ctx, stop, &phase, cfg.window, recs)
		}()
	}
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			wg.Wait()
		}
	}()
	if err := sleepCtx(ctx, cfg.warmup); err != nil {
		return nil, err
	}
	servers := c.servers()
	m0, err := c.storeCounters(ctx)
	if err != nil {
		return nil, err
	}
	cpu0, err := cpuOf(servers)
	if err != nil {
		return nil, err
	}
	self0 := selfCPU()
	t0 := time.Now()
	phase.Store(phaseMeasuring)
	profDone := make(chan error, 1)
	if profile {
		go func() {
			profDone <- c.profileNodes(ctx, int(cfg.duration/time.Second), cfg.pprofDir, n, round, cfg.rounds)
		}()
	} else {
		profDone <- nil
	}
	werr := sleepCtx(ctx, cfg.duration)
	phase.Store(phaseDone)
	t1 := time.Now()
	cpu1, cerr := cpuOf(servers)
	self1 := selfCPU()
	m1, merr := c.storeCounters(ctx)
	for i, p := range servers {
		rss, err := peakRSS(p.pid())
		if err != nil {
			merr = errors.Join(merr, fmt.Errorf("peak RSS of %s: %w", p.name, err))
		}
		res.Nodes[i].PeakRSS = rss
	}
	stopped = true
	close(stop)
	wg.Wait()
	if err := errors.Join(werr, cerr, merr, <-profDone); err != nil {
		return nil, err
	}

	t := merge(tallies)
	res.Seconds = t1.Sub(t0).Seconds()
	res.Acked = len(t.lats)
	res.RecordsPerSec = float64(res.Acked) / res.Seconds
	ps := latencyPercentiles(t.lats, 50, 99, 99.9)
	res.P50, res.P99, res.P999 = ps[0], ps[1], ps[2]
	res.ServerCPU, res.ClientCPU = cpu1-cpu0, self1-self0
	if res.Acked > 0 {
		res.ServerCPUPer1k = res.ServerCPU / float64(res.Acked) * 1000
	}
	var appends, fsyncs float64
	for i := range res.Nodes {
		nc := &res.Nodes[i]
		nc.Appends, nc.Fsyncs = m1[i].appends-m0[i].appends, m1[i].fsyncs-m0[i].fsyncs
		nc.PerFsync = ratioOrNaN(nc.Appends, nc.Fsyncs)
		appends += nc.Appends
		fsyncs += nc.Fsyncs
	}
	res.PerFsync = ratioOrNaN(appends, fsyncs)
	res.Errors = t.errs
	if t.firstErr != nil {
		res.FirstError = t.firstErr.Error()
	}
	for _, p := range servers {
		if !p.running() {
			return res, p.exitError()
		}
	}
	for i, name := range names {
		rb, verr := c.verifyLog(ctx, name, tallies[i].acks, recs)
		res.ReadBack += rb.acked
		res.Unacked += rb.others
		if verr != nil {
			return res, fmt.Errorf("READ-BACK FAILED: log %s, after %d of %d acknowledged records: %w", name, rb.acked, len(tallies[i].acks), verr)
		}
	}
	if t.errs > 0 {
		return res, fmt.Errorf("%d appends failed; the first: %v", t.errs, t.firstErr)
	}
	return res, nil
}

// ratioOrNaN returns a/b, NaN when b is 0.
func ratioOrNaN(a, b float64) float64 {
	if b == 0 {
		return nan()
	}
	return a / b
}

// countLeads counts the logs of names that leaders says node id leads.
func countLeads(leaders map[string]string, names []string, id string) int {
	k := 0
	for _, name := range names {
		if leaders[name] == id {
			k++
		}
	}
	return k
}
