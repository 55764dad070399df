package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/node"
	"github.com/raftlog/raftlog/transport"
)

// runCmdStdin is runCmd with stdin.
func runCmdStdin(ctx context.Context, stdin string, args ...string) (stdout, stderr string, code int) {
	e, out, errOut := testEnv(nil)
	e.stdin = strings.NewReader(stdin)
	code = run(ctx, e, args)
	return out.String(), errOut.String(), code
}

// lines returns n lines named prefix0 ... prefix<n-1>, each ended by \n.
func lines(prefix string, from, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%05d\n", prefix, from+i)
	}
	return b.String()
}

// parseIndexes parses append output, one index a line.
func parseIndexes(t *testing.T, out string) []uint64 {
	t.Helper()
	var idx []uint64
	for _, l := range strings.Fields(out) {
		i, err := strconv.ParseUint(l, 10, 64)
		if err != nil {
			t.Fatalf("append printed %q, want indexes", l)
		}
		idx = append(idx, i)
	}
	return idx
}

// TestAppendStdin appends lines from stdin to a local cluster: they are
// stored in input order, their indexes printed in that order; an append
// the cluster refuses stops the command, which names its lines.
func TestAppendStdin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	lc, err := startLocalCluster(ctx, t.TempDir(), node.FlushAsync, &logs)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.close()
	addrs := strings.Join(lc.clientAddrs(), ",")
	readFrom := func(t *testing.T, from uint64) ([]uint64, []string) {
		t.Helper()
		out, errOut, code := runCmd(ctx, "read", "--addrs", addrs, "--from", strconv.FormatUint(from, 10))
		if code != 0 {
			t.Fatalf("read: exit status %d, stderr %q", code, errOut)
		}
		return parseRecords(t, out)
	}

	t.Run("in order", func(t *testing.T) {
		const n = 3000
		in := lines("s", 0, n)
		out, errOut, code := runCmdStdin(ctx, in, "append", "--addrs", addrs, "--stdin", "--batch", "7", "--in-flight", "64")
		if code != 0 {
			t.Fatalf("append --stdin: exit status %d, stderr %q", code, errOut)
		}
		idx := parseIndexes(t, out)
		if len(idx) != n {
			t.Fatalf("append --stdin printed %d indexes for %d lines", len(idx), n)
		}
		gotIdx, data := readFrom(t, idx[0])
		if strings.Join(data, "\n")+"\n" != in {
			t.Fatalf("the log holds %d records from index %d, not the %d lines in input order", len(data), idx[0], n)
		}
		if fmt.Sprint(gotIdx) != fmt.Sprint(idx) {
			t.Fatal("the indexes printed are not those the lines were stored at, in input order")
		}
	})

	t.Run("a refused append stops it", func(t *testing.T) {
		big := strings.Repeat("x", transport.DefaultMaxRecordSize+1) + "\n"
		in := lines("a", 0, 50) + big + lines("b", 0, 50)
		out, errOut, code := runCmdStdin(ctx, in, "append", "--addrs", addrs, "--stdin", "--batch", "10")
		if code != 1 || !strings.Contains(errOut, "stdin lines 51-51: ") || !strings.Contains(errOut, "TooLarge") {
			t.Fatalf("append --stdin of a line too large: exit status %d, stderr %q; want status 1 naming line 51 and TooLarge", code, errOut)
		}
		idx := parseIndexes(t, out)
		if len(idx) != 50 {
			t.Fatalf("printed %d indexes, want the 50 of the lines before the one refused", len(idx))
		}
		_, data := readFrom(t, idx[0])
		if got := strings.Join(data[:50], "\n") + "\n"; got != lines("a", 0, 50) {
			t.Errorf("the lines before the one refused were not stored in order")
		}
		for _, d := range data[50:] {
			if !strings.HasPrefix(d, "b") {
				t.Errorf("stored %.10q after the lines before the one refused", d)
			}
		}
	})
}

