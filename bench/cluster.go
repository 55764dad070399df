package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The cluster comparison (`bench cluster`): raftlog's real deployment,
// three `node serve` processes on 127.0.0.1, against a NATS JetStream
// cluster of three servers with a stream of 3 replicas, in the same run on
// the same disk, one system at a time. See README.md.

// maxCellDuration bounds the measured window of a cell: every latency in it
// is kept, 8 bytes each, for exact percentiles.
const maxCellDuration = 10 * time.Minute

// clusterConfig is what the flags of `bench cluster` select.
type clusterConfig struct {
	dir       string        // parent of the run's temporary directory
	keep      bool          // keep the run's directory
	duration  time.Duration // measured window of each cell
	warmup    time.Duration // appending before the window, not counted
	rounds    int           // repetitions of every cell; figures are medians
	workloads []clusterWorkload
	systems   []systemKind
	nodeBin   string // a built cmd/node; "" builds one
	maxprocs  int    // GOMAXPROCS of the server processes; 0: Go's default
	pprof     string // workload key whose raftlog leader is profiled; "" none
	pprofDir  string // where profiles go
	json      bool
	seed      uint64
}

// profiler writes a CPU profile of seconds to path.
type profiler func(ctx context.Context, seconds int, path string) error

// cluster is a running cluster of one system under test.
type cluster interface {
	// servers returns the three server processes.
	servers() []*proc
	// dial connects clients clients for window appends in flight each.
	dial(ctx context.Context, clients, window int) ([]loadClient, error)
	// verify reads back every acknowledged record.
	verify(ctx context.Context, acks []ack, recs *records) (readBack, error)
	// leaderProfiler finds the leader and returns what profiles it.
	leaderProfiler(ctx context.Context) (profiler, error)
}

// systemKind is one column of the comparison.
type systemKind struct {
	key   string // name in -systems
	name  string
	pair  string // key of the NATS setting its ratios are to; "" for NATS
	flush string // raftlog's --flush; "" for NATS
	// start starts a cluster under dir; pprof turns on raftlog's --pprof.
	start func(ctx context.Context, e *clusterEnv, dir string, pprof bool) (cluster, error)
	// extra keeps the system out of -systems all; oneClient runs it only
	// in the workloads of one client.
	extra, oneClient bool
}

// Keys of the systems.
const (
	sysRaftlogSync  = "raftlog-sync"
	sysRaftlogAsync = "raftlog-async"
	sysNATSAlways   = "nats-always"
	sysNATSDefault  = "nats-default"
	sysFloor        = "floor"
)

// systemKinds lists the systems in report order.
func systemKinds() []systemKind {
	raftlog := func(flush string) func(context.Context, *clusterEnv, string, bool) (cluster, error) {
		return func(ctx context.Context, e *clusterEnv, dir string, pprof bool) (cluster, error) {
			return startRaftlog(ctx, e, dir, flush, pprof)
		}
	}
	natsJS := func(always bool) func(context.Context, *clusterEnv, string, bool) (cluster, error) {
		return func(ctx context.Context, e *clusterEnv, dir string, _ bool) (cluster, error) {
			return startNATS(ctx, e, dir, always)
		}
	}
	return []systemKind{
		{sysRaftlogSync, "raftlog sync", sysNATSAlways, "sync", raftlog("sync"), false, false},
		{sysRaftlogAsync, "raftlog async", sysNATSDefault, "async", raftlog("async"), false, false},
		{sysNATSAlways, "NATS JS, fsync always", "", "", natsJS(true), false, false},
		{sysNATSDefault, "NATS JS, default", "", "", natsJS(false), false, false},
		{sysFloor, "replication floor, sync", "", "", func(ctx context.Context, e *clusterEnv, dir string, _ bool) (cluster, error) {
			return startPipeline(ctx, e, dir)
		}, true, true},
	}
}

