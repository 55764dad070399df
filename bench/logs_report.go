package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// The report of `bench logs`: Markdown tables or one JSON object.

// logsReport collects the results of a run; runLogs' goroutine owns it.
type logsReport struct {
	cfg       *logsConfig
	machine   machine
	dir       string
	version   string // of the node binary
	cells     []*logsCell
	failovers []*failoverResult
	problems  []string
}

// print writes the report as Markdown, or JSON with -json.
func (r *logsReport) print(out io.Writer) error {
	if r.cfg.json {
		return r.printJSON(out)
	}
	r.printMarkdown(out)
	return nil
}

// printJSON writes the machine, the settings and every result.
func (r *logsReport) printJSON(out io.Writer) error {
	m := r.machine
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{
		"date":       m.date,
		"machine":    fmt.Sprintf("%d CPUs %s, %s, %s", m.nproc, m.cpu, m.platform, m.goVersion),
		"kernel":     m.kernel,
		"filesystem": m.filesystem,
		"raftlog":    r.version,
		"flush":      r.cfg.flush,
		"in_flight":  r.cfg.window,
		"size":       r.cfg.size,
		"duration_s": r.cfg.duration.Seconds(),
		"warmup_s":   r.cfg.warmup.Seconds(),
		"rounds":     r.cfg.rounds,
		"cells":      r.cells,
		"failovers":  r.failovers,
		"problems":   r.problems,
	})
}

// cellsOf returns the cells of n named logs, every round.
func (r *logsReport) cellsOf(n int) []*logsCell {
	var out []*logsCell
	for _, c := range r.cells {
		if c.Logs == n {
			out = append(out, c)
		}
	}
	return out
}

// medianOf returns the median of f over cs.
func medianOf(cs []*logsCell, f func(*logsCell) float64) float64 {
	var xs []float64
	for _, c := range cs {
		xs = append(xs, f(c))
	}
	return median(xs)
}

// printMarkdown writes the header, the throughput table and the failover.
func (r *logsReport) printMarkdown(out io.Writer) {
	m, cfg := r.machine, r.cfg
	fmt.Fprintf(out, "# raftlog named logs: 3 processes on 127.0.0.1\n\n")
	fmt.Fprintf(out, "- date: %s\n", m.date)
	cpu := ""
	if m.cpu != "" {
		cpu = " (" + m.cpu + ")"
	}
	fmt.Fprintf(out, "- machine: %d CPUs%s, %s, %s\n", m.nproc, cpu, m.platform, m.goVersion)
	fmt.Fprintf(out, "- kernel: %s\n", m.kernel)
	fmt.Fprintf(out, "- directory: %s\n", r.dir)
	fmt.Fprintf(out, "- filesystem: %s\n", m.filesystem)
	fmt.Fprintf(out, "- raftlog: %s; three `node serve` processes, --flush %s, full --bootstrap list, --max-in-flight %d, other flags default\n",
		r.version, cfg.flush, raftlogMaxInFlight)
	if cfg.maxprocs > 0 {
		fmt.Fprintf(out, "- node processes: GOMAXPROCS=%d (-server-gomaxprocs)\n", cfg.maxprocs)
	}
	fmt.Fprintln(out)

	if len(r.cells) > 0 {
		r.printThroughput(out)
	}
	if len(r.failovers) > 0 {
		r.printFailovers(out)
	}
	if len(r.problems) > 0 {
		fmt.Fprintf(out, "## FAILED\n\n")
		for _, p := range r.problems {
			fmt.Fprintf(out, "- %s\n", p)
		}
		fmt.Fprintln(out)
	}
}

