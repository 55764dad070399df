package main

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// logsServer is one node serving named logs in memory, as a node of issue
// #15 would, to run the CLI against: it leads every log and the catalog.
// With old set it answers as a node older than named logs: UnknownOp for
// the log operations, BadRequest for a request naming a log.
type logsServer struct {
	addr string // immutable
	old  bool   // immutable

	mu      sync.Mutex                    // guards the fields below
	logs    map[string]*transport.LogInfo // by name
	records map[string][]transport.Record // by log name
	deleted []string                      // names deleted, in order
	poke    chan struct{}                 // closed, and replaced, when records are added
}

func startLogsServer(t *testing.T, old bool) *logsServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &logsServer{
		addr: ln.Addr().String(), old: old,
		logs:    map[string]*transport.LogInfo{transport.DefaultLog: {Name: transport.DefaultLog, Replicas: 1, State: transport.LogActive, Members: []string{"n1"}, LeaderID: "n1"}},
		records: map[string][]transport.Record{},
		poke:    make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { transport.Serve(ctx, nc, s, transport.Limits{}) })
		}
	})
	return s
}

// logLocked returns the log a record request names, or NotFound.
func (s *logsServer) logLocked(field string) (string, error) {
	if s.old && field != "" {
		return "", &transport.Error{Code: transport.CodeBadRequest, Message: "transport: malformed body: msgpack decode error [pos 5]: no matching struct field found when decoding stream map with key log"}
	}
	name := transport.LogName(field)
	if s.logs[name] == nil {
		return "", transport.NotFoundLog(name)
	}
	return name, nil
}

func (s *logsServer) Handle(_ context.Context, op transport.Op, req any) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.old && op >= transport.OpCreateLog {
		return nil, &transport.Error{Code: transport.CodeUnknownOp, Message: "unknown op " + strconv.Itoa(int(op))}
	}
	switch r := req.(type) {
	case *transport.AppendRequest:
		name, err := s.logLocked(r.Log)
		if err != nil {
			return nil, err
		}
		var idx []uint64
		for _, d := range r.Records {
			i := uint64(len(s.records[name]) + 1)
			s.records[name] = append(s.records[name], transport.Record{Index: i, Data: d})
			idx = append(idx, i)
		}
		close(s.poke)
		s.poke = make(chan struct{})
		return &transport.AppendResponse{Indexes: idx}, nil
	case *transport.ReadRequest:
		name, err := s.logLocked(r.Log)
		if err != nil {
			return nil, err
		}
		recs := s.records[name]
		from := max(r.From, 1)
		if from > uint64(len(recs)) {
			return &transport.ReadResponse{Next: from}, nil
		}
		out := slices.Clone(recs[from-1 : min(uint64(len(recs)), from-1+uint64(r.MaxRecords))])
		return &transport.ReadResponse{Records: out, Next: out[len(out)-1].Index + 1}, nil
	case *transport.TrimRequest:
		if _, err := s.logLocked(r.Log); err != nil {
			return nil, err
		}
		return &transport.TrimResponse{Index: 77}, nil
	case *transport.StatusRequest:
		return &transport.StatusResponse{NodeID: "n1", Role: "Leader", LastIndex: uint64(len(s.records[transport.DefaultLog]))}, nil
	case *transport.CreateLogRequest:
		if s.logs[r.Name] != nil {
			return nil, transport.DuplicateLog(r.Name)
		}
		info := &transport.LogInfo{Name: r.Name, ID: uint64(len(s.logs) + len(s.deleted)), Replicas: r.Replicas, RetentionBytes: r.RetentionBytes,
			RetentionAge: r.RetentionAge, State: transport.LogActive, Members: []string{"n1", "n2", "n3"}[:r.Replicas]}
		s.logs[r.Name] = info
		return &transport.CreateLogResponse{Log: *info}, nil
	case *transport.ListLogsRequest:
		var resp transport.ListLogsResponse
		for _, l := range s.logs {
			resp.Logs = append(resp.Logs, *l)
		}
		slices.SortFunc(resp.Logs, func(a, b transport.LogInfo) int { return strings.Compare(a.Name, b.Name) })
		return &resp, nil
	case *transport.DescribeLogRequest:
		name, err := s.logLocked(r.Name)
		if err != nil {
			return nil, err
		}
		l := s.logs[name]
		n := uint64(len(s.records[name]))
		resp := &transport.DescribeLogResponse{Log: *l, LeaderAddr: s.addr, FirstIndex: min(n, 1), LastIndex: n, CommitIndex: n, Bytes: 1536}
		resp.Log.LeaderID = "n1"
		for i, m := range l.Members {
			resp.Members = append(resp.Members, transport.LogMember{NodeID: m, Role: []string{transport.RoleLeader, transport.RoleFollower, transport.RoleNonvoter}[i], CaughtUp: i < 2})
		}
		resp.Members[0].ClientAddr = s.addr
		return resp, nil
	case *transport.DeleteLogRequest:
		l := s.logs[r.Name]
		if l == nil {
			return nil, transport.NotFoundLog(r.Name)
		}
		delete(s.logs, r.Name)
		s.deleted = append(s.deleted, r.Name)
		info := *l
		info.State = transport.LogDeleting
		return &transport.DeleteLogResponse{Log: info}, nil
	}
	return nil, &transport.Error{Code: transport.CodeUnknownOp}
}