// clusterEnv is what every cell of a run shares.
type clusterEnv struct {
	procs    *procSet
	nodeBin  string    // the node binary
	maxprocs int       // GOMAXPROCS of every server process; 0: Go's default
	self     string    // this binary, which runs NATS servers
	progress io.Writer // progress lines
}

// clusterMain is `bench cluster`; it returns the exit status.
func clusterMain(args []string) int {
	cfg, err := parseClusterFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench cluster:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runCluster(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench cluster:", err)
		return 1
	}
	return 0
}

// parseClusterFlags turns the command line of `bench cluster` into a
// config.
func parseClusterFlags(args []string) (*clusterConfig, error) {
	fs := flag.NewFlagSet("bench cluster", flag.ContinueOnError)
	cfg := &clusterConfig{}
	var only, systems string
	var quick bool
	fs.StringVar(&cfg.dir, "dir", os.TempDir(), "create the run's temporary directory (removed at the end) under `path`: every server's data goes there")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the run's directory (data and server logs)")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "measured window of each cell (workload and system)")
	fs.DurationVar(&cfg.warmup, "warmup", 2*time.Second, "appending before each measured window, not counted")
	fs.IntVar(&cfg.rounds, "rounds", 1, "repeat every cell this many times and report the median")
	fs.StringVar(&only, "only", "all", "comma-separated `workloads` to run: "+strings.Join(clusterWorkloadKeys(), ", ")+" (or 1-5)")
	fs.StringVar(&systems, "systems", "all", "comma-separated `systems` to run: "+strings.Join(systemKeys(), ", ")+"; all is every one but floor (pipeline.go)")
	fs.StringVar(&cfg.nodeBin, "node-bin", "", "the raftlog node `binary` to run; default: go build ../cmd/node into the run's directory")
	fs.IntVar(&cfg.maxprocs, "server-gomaxprocs", 0, "run every server process, raftlog's and NATS', with GOMAXPROCS=`n` (0: Go's default, the cores)")
	fs.StringVar(&cfg.pprof, "pprof", "", "take a CPU profile of the raftlog leader over the measured window of this `workload` (each raftlog system, each round)")
	fs.StringVar(&cfg.pprofDir, "pprof-dir", ".", "the `directory` -pprof writes raftlog-<flush>-<workload>.pprof to")
	fs.BoolVar(&cfg.json, "json", false, "print the results as one JSON object instead of Markdown")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the record payloads")
	fs.BoolVar(&quick, "quick", false, "smoke run: 1s windows after 500ms of warm-up (explicit flags still win)")
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
	}
	var err error
	if cfg.workloads, err = selectClusterWorkloads(only); err != nil {
		return nil, err
	}
	if cfg.systems, err = selectSystems(systems); err != nil {
		return nil, err
	}
	switch {
	case cfg.duration <= 0 || cfg.duration > maxCellDuration:
		return nil, fmt.Errorf("-duration %v is outside (0, %v]", cfg.duration, maxCellDuration)
	case cfg.warmup < 0:
		return nil, fmt.Errorf("-warmup %v is negative", cfg.warmup)
	case cfg.rounds < 1:
		return nil, errors.New("-rounds must be at least 1")
	}
	if cfg.pprof != "" {
		if !slices.ContainsFunc(cfg.workloads, func(w clusterWorkload) bool { return w.key == cfg.pprof }) {
			return nil, fmt.Errorf("-pprof %q: not a workload of this run (%s)", cfg.pprof, strings.Join(keysOf(cfg.workloads), ", "))
		}
		if !slices.ContainsFunc(cfg.systems, func(s systemKind) bool { return s.flush != "" }) {
			return nil, errors.New("-pprof profiles raftlog, which -systems leaves out")
		}
		if err := checkProfiling(cfg.duration, cfg.pprofDir); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// clusterWorkloadKeys lists the names -only accepts, in report order.
func clusterWorkloadKeys() []string { return keysOf(clusterWorkloads) }

// keysOf returns the keys of ws.
func keysOf(ws []clusterWorkload) []string {
	var ks []string
	for _, w := range ws {
		ks = append(ks, w.key)
	}
	return ks
}

// systemKeys lists the names -systems accepts.
func systemKeys() []string {
	var ks []string
	for _, s := range systemKinds() {
		ks = append(ks, s.key)
	}
	return ks
}

// selectClusterWorkloads parses -only: names or numbers, or "all".
func selectClusterWorkloads(list string) ([]clusterWorkload, error) {
	if list == "" || list == "all" {
		return clusterWorkloads, nil
	}
	want := map[string]bool{}
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if n, err := strconv.Atoi(f); err == nil && n >= 1 && n <= len(clusterWorkloads) {
			f = clusterWorkloads[n-1].key
		}
		if !slices.Contains(clusterWorkloadKeys(), f) {
			return nil, fmt.Errorf("unknown workload %q (have %s)", f, strings.Join(clusterWorkloadKeys(), ", "))
		}
		want[f] = true
	}
	var out []clusterWorkload
	for _, w := range clusterWorkloads {
		if want[w.key] {
			out = append(out, w)
		}
	}
	return out, nil
}

