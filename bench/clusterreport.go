package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// The report of `bench cluster`: Markdown tables or one JSON object.

// Metric names of a cell's measurement.
const (
	mRecSec       = "records/s"
	mLatP50       = "p50"
	mLatP99       = "p99"
	mLatP999      = "p99.9"
	mServerCPU1k  = "server CPU/1k"
	mClientCPU1k  = "client CPU/1k"
	mServerCS1k   = "server switches/1k"
	mAckedRecords = "acked"
)

// versions names what ran.
type versions struct {
	raftlog    string // commit of the node binary's source
	nats       string // nats-server/v2
	natsClient string // nats.go
}

// clusterReport collects the cells of a run; runCluster's goroutine owns
// it.
type clusterReport struct {
	cfg      *clusterConfig
	machine  machine
	dir      string
	versions versions
	res      *results
	cells    []*cellResult
	floors   []floor // one per round that ran floorWorkload
	problems []string
}

// add records a cell.
func (r *clusterReport) add(w clusterWorkload, sys systemKind, c *cellResult) {
	r.cells = append(r.cells, c)
	r.res.add(rowKey{w.key, "", sys.key}, measurement{
		mRecSec:       c.RecordsPerSec,
		mLatP50:       c.P50,
		mLatP99:       c.P99,
		mLatP999:      c.P999,
		mServerCPU1k:  c.ServerCPUPer1k,
		mClientCPU1k:  c.ClientCPUPer1k,
		mServerCS1k:   c.ServerSwitchesPer1k,
		mAckedRecords: float64(c.Acked),
	})
}

// median is a row's median of metric.
func (r *clusterReport) median(w, sys, metric string) float64 {
	return r.res.median(rowKey{w, "", sys}, metric)
}

// ratioTo returns a row's metric over its NATS pair's, NaN without one.
func (r *clusterReport) ratioTo(w string, sys systemKind, metric string) float64 {
	if sys.pair == "" {
		return math.NaN()
	}
	base := r.median(w, sys.pair, metric)
	if base == 0 {
		return math.NaN()
	}
	return r.median(w, sys.key, metric) / base
}

// print writes the report as Markdown, or JSON with -json.
func (r *clusterReport) print(out io.Writer) error {
	if r.cfg.json {
		return r.printJSON(out)
	}
	r.printMarkdown(out)
	return nil
}

// settings describes how the run was made, one line each.
func (r *clusterReport) settings() []string {
	cfg := r.cfg
	procs := "server processes: GOMAXPROCS Go's default (the CPUs)"
	if cfg.maxprocs > 0 {
		procs = fmt.Sprintf("server processes, raftlog's and NATS' alike: GOMAXPROCS=%d (-server-gomaxprocs)", cfg.maxprocs)
	}
	out := []string{
		procs,
		fmt.Sprintf("raftlog: %s; three `node serve` processes, full --bootstrap list, --max-in-flight %d (default 128), other flags default",
			r.versions.raftlog, raftlogMaxInFlight),
		fmt.Sprintf("NATS: nats-server %s (as a library, this binary re-executed), nats.go %s; three servers in one cluster, "+
			"JetStream file storage, a stream of 3 replicas; \"fsync always\" is `sync_interval: always`, \"default\" syncs every 2 minutes",
			r.versions.nats, r.versions.natsClient),
		fmt.Sprintf("each cell (workload × system) gets fresh processes and data on the same disk, one system at a time, in an order that rotates; "+
			"%v of appends first, then a measured window of %v; %d round(s), figures are medians", cfg.warmup, cfg.duration, cfg.rounds),
		"raftlog clients: client.Dial; 1 in flight is synchronous Append, N in flight is AppendAsync with a window of N from one goroutine " +
			"(the Client packs waiting appends into one request at a time, its default, which keeps submission order)",
		"NATS clients: nats.go JetStream; 1 in flight is synchronous Publish, N in flight is PublishAsync with a window of N on one connection; " +
			"each client connects to the server that leads the stream (NATS' best case: through another server a publish takes one more hop)",
		"latency: from the call to its ack, of every record acked in the window; CPU: user+system seconds of the three server processes " +
			"(/proc/<pid>/stat, Linux only) and of the bench process (the clients) over the window, per 1,000 records acked in it; " +
			"context switches: voluntary and not, of every thread of the three server processes (/proc/<pid>/task/*/status), per 1,000 records",
		"every acknowledged record (warm-up and drain included) is read back after its cell, at its index or sequence, with its data",
	}
	if hasSystem(cfg.systems, sysFloor) {
		out = append(out, "replication floor: no raft, three processes of this binary; the leader stores a request (pwrite + fdatasync), then sends it to "+
			"both followers, which store it and answer; it answers the client at the first answer; the client sends one request at a time holding "+
			"its whole window; workloads of one client only; its read-back covers the last 256 MiB of each cell, which its file holds (bench/pipeline.go)")
	}
	return out
}

