package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// refusedLine is the /metrics line of raftlog_requests_refused_total for
// op and reason, without its value.
func refusedLine(op, reason string) string {
	return fmt.Sprintf("raftlog_requests_refused_total{op=%q,reason=%q} ", op, reason)
}

// metricsHave fails the test unless n's /metrics has every one of lines.
func metricsHave(t *testing.T, n *Node, lines ...string) {
	t.Helper()
	code, body := get(t, n, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, l := range lines {
		if !strings.Contains(body, "\n"+l+"\n") {
			t.Errorf("/metrics lacks the line %q", l)
		}
	}
}

// rawConn dials n's client port for hand-made frames.
func rawConn(t *testing.T, n *Node) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	return nc
}

// Every kind of refusal a client can meet is counted in
// raftlog_requests_refused_total by op and reason: a malformed request or
// frame, one too large, one beyond the connection's in-flight limit or the
// node's connection limit, an unknown op. (Permission refusals are counted
// there too: TestAdminOperationsNeedAdmin.) The counters an operator
// alerts on are there, at 0, before anything happens.
func TestRefusalMetrics(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) {
		cfg.AdminAddr = "127.0.0.1:0"
		cfg.MaxConns = 4
		cfg.Limits = transport.Limits{MaxRecordSize: 1024, MaxInFlight: 1}
	})
	n := c.waitLeader()
	metricsHave(t, n,
		`raftlog_store_errors_total{kind="io"} 0`,
		`raftlog_store_errors_total{kind="no_space"} 0`,
		`raftlog_appends_refused_total{reason="no_space"} 0`,
		`raftlog_store_failed 0`,
		`raftlog_appends_refusing 0`,
		refusedLine("Trim", "permission")+"0",
		refusedLine("Append", "too_large")+"0",
		refusedLine("none", "busy")+"0",
		refusedLine("none", "unsupported")+"0",
	)

	a := dial(t, n)
	_, err := call[transport.AppendResponse](t, a, transport.OpAppend, &transport.AppendRequest{Records: [][]byte{make([]byte, 1025)}})
	if transport.ErrorCode(err) != transport.CodeTooLarge {
		t.Fatalf("record over the limit: %v, want TooLarge", err)
	}
	_, err = call[transport.ReadResponse](t, a, transport.OpRead, &transport.ReadRequest{MaxRecords: 1 << 20})
	if transport.ErrorCode(err) != transport.CodeBadRequest {
		t.Fatalf("read of more records than allowed: %v, want BadRequest", err)
	}
	// A tail holds the connection's one slot.
	ctx, cancel := context.WithCancel(context.Background())
	st, err := a.OpenStream(ctx, transport.OpTail, &transport.TailRequest{From: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = call[transport.StatusResponse](t, a, transport.OpStatus, &transport.StatusRequest{})
	if transport.ErrorCode(err) != transport.CodeBusy {
		t.Fatalf("status beside a tail, one request in flight allowed: %v, want Busy", err)
	}
	cancel()
	st.Close()

	// A frame of length 0: the node answers and closes the connection.
	garbage := rawConn(t, n)
	garbage.Write([]byte{0, 0, 0, 0})
	for {
		if _, err := transport.ReadFrame(garbage, 0); err != nil {
			break
		}
	}
	waitFor(t, "the node closes the malformed frame's connection", func() bool {
		_, body := get(t, n, "/metrics")
		return strings.Contains(body, "\nraftlog_client_connections 1\n")
	})
	// An op the node does not know: it answers and keeps the connection.
	newer := rawConn(t, n)
	body, _ := transport.EncodeBody(&transport.StatusRequest{})
	if err := transport.WriteFrame(newer, transport.Frame{Type: transport.FrameRequest, Op: 99, ID: 1, Body: body}); err != nil {
		t.Fatal(err)
	}
	if f, err := transport.ReadFrame(newer, 0); err != nil || f.Type != transport.FrameError {
		t.Fatalf("unknown op: %v %v, want an Error frame", f.Type, err)
	}
	// a, newer and two more are the node's limit: the next is refused.
	for range 2 {
		if _, err := call[transport.StatusResponse](t, dial(t, n), transport.OpStatus, &transport.StatusRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = call[transport.StatusResponse](t, dial(t, n), transport.OpStatus, &transport.StatusRequest{})
	if transport.ErrorCode(err) != transport.CodeBusy {
		t.Fatalf("connection over the limit: %v, want Busy", err)
	}

	metricsHave(t, n,
		refusedLine("Append", "too_large")+"1",
		refusedLine("Read", "malformed")+"1",
		refusedLine("Status", "busy")+"1",
		refusedLine("none", "malformed")+"1",
		refusedLine("none", "unsupported")+"1",
		refusedLine("none", "busy")+"1",
		"raftlog_client_connections_refused_total 1",
		// What the handler answered is in raftlog_requests_total, and no
		// refusal is.
		`raftlog_requests_total{code="ok",op="Status"} 2`,
	)
}

// raft's per-peer series carry the peer in the label peer_id; no metric
// name holds a node id.
func TestRaftMetricsPeerLabel(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.AdminAddr = "127.0.0.1:0" })
	leader := c.waitLeader()
	appendN(t, dial(t, leader), "m", 5)
	code, body := get(t, leader, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for id := range c.nodes {
		if id == leader.ID() {
			continue
		}
		for _, want := range []string{
			`raftlog_raft_replication_appendEntries_rpc_count{peer_id="` + id + `"}`,
			`raftlog_raft_replication_appendEntries_logs{peer_id="` + id + `"}`,
			`raftlog_raft_replication_heartbeat_count{peer_id="` + id + `"}`,
		} {
			if !strings.Contains(body, "\n"+want+" ") {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		for _, part := range strings.Split(name, "_") {
			if _, ok := c.nodes[part]; ok {
				t.Errorf("metric %s names node %s", name, part)
			}
		}
	}
}

// TestHandlerCopiesAppendRecords: the handler a node serves clients with,
// metrics wrapper included, tells transport.Serve that it copies appended
// records (replica.Replica.Append builds raft commands from copies), so
// that request bodies are read into reused buffers.
func TestHandlerCopiesAppendRecords(t *testing.T) {
	var h transport.Handler = metricsHandler{h: &handler{}}
	c, ok := h.(transport.AppendCopier)
	if !ok || !c.CopiesAppendRecords() {
		t.Fatal("the node's client handler does not say it copies appended records: every append body is a fresh allocation")
	}
}
