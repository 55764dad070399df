package node

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/raftlog/raftlog/transport"
)

func TestSpaceVerdict(t *testing.T) {
	now := time.Now()
	low := spaceReport{free: 1 << 20, reserve: 128 << 20, below: true, at: now}
	ok := spaceReport{free: 1 << 30, reserve: 128 << 20, at: now}
	stale := low
	stale.at = now.Add(-2 * spaceReportTTL)
	voters := []string{"n1", "n2", "n3"}
	for _, tc := range []struct {
		name    string
		reports map[string]spaceReport
		want    string // "" for no refusal, else the start of the message
	}{
		{"all above", map[string]spaceReport{"n1": ok, "n2": ok, "n3": ok}, ""},
		{"one follower below", map[string]spaceReport{"n1": ok, "n2": low, "n3": ok}, ""},
		{"both followers below", map[string]spaceReport{"n1": ok, "n2": low, "n3": low}, "n2, n3 are below their free-space reserve (n2: 1 MiB free, reserve 128 MiB, n3:"},
		{"leader below", map[string]spaceReport{"n1": low, "n2": ok, "n3": ok}, "n1 is below its free-space reserve"},
		{"a stale report", map[string]spaceReport{"n1": ok, "n2": low, "n3": stale}, ""},
		{"followers unknown", map[string]spaceReport{"n1": ok}, ""},
	} {
		v := spaceVerdict("n1", voters, tc.reports, now)
		switch {
		case tc.want == "" && v != nil:
			t.Errorf("%s: refused: %v", tc.name, v)
		case tc.want != "" && (v == nil || v.Code != transport.CodeNoSpace || !strings.HasPrefix(v.Message, tc.want)):
			t.Errorf("%s: %v, want NoSpace: %s...", tc.name, v, tc.want)
		}
	}
}

// appendOnce sends one append straight to n, under a short deadline.
func appendOnce(conn *transport.Conn, client string, seq uint64, rec string) (*transport.AppendResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var resp transport.AppendResponse
	err := conn.Call(ctx, transport.OpAppend, &transport.AppendRequest{ClientID: client, Seq: seq, Base: seq, Records: [][]byte{[]byte(rec)}}, &resp)
	return &resp, err
}

