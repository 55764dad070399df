package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlog/raftlog/internal/testaddr"
)

// exitWait bounds how long a node process may take to exit after SIGTERM.
const exitWait = 10 * time.Second

// procNode is a "node serve" process the test started.
type procNode struct {
	id, dir, raft, client string
	env                   []string // RAFTLOG_* variables (key=value) to start it with
	cmd                   *exec.Cmd
	log                   string        // its stderr, a file
	exited                chan struct{} // closed once cmd.Wait returned
	restored              string        // what "node restore" printed, when it wrote the data dir
}

// serveHarness builds the node binary and runs its processes.
type serveHarness struct {
	t   *testing.T
	bin string
	dir string
}

// newServeHarness builds the binary into a temporary directory, the way a
// release is built (go build, no tags) unless buildFlags say otherwise; it
// skips the test in -short mode.
func newServeHarness(t *testing.T, buildFlags ...string) *serveHarness {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	if runtime.GOOS == "windows" {
		t.Skip("sends SIGTERM")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the binary with")
	}
	h := &serveHarness{t: t, dir: t.TempDir()}
	h.bin = filepath.Join(h.dir, "node")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append(append([]string{"build", "-o", h.bin}, buildFlags...), ".")
	build := exec.CommandContext(ctx, gobin, args...)
	build.Env = append(cleanEnv(), "GOFLAGS=")
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return h
}

// cleanEnv is the test process's environment without RAFTLOG_* variables,
// which would change what the binary does.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			env = append(env, kv)
		}
	}
	return env
}

// freeAddrs returns n distinct loopback addresses that were free a moment
// ago. It holds each port until it has them all: a port closed and asked
// for again may come back, and two nodes of a test were once given the
// same one (a raft port and another node's client port).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs, err := testaddr.Addrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// start starts "node serve" for n with extra flags; the process is killed
// at the end of the test if it still runs.
func (h *serveHarness) start(n *procNode, extra ...string) {
	h.t.Helper()
	args := append([]string{"serve", "--id", n.id, "--data-dir", n.dir, "--raft-addr", n.raft, "--client-addr", n.client}, extra...)
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		h.t.Fatal(err)
	}
	defer logf.Close()
	n.cmd = exec.Command(h.bin, args...)
	n.cmd.Env = append(cleanEnv(), n.env...)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	n.exited = make(chan struct{})
	cmd, exited := n.cmd, n.exited
	go func() { cmd.Wait(); close(exited) }()
	h.t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill() // only this test's own process, by its pid
			<-exited
		}
	})
}

// stop sends SIGTERM to n's process and checks that it exits with status 0
// within exitWait.
func (h *serveHarness) stop(n *procNode) {
	h.t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		h.t.Fatalf("SIGTERM to %s (pid %d): %v", n.id, n.cmd.Process.Pid, err)
	}
	start := time.Now()
	h.waitExit(n, "of SIGTERM")
	if code := n.cmd.ProcessState.ExitCode(); code != 0 {
		h.dumpLog(n)
		h.t.Fatalf("%s exited with status %d after SIGTERM", n.id, code)
	}
	h.t.Logf("%s exited 0, %v after SIGTERM", n.id, time.Since(start).Round(time.Millisecond))
}

// waitExit waits up to exitWait for n's process to exit; after is what the
// failure says it did not exit within exitWait of.
func (h *serveHarness) waitExit(n *procNode, after string) {
	h.t.Helper()
	timer := time.NewTimer(exitWait)
	defer timer.Stop()
	select {
	case <-n.exited:
	case <-timer.C:
		h.dumpLog(n)
		h.t.Fatalf("%s did not exit within %v %s", n.id, exitWait, after)
	}
}

// dumpLog writes the output of n's process to the test log.
func (h *serveHarness) dumpLog(n *procNode) {
	b, _ := os.ReadFile(n.log)
	h.t.Logf("log of %s:\n%s", n.id, b)
}

// cli runs the binary with args and returns its stdout, stderr and exit
// status.
func (h *serveHarness) cli(args ...string) (stdout, stderr string, code int) {
	h.t.Helper()
	return h.cliEnv(nil, args...)
}