// printThroughput writes the table of the throughput cells, medians over
// the rounds, with ratios to the default log alone.
func (r *logsReport) printThroughput(out io.Writer) {
	cfg := r.cfg
	fmt.Fprintf(out, "## Many logs: %s records, %d appends in flight per log\n\n", fmtSize(cfg.size), cfg.window)
	fmt.Fprintf(out, "Each cell gets fresh processes and data. Its named logs are created with 3 replicas (`CreateLog`), "+
		"then the load waits until every log has a leader and, with 3 logs or more, each is led by its preferred leader "+
		"and the nodes' counts of leaders differ by at most one. One `client.Client` per log keeps %d `AppendAsync` "+
		"in flight on it; %v of warm-up, then a measured window of %v; %d round(s), figures are medians. "+
		"\"default log\" is the default log alone, no named log created. Server CPU: user+system seconds of the three "+
		"nodes over the window per 1,000 records acked in it. Records per fdatasync: raftlog_store_appends_total ÷ "+
		"raftlog_store_fsyncs_total over the window, from each node's /metrics (every group's raft entries the node's "+
		"commit log stored, a follower's copies included), per node and over the three. Peak RSS: each node's largest resident set "+
		"by the end of the window (VmHWM), in MiB. Cores busy: CPU seconds over the window per second, of the three nodes and of the "+
		"bench process that runs the clients (%d CPUs here): whether the machine ran flat.\n\n",
		cfg.window, cfg.warmup, cfg.duration, cfg.rounds, r.machine.nproc)
	base := r.cellsOf(0)
	baseRate := medianOf(base, func(c *logsCell) float64 { return c.RecordsPerSec })
	baseCPU := medianOf(base, func(c *logsCell) float64 { return c.ServerCPUPer1k })
	basePer := medianOf(base, func(c *logsCell) float64 { return c.PerFsync })
	writeRow(out, []string{"logs", "records/s", "÷ default log", "p50", "p99", "server CPU per 1,000", "÷ default log",
		"records per fdatasync, n1 / n2 / n3", "all nodes", "÷ default log", "leaders n1 / n2 / n3", "peak RSS n1 / n2 / n3, MiB", "cores busy: nodes + bench"})
	writeRow(out, slices.Repeat([]string{"---"}, 13))
	counts := append([]int{0}, cfg.counts...)
	for _, n := range counts {
		cs := r.cellsOf(n)
		if len(cs) == 0 {
			continue
		}
		rate := medianOf(cs, func(c *logsCell) float64 { return c.RecordsPerSec })
		cpu := medianOf(cs, func(c *logsCell) float64 { return c.ServerCPUPer1k })
		per := medianOf(cs, func(c *logsCell) float64 { return c.PerFsync })
		var nodes, leads, rss []string
		for i := range cs[0].Nodes {
			nodes = append(nodes, fmtPer(medianOf(cs, func(c *logsCell) float64 { return c.Nodes[i].PerFsync })))
			leads = append(leads, fmt.Sprint(cs[0].Nodes[i].Leads))
			rss = append(rss, fmt.Sprintf("%.0f", medianOf(cs, func(c *logsCell) float64 { return float64(c.Nodes[i].PeakRSS) / (1 << 20) })))
		}
		title := cellTitle(n)
		if n == 0 {
			title = "default log"
		}
		writeRow(out, []string{title, fmtCount(rate), fmtRatio(rate / baseRate),
			fmtSeconds(medianOf(cs, func(c *logsCell) float64 { return c.P50 })),
			fmtSeconds(medianOf(cs, func(c *logsCell) float64 { return c.P99 })),
			fmtSeconds(cpu), fmtRatio(cpu / baseCPU),
			strings.Join(nodes, " / "), fmtPer(per), fmtRatio(per / basePer), strings.Join(leads, " / "), strings.Join(rss, " / "),
			sig3(medianOf(cs, func(c *logsCell) float64 { return c.ServerCPU / c.Seconds })) + " + " +
				sig3(medianOf(cs, func(c *logsCell) float64 { return c.ClientCPU / c.Seconds }))})
	}
	fmt.Fprintln(out)
	read, unacked := 0, 0
	for _, c := range r.cells {
		read += c.ReadBack
		unacked += c.Unacked
	}
	fmt.Fprintf(out, "Read back after each cell: %s acknowledged records, every one at its index with its data, 0 lost "+
		"(%s stored records no ack names).\n\n", fmtCount(float64(read)), fmtCount(float64(unacked)))
}

