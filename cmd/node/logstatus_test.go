package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

func TestLogsTable(t *testing.T) {
	rows := []logRow{
		{info: transport.LogInfo{Name: "default"}, d: &transport.DescribeLogResponse{
			Log:       transport.LogInfo{Name: "default", Replicas: 3, State: transport.LogActive, LeaderID: "n1"},
			LastIndex: 120, CommitIndex: 120, FirstIndex: 1, Bytes: 3 << 20,
			Members: []transport.LogMember{{NodeID: "n1", Role: transport.RoleLeader}, {NodeID: "n2", Role: transport.RoleFollower}, {NodeID: "n3", Role: transport.RoleFollower}},
		}},
		{info: transport.LogInfo{Name: "gone", State: transport.LogDeleting, Members: []string{"n1", "n2", "n3"}}},
		{info: transport.LogInfo{Name: "orders"}, d: &transport.DescribeLogResponse{
			Log:       transport.LogInfo{Name: "orders", Replicas: 3, State: transport.LogActive, LeaderID: "n2"},
			LastIndex: 7, CommitIndex: 6, FirstIndex: 3, Bytes: 1536,
			Members: []transport.LogMember{{NodeID: "n2", Role: transport.RoleLeader}, {NodeID: "n3", Role: transport.RoleFollower},
				{NodeID: "n4", Role: transport.RoleNonvoter}, {NodeID: "n1", Role: transport.RoleLeaving}},
		}},
		{info: transport.LogInfo{Name: "stuck"}, err: errors.New("client: describe log: no leader")},
	}
	var b bytes.Buffer
	if err := writeLogsTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := `LOG      STATE     LEADER  REPLICAS  MEMBERS                         FIRST  LAST  COMMIT  BYTES
default  active    n1      3/3       n1,n2,n3                        1      120   120     3MiB
gone     deleting  -       -         n1,n2,n3                        -      -     -       -
orders   active    n2      2/3       n2,n3,n4(Nonvoter),n1(Leaving)  3      7     6       1.5KiB
stuck    error: client: describe log: no leader
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	if n := logFailures(rows); n != 1 {
		t.Errorf("logFailures: %d, want 1", n)
	}
}

// TestStatusOfLogs runs status against a node serving named logs and
// against one older than them: the first gets a table of its logs, and
// --log NAME shows one; the second gets the nodes' table as before, and
// --log default shows it too.
func TestStatusOfLogs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := startLogsServer(t, false)
	must := func(addr string, args ...string) string {
		t.Helper()
		out, errOut, code := runCmd(ctx, append(args, "--addrs", addr, "--timeout", "10s")...)
		if code != 0 {
			t.Fatalf("node %s: exit status %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	must(s.addr, "log", "create", "orders")
	must(s.addr, "append", "--log", "orders", "o1", "o2")
	out := must(s.addr, "status")
	wantLogs := `LOG      STATE   LEADER  REPLICAS  MEMBERS             FIRST  LAST  COMMIT  BYTES
default  active  n1      1/1       n1                  0      0     0       1.5KiB
orders   active  n1      2/3       n1,n2,n3(Nonvoter)  1      2     2       1.5KiB
`
	if !strings.Contains(out, "\n\n"+wantLogs+"\n") {
		t.Errorf("status:\n%s\nwant the logs table:\n%s", out, wantLogs)
	}
	wantOne := `LOG     STATE   LEADER  REPLICAS  MEMBERS             FIRST  LAST  COMMIT  BYTES
orders  active  n1      2/3       n1,n2,n3(Nonvoter)  1      2     2       1.5KiB

NODE  ADDRESS` + strings.Repeat(" ", max(0, len(s.addr)-len("ADDRESS"))) + `  ROLE      CAUGHT UP
n1    ` + s.addr + `  Leader    yes
n2    -` + strings.Repeat(" ", len(s.addr)-1) + `  Follower  yes
n3    -` + strings.Repeat(" ", len(s.addr)-1) + `  Nonvoter  unknown
`
	if out := must(s.addr, "status", "--log", "orders"); out != wantOne {
		t.Errorf("status --log orders:\n%s\nwant:\n%s", out, wantOne)
	}
	var info infoJSON
	if err := json.Unmarshal([]byte(must(s.addr, "status", "--log", "orders", "--json")), &info); err != nil || info.Name != "orders" ||
		info.LastIndex != 2 || len(info.MemberStates) != 3 {
		t.Errorf("status --log orders --json: %+v, %v", info, err)
	}
	if out, errOut, code := runCmd(ctx, "status", "--log", "nosuch", "--addrs", s.addr, "--timeout", "5s"); code != 1 || out != "" ||
		!strings.Contains(errOut, `log "nosuch" does not exist`) {
		t.Errorf("status --log nosuch: exit status %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := runCmd(ctx, "status", "--log", "a.b", "--addrs", s.addr); code != 2 || !strings.Contains(errOut, `--log: log name "a.b"`) {
		t.Errorf("status --log a.b: exit status %d, stderr %q", code, errOut)
	}

	// A node older than named logs: the nodes' table, as before.
	old := startLogsServer(t, true)
	out = must(old.addr, "status")
	if strings.Contains(out, "LOG ") || !strings.HasPrefix(out, "ADDRESS ") || !strings.Contains(out, "\nNODE ") {
		t.Errorf("status of an older node:\n%s", out)
	}
	if got := must(old.addr, "status", "--log", "default"); got != out {
		t.Errorf("status --log default of an older node:\n%s\nwant:\n%s", got, out)
	}
	if out, errOut, code := runCmd(ctx, "status", "--log", "orders", "--addrs", old.addr, "--timeout", "5s"); code != 1 || out != "" ||
		!strings.Contains(errOut, "this server does not serve named logs") {
		t.Errorf("status --log orders of an older node: exit status %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// statusOfLogsOnCluster checks status's table of logs on a real cluster
// (addrs) serving the default log and two named logs, one of three
// replicas that holds records and one of one.
func statusOfLogsOnCluster(t *testing.T, ctx context.Context, addrs []string) {
	cl, err := client.Dial(ctx, addrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, l := range []struct {
		name     string
		replicas int
	}{{"st-orders", 3}, {"st-events", 1}} {
		if _, err := cl.CreateLog(ctx, l.name, client.CreateLogOptions{Replicas: l.replicas}); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := cl.Log("st-orders").Append(ctx, []byte("a"), []byte("b"), []byte("c"))
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(addrs, ",")
	// Each log's raft group starts after the catalog committed it: wait
	// until status finds a leader of every log.
	var out, errOut string
	deadline := time.Now().Add(30 * time.Second)
	for code := -1; code != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("status: exit status %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		out, errOut, code = runCmd(ctx, "status", "--addrs", joined, "--timeout", "10s")
	}
	rows := map[string][]string{}
	inLogs := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "LOG "):
			inLogs = true
		case line == "":
			inLogs = false
		case inLogs:
			f := strings.Fields(line)
			rows[f[0]] = f
		}
	}
	// LOG STATE LEADER REPLICAS MEMBERS FIRST LAST COMMIT BYTES
	check := func(name, replicas string, members int, last uint64) {
		t.Helper()
		f := rows[name]
		var got uint64
		if len(f) == 9 {
			got, _ = strconv.ParseUint(f[6], 10, 64)
		}
		if len(f) != 9 || f[1] != "active" || f[2] == "-" || f[3] != replicas || len(strings.Split(f[4], ",")) != members ||
			!slices.Contains(strings.Split(f[4], ","), f[2]) || got < last {
			t.Errorf("status: row of %s %q, want active, a leader among %d members, %s replicas, last index at least %d; status:\n%s",
				name, f, members, replicas, last, out)
		}
	}
	check("default", "3/3", 3, 1)
	check("st-orders", "3/3", 3, idx[2])
	check("st-events", "1/1", 1, 0)
	if len(rows) != 3 {
		t.Errorf("status lists %d logs, want 3:\n%s", len(rows), out)
	}

	one, errOut, code := runCmd(ctx, "status", "--log", "st-orders", "--addrs", joined, "--timeout", "10s")
	if code != 0 || strings.Count(one, "\n") != 7 || !strings.HasPrefix(one, "LOG ") || strings.Count(one, " Leader ") != 1 ||
		strings.Count(one, " Follower ") != 2 || !strings.Contains(one, "\nst-orders ") {
		t.Errorf("status --log st-orders: exit status %d, stderr %q, stdout:\n%s", code, errOut, one)
	}
}
