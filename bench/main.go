// Command bench compares raftstore with hashicorp's raft-wal and
// raft-boltdb v2 on the same disk in the same run, through the
// raft.LogStore and raft.StableStore interfaces that hashicorp/raft calls.
//
// It measures StoreLogs throughput and latency, random GetLog, prefix and
// suffix DeleteRange, reopening with a warm and with a cold page cache, the
// bytes on disk and many raft groups appending at once (multi-raft), runs every case
// -rounds times with the stores in a rotating order, and prints the
// medians as Markdown tables, each with the ratio to raft-wal. See
// README.md for the workloads and flags.
//
// Usage (from the repository root):
//
//	go -C bench run . [-quick] [-only storelogs,getlog,...] [-dir /path] [-rounds 3] [-duration 3s]
//
// `bench cluster` (cluster.go) compares raftlog's real deployment, three
// node processes on loopback, with a NATS JetStream cluster of three
// servers, in the same run:
//
//	go -C bench run . cluster [-quick] [-only 1x64,...] [-systems raftlog-sync,...] [-pprof 1x64] [-json]
//
// `bench logs` (logs.go) measures many named logs on the same three node
// processes against the default log alone, and their failover:
//
//	go -C bench run . logs [-quick] [-logs 1,8,64] [-flush sync|async] [-only throughput|failover] [-json]
//
// `bench nats-server -c <file>` runs a NATS server; the cluster comparison
// starts its NATS servers so.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"
)

// config is what the flags select.
type config struct {
	dir        string        // parent of the run's temporary directory
	keep       bool          // keep the run's directory
	duration   time.Duration // length of a StoreLogs, GetLog or groups case
	count      int           // calls per StoreLogs or GetLog case, or per group; overrides duration when > 0
	maxBytes   int64         // payload bytes a StoreLogs or groups case may write at most
	rounds     int           // repetitions of every case
	entries    int           // entries in the filled store
	entrySize  int           // payload bytes of a filled entry
	fillBatch  int           // entries per StoreLogs call of the fill
	deleteHead int           // entries the prefix DeleteRange removes
	deleteTail int           // entries the suffix DeleteRange removes
	groups     []int         // group counts of workload 7
	compact    bool          // workload 7's groups compact their logs as raft does
	cold       string        // how workload 8 empties the page cache: coldFadvise or coldDrop
	coldRuns   int           // cold reopens per round in workload 8
	only       map[string]bool
	stores     []storeKind
	seed       uint64
}

// more reports whether a timed loop that has made calls calls in elapsed
// goes on.
func (c *config) more(calls int, elapsed time.Duration) bool {
	if c.count > 0 {
		return calls < c.count
	}
	return elapsed < c.duration
}

// runLength describes how long a StoreLogs (writes) or GetLog case runs.
func (c *config) runLength(writes bool) string {
	s := c.duration.String()
	if c.count > 0 {
		s = fmtCount(float64(c.count)) + " calls"
	}
	if writes {
		s += fmt.Sprintf(" or until %s of payload is written, whichever comes first", fmtBytes(float64(c.maxBytes)))
	}
	return s
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "cluster":
			os.Exit(clusterMain(os.Args[2:]))
		case "logs":
			os.Exit(logsMain(os.Args[2:]))
		case natsServerCommand:
			natsServerMain(os.Args[2:])
			return
		case pipelineServerCommand:
			pipelineServerMain(os.Args[2:])
			return
		}
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		stop()
		os.Exit(1)
	}
}