// selectSystems parses -systems: names, or "all".
func selectSystems(list string) ([]systemKind, error) {
	all := systemKinds()
	if list == "" || list == "all" {
		return slices.DeleteFunc(all, func(s systemKind) bool { return s.extra }), nil
	}
	want := map[string]bool{}
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(systemKeys(), f) {
			return nil, fmt.Errorf("unknown system %q (have %s)", f, strings.Join(systemKeys(), ", "))
		}
		want[f] = true
	}
	var out []systemKind
	for _, s := range all {
		if want[s.key] {
			out = append(out, s)
		}
	}
	return out, nil
}

// runCluster runs every cell of the comparison and prints the report.
func runCluster(ctx context.Context, cfg *clusterConfig, out, progress io.Writer) (err error) {
	base, err := os.MkdirTemp(cfg.dir, "raftbench-cluster-")
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
	if e.self, err = os.Executable(); err != nil {
		return err
	}
	vers := versions{nats: natsServerVersion(), natsClient: natsClientVersion()}
	if e.nodeBin == "" {
		root, err := repoRoot(ctx)
		if err != nil {
			return fmt.Errorf("finding the raftlog module to build cmd/node (or give -node-bin): %w", err)
		}
		vers.raftlog = gitVersion(ctx, root)
		if e.nodeBin, err = buildNode(ctx, root, filepath.Join(base, "bin"), progress); err != nil {
			return err
		}
	} else {
		vers.raftlog = "the binary " + e.nodeBin
	}

	rep := &clusterReport{cfg: cfg, machine: describeMachine(base), dir: base, versions: vers, res: newResults()}
	var problems []string
	for round := range cfg.rounds {
		for wi, w := range cfg.workloads {
			if w.key == floorWorkload {
				fmt.Fprintf(progress, "round %d/%d, floor of one sync append: ", round+1, cfg.rounds)
				f, err := measureFloor(base, floorSamples)
				if err != nil {
					fmt.Fprintln(progress, "FAILED:", err)
					problems = append(problems, fmt.Sprintf("round %d, floor: %v", round+1, err))
				} else {
					fmt.Fprintf(progress, "fdatasync p50 %s, loopback round trip p50 %s: %s\n",
						fmtSeconds(f.FsyncP50), fmtSeconds(f.RTTP50), fmtSeconds(f.syncAppend()))
					rep.floors = append(rep.floors, f)
				}
			}
			// Rotate the order of the systems from cell to cell, so that
			// none always runs first or right after another's writeback.
			order := slices.Clone(cfg.systems)
			rot := (round + wi) % len(order)
			order = append(order[rot:], order[:rot]...)
			for _, sys := range order {
				if err := ctx.Err(); err != nil {
					return err
				}
				if sys.oneClient && w.clients != 1 {
					continue
				}
				fmt.Fprintf(progress, "round %d/%d, %s, %s: ", round+1, cfg.rounds, w.title, sys.name)
				c, err := runCell(ctx, cfg, e, base, w, sys, round)
				if err != nil {
					fmt.Fprintln(progress, "FAILED:", err)
					if ctx.Err() != nil {
						return ctx.Err()
					}
					problems = append(problems, fmt.Sprintf("round %d, %s, %s: %v", round+1, w.title, sys.name, err))
				}
				if c != nil {
					if err == nil {
						fmt.Fprintf(progress, "%s records/s, p50 %s, server CPU %s per 1,000\n",
							fmtCount(c.RecordsPerSec), fmtSeconds(c.P50), fmtSeconds(c.ServerCPUPer1k))
					}
					rep.add(w, sys, c)
				}
			}
		}
	}
	rep.problems = problems
	if err := rep.print(out); err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d cells failed: %s", len(problems), strings.Join(problems, "; "))
	}
	return nil
}