// printFailovers writes the failover summary and every repetition.
func (r *logsReport) printFailovers(out io.Writer) {
	fmt.Fprintf(out, "## Failover: SIGKILL of a node leading several logs\n\n")
	fmt.Fprintf(out, "Fresh processes and data for each setup. A light load on every log, the default one included: "+
		"one `client.Client` per log, one synchronous `Append` at a time, at most one per %v (the resolution of a gap). "+
		"Each repetition SIGKILLs a node leading at least 2 of the named logs (the default log's leader when it is alone), "+
		"in turn by node id, after the load has run %v with the leaders spread; an affected log is one the node led. Gap: from the SIGKILL to the first append of the log "+
		"acknowledged after the process exited. Exit: from the SIGKILL until the process was reaped; its peers can tell "+
		"it is gone only then, when its sockets close (the kernel first tears down its memory and lets every thread "+
		"finish its system call, an fdatasync under way included), and the busier the machine the longer that takes. "+
		"The node is then restarted on its data and the next repetition waits "+
		"until the leaders are spread again. Every acknowledged record is read back at the end.\n\n", failoverPace, failoverSettle)
	var single, singleAfter float64
	writeRow(out, []string{"setup", "repetitions", "longest affected gap: median", "÷ single log", "exit: median",
		"longest affected gap after the exit: median", "÷ single log", "every affected gap: median, max",
		"per affected log: median over its repetitions", "the others' longest gap: median", "acked", "read back"})
	writeRow(out, slices.Repeat([]string{"---"}, 12))
	for _, f := range r.failovers {
		w, wa := f.medianWorst(), f.medianWorstAfterExit()
		title := cellTitle(f.Logs) + " and the default log"
		if f.Logs == 0 {
			single, singleAfter = w, wa
			title = "default log alone"
		}
		all := f.allGaps()
		var others []float64
		for _, rep := range f.Reps {
			others = append(others, rep.OthersMaxGap)
		}
		othersCell := "-"
		if f.Logs > 0 {
			othersCell = fmtSeconds(median(others))
		}
		writeRow(out, []string{title, fmt.Sprint(len(f.Reps)), fmtSeconds(w), fmtRatio(w / single),
			fmtSeconds(f.medianExit()), fmtSeconds(wa), fmtRatio(wa / singleAfter), fmtSeconds(median(all)) + ", " + fmtSeconds(slices.Max(append(all, 0))),
			perLogMedians(f), othersCell, fmtCount(float64(f.Acked)), fmtCount(float64(f.ReadBack))})
	}
	fmt.Fprintln(out)
	writeRow(out, []string{"setup", "repetition", "killed", "exit", "affected logs: gap", "the others' longest gap", "leaders spread again after the restart"})
	writeRow(out, slices.Repeat([]string{"---"}, 7))
	for _, f := range r.failovers {
		for _, rep := range f.Reps {
			others := "-"
			if f.Logs > 0 {
				others = fmtSeconds(rep.OthersMaxGap)
			}
			writeRow(out, []string{cellTitle(f.Logs), fmt.Sprint(rep.Rep), rep.Victim, fmtSeconds(rep.ExitSeconds), describeGaps(rep.Gaps),
				others, fmtSeconds(rep.BackSeconds)})
		}
	}
	fmt.Fprintln(out)
}

// perLogMedians lists, for each log a repetition affected, the median of
// its gaps and how many repetitions affected it.
func perLogMedians(f *failoverResult) string {
	gaps := map[string][]float64{}
	for _, rep := range f.Reps {
		for name, g := range rep.Gaps {
			gaps[name] = append(gaps[name], g)
		}
	}
	var names []string
	for name := range gaps {
		names = append(names, name)
	}
	slices.Sort(names)
	var parts []string
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %s (%d)", name, fmtSeconds(median(gaps[name])), len(gaps[name])))
	}
	return strings.Join(parts, ", ")
}

// fmtSize formats a record size: KiB when it is a whole number of them.
func fmtSize(b int) string {
	if b >= 1<<10 && b%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}

// fmtPer formats records per fdatasync; "–" when there was none.
func fmtPer(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return sig3(x)
}
