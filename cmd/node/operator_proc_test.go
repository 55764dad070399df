package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// logCluster is a cluster of "node serve" processes with two named logs,
// orders (3 replicas) and solo (1 replica), for the tests of what an
// operator sees of them through the binary.
type logCluster struct {
	h     *serveHarness
	nodes []*procNode
	addrs string // every node's client address, comma-separated
}

// startLogCluster starts 3 nodes and creates orders and solo.
func startLogCluster(t *testing.T) *logCluster {
	t.Helper()
	h := newServeHarness(t)
	nodes, addrs := startProcCluster(t, h, 3, "n", "")
	lc := &logCluster{h: h, nodes: nodes, addrs: addrs}
	h.mustCLI("log", "create", "orders", "--replicas", "3", "--addrs", addrs)
	h.mustCLI("log", "create", "solo", "--replicas", "1", "--addrs", addrs)
	for _, name := range []string{"orders", "solo"} {
		lc.info(t, name)
	}
	return lc
}

// info returns "log info NAME --json", once the log has a leader.
func (lc *logCluster) info(t *testing.T, name string) infoJSON {
	t.Helper()
	var in infoJSON
	waitUntil(t, time.Minute, "a leader of log "+name, func() bool {
		out, _, code := lc.h.cli("log", "info", name, "--json", "--addrs", lc.addrs, "--timeout", "5s")
		in = infoJSON{}
		return code == 0 && json.Unmarshal([]byte(out), &in) == nil && in.LeaderID != ""
	})
	return in
}

// list returns "log list --json" as the node at addr answers it.
func (lc *logCluster) list(t *testing.T, addr string) []logJSON {
	t.Helper()
	var logs []logJSON
	if out := lc.h.mustCLI("log", "list", "--json", "--addrs", addr); json.Unmarshal([]byte(out), &logs) != nil {
		t.Fatalf("log list --json: %s", out)
	}
	return logs
}