// cellResult is what one cell measured; -json prints it as is. Latencies
// are in seconds, of the records acked in the window; CPU is user plus
// system seconds over the window, of the three servers together and of
// the bench process (the clients).
type cellResult struct {
	Round          int     `json:"round"`
	Workload       string  `json:"workload"`
	System         string  `json:"system"`
	Seconds        float64 `json:"seconds"` // the measured window
	Acked          int     `json:"acked"`   // records acked in the window
	RecordsPerSec  float64 `json:"records_per_sec"`
	P50            float64 `json:"p50_s"`
	P99            float64 `json:"p99_s"`
	P999           float64 `json:"p999_s"`
	ServerCPU      float64 `json:"server_cpu_s"`
	ClientCPU      float64 `json:"client_cpu_s"`
	ServerCPUPer1k float64 `json:"server_cpu_s_per_1k"`
	ClientCPUPer1k float64 `json:"client_cpu_s_per_1k"`
	Errors         int     `json:"errors"`
	FirstError     string  `json:"first_error,omitempty"`
	ReadBack       int     `json:"read_back"`      // acked records read back and matched, warm-up and drain included
	Unacked        int     `json:"unacked_stored"` // records read back that no ack names
	Profile        string  `json:"profile,omitempty"`

	// ServerSwitches is the servers' context switches in the window
	// (switches.go).
	ServerSwitches      int64   `json:"server_ctx_switches"`
	ServerSwitchesPer1k float64 `json:"server_ctx_switches_per_1k"`
}