// printMarkdown writes the header, the summary, the detail table and the
// read-back.
func (r *clusterReport) printMarkdown(out io.Writer) {
	m := r.machine
	fmt.Fprintf(out, "# raftlog vs NATS JetStream: 3 processes on 127.0.0.1\n\n")
	fmt.Fprintf(out, "- date: %s\n", m.date)
	cpu := ""
	if m.cpu != "" {
		cpu = " (" + m.cpu + ")"
	}
	fmt.Fprintf(out, "- machine: %d CPUs%s, %s, %s\n", m.nproc, cpu, m.platform, m.goVersion)
	fmt.Fprintf(out, "- kernel: %s\n", m.kernel)
	fmt.Fprintf(out, "- directory: %s\n", r.dir)
	fmt.Fprintf(out, "- filesystem: %s\n", m.filesystem)
	for _, s := range r.settings() {
		fmt.Fprintf(out, "- %s\n", s)
	}
	fmt.Fprintln(out)

	systems := r.cfg.systems
	fmt.Fprintf(out, "## Acked records/s and p50 latency\n\n")
	head := []string{"workload (1 KiB unless noted)"}
	for _, s := range systems {
		head = append(head, s.name)
	}
	var paired []systemKind
	for _, s := range systems {
		if s.pair != "" && hasSystem(systems, s.pair) {
			paired = append(paired, s)
			head = append(head, s.name+" ÷ "+systemName(s.pair))
		}
	}
	writeRow(out, head)
	fmt.Fprintf(out, "|%s\n", strings.Repeat(" --- |", len(head)))
	for _, w := range r.cfg.workloads {
		row := []string{w.title}
		for _, s := range systems {
			row = append(row, fmtCount(r.median(w.key, s.key, mRecSec))+", "+fmtSeconds(r.median(w.key, s.key, mLatP50)))
		}
		for _, s := range paired {
			row = append(row, fmtRatio(r.ratioTo(w.key, s, mRecSec)))
		}
		writeRow(out, row)
	}
	fmt.Fprintln(out)
	r.printFloor(out)

	fmt.Fprintf(out, "## Every figure\n\n")
	fmt.Fprintf(out, "CPU is seconds per 1,000 acked records: the three servers together, and the bench process that runs the clients; "+
		"switches are the three servers' context switches per 1,000 acked records. "+
		"Ratios are to NATS with fsync always (raftlog sync) and NATS default (raftlog async); records/s higher is better, CPU lower.\n\n")
	head = []string{"workload", "system", "records/s", "p50", "p99", "p99.9", "server CPU", "client CPU", "server switches", "records/s ÷ NATS", "server CPU ÷ NATS"}
	writeRow(out, head)
	fmt.Fprintf(out, "|%s\n", strings.Repeat(" --- |", len(head)))
	for _, w := range r.cfg.workloads {
		for _, s := range systems {
			writeRow(out, []string{
				w.title, s.name,
				fmtCount(r.median(w.key, s.key, mRecSec)),
				fmtSeconds(r.median(w.key, s.key, mLatP50)),
				fmtSeconds(r.median(w.key, s.key, mLatP99)),
				fmtSeconds(r.median(w.key, s.key, mLatP999)),
				fmtSeconds(r.median(w.key, s.key, mServerCPU1k)),
				fmtSeconds(r.median(w.key, s.key, mClientCPU1k)),
				fmtCount(r.median(w.key, s.key, mServerCS1k)),
				fmtRatio(r.ratioTo(w.key, s, mRecSec)),
				fmtRatio(r.ratioTo(w.key, s, mServerCPU1k)),
			})
		}
	}
	fmt.Fprintln(out)

	fmt.Fprintf(out, "## Read-back\n\n")
	read, unacked, cells := 0, 0, 0
	for _, c := range r.cells {
		read += c.ReadBack
		unacked += c.Unacked
		cells++
	}
	fmt.Fprintf(out, "%s acknowledged records in %d cells read back at their positions with their data; %d records stored without an ack.\n",
		fmtCount(float64(read)), cells, unacked)
	for _, c := range r.cells {
		if c.Profile != "" {
			fmt.Fprintf(out, "\nCPU profile of the raftlog leader, %s, round %d, over the window: %s (`go tool pprof -top %s`)\n",
				c.System, c.Round, c.Profile, c.Profile)
		}
	}
	if len(r.problems) > 0 {
		fmt.Fprintf(out, "\n## FAILED CELLS\n\n")
		for _, p := range r.problems {
			fmt.Fprintf(out, "- %s\n", p)
		}
	}
}