// parseFlags turns the command line into a config.
func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	cfg := &config{}
	var only, stores, groups string
	var quick bool
	fs.StringVar(&cfg.dir, "dir", os.TempDir(), "create the run's temporary directory (removed at the end) under `path`")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the run's directory")
	fs.DurationVar(&cfg.duration, "duration", 3*time.Second, "length of each StoreLogs, GetLog and groups case")
	fs.IntVar(&cfg.count, "count", 0, "calls per StoreLogs and GetLog case (per group in workload 7), instead of -duration")
	fs.Int64Var(&cfg.maxBytes, "maxbytes", 1<<30, "payload `bytes` a StoreLogs or groups case writes at most (bounds disk use)")
	fs.IntVar(&cfg.rounds, "rounds", 3, "repeat every case this many times and report the median")
	fs.IntVar(&cfg.entries, "entries", 200_000, "entries in the filled store (workloads 2-6)")
	fs.IntVar(&cfg.entrySize, "size", 1<<10, "payload bytes of a filled entry")
	fs.IntVar(&cfg.fillBatch, "batch", 64, "entries per StoreLogs call when filling")
	fs.IntVar(&cfg.deleteHead, "head", 100_000, "entries the prefix DeleteRange removes")
	fs.IntVar(&cfg.deleteTail, "tail", 1_000, "entries the suffix DeleteRange removes")
	fs.StringVar(&groups, "groups", "8,16,64", "comma-separated raft group `counts` of workload 7")
	fs.BoolVar(&cfg.compact, "compact", false, "in workload 7, each group compacts its log as raft's defaults do (every 8,192 entries, keeping 10,240)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of payloads and random indexes")
	fs.StringVar(&cfg.cold, "cold", coldFadvise, "how workload 8 (coldopen) empties the page cache: "+coldFadvise+
		" (the store's files only, posix_fadvise DONTNEED) or "+coldDrop+" (the whole machine's caches, root only)")
	fs.IntVar(&cfg.coldRuns, "coldruns", 3, "cold reopens per round in workload 8 (coldopen)")
	fs.StringVar(&only, "only", "all", "comma-separated `workloads` to run: "+strings.Join(workloadKeys(), ", ")+
		fmt.Sprintf(" (or 1-%d)", len(workloadKeys())))
	fs.StringVar(&stores, "stores", "all", "comma-separated `stores` to run: "+storeKeys())
	fs.BoolVar(&quick, "quick", false, "smoke run: 1 round, 250ms cases, 20,000 entries, groups 8,64 (explicit flags still win)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		quickDefault(set, "duration", &cfg.duration, 250*time.Millisecond)
		quickDefault(set, "maxbytes", &cfg.maxBytes, 64<<20)
		quickDefault(set, "rounds", &cfg.rounds, 1)
		quickDefault(set, "entries", &cfg.entries, 20_000)
		quickDefault(set, "head", &cfg.deleteHead, 10_000)
		quickDefault(set, "tail", &cfg.deleteTail, 1_000)
		quickDefault(set, "groups", &groups, "8,64")
	}
	var err error
	if cfg.groups, err = parseGroups(groups); err != nil {
		return nil, err
	}
	if cfg.only, err = selectWorkloads(only); err != nil {
		return nil, err
	}
	if cfg.stores, err = selectStores(stores); err != nil {
		return nil, err
	}
	return cfg, cfg.validate()
}

// quickDefault sets *p to v unless the flag name was given.
func quickDefault[T any](set map[string]bool, name string, p *T, v T) {
	if !set[name] {
		*p = v
	}
}

// validate refuses sizes the workloads cannot run with.
func (c *config) validate() error {
	switch {
	case c.rounds < 1:
		return errors.New("-rounds must be at least 1")
	case c.count <= 0 && c.duration <= 0:
		return errors.New("-duration must be positive (or -count set)")
	case c.maxBytes <= 0:
		return errors.New("-maxbytes must be positive")
	case c.entries < 1 || c.entrySize < 1 || c.fillBatch < 1:
		return errors.New("-entries, -size and -batch must be positive")
	case c.deleteHead < 1 || c.deleteHead >= c.entries:
		return fmt.Errorf("-head must be in [1, %d)", c.entries)
	case c.deleteTail < 1 || c.deleteTail >= c.entries:
		return fmt.Errorf("-tail must be in [1, %d)", c.entries)
	case c.cold != coldFadvise && c.cold != coldDrop:
		return fmt.Errorf("-cold must be %s or %s", coldFadvise, coldDrop)
	case c.coldRuns < 1:
		return errors.New("-coldruns must be at least 1")
	}
	return nil
}