// runCell starts a fresh cluster of sys, runs workload w against it (warm-up,
// then the measured window), reads every acked record back and stops the
// cluster. It returns the figures, also with an error when appends failed
// or the read-back found a record missing.
func runCell(ctx context.Context, cfg *clusterConfig, e *clusterEnv, base string, w clusterWorkload, sys systemKind, round int) (_ *cellResult, err error) {
	dir, finish, err := e.cellDir(base, sys.key+"-"+w.key+"-", cfg.keep)
	if err != nil {
		return nil, err
	}
	defer finish(&err)
	profile := cfg.pprof == w.key && sys.flush != ""
	c, err := sys.start(ctx, e, dir, profile)
	if err != nil {
		return nil, err
	}
	servers := c.servers()
	clients, err := c.dial(ctx, w.clients, w.window)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := closeClients(clients); err == nil {
			err = cerr
		}
	}()

	recs := newRecords(w.size, cfg.seed+uint64(round))
	var phase atomic.Int32
	stop := make(chan struct{})
	tallies := runClients(ctx, clients, stop, &phase, w.window, recs)
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			<-tallies
		}
	}()
	if err := sleepCtx(ctx, cfg.warmup); err != nil {
		return nil, err
	}
	var prof profiler
	if profile {
		if prof, err = c.leaderProfiler(ctx); err != nil {
			return nil, fmt.Errorf("finding the leader to profile: %w", err)
		}
	}

	res := &cellResult{Round: round + 1, Workload: w.key, System: sys.key}
	cpu0, err := cpuOf(servers)
	if err != nil {
		return nil, err
	}
	sw0, err := switchesOf(servers)
	if err != nil {
		return nil, err
	}
	self0 := selfCPU()
	t0 := time.Now()
	phase.Store(phaseMeasuring)
	profDone := make(chan error, 1)
	if prof != nil {
		suffix := ""
		if cfg.rounds > 1 {
			suffix = fmt.Sprintf("-round%d", round+1)
		}
		res.Profile = filepath.Join(cfg.pprofDir, fmt.Sprintf("raftlog-%s-%s%s.pprof", sys.flush, w.key, suffix))
		go func() { profDone <- prof(ctx, int(cfg.duration/time.Second), res.Profile) }()
	} else {
		profDone <- nil
	}
	werr := sleepCtx(ctx, cfg.duration)
	phase.Store(phaseDone)
	t1 := time.Now()
	cpu1, cerr := cpuOf(servers)
	sw1, serr := switchesOf(servers)
	self1 := selfCPU()
	stopped = true
	close(stop)
	t := <-tallies
	if err := errors.Join(werr, cerr, serr, <-profDone); err != nil {
		return nil, err
	}

	res.Seconds = t1.Sub(t0).Seconds()
	res.Acked = len(t.lats)
	res.RecordsPerSec = float64(res.Acked) / res.Seconds
	ps := latencyPercentiles(t.lats, 50, 99, 99.9)
	res.P50, res.P99, res.P999 = ps[0], ps[1], ps[2]
	res.ServerCPU, res.ClientCPU = cpu1-cpu0, self1-self0
	res.ServerSwitches = sw1.since(sw0)
	if res.Acked > 0 {
		res.ServerCPUPer1k = res.ServerCPU / float64(res.Acked) * 1000
		res.ClientCPUPer1k = res.ClientCPU / float64(res.Acked) * 1000
		res.ServerSwitchesPer1k = float64(res.ServerSwitches) / float64(res.Acked) * 1000
	}
	res.Errors = t.errs
	if t.firstErr != nil {
		res.FirstError = t.firstErr.Error()
	}
	for _, p := range servers {
		if !p.running() {
			return res, p.exitError()
		}
	}
	rb, verr := c.verify(ctx, t.acks, recs)
	res.ReadBack, res.Unacked = rb.acked, rb.others
	if verr != nil {
		return res, fmt.Errorf("READ-BACK FAILED after %d of %d acknowledged records: %w", rb.acked, len(t.acks), verr)
	}
	if t.errs > 0 {
		return res, fmt.Errorf("%d appends failed; the first: %v", t.errs, t.firstErr)
	}
	return res, nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// repoRoot returns the directory of the raftlog module, which the bench
// module replaces with ../.
func repoRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/raftlog/raftlog").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go list -m github.com/raftlog/raftlog: %v: %s", err, ee.Stderr)
		}
		return "", err
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", errors.New("go list -m github.com/raftlog/raftlog: no directory (run from bench/)")
	}
	return dir, nil
}

// buildNode builds cmd/node of the module at root into dir, with the
// raftlog module's own go.mod (not the bench module's, whose other
// requirements could change what it links).
func buildNode(ctx context.Context, root, dir string, progress io.Writer) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "node")
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/node")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/node in %s: %v\n%s", root, err, out)
	}
	fmt.Fprintf(progress, "built cmd/node in %v\n", time.Since(start).Round(100*time.Millisecond))
	return bin, nil
}

// gitVersion describes the commit of the repository at root, "+ changes"
// when its work tree differs; "unknown" without git.
func gitVersion(ctx context.Context, root string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "log", "-1", "--format=%h %cd", "--date=short").Output()
	if err != nil {
		return "unknown"
	}
	v := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		v += " + uncommitted changes"
	}
	return v
}