// writeRow writes one Markdown table row.
func writeRow(out io.Writer, cells []string) {
	fmt.Fprintf(out, "| %s |\n", strings.Join(cells, " | "))
}

// hasSystem reports whether key is among systems.
func hasSystem(systems []systemKind, key string) bool {
	for _, s := range systems {
		if s.key == key {
			return true
		}
	}
	return false
}

// systemName returns the name of the system key.
func systemName(key string) string {
	for _, s := range systemKinds() {
		if s.key == key {
			return s.name
		}
	}
	return key
}

// jsonRow is the medians of one workload and system.
type jsonRow struct {
	Workload       string   `json:"workload"`
	System         string   `json:"system"`
	RecordsPerSec  float64  `json:"records_per_sec"`
	P50            float64  `json:"p50_s"`
	P99            float64  `json:"p99_s"`
	P999           float64  `json:"p999_s"`
	ServerCPUPer1k float64  `json:"server_cpu_s_per_1k"`
	ClientCPUPer1k float64  `json:"client_cpu_s_per_1k"`
	SwitchesPer1k  float64  `json:"server_ctx_switches_per_1k"`
	RatioRecSec    *float64 `json:"records_per_sec_ratio,omitempty"` // to Pair
	RatioCPU       *float64 `json:"server_cpu_ratio,omitempty"`      // to Pair
	Pair           string   `json:"ratio_to,omitempty"`
}

// printJSON writes the run as one JSON object: the machine, the settings,
// every cell and the medians.
func (r *clusterReport) printJSON(out io.Writer) error {
	m := r.machine
	v := struct {
		Date       string        `json:"date"`
		Machine    string        `json:"machine"`
		Kernel     string        `json:"kernel"`
		Directory  string        `json:"directory"`
		Filesystem string        `json:"filesystem"`
		Raftlog    string        `json:"raftlog"`
		NATSServer string        `json:"nats_server"`
		NATSClient string        `json:"nats_go"`
		Warmup     float64       `json:"warmup_s"`
		Duration   float64       `json:"duration_s"`
		Rounds     int           `json:"rounds"`
		Settings   []string      `json:"settings"`
		Rows       []jsonRow     `json:"rows"`
		Cells      []*cellResult `json:"cells"`
		Floors     []floor       `json:"floors,omitempty"`
		Problems   []string      `json:"problems,omitempty"`
	}{
		Date:       m.date,
		Machine:    fmt.Sprintf("%d CPUs (%s), %s, %s", m.nproc, m.cpu, m.platform, m.goVersion),
		Kernel:     m.kernel,
		Directory:  r.dir,
		Filesystem: m.filesystem,
		Raftlog:    r.versions.raftlog,
		NATSServer: r.versions.nats,
		NATSClient: r.versions.natsClient,
		Warmup:     r.cfg.warmup.Seconds(),
		Duration:   r.cfg.duration.Seconds(),
		Rounds:     r.cfg.rounds,
		Settings:   r.settings(),
		Cells:      r.cells,
		Floors:     r.floors,
		Problems:   r.problems,
	}
	num := func(x float64) *float64 {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return &x
	}
	zeroNaN := func(x float64) float64 {
		if math.IsNaN(x) {
			return 0
		}
		return x
	}
	for _, w := range r.cfg.workloads {
		for _, s := range r.cfg.systems {
			row := jsonRow{Workload: w.key, System: s.key,
				RecordsPerSec:  zeroNaN(r.median(w.key, s.key, mRecSec)),
				P50:            zeroNaN(r.median(w.key, s.key, mLatP50)),
				P99:            zeroNaN(r.median(w.key, s.key, mLatP99)),
				P999:           zeroNaN(r.median(w.key, s.key, mLatP999)),
				ServerCPUPer1k: zeroNaN(r.median(w.key, s.key, mServerCPU1k)),
				ClientCPUPer1k: zeroNaN(r.median(w.key, s.key, mClientCPU1k)),
				SwitchesPer1k:  zeroNaN(r.median(w.key, s.key, mServerCS1k)),
				RatioRecSec:    num(r.ratioTo(w.key, s, mRecSec)),
				RatioCPU:       num(r.ratioTo(w.key, s, mServerCPU1k)),
			}
			if row.RatioRecSec != nil {
				row.Pair = s.pair
			}
			v.Rows = append(v.Rows, row)
		}
	}
	for _, c := range v.Cells {
		for _, p := range []*float64{&c.P50, &c.P99, &c.P999} {
			*p = zeroNaN(*p)
		}
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}