// TestCLIProcesses runs the CLI against a cluster of "node serve"
// processes and checks what an operator sees.
func TestCLIProcesses(t *testing.T) {
	lc := startLogCluster(t)

	// log list names each log's leader, whichever node answers, the one
	// the log's leader describes itself as (leadership may move while
	// they settle: poll until the two agree).
	t.Run("list shows leaders", func(t *testing.T) {
		for _, p := range lc.nodes {
			var why string
			waitUntil(t, 30*time.Second, "log list at "+p.id+" naming every log's leader", func() bool {
				logs := lc.list(t, p.client)
				for _, l := range logs {
					if want := lc.info(t, l.Name).LeaderID; l.LeaderID != want {
						if w := fmt.Sprintf("log list at %s: log %s led by %q, log info says %q", p.id, l.Name, l.LeaderID, want); w != why {
							why = w
							t.Log(why)
						}
						return false
					}
				}
				return len(logs) == 3
			})
			table := lc.h.mustCLI("log", "list", "--addrs", p.client)
			for _, line := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
				if f := strings.Fields(line); len(f) < 7 || f[5] == "-" {
					t.Errorf("log list at %s shows no leader: %q", p.id, line)
				}
			}
		}
	})
	// The leader knows that it has caught up with itself, and nothing of
	// its followers: log info says so, rather than "no".
	t.Run("info caught up unknown", func(t *testing.T) {
		lc.info(t, "orders")
		out := lc.h.mustCLI("log", "info", "orders", "--addrs", lc.addrs)
		_, members, _ := strings.Cut(out, "\n\n")
		rows := strings.Split(strings.TrimSpace(members), "\n")
		if len(rows) != 4 || !strings.HasSuffix(rows[0], "CAUGHT UP") {
			t.Fatalf("log info orders: %s", out)
		}
		for _, row := range rows[1:] {
			f := strings.Fields(row)
			want := "unknown"
			if f[2] == "Leader" {
				want = "yes"
			}
			if len(f) != 4 || f[3] != want {
				t.Errorf("log info orders: member row %q, want caught up %q", row, want)
			}
		}
	})
	// append --stdin sends a line as soon as it is read, not once 100 are
	// (its --batch) or stdin ends; SIGINT stops it while it waits for
	// more, and it says what was appended.
	t.Run("append stdin at once and interrupted", func(t *testing.T) {
		p := lc.h.startPiped("append", "--stdin", "--addrs", lc.addrs)
		const line = "sent-at-once"
		if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 30*time.Second, "the line written to append --stdin readable from the cluster", func() bool {
			out, _, code := lc.h.cli("read", "--addrs", lc.addrs, "--timeout", "5s")
			return code == 0 && strings.Contains(out, "\t"+line+"\n")
		})
		p.waitPrinted(t, 1, 30*time.Second)
		if err := p.cmd.Process.Signal(os.Interrupt); err != nil { // this test's own process, by its pid
			t.Fatal(err)
		}
		code := p.wait(t, 10*time.Second)
		stderr := p.stderr.String()
		if code != exitInterrupted || len(p.out) != 1 || !strings.Contains(stderr, "interrupted: stdin lines 1-1 were appended") {
			t.Fatalf("append --stdin after SIGINT: exit status %d, stdout %q, stderr %q; want %d, one index, saying line 1 was appended",
				code, p.out, stderr, exitInterrupted)
		}
		if out := lc.h.mustCLI("read", "--addrs", lc.addrs, "--from", p.out[0], "--max", "1"); out != p.out[0]+"\t"+line+"\n" {
			t.Errorf("read --from %s, the index printed: %q, want the line", p.out[0], out)
		}
	})
	t.Run("one replica", func(t *testing.T) {
		out := lc.h.mustCLI("log", "create", "single", "--replicas", "1", "--addrs", lc.addrs)
		if !strings.Contains(out, ": 1 replica, on ") {
			t.Errorf("log create --replicas 1 printed %q, want it to say 1 replica", out)
		}
	})
	// An error of "node log SUBCOMMAND" names the subcommand, and so does
	// its hint on usage.
	t.Run("log subcommand errors", func(t *testing.T) {
		for _, c := range []struct {
			code int
			want string
			args []string
		}{
			{2, "node log create: ", []string{"log", "create", "a.b"}},
			{2, "(run 'node log create -h' for usage)", []string{"log", "create", "a.b"}},
			{1, "node log info: ", []string{"log", "info", "nosuch"}},
			{1, "node log delete: ", []string{"log", "delete", "nosuch", "--yes"}},
		} {
			_, errOut, code := lc.h.cli(append(c.args, "--addrs", lc.addrs)...)
			if code != c.code || !strings.Contains(errOut, c.want) {
				t.Errorf("node %s: exit status %d, stderr %q; want %d saying %q", strings.Join(c.args, " "), code, errOut, c.code, c.want)
			}
		}
	})
	// A name with a character outside A-Z a-z 0-9 _ - is refused with the
	// rule, whichever character and wherever it is.
	t.Run("log name rule", func(t *testing.T) {
		const rule = "1 to 64 characters of A-Z, a-z, 0-9, _ and -"
		for _, c := range []struct{ name, says string }{
			{"éa", `starts with 'é'`},
			{"aé", `holds 'é'`},
			{strings.Repeat("a", 63) + "é", `holds 'é'`},
			{"a\xff", "holds the byte 0xff"},
			{"-a", `starts with '-'`},
		} {
			_, errOut, code := lc.h.cli("log", "create", "--addrs", lc.addrs, "--", c.name)
			if code != 2 || !strings.Contains(errOut, c.says) || !strings.Contains(errOut, rule) {
				t.Errorf("log create %q: exit status %d, stderr %q; want 2 saying %q and %q", c.name, code, errOut, c.says, rule)
			}
		}
	})
	// read and tail from a trimmed index say which index the log starts
	// at now, and how to read from there.
	t.Run("read below the first index", func(t *testing.T) {
		idx := parseIndexes(t, lc.h.mustCLI("append", "--log", "orders", "--addrs", lc.addrs, "t1", "t2", "t3"))
		lc.h.mustCLI("trim", "--log", "orders", "--below", strconv.FormatUint(idx[2], 10), "--addrs", lc.addrs)
		want := fmt.Sprintf("the first record the log holds is at index %d: read on with --from %d", idx[2], idx[2])
		for _, cmd := range []string{"read", "tail"} {
			_, errOut, code := lc.h.cli(cmd, "--log", "orders", "--from", "1", "--addrs", lc.addrs, "--timeout", "10s")
			if code != 1 || !strings.Contains(errOut, "index 1 was trimmed") || !strings.Contains(errOut, want) {
				t.Errorf("%s --from 1 after a trim below %d: exit status %d, stderr %q; want 1 saying %q", cmd, idx[2], code, errOut, want)
			}
		}
	})

	// A node that joins takes a replica from a node holding more (n1
	// holds orders and solo, n4 none); the node it moved from drops its
	// copy and says the log moved, not that it was deleted. Last: it
	// changes the cluster.
	t.Run("moved log dropped", func(t *testing.T) {
		addrs := freeAddrs(t, 2)
		n4 := &procNode{id: "n4", raft: addrs[0], client: addrs[1], dir: filepath.Join(lc.h.dir, "n4"), log: filepath.Join(lc.h.dir, "n4.log")}
		lc.h.start(n4, "--join", lc.addrs)
		nodes := append(append([]*procNode{}, lc.nodes...), n4)
		var moved string
		waitUntil(t, time.Minute, "a node dropping the replica of a log that moved away", func() bool {
			for _, p := range nodes {
				b, _ := os.ReadFile(p.log)
				for _, line := range strings.Split(string(b), "\n") {
					if strings.Contains(line, "dropped a deleted log's data") {
						t.Fatalf("%s says it dropped a deleted log's data, when no log was deleted: %s", p.id, line)
					}
					if strings.Contains(line, "dropped its replica of a log that moved away") {
						moved = p.id + ": " + line
					}
				}
			}
			return moved != ""
		})
		t.Log(moved)
	})
}

