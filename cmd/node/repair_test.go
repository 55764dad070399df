package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/internal/testdamage"
	"github.com/raftlog/raftlog/node"
	"github.com/raftlog/raftlog/raftstore"
	"github.com/raftlog/raftlog/replica"
)

// damageEntry flips the last payload byte of the commit-log record that
// holds the default log's raft entry index in a stopped node's data dir,
// and returns the segment file and the record's offset in it.
func damageEntry(t *testing.T, dataDir string, index uint64) (string, int64) {
	t.Helper()
	return damageGroupEntry(t, dataDir, replica.GroupsOf(0).Live, index)
}

// damageGroupEntry is damageEntry for the entry of raftstore group g.
func damageGroupEntry(t *testing.T, dataDir string, g, index uint64) (string, int64) {
	t.Helper()
	pos := int64(-1)
	in, err := raftstore.Inspect(filepath.Join(dataDir, "store"), nil, func(group uint64, p int64, l *raft.Log) {
		if group == g && l.Index == index {
			pos = p
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if pos < 0 {
		t.Fatalf("%s holds no entry %d of group %d", dataDir, index, g)
	}
	path, off := in.Log.Locate(pos)
	testdamage.FlipLastPayloadByte(t, path, off)
	return path, off
}

// fakeTerminal is a stdin that says it is a terminal.
type fakeTerminal struct{ io.Reader }

func (fakeTerminal) Stat() (os.FileInfo, error) { return ttyInfo{}, nil }

// ttyInfo describes a character device.
type ttyInfo struct{}

func (ttyInfo) Name() string       { return "tty" }
func (ttyInfo) Size() int64        { return 0 }
func (ttyInfo) Mode() os.FileMode  { return os.ModeDevice | os.ModeCharDevice | 0o620 }
func (ttyInfo) ModTime() time.Time { return time.Time{} }
func (ttyInfo) IsDir() bool        { return false }
func (ttyInfo) Sys() any           { return nil }

// runRepair runs "node repair" args in this process with stdin.
func runRepair(stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	e, out, errOut := testEnv(nil)
	e.stdin = stdin
	code = run(context.Background(), e, append([]string{"repair"}, args...))
	return out.String(), errOut.String(), code
}

// TestRepairCommand runs repair against the data dirs of a local 3-node
// cluster, one of them damaged: refused on a running node's dir, nothing
// to do on a clean one, no change without a confirmation, repaired with
// one.
func TestRepairCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := t.TempDir()
	lc, err := startLocalCluster(ctx, root, node.FlushSync, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	addrs := strings.Join(lc.clientAddrs(), ",")
	var last uint64
	for i := range 3 {
		out, errOut, code := runCmd(ctx, "append", "--addrs", addrs, fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i), fmt.Sprintf("c%d", i))
		if code != 0 {
			t.Fatalf("append: %s", errOut)
		}
		f := strings.Fields(out)
		if last, err = strconv.ParseUint(f[len(f)-1], 10, 64); err != nil {
			t.Fatalf("append printed %q", out)
		}
	}

	// A running node's dir is refused, and left alone.
	running := filepath.Join(root, "n2")
	if _, errOut, code := runRepair(strings.NewReader(""), "--data-dir", running, "--yes"); code != 1 || !strings.Contains(errOut, "in use") {
		t.Fatalf("repair of a running node's dir: exit %d, %s", code, errOut)
	}
	// Wait until every node holds the last record, then stop them.
	for _, n := range lc.nodes {
		deadline := time.Now().Add(30 * time.Second)
		for n.Status().AppliedIndex < last {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not apply %d", n.ID(), last)
			}
			timer := time.NewTimer(10 * time.Millisecond)
			<-timer.C
		}
	}
	if err := lc.close(); err != nil {
		t.Fatal(err)
	}

	if out, _, code := runRepair(nil); code != 2 || out != "" {
		t.Fatalf("repair without --data-dir: exit %d", code)
	}
	clean := filepath.Join(root, "n1")
	before := testdamage.TreeDigest(t, clean)
	out, errOut, code := runRepair(strings.NewReader(""), "--data-dir", clean)
	if code != 0 || !strings.Contains(out, "nothing to repair") || testdamage.TreeDigest(t, clean) != before {
		t.Fatalf("repair of a clean dir: exit %d\n%s%s", code, out, errOut)
	}

	damaged := filepath.Join(root, "n3")
	path, off := damageEntry(t, damaged, last-4)
	where := fmt.Sprintf("%s at offset %d", path, off)
	copyOf := func(name string) string {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.CopyFS(dir, os.DirFS(damaged)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, tc := range []struct {
		name    string
		stdin   io.Reader
		args    []string
		code    int
		stderr  string
		changed bool
	}{
		{"not a terminal", strings.NewReader("yes\n"), nil, 1, "give --yes", false},
		{"declined", fakeTerminal{strings.NewReader("no\n")}, nil, 1, "not confirmed; nothing changed", false},
		{"no answer", fakeTerminal{strings.NewReader("")}, nil, 1, "not confirmed; nothing changed", false},
		{"confirmed", fakeTerminal{strings.NewReader("yes\n")}, nil, 0, "", true},
		{"--yes", strings.NewReader(""), []string{"--yes"}, 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyOf(tc.name)
			before := testdamage.TreeDigest(t, dir)
			out, errOut, code := runRepair(tc.stdin, append([]string{"--data-dir", dir}, tc.args...)...)
			dirPath := strings.Replace(where, damaged, dir, 1)
			if code != tc.code || !strings.Contains(errOut, tc.stderr) || !strings.Contains(out, "damaged record: "+dirPath) {
				t.Fatalf("exit %d, want %d; stderr %q, want %q; stdout:\n%s", code, tc.code, errOut, tc.stderr, out)
			}
			if changed := testdamage.TreeDigest(t, dir) != before; changed != tc.changed {
				t.Fatalf("changed %v, want %v", changed, tc.changed)
			}
			if !tc.changed {
				return
			}
			if !strings.Contains(out, "repaired "+dir) {
				t.Fatalf("stdout:\n%s", out)
			}
			out, _, code = runRepair(strings.NewReader(""), "--data-dir", dir)
			if code != 0 || !strings.Contains(out, "nothing to repair") {
				t.Fatalf("repair again: exit %d\n%s", code, out)
			}
		})
	}
}

// On a single-node cluster repair refuses without --accept-loss, naming
// the logs whose only copy it would cut: the default log, and a named log
// with one replica.
func TestRepairCommandSingleNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := node.Config{ID: "n1", DataDir: dir, RaftAddr: "127.0.0.1:0", ClientAddr: "127.0.0.1:0", Logger: hclog.NewNullLogger()}
	cfg.Bootstrap = []node.Peer{{ID: "n1", RaftAddr: cfg.RaftAddr}}
	n, err := node.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCmd(ctx, "log", "create", "solo", "--replicas", "1", "--addrs", n.ClientAddr()); code != 0 {
		n.Close()
		t.Fatalf("log create: %s%s", out, errOut)
	}
	var last uint64
	for i := range 3 {
		out, errOut, code := runCmd(ctx, "append", "--addrs", n.ClientAddr(), "--timeout", "30s", fmt.Sprint("r", i))
		if code != 0 {
			n.Close()
			t.Fatalf("append: %s", errOut)
		}
		last, _ = strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	}
	// The named log's records come after the damaged one: the cut takes
	// them too.
	if _, errOut, code := runCmd(ctx, "append", "--log", "solo", "--addrs", n.ClientAddr(), "--timeout", "30s", "s0", "s1"); code != 0 {
		n.Close()
		t.Fatalf("append to solo: %s", errOut)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	damageEntry(t, dir, last)
	before := testdamage.TreeDigest(t, dir)
	out, errOut, code := runRepair(strings.NewReader(""), "--data-dir", dir, "--yes")
	if code != 1 || !strings.Contains(errOut, "--accept-loss") || !strings.Contains(out, "single-node cluster") || testdamage.TreeDigest(t, dir) != before {
		t.Fatalf("repair of a single node without --accept-loss: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "the default log") || !strings.Contains(errOut, `log "solo"`) || !strings.Contains(out, `WARNING: log "solo"`) {
		t.Fatalf("the refusal does not name both logs:\n%s%s", out, errOut)
	}
	if out, errOut, code := runRepair(strings.NewReader(""), "--data-dir", dir, "--yes", "--accept-loss"); code != 0 {
		t.Fatalf("repair with --accept-loss: exit %d\n%s%s", code, out, errOut)
	}
}

// appendBatches runs "node append" n times, 5 records each (so several
// raft batches), on log (the default log when ""), and returns the
// indexes it printed.
func (h *serveHarness) appendBatches(addrs, log, prefix string, n int) []uint64 {
	h.t.Helper()
	var acked []uint64
	for i := range n {
		args := []string{"append", "--addrs", addrs, "--timeout", "30s"}
		if log != "" {
			args = append(args, "--log", log)
		}
		for j := range 5 {
			args = append(args, fmt.Sprintf("%s-%d-%d", prefix, i, j))
		}
		for _, f := range strings.Fields(h.mustCLI(args...)) {
			idx, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				h.t.Fatalf("append printed %q", f)
			}
			acked = append(acked, idx)
		}
	}
	return acked
}

// TestRepairProcesses is the operator's path through a damaged record on a
// 3-node cluster of "node serve" processes: a follower whose log holds a
// damaged record refuses to start, naming the file and offset; "node
// repair --yes" cuts its log back; it starts, catches up from the leader,
// and every acknowledged record is readable on it.
func TestRepairProcesses(t *testing.T) {
	h := newServeHarness(t)
	nodes, addrs := startProcCluster(t, h, 3, "n", "")
	// Acknowledged records, in several appends (so several raft batches).
	var acked []uint64
	appendSome := func(prefix string, n int) {
		t.Helper()
		acked = append(acked, h.appendBatches(addrs, "", prefix, n)...)
	}
	appendSome("before", 8)
	last := acked[len(acked)-1]

	// n3 must hold the records before it stops, or there is nothing to
	// damage: wait (bounded) until it has applied the last one.
	victim := nodes[2]
	waitApplied := func(n *procNode, index uint64) {
		t.Helper()
		for range 300 {
			out, _, code := h.cli("status", "--addrs", n.client, "--json", "--timeout", "2s")
			var rows []statusJSON
			if code == 0 && json.Unmarshal([]byte(out), &rows) == nil {
				for _, r := range rows {
					if r.Addr == n.client && r.Applied >= index {
						return
					}
				}
			}
			timer := time.NewTimer(200 * time.Millisecond)
			<-timer.C
		}
		h.dumpLog(n)
		t.Fatalf("%s did not apply index %d within a minute", n.id, index)
	}
	waitApplied(victim, last)
	h.stop(victim)
	path, off := damageEntry(t, victim.dir, acked[20])

	// It refuses to start, naming the file and offset.
	h.start(victim, "--bootstrap", bootstrapOf(nodes))
	h.waitExit(victim, "of its start on a damaged record")
	b, _ := os.ReadFile(victim.log)
	if code := victim.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(b), fmt.Sprintf("%s at offset %d", path, off)) || !strings.Contains(string(b), "node repair") {
		t.Fatalf("%s exited with status %d, want 1 and an error naming %s offset %d and node repair:\n%s", victim.id, code, path, off, b)
	}

	// The other two go on: a quorum of them holds every record n3 loses.
	appendSome("while-down", 4)

	// repair asks for a confirmation it cannot get without a terminal.
	before := testdamage.TreeDigest(t, victim.dir)
	if out, errOut, code := h.cli("repair", "--data-dir", victim.dir); code != 1 || !strings.Contains(out, fmt.Sprintf("damaged record: %s at offset %d", path, off)) || !strings.Contains(errOut, "--yes") {
		t.Fatalf("repair without --yes: exit %d\n%s%s", code, out, errOut)
	}
	if testdamage.TreeDigest(t, victim.dir) != before {
		t.Fatal("repair without a confirmation changed the data dir")
	}
	out := h.mustCLI("repair", "--data-dir", victim.dir, "--yes")
	t.Logf("node repair:\n%s", out)

	h.start(victim, "--bootstrap", bootstrapOf(nodes))
	appendSome("after", 2)
	last = acked[len(acked)-1]
	waitApplied(victim, last)
	// Every acknowledged record, read from n3 alone.
	got := h.mustCLI("read", "--addrs", victim.client, "--stale", "--from", "1", "--max", "0")
	idx, data := parseRecords(t, got)
	have := map[uint64]bool{}
	for _, i := range idx {
		have[i] = true
	}
	for _, i := range acked {
		if !have[i] {
			t.Fatalf("acknowledged record %d is not readable on %s after the repair (it holds %d records)", i, victim.id, len(idx))
		}
	}
	want := h.mustCLI("read", "--addrs", addrs, "--from", "1", "--max", "0")
	if wantIdx, wantData := parseRecords(t, want); fmt.Sprint(wantIdx) != fmt.Sprint(idx) || strings.Join(wantData, "\n") != strings.Join(data, "\n") {
		t.Fatalf("%s after the repair reads %d records, the cluster %d, or they differ", victim.id, len(idx), len(wantIdx))
	}
	for _, n := range nodes {
		h.stop(n)
	}
}

// TestRepairNamedLogProcesses is the operator's path through a damaged
// record of a named log on a 3-node cluster of "node serve" processes. A
// trim makes every replica of the log take a snapshot (its first retained
// index the trim's); the record of the first entry the follower then holds
// is damaged, so the cut leaves the log's snapshot claiming records the
// node no longer holds. It refuses to start, "node repair --yes" reports
// the log by name and removes its snapshot, and the node, started again,
// catches up: every acknowledged record of the named log and of the
// default log reads back from it alone.
func TestRepairNamedLogProcesses(t *testing.T) {
	h := newServeHarness(t)
	nodes, addrs := startProcCluster(t, h, 3, "n", "")
	h.mustCLI("log", "create", "orders", "--replicas", "3", "--addrs", addrs)
	acked := map[string][]uint64{} // by log: "" the default log
	appendSome := func(log, prefix string, n int) {
		t.Helper()
		acked[log] = append(acked[log], h.appendBatches(addrs, log, prefix, n)...)
	}
	var info infoJSON
	waitUntil(t, time.Minute, "a leader of orders", func() bool {
		out, _, code := h.cli("log", "info", "orders", "--json", "--addrs", addrs, "--timeout", "5s")
		return code == 0 && json.Unmarshal([]byte(out), &info) == nil && info.LeaderID != ""
	})
	appendSome("orders", "a", 12)
	appendSome("", "d", 4)
	floor := acked["orders"][20]
	h.mustCLI("trim", "--log", "orders", "--below", fmt.Sprint(floor), "--addrs", addrs)
	appendSome("orders", "b", 4)

	var victim *procNode
	for _, p := range nodes {
		if p.id != info.LeaderID {
			victim = p
		}
	}
	// It holds every record, and its snapshot after the trim, before it
	// stops.
	lastOrders := acked["orders"][len(acked["orders"])-1]
	snapDir := filepath.Join(victim.dir, "logs", fmt.Sprint(info.ID), "snapshots")
	waitUntil(t, time.Minute, victim.id+" holding orders and its snapshot", func() bool {
		out, _, code := h.cli("read", "--log", "orders", "--addrs", victim.client, "--stale", "--from", fmt.Sprint(lastOrders), "--timeout", "2s")
		files, _ := filepath.Glob(filepath.Join(snapDir, "*.snap"))
		return code == 0 && strings.HasPrefix(out, fmt.Sprint(lastOrders)+"\t") && len(files) > 0
	})
	h.stop(victim)
	path, off := damageGroupEntry(t, victim.dir, replica.GroupsOf(info.ID).Live, floor)

	h.start(victim, "--bootstrap", bootstrapOf(nodes))
	h.waitExit(victim, "of its start on a damaged record")
	if b, _ := os.ReadFile(victim.log); !strings.Contains(string(b), fmt.Sprintf("%s at offset %d", path, off)) {
		t.Fatalf("%s did not name the damaged record %s offset %d:\n%s", victim.id, path, off, b)
	}

	// The other two go on.
	appendSome("orders", "c", 4)
	appendSome("", "e", 2)
	out := h.mustCLI("repair", "--data-dir", victim.dir, "--yes")
	t.Logf("node repair:\n%s", out)
	if !strings.Contains(out, fmt.Sprintf(`log "orders" (id %d):`, info.ID)) || !strings.Contains(out, "removes the snapshots at indexes") {
		t.Fatalf("the repair report does not say what happens to orders:\n%s", out)
	}

	h.start(victim, "--bootstrap", bootstrapOf(nodes))
	appendSome("orders", "f", 2)
	appendSome("", "g", 1)
	for _, log := range []string{"orders", ""} {
		last := acked[log][len(acked[log])-1]
		read := func(addrs string, stale bool) (string, int) {
			args := []string{"read", "--addrs", addrs, "--from", "0", "--max", "0", "--timeout", "5s"}
			if log != "" {
				args = append(args, "--log", log)
			}
			if stale {
				args = append(args, "--stale")
			}
			out, _, code := h.cli(args...)
			return out, code
		}
		var got string
		waitUntil(t, 2*time.Minute, fmt.Sprintf("%s catching up on log %q", victim.id, log), func() bool {
			out, code := read(victim.client, true)
			got = out
			return code == 0 && strings.Contains(out, fmt.Sprintf("\n%d\t", last))
		})
		idx, data := parseRecords(t, got)
		have := map[uint64]bool{}
		for _, i := range idx {
			have[i] = true
		}
		for _, i := range acked[log] {
			if !have[i] && (log == "" || i >= floor) {
				t.Fatalf("acknowledged record %d of log %q is not readable on %s after the repair (it holds %d records)", i, log, victim.id, len(idx))
			}
		}
		want, code := read(addrs, false)
		if wantIdx, wantData := parseRecords(t, want); code != 0 || fmt.Sprint(wantIdx) != fmt.Sprint(idx) || strings.Join(wantData, "\n") != strings.Join(data, "\n") {
			t.Fatalf("%s after the repair reads %d records of log %q, the cluster %d, or they differ", victim.id, len(idx), log, len(wantIdx))
		}
	}
	for _, n := range nodes {
		h.stop(n)
	}
}
