package node

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// get fetches path from n's admin address and returns the status code
// and the body.
func get(t *testing.T, n *Node, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// The admin address serves /metrics in the Prometheus text format with the
// server's, the store's and raft's metrics, /status as JSON, and /health
// and /ready.
func TestAdminEndpoints(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.AdminAddr = "127.0.0.1:0" })
	leader := c.waitLeader()
	appendN(t, dial(t, leader), "m", 10)
	code, body := get(t, leader, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`raftlog_requests_total{code="ok",op="Append"} 10`,
		`raftlog_request_duration_seconds_bucket{op="Append",le=`,
		`raftlog_client_connections 1`,
		// One append at a time: each is proposed alone, at once.
		`raftlog_append_batch_records_sum 10`,
		`raftlog_append_batch_records_count 10`,
		`raftlog_store_fsync_duration_seconds_bucket{le=`,
		`raftlog_store_entries_per_fsync_count`,
		`raftlog_store_appended_bytes_total`,
		`raftlog_store_segments 1`,
		`raftlog_store_pinned_bytes{group="1"}`,
		`raftlog_raft_leader 1`,
		`raftlog_raft_commit_index`,
		`raftlog_raft_commitNumLogs`, // bridged from hashicorp/raft's go-metrics
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// raft's metrics updated once per entry are not bridged: they cost
	// a leader more CPU than they tell.
	for _, unwanted := range []string{"raftlog_raft_apply", "raftlog_raft_commitTime"} {
		if strings.Contains(body, unwanted) {
			t.Errorf("/metrics has %s, updated once per record", unwanted)
		}
	}
	code, body = get(t, leader, "/status")
	var st struct {
		Node struct {
			Role     string `json:"role"`
			LeaderID string `json:"leader_id"`
		} `json:"node"`
		Members []adminMember     `json:"members"`
		Clients map[string]string `json:"client_addrs"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != http.StatusOK {
		t.Fatalf("/status: %d %v\n%s", code, err, body)
	}
	if st.Node.Role != "Leader" || len(st.Members) != 3 || st.Clients[leader.ID()] != leader.ClientAddr() {
		t.Fatalf("/status: %s", body)
	}
	for _, n := range c.nodes {
		if code, _ := get(t, n, "/health"); code != http.StatusOK {
			t.Errorf("%s /health: %d", n.ID(), code)
		}
		if code, _ := get(t, n, "/ready"); code != http.StatusOK {
			t.Errorf("%s /ready: %d", n.ID(), code)
		}
	}
}

// With Config.Pprof the admin port serves runtime profiles under
// /debug/pprof/; without it, they are not there (404), and Start refuses
// Pprof without an admin address.
func TestAdminPprof(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) { cfg.AdminAddr = "127.0.0.1:0" })
	off := c.waitLeader()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		if code, _ := get(t, off, path); code != http.StatusNotFound {
			t.Errorf("pprof off: GET %s: %d, want 404", path, code)
		}
	}

	on := newTestCluster(t, 1, func(cfg *Config) { cfg.AdminAddr = "127.0.0.1:0"; cfg.Pprof = true }).waitLeader()
	code, body := get(t, on, "/debug/pprof/")
	if code != http.StatusOK || !strings.Contains(body, "goroutine") || !strings.Contains(body, "heap") {
		t.Fatalf("/debug/pprof/: %d %q", code, body)
	}
	code, body = get(t, on, "/debug/pprof/goroutine?debug=2")
	if code != http.StatusOK || !strings.Contains(body, "goroutine ") || !strings.Contains(body, "net/http.(*Server).Serve") {
		t.Fatalf("/debug/pprof/goroutine?debug=2: %d, %d bytes", code, len(body))
	}
	// The binary profiles are gzipped protocol buffers, what go tool pprof reads.
	for _, path := range []string{"/debug/pprof/heap?gc=1", "/debug/pprof/profile?seconds=1"} {
		code, body = get(t, on, path)
		if code != http.StatusOK || !strings.HasPrefix(body, "\x1f\x8b") {
			t.Errorf("GET %s: %d, %d bytes starting %q, want a gzipped profile", path, code, len(body), body[:min(len(body), 8)])
		}
	}
	for path, want := range map[string]int{
		"/debug/pprof/nosuch":            http.StatusNotFound,
		"/debug/pprof/profile?seconds=0": http.StatusBadRequest,
		"/debug/pprof/heap?debug=x":      http.StatusBadRequest,
	} {
		if code, body := get(t, on, path); code != want {
			t.Errorf("GET %s: %d %q, want %d", path, code, body, want)
		}
	}

	cfg := testConfig(t, t.TempDir(), "n1")
	cfg.Pprof = true
	if _, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "Pprof needs an admin address") {
		t.Fatalf("Start with Pprof and no admin address: %v", err)
	}
}