// TestRemoveNodeWithStuckLog removes a stopped node that holds the only
// replica of a log: the log has no leader to move it, so the remove fails
// at once naming the log and what to do, and changes nothing; once the
// node runs again, the remove moves the log and takes the node out.
func TestRemoveNodeWithStuckLog(t *testing.T) {
	lc := startLogCluster(t)
	// Only solo: orders, of 3 replicas on 3 nodes, would block a remove
	// whatever its nodes' state.
	lc.h.mustCLI("log", "delete", "orders", "--yes", "--addrs", lc.addrs)
	var holder *procNode
	for _, p := range lc.nodes {
		if m := lc.info(t, "solo").Members; len(m) == 1 && m[0] == p.id {
			holder = p
		}
	}
	if holder == nil {
		t.Fatal("no node holds log solo")
	}
	var others []string
	for _, p := range lc.nodes {
		if p != holder {
			others = append(others, p.client)
		}
	}
	addrs := strings.Join(others, ",")
	lc.h.stop(holder)

	start := time.Now()
	out, errOut, code := lc.h.cli("remove", "--id", holder.id, "--addrs", addrs, "--timeout", "30s")
	took := time.Since(start)
	if code != 1 || took > 20*time.Second || !strings.Contains(errOut, `log "solo"`) || !strings.Contains(errOut, "Start "+holder.id+" again") ||
		strings.Contains(errOut, "outcome unknown") {
		t.Fatalf("remove of %s, down, holding log solo's only replica: exit status %d after %v, stdout %q, stderr %q; want status 1 within 20s naming the log and what to do",
			holder.id, code, took.Round(time.Millisecond), out, errOut)
	}
	t.Logf("remove refused in %v: %s", took.Round(time.Millisecond), strings.TrimSpace(errOut))

	lc.h.start(holder)
	lc.info(t, "solo")
	lc.h.mustCLI("remove", "--id", holder.id, "--addrs", addrs, "--timeout", "60s")
	for _, l := range lc.list(t, addrs) {
		if slices.Contains(l.Members, holder.id) {
			t.Errorf("log %s is still on %s after its removal: %+v", l.Name, holder.id, l)
		}
	}
}

// TestServeBindFailureLeavesNoDataDir starts "node serve" on a port that
// is taken: it fails naming the address, before it creates or writes
// anything in its data dir, so that the dir can still be restored into.
func TestServeBindFailureLeavesNoDataDir(t *testing.T) {
	h := newServeHarness(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	free := freeAddrs(t, 3)
	empty := filepath.Join(h.dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flag, dir string
		addrs     []string // --raft-addr, --client-addr, --admin-addr
	}{
		{"--client-addr", filepath.Join(h.dir, "new", "n1"), []string{free[0], busy, free[2]}},
		{"--raft-addr", filepath.Join(h.dir, "new", "n1"), []string{busy, free[1], free[2]}},
		{"--admin-addr", filepath.Join(h.dir, "new", "n1"), []string{free[0], free[1], busy}},
		{"--client-addr", empty, []string{free[0], busy, free[2]}},
	} {
		_, errOut, code := h.cli("serve", "--id", "n1", "--data-dir", c.dir, "--raft-addr", c.addrs[0], "--client-addr", c.addrs[1],
			"--admin-addr", c.addrs[2], "--bootstrap", "n1="+c.addrs[0])
		if code != 1 || !strings.Contains(errOut, busy) {
			t.Errorf("serve with %s %s taken: exit status %d, stderr %q; want 1 naming the address", c.flag, busy, code, errOut)
		}
		if c.dir == empty {
			if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
				t.Errorf("serve with %s %s taken wrote into its empty data dir: %v %v", c.flag, busy, ents, err)
			}
		} else if _, err := os.Stat(filepath.Join(h.dir, "new")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("serve with %s %s taken left its data dir (or its parent) behind: %v", c.flag, busy, err)
			os.RemoveAll(filepath.Join(h.dir, "new")) // for the next case
		}
	}
}