// TestAppendStdinProcesses pipes lines into "node append --stdin" against
// a cluster of "node serve" processes and kills the leader with SIGKILL
// midway: the client keeps its appends in flight across the failover, and
// every line is stored once, in input order, at the indexes printed.
func TestAppendStdinProcesses(t *testing.T) {
	h := newServeHarness(t)
	nodes, addrs := startProcCluster(t, h, 3, "n", "")
	h.mustCLI("append", "--addrs", addrs, "--timeout", "30s", "warm-up") // waits for a leader

	p := h.startPiped("append", "--addrs", addrs, "--stdin", "--batch", "3", "--in-flight", "32", "--timeout", "30s")
	waitPrinted := func(n int) { t.Helper(); p.waitPrinted(t, n, time.Minute) }

	// Lines go in chunks, each once all but the last two chunks are
	// printed, so that appends are in flight whenever the leader dies.
	const total, chunk = 3000, 60
	var leader *procNode
	for written := 0; written < total; written += chunk {
		if _, err := io.WriteString(p.stdin, lines("p", written, chunk)); err != nil {
			t.Fatal(err)
		}
		if written >= total/3 && leader == nil {
			leader = leaderOf(t, h, nodes, addrs)
			leader.cmd.Process.Kill() // this test's own process, by its pid
			<-leader.exited
			t.Logf("killed the leader %s with %d lines written and %d indexes printed", leader.id, written+chunk, len(p.out))
		}
		waitPrinted(written - chunk)
	}
	p.stdin.Close()
	waitPrinted(total)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("append --stdin: exit status %d; stderr %q", code, p.stderr.String())
	}

	var live []string
	for _, n := range nodes {
		if n != leader {
			live = append(live, n.client)
		}
	}
	idx := parseIndexes(t, strings.Join(p.out, "\n"))
	got := h.mustCLI("read", "--addrs", strings.Join(live, ","), "--from", strconv.FormatUint(idx[0], 10))
	gotIdx, data := parseRecords(t, got)
	if strings.Join(data, "\n")+"\n" != lines("p", 0, total) {
		t.Fatalf("the log holds %d records from index %d, not the %d lines once each in input order", len(data), idx[0], total)
	}
	if fmt.Sprint(gotIdx) != fmt.Sprint(idx) {
		t.Fatal("the indexes printed are not those the lines were stored at")
	}
}

// pipedCLI is a CLI process that the test writes stdin to through a pipe
// and whose stdout it reads a line at a time.
type pipedCLI struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	printed chan string   // the lines of its stdout; closed at its end
	out     []string      // the lines taken from printed (waitPrinted)
	stderr  bytes.Buffer  // read it once exited is closed
	exited  chan struct{} // closed once cmd.Wait returned
}

// startPiped starts the binary with args, its stdin a pipe; the process
// is killed at the end of the test if it still runs.
func (h *serveHarness) startPiped(args ...string) *pipedCLI {
	h.t.Helper()
	p := &pipedCLI{printed: make(chan string, 1<<16), exited: make(chan struct{})}
	p.cmd = exec.Command(h.bin, args...)
	p.cmd.Env = cleanEnv()
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		h.t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.printed <- sc.Text()
		}
		close(p.printed)
		p.cmd.Wait() // after the last read of stdout, as Wait closes it
		close(p.exited)
	}()
	h.t.Cleanup(func() {
		p.stdin.Close()
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill() // only this test's own process, by its pid
			<-p.exited
		}
	})
	return p
}

// waitPrinted waits until the process printed n lines in all, for at most
// d.
func (p *pipedCLI) waitPrinted(t *testing.T, n int, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for len(p.out) < n {
		select {
		case l, ok := <-p.printed:
			if !ok {
				<-p.exited
				t.Fatalf("%s exited after printing %d lines, want %d; stderr %q", p.cmd.Args[1], len(p.out), n, p.stderr.String())
			}
			p.out = append(p.out, l)
		case <-timer.C:
			t.Fatalf("%s printed %d lines within %v, want %d", p.cmd.Args[1], len(p.out), d, n)
		}
	}
}

// wait waits up to d for the process to exit, takes the rest of what it
// printed, and returns its exit status.
func (p *pipedCLI) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		t.Fatalf("%s did not exit within %v", p.cmd.Args[1], d)
	}
	for l := range p.printed {
		p.out = append(p.out, l)
	}
	return p.cmd.ProcessState.ExitCode()
}

// leaderOf returns the node that status says leads.
func leaderOf(t *testing.T, h *serveHarness, nodes []*procNode, addrs string) *procNode {
	t.Helper()
	var rows []statusJSON
	st := h.mustCLI("status", "--addrs", addrs, "--json")
	if err := json.Unmarshal([]byte(st), &rows); err != nil || len(rows) == 0 {
		t.Fatalf("status --json: %v: %s", err, st)
	}
	for _, n := range nodes {
		if n.id == rows[0].LeaderID {
			return n
		}
	}
	t.Fatalf("no leader in %s", st)
	return nil
}