// waitFor polls cond every 50 ms until it holds or d passes.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not within %v; last: %s", what, d, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// When both followers are below their reserve, the leader refuses appends
// with NoSpace naming them, serves reads and trims, says so in /ready (which
// stays 200: the leader serves reads) and /status and its metrics, and
// takes appends again once space is freed.
func TestNoSpaceOnFollowers(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.FaultInjection = true; cfg.AdminAddr = "127.0.0.1:0" })
	leader := c.waitLeader()
	var followers []*Node
	for _, n := range c.nodes {
		if n != leader {
			followers = append(followers, n)
		}
	}
	conn := dial(t, leader)
	seq := uint64(1)
	if _, err := appendOnce(conn, "space", seq, "before"); err != nil {
		t.Fatal(err)
	}
	for _, f := range followers {
		f.faults.fs.noSpace.Store(true)
		f.space.invalidate()
	}
	names := []string{followers[0].ID(), followers[1].ID()}
	if names[0] > names[1] {
		names[0], names[1] = names[1], names[0]
	}
	want := fmt.Sprintf("%s, %s are below their free-space reserve", names[0], names[1])
	waitUntil(t, 10*time.Second, "NoSpace", func() (bool, string) {
		seq++
		_, err := appendOnce(conn, "space", seq, "during")
		return transport.ErrorCode(err) == transport.CodeNoSpace && strings.Contains(err.Error(), want), fmt.Sprint(err)
	})
	if _, err := call[transport.ReadResponse](t, conn, transport.OpRead, &transport.ReadRequest{From: 1}); err != nil {
		t.Fatalf("read while refusing appends: %v", err)
	}
	tr, err := call[transport.TrimResponse](t, conn, transport.OpTrim, &transport.TrimRequest{Below: 2})
	if err != nil {
		t.Fatalf("trim while refusing appends: %v", err)
	}
	if st := leader.Status(); !strings.Contains(st.Refusing, want) {
		t.Fatalf("leader's status says it refuses %q", st.Refusing)
	}
	if st := followers[0].Status(); !st.Store.BelowReserve {
		t.Fatalf("follower's status: %+v", st.Store)
	}
	if code, body := get(t, leader, "/ready"); code != http.StatusOK || !strings.Contains(body, "refusing appends: "+want) {
		t.Fatalf("leader's /ready: %d %s", code, body)
	}
	if _, body := get(t, leader, "/metrics"); !strings.Contains(body, "\nraftlog_appends_refusing 1\n") {
		t.Fatalf("leader's raftlog_appends_refusing is not 1")
	}
	if code, body := get(t, followers[0], "/health"); code != http.StatusOK || !strings.Contains(body, "below its free-space reserve") {
		t.Fatalf("follower's /health: %d %s", code, body)
	}
	if v := counterValue(leader.metrics.refusedAppends.WithLabelValues(refusedSpace)); v < 1 {
		t.Fatalf("appends refused for space: %v", v)
	}

	for _, f := range followers {
		f.faults.fs.noSpace.Store(false)
		f.space.invalidate()
	}
	var resp *transport.AppendResponse
	waitUntil(t, 10*time.Second, "appends accepted again", func() (bool, string) {
		seq++
		resp, err = appendOnce(conn, "space", seq, "after")
		return err == nil, fmt.Sprint(err)
	})
	if resp.Indexes[0] <= tr.Index {
		t.Fatalf("append after the trim at %d stored at %v", tr.Index, resp.Indexes)
	}
	if code, body := get(t, leader, "/ready"); code != http.StatusOK || strings.Contains(body, "refusing") {
		t.Fatalf("leader's /ready after space was freed: %d %s", code, body)
	}
	if _, body := get(t, leader, "/metrics"); !strings.Contains(body, "\nraftlog_appends_refusing 0\n") {
		t.Fatalf("leader's raftlog_appends_refusing is not 0 after space was freed")
	}
	for _, f := range followers {
		waitCaughtUp(t, f, resp.Indexes[0])
	}
}

// A follower whose disk fills up fails to store what raft sends it, but
// does not stop; once space is freed it catches up by itself.
func TestFollowerOutOfSpaceRecovers(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.FaultInjection = true; cfg.SegmentSize = 64 << 10 })
	leader := c.waitLeader()
	var full *Node
	for _, n := range c.nodes {
		if n != leader {
			full = n
			break
		}
	}
	full.faults.fs.noSpace.Store(true)
	full.space.invalidate()
	conn := dial(t, leader)
	rec := strings.Repeat("x", 4<<10)
	for seq := uint64(1); seq <= 64; seq++ { // 256 KiB: four segments
		if _, err := appendOnce(conn, "fill", seq, rec); err != nil {
			t.Fatalf("append %d with one follower full: %v", seq, err)
		}
	}
	waitUntil(t, 10*time.Second, "the full follower's store errors", func() (bool, string) {
		v := counterValue(full.metrics.storeErrors.WithLabelValues("no_space"))
		return v > 0, fmt.Sprint(v)
	})
	if full.raft.LastIndex() >= leader.raft.LastIndex() {
		t.Fatalf("the full follower holds index %d, the leader %d", full.raft.LastIndex(), leader.raft.LastIndex())
	}
	full.faults.fs.noSpace.Store(false)
	full.space.invalidate()
	waitCaughtUp(t, full, leader.raft.LastIndex())
	if err := full.Err(); err != nil {
		t.Fatalf("the follower stopped: %v", err)
	}
	select {
	case <-full.Done():
		t.Fatal("the follower stopped")
	default:
	}
}

// counterValue reads a counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
