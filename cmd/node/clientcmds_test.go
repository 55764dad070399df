package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"

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
