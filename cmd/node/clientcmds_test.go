package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/node"
	"github.com/raftlog/raftlog/transport"
)

func TestStatusTable(t *testing.T) {
	rows := []statusRow{
		{addr: "127.0.0.1:7000", st: &transport.StatusResponse{
			NodeID: "n1", Role: "Leader", LeaderID: "n1", Term: 3, FirstIndex: 1, LastIndex: 120,
			CommitIndex: 120, AppliedIndex: 120, Store: transport.StoreStatus{Segments: 2, Bytes: 3 << 20},
		}},
		{addr: "127.0.0.1:7010", st: &transport.StatusResponse{
			NodeID: "node-two", Role: "Follower", Term: 3, FirstIndex: 1, LastIndex: 118,
			CommitIndex: 118, AppliedIndex: 117, Store: transport.StoreStatus{Segments: 1, Bytes: 1536},
		}},
		{addr: "127.0.0.1:7020", err: errors.New("dial tcp 127.0.0.1:7020: connect: connection refused")},
	}
	var b bytes.Buffer
	if err := writeStatusTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := `ADDRESS         NODE      ROLE      LEADER  TERM  FIRST  LAST  COMMIT  APPLIED  SEGMENTS  BYTES
127.0.0.1:7000  n1        Leader    n1      3     1      120   120     120      2         3MiB
127.0.0.1:7010  node-two  Follower  -       3     1      118   118     117      1         1.5KiB
127.0.0.1:7020  error: dial tcp 127.0.0.1:7020: connect: connection refused
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}

	j, err := json.Marshal([]statusJSON{rows[0].json(), rows[2].json()})
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := `[{"addr":"127.0.0.1:7000","node_id":"n1","role":"Leader","leader_id":"n1","term":3,"first_index":1,"last_index":120,"commit_index":120,"applied_index":120,"segments":2,"bytes":3145728},` +
		`{"addr":"127.0.0.1:7020","error":"dial tcp 127.0.0.1:7020: connect: connection refused","first_index":0,"last_index":0,"commit_index":0,"applied_index":0,"segments":0,"bytes":0}]`
	if string(j) != wantJSON {
		t.Errorf("json:\n%s\nwant:\n%s", j, wantJSON)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestUnreachableCluster checks that commands against a cluster that does
// not answer fail with status 1 and say so, and that status still prints
// a row for every address.
func TestUnreachableCluster(t *testing.T) {
	a, b := closedAddr(t), closedAddr(t)
	e, stdout, stderr := testEnv(nil)
	if code := run(context.Background(), e, []string{"status", "--addrs", a + "," + b, "--timeout", "5s"}); code != 1 {
		t.Errorf("status: exit status %d, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], a+"  error: ") || !strings.HasPrefix(lines[2], b+"  error: ") {
		t.Errorf("status table:\n%s", stdout)
	}
	if want := "node status: 2 of 2 addresses did not answer\n"; stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}

	e, stdout, stderr = testEnv(map[string]string{"RAFTLOG_ADDRS": a})
	if code := run(context.Background(), e, []string{"append", "--timeout", "5s", "x"}); code != 1 {
		t.Errorf("append: exit status %d, want 1", code)
	}
	if msg := stderr.String(); !strings.HasPrefix(msg, "node append: ") || !strings.Contains(msg, "no member reachable") ||
		!strings.Contains(msg, a) || strings.Count(msg, "\n") != 1 {
		t.Errorf("append: stderr %q", msg)
	}
	if stdout.Len() > 0 {
		t.Errorf("append: stdout %q", stdout)
	}
}

// runCmd runs the command line args in this process, as the binary would,
// and returns its stdout, stderr and exit status.
func runCmd(ctx context.Context, args ...string) (stdout, stderr string, code int) {
	e, out, errOut := testEnv(nil)
	code = run(ctx, e, args)
	return out.String(), errOut.String(), code
}

// TestClientCommandsOnCluster runs the client commands against a local
// 3-node cluster: flags anywhere on the command line, reads longer than a
// page, and requests the cluster's state makes pointless.
func TestClientCommandsOnCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	lc, err := startLocalCluster(ctx, t.TempDir(), node.FlushAsync, &logs)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.close()
	addrs := strings.Join(lc.clientAddrs(), ",")
	mustRun := func(t *testing.T, args ...string) string {
		t.Helper()
		out, errOut, code := runCmd(ctx, args...)
		if code != 0 {
			t.Fatalf("node %s: exit status %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	// readData returns the data of the records from index from on.
	readData := func(t *testing.T, from uint64) []string {
		t.Helper()
		out := mustRun(t, "read", "--addrs", addrs, "--from", strconv.FormatUint(from, 10))
		_, data := parseRecords(t, out)
		return data
	}

	t.Run("flags after records", func(t *testing.T) {
		out := mustRun(t, "append", "--addrs", addrs, "hello", "--timeout", "5s")
		first, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatalf("append printed %q, want one index", out)
		}
		out = mustRun(t, "append", "a", "--addrs", addrs, "--timeout=5s", "b", "--", "--literal", "-x", "--timeout")
		if n := strings.Count(out, "\n"); n != 5 {
			t.Fatalf("append printed %q, want 5 indexes", out)
		}
		want := []string{"hello", "a", "b", "--literal", "-x", "--timeout"}
		if got := readData(t, first); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("records %q, want %q", got, want)
		}
		// A mistyped flag is refused, naming it, and stores nothing.
		for _, args := range [][]string{
			{"append", "--addrs", addrs, "world", "--timout", "5s"},
			{"append", "--addrs", addrs, "-5"},
		} {
			out, errOut, code := runCmd(ctx, args...)
			bad := args[len(args)-1]
			if bad == "5s" {
				bad = args[len(args)-2]
			}
			if code != 2 || out != "" || !strings.Contains(errOut, "unknown flag "+bad+" ") || !strings.Contains(errOut, "-- "+bad) {
				t.Errorf("node %q: exit status %d, stdout %q, stderr %q; want a usage error naming %s", args, code, out, errOut, bad)
			}
		}
		if got := readData(t, first); len(got) != len(want) {
			t.Errorf("records after refused command lines: %q, want %q", got, want)
		}
	})

	t.Run("read past a page", func(t *testing.T) {
		const n = transport.DefaultMaxReadRecords + 904 // more than one page
		cl, err := client.Dial(ctx, lc.clientAddrs(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var first, last uint64
		for done := 0; done < n; {
			batch := make([][]byte, min(1000, n-done))
			for i := range batch {
				batch[i] = fmt.Appendf(nil, "p%05d", done+i)
			}
			idx, err := cl.Append(ctx, batch...)
			if err != nil {
				t.Fatal(err)
			}
			if done == 0 {
				first = idx[0]
			}
			last = idx[len(idx)-1]
			done += len(batch)
		}
		out, errOut, code := runCmd(ctx, "read", "--addrs", addrs, "--from", strconv.FormatUint(first, 10))
		if code != 0 || errOut != "" {
			t.Fatalf("read: exit status %d, stderr %q", code, errOut)
		}
		idx, data := parseRecords(t, out)
		if len(data) != n || data[0] != "p00000" || data[n-1] != fmt.Sprintf("p%05d", n-1) || idx[n-1] != last {
			t.Fatalf("read printed %d records (%q ... %q), want %d", len(data), data[0], data[len(data)-1], n)
		}

		// --max stops early and says where to read on.
		out, errOut, code = runCmd(ctx, "read", "--addrs", addrs, "--from", strconv.FormatUint(first, 10), "--max", "10")
		if _, data := parseRecords(t, out); code != 0 || len(data) != 10 || data[9] != "p00009" {
			t.Fatalf("read --max 10: exit status %d, %d records %q", code, len(data), data)
		}
		if from := strconv.FormatUint(idx[10], 10); !strings.Contains(errOut, "more follow from index "+from) || !strings.Contains(errOut, "--from "+from) {
			t.Errorf("read --max 10: stderr %q does not say to read on from %s", errOut, from)
		}
		// Exactly the records left: nothing more follows, nothing is said.
		out, errOut, code = runCmd(ctx, "read", "--addrs", addrs, "--from", strconv.FormatUint(idx[n-3], 10), "--max", "3")
		if _, data := parseRecords(t, out); code != 0 || len(data) != 3 || errOut != "" {
			t.Errorf("read --max 3 of the last 3: exit status %d, %d records, stderr %q", code, len(data), errOut)
		}
	})

	t.Run("status of every log", func(t *testing.T) { statusOfLogsOnCluster(t, ctx, lc.clientAddrs()) })

	t.Run("requests in the wrong state", func(t *testing.T) {
		st := mustRun(t, "status", "--addrs", addrs, "--json")
		var rows []statusJSON
		if err := json.Unmarshal([]byte(st), &rows); err != nil || len(rows) == 0 || rows[0].LeaderID == "" {
			t.Fatalf("status: %v\n%s", err, st)
		}
		leader := rows[0].LeaderID
		// A member that never catches up stays a nonvoter.
		mustRun(t, "join", "--addrs", addrs, "--id", "n9", "--raft-addr", closedAddr(t), "--client-addr", closedAddr(t))
		for _, tc := range []struct {
			args []string
			code transport.Code
			say  string
		}{
			{[]string{"transfer", "--to", leader}, transport.CodeFailedPrecondition, "already leads"},
			{[]string{"transfer", "--to", "n9"}, transport.CodeFailedPrecondition, "nonvoter"},
			{[]string{"transfer", "--to", "nosuch"}, transport.CodeNotFound, `"nosuch" is not a member`},
			{[]string{"remove", "--id", "nosuch"}, transport.CodeNotFound, `"nosuch" is not a member`},
			{[]string{"join", "--id", "n8", "--raft-addr", lc.nodes[1].RaftAddr(), "--client-addr", closedAddr(t)}, transport.CodeFailedPrecondition, "raft address " + lc.nodes[1].RaftAddr()},
		} {
			args := append(tc.args, "--addrs", addrs, "--timeout", "10s")
			out, errOut, code := runCmd(ctx, args...)
			if code != 1 || out != "" || !strings.Contains(errOut, "transport: "+tc.code.String()+": ") || !strings.Contains(errOut, tc.say) {
				t.Errorf("node %q: exit status %d, stdout %q, stderr %q; want %v saying %q", args, code, out, errOut, tc.code, tc.say)
			}
		}
		mustRun(t, "remove", "--addrs", addrs, "--id", "n9")
		if out := mustRun(t, "transfer", "--addrs", addrs); !strings.Contains(out, "leadership handed over") {
			t.Errorf("transfer: %q", out)
		}
	})
}