// cliEnv is cli with the variables env (key=value) added to the clean
// environment.
func (h *serveHarness) cliEnv(env []string, args ...string) (stdout, stderr string, code int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		h.t.Fatalf("node %s: %v", strings.Join(args, " "), err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// mustCLI runs the binary and fails the test unless it exits 0.
func (h *serveHarness) mustCLI(args ...string) string {
	h.t.Helper()
	out, errOut, code := h.cli(args...)
	if code != 0 {
		h.t.Fatalf("node %s: exit status %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// waitStatus asks the node at addr for its status, retrying while its
// process starts: a bounded poll of an external process. extra are more
// flags of status (--tls-*).
func (h *serveHarness) waitStatus(addr string, extra ...string) statusJSON {
	h.t.Helper()
	const attempts, pause = 100, 100 * time.Millisecond
	var last string
	for range attempts {
		out, errOut, code := h.cli(append([]string{"status", "--addrs", addr, "--json", "--timeout", "2s"}, extra...)...)
		if code == 0 {
			var rows []statusJSON
			if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
				h.t.Fatalf("status --json: %v: %s", err, out)
			}
			return rows[0]
		}
		last = errOut
		timer := time.NewTimer(pause)
		<-timer.C
	}
	h.t.Fatalf("%s did not answer status within %d attempts: %s", addr, attempts, last)
	return statusJSON{}
}

// parseRecords parses read output: index<TAB>data lines.
func parseRecords(t *testing.T, out string) (indexes []uint64, data []string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		i, d, ok := strings.Cut(line, "\t")
		x, err := strconv.ParseUint(i, 10, 64)
		if !ok || err != nil {
			t.Fatalf("read output line %q", line)
		}
		indexes = append(indexes, x)
		data = append(data, d)
	}
	return indexes, data
}

// TestServeProcesses runs a 3-node cluster of "node serve" processes,
// appends and reads through the CLI, stops every process with SIGTERM and
// restarts from the same data dirs to read the records back.
func TestServeProcesses(t *testing.T) {
	h := newServeHarness(t)
	nodes, addrs := startProcCluster(t, h, 3, "n", "")
	records := []string{"first record", "second", "third, with\ttab"}
	var want []uint64
	for _, r := range records[:2] {
		out := h.mustCLI("append", "--addrs", addrs, "--timeout", "30s", r)
		idx, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatalf("append printed %q", out)
		}
		want = append(want, idx)
	}
	out := h.mustCLI("append", records[2], "--addrs", addrs) // flags may follow records
	idx, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil || idx <= want[1] {
		t.Fatalf("append printed %q after %v", out, want)
	}
	want = append(want, idx)

	check := func(out string) {
		t.Helper()
		gotIdx, got := parseRecords(t, out)
		if fmt.Sprint(gotIdx) != fmt.Sprint(want) || strings.Join(got, "|") != strings.Join(records, "|") {
			t.Fatalf("read %v %q, want %v %q", gotIdx, got, want, records)
		}
	}
	check(h.mustCLI("read", "--addrs", addrs, "--from", strconv.FormatUint(want[0], 10), "--max", "0"))
	if st := h.mustCLI("status", "--addrs", addrs); strings.Count(st, "Leader ") != 1 {
		t.Errorf("status shows no one leader:\n%s", st)
	}

	for _, n := range nodes {
		h.stop(n)
	}

	// Data survived: one node restarted alone holds the records in its
	// log; with a second one there is a quorum again, and a leader to
	// serve a linearizable read.
	h.start(nodes[0])
	if st := h.waitStatus(nodes[0].client); st.Last < want[2] || st.NodeID != "n1" {
		t.Errorf("restarted n1: %+v, want last index >= %d", st, want[2])
	}
	h.start(nodes[1])
	check(h.mustCLI("read", "--addrs", nodes[0].client+","+nodes[1].client, "--from", strconv.FormatUint(want[0], 10), "--max", "0"))
	h.stop(nodes[1])
	h.stop(nodes[0])
}