// workloadKeys lists the names -only accepts, in report order.
func workloadKeys() []string {
	return []string{wStoreLogs, wGetLog, wDeleteHead, wDeleteTail, wReopen, wDisk, wGroups, wCold}
}

// parseGroups parses -groups: a comma-separated list of group counts.
func parseGroups(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxGroupCount {
			return nil, fmt.Errorf("-groups: %q is not a group count in [1, %d]", f, maxGroupCount)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// selectWorkloads parses -only: names or numbers (1 for the first of
// workloadKeys), or "all".
func selectWorkloads(list string) (map[string]bool, error) {
	keys := workloadKeys()
	out := map[string]bool{}
	if list == "" || list == "all" {
		for _, k := range keys {
			out[k] = true
		}
		return out, nil
	}
	for _, w := range strings.Split(list, ",") {
		w = strings.TrimSpace(w)
		if n, err := strconv.Atoi(w); err == nil && n >= 1 && n <= len(keys) {
			w = keys[n-1]
		}
		if !slices.Contains(keys, w) {
			return nil, fmt.Errorf("unknown workload %q (have %s)", w, strings.Join(keys, ", "))
		}
		out[w] = true
	}
	return out, nil
}

// run creates the run's directory, prints the machine, runs the selected
// workloads and prints their tables to out; progress goes to progress.
func run(ctx context.Context, cfg *config, out, progress io.Writer) (err error) {
	base, err := os.MkdirTemp(cfg.dir, "raftbench-")
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

	printHeader(out, cfg, describeMachine(base), base)
	res := newResults()
	if cfg.only[wStoreLogs] {
		if err := runStoreLogs(ctx, cfg, base, res, progress); err != nil {
			return err
		}
	}
	if slices.ContainsFunc(filledWorkloads, func(w string) bool { return cfg.only[w] }) {
		if err := runFilled(ctx, cfg, base, res, progress); err != nil {
			return err
		}
	}
	if cfg.only[wGroups] {
		if err := runGroups(ctx, cfg, base, res, progress); err != nil {
			return err
		}
	}

	for i, w := range workloads(cfg) {
		if !cfg.only[w.key] {
			continue
		}
		if w.key == wGroups {
			printGroupsTable(out, i+1, w, cfg, res)
			continue
		}
		variants := []string{""}
		if w.key == wStoreLogs {
			variants = variants[:0]
			for _, c := range appendCases {
				variants = append(variants, c.name)
			}
		}
		printTable(out, i+1, w, variants, cfg.stores, res)
	}
	return nil
}

// printHeader writes the machine and the settings above the tables.
func printHeader(out io.Writer, cfg *config, m machine, base string) {
	fmt.Fprintf(out, "# raftstore vs raft-wal vs raft-boltdb v2\n\n")
	fmt.Fprintf(out, "- date: %s\n", m.date)
	cpu := ""
	if m.cpu != "" {
		cpu = " (" + m.cpu + ")"
	}
	fmt.Fprintf(out, "- machine: %d CPUs%s, %s, %s\n", m.nproc, cpu, m.platform, m.goVersion)
	fmt.Fprintf(out, "- kernel: %s\n", m.kernel)
	fmt.Fprintf(out, "- directory: %s\n", base)
	fmt.Fprintf(out, "- filesystem: %s\n", m.filesystem)
	fmt.Fprintf(out, "- rounds: %d, stores in a rotating order; every figure is the median over the rounds\n", cfg.rounds)
	fmt.Fprintf(out, "- raftstore async is UNSAFE: it acknowledges StoreLogs before the entries are durable\n\n")
}