func (s *logsServer) Stream(ctx context.Context, _ transport.Op, req any, st *transport.ServerStream) error {
	r := req.(*transport.TailRequest)
	from := max(r.From, 1)
	for {
		s.mu.Lock()
		name, err := s.logLocked(r.Log)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		var recs []transport.Record
		if n := uint64(len(s.records[name])); from <= n {
			recs = slices.Clone(s.records[name][from-1:])
		}
		poke := s.poke
		s.mu.Unlock()
		if len(recs) > 0 {
			from += uint64(len(recs))
			if err := st.Send(&transport.TailItem{Records: recs, Next: from}); err != nil {
				return err
			}
			continue
		}
		select {
		case <-poke:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestLogCommands runs "node log" and the record commands with --log
// against a node serving named logs.
func TestLogCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := startLogsServer(t, false)
	must := func(args ...string) string {
		t.Helper()
		out, errOut, code := runCmd(ctx, append(args, "--addrs", s.addr, "--timeout", "10s")...)
		if code != 0 {
			t.Fatalf("node %s: exit status %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	fail := func(wantCode int, say string, args ...string) {
		t.Helper()
		out, errOut, code := runCmd(ctx, append(args, "--addrs", s.addr, "--timeout", "10s")...)
		if code != wantCode || !strings.Contains(errOut, say) {
			t.Errorf("node %s: exit status %d, stdout %q, stderr %q; want %d saying %q", strings.Join(args, " "), code, out, errOut, wantCode, say)
		}
	}

	if out := must("log", "create", "orders", "--retention-bytes", "1GiB", "--retention-age", "7d"); out != "created log orders (id 1): 3 replicas, on n1, n2, n3; retention 1GiB, 7d\n" {
		t.Errorf("log create: %q", out)
	}
	must("log", "create", "--replicas", "1", "events")
	fail(1, `transport: FailedPrecondition: log "orders" exists already`, "log", "create", "orders")
	fail(2, "--replicas 2: a log has 1, 3 or 5", "log", "create", "x", "--replicas", "2")
	fail(2, `"default" always exists`, "log", "create", "default")
	fail(2, `log name "a.b" holds '.'`, "log", "create", "a.b")
	fail(2, "no log name", "log", "create")
	fail(2, `unknown subcommand "make"`, "log", "make", "x")

	want := `NAME     ID  REPLICAS  RETENTION  STATE   LEADER  MEMBERS
default  0   1         none       active  n1      n1
events   2   1         none       active  n1      n1
orders   1   3         1GiB, 7d   active  n1      n1,n2,n3
`
	if out := must("log", "list"); out != want {
		t.Errorf("log list:\n%s\nwant:\n%s", out, want)
	}
	var logs []logJSON
	if err := json.Unmarshal([]byte(must("log", "list", "--json")), &logs); err != nil || len(logs) != 3 || logs[2].Name != "orders" ||
		logs[2].RetentionAge != "168h0m0s" || logs[2].RetentionBytes != 1<<30 || len(logs[2].Members) != 3 {
		t.Errorf("log list --json: %+v, %v", logs, err)
	}

	// Records go to the log named, and only there.
	if out := must("append", "--log", "orders", "o1", "o2"); out != "1\n2\n" {
		t.Errorf("append --log orders: %q", out)
	}
	if out := must("append", "d1"); out != "1\n" {
		t.Errorf("append to the default log: %q", out)
	}
	e, stdout, stderr := testEnv(nil)
	e.stdin = strings.NewReader("o3\no4\n")
	if code := run(ctx, e, []string{"append", "--stdin", "--log", "orders", "--addrs", s.addr}); code != 0 || stdout.String() != "3\n4\n" {
		t.Errorf("append --stdin --log orders: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, data := parseRecords(t, must("read", "--log", "orders")); strings.Join(data, ",") != "o1,o2,o3,o4" {
		t.Errorf("read --log orders: %q", data)
	}
	if _, data := parseRecords(t, must("read", "--log", "default")); strings.Join(data, ",") != "d1" {
		t.Errorf("read --log default: %q", data)
	}
	if out := must("read", "--log", "orders", "--from", "4", "--json"); out != `{"index":4,"data":"bzQ="}`+"\n" {
		t.Errorf("read --log orders --json: %q", out)
	}
	if out := must("trim", "--log", "orders", "--below", "2"); out != "trimmed the records of log orders below index 2 (trim command at index 77)\n" {
		t.Errorf("trim --log orders: %q", out)
	}
	fail(1, `transport: NotFound: log "nosuch" does not exist`, "append", "--log", "nosuch", "x")
	fail(1, `log "nosuch" does not exist`, "read", "--log", "nosuch")
	fail(2, "--log: log name is empty", "read", "--log", "")

	// tail runs until interrupted: stop it once it printed the records.
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	w := &lineWriter{n: 2, done: make(chan struct{})}
	te, _, tstderr := testEnv(nil)
	te.stdout = w
	exited := make(chan int, 1)
	go func() { exited <- run(tctx, te, []string{"tail", "--addrs", s.addr, "--log", "orders", "--from", "3"}) }()
	select {
	case <-w.done:
	case code := <-exited:
		t.Fatalf("tail --log orders exited with status %d: %s", code, tstderr)
	case <-ctx.Done():
		t.Fatalf("tail --log orders printed %q in time", w.String())
	}
	stop()
	if code := <-exited; code != 0 || w.String() != "3\to3\n4\to4\n" {
		t.Errorf("tail --log orders: exit status %d, printed %q", code, w.String())
	}

	wantInfo := `log           orders
id            1
replicas      3
retention     1GiB, 7d
state         active
leader        n1 at ` + s.addr + `
first index   1
last index    4
commit index  4
bytes         1.5KiB

NODE  ADDRESS` + strings.Repeat(" ", max(0, len(s.addr)-len("ADDRESS"))) + `  ROLE      CAUGHT UP
n1    ` + s.addr + `  Leader    yes
n2    -` + strings.Repeat(" ", len(s.addr)-1) + `  Follower  yes
n3    -` + strings.Repeat(" ", len(s.addr)-1) + `  Nonvoter  unknown
`
	if out := must("log", "info", "orders"); out != wantInfo {
		t.Errorf("log info:\n%s\nwant:\n%s", out, wantInfo)
	}
	var info infoJSON
	if err := json.Unmarshal([]byte(must("log", "info", "orders", "--json")), &info); err != nil || info.Name != "orders" || info.LastIndex != 4 ||
		len(info.MemberStates) != 3 || info.MemberStates[2].Role != transport.RoleNonvoter || info.MemberStates[2].CaughtUp {
		t.Errorf("log info --json: %+v, %v", info, err)
	}
	fail(1, `log "nosuch" does not exist`, "log", "info", "nosuch")

	// bench appends to the log named, and only there.
	var res benchResult
	if err := json.Unmarshal([]byte(must("bench", "--log", "events", "--clients", "2", "--size", "16", "--duration", "200ms", "--json")), &res); err != nil ||
		res.Log != "events" || res.Records == 0 || res.Errors != 0 {
		t.Fatalf("bench --log events: %+v, %v", res, err)
	}
	if recs, _ := parseRecords(t, must("read", "--log", "events")); uint64(len(recs)) != res.Records+1 { // and the first append, not measured
		t.Errorf("bench --log events acked %d records (and one before), the log holds %d", res.Records, len(recs))
	}
	if _, data := parseRecords(t, must("read", "--log", "default")); strings.Join(data, ",") != "d1" {
		t.Errorf("after bench --log events, the default log holds %q", data)
	}
	fail(1, `log "nosuch" does not exist`, "bench", "--log", "nosuch", "--duration", "100ms")

	// delete asks first; without a terminal it needs --yes.
	fail(1, "give --yes", "log", "delete", "events")
	e, stdout, stderr = testEnv(nil)
	e.stdin = fakeTerminal{strings.NewReader("no\n")}
	if code := run(ctx, e, []string{"log", "delete", "events", "--addrs", s.addr}); code != 1 || !strings.Contains(stderr.String(), "not confirmed; nothing changed") ||
		!strings.Contains(stdout.String(), "Delete log events") {
		t.Errorf("log delete, declined: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	e, stdout, stderr = testEnv(nil)
	e.stdin = fakeTerminal{strings.NewReader("yes\n")}
	if code := run(ctx, e, []string{"log", "delete", "events", "--addrs", s.addr}); code != 0 || !strings.Contains(stdout.String(), "deleted log events (id 2)") {
		t.Errorf("log delete, confirmed: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	must("log", "delete", "orders", "--yes")
	fail(1, `log "orders" does not exist`, "log", "delete", "orders", "--yes")
	fail(2, `"default" cannot be deleted`, "log", "delete", "default", "--yes")
	s.mu.Lock()
	if !slices.Equal(s.deleted, []string{"events", "orders"}) {
		t.Errorf("deleted %q, want events, then orders", s.deleted)
	}
	s.mu.Unlock()
}

// TestLogCommandsOnOlderServer checks that a node older than named logs
// gets a clear error, and still serves the default log.
func TestLogCommandsOnOlderServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := startLogsServer(t, true)
	for _, args := range [][]string{
		{"log", "create", "orders"},
		{"log", "list"},
		{"log", "info", "orders"},
		{"log", "delete", "orders", "--yes"},
		{"append", "--log", "orders", "x"},
		{"read", "--log", "orders"},
		{"trim", "--log", "orders", "--below", "3"},
	} {
		out, errOut, code := runCmd(ctx, append(args, "--addrs", s.addr, "--timeout", "10s")...)
		if code != 1 || out != "" || !strings.Contains(errOut, "this server does not serve named logs") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("node %s: exit status %d, stdout %q, stderr %q; want a failure saying the server does not serve named logs", strings.Join(args, " "), code, out, errOut)
		}
	}
	if out, errOut, code := runCmd(ctx, "append", "--log", "default", "x", "--addrs", s.addr); code != 0 || out != "1\n" {
		t.Errorf("append --log default to an older node: exit status %d, stdout %q, stderr %q", code, out, errOut)
	}
}
