package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReadyAfterRestartOnceReplayed restarts the leader of a 3-node
// cluster of "node serve" processes, as a rolling upgrade does, and probes
// its /ready and /status from its first moment: /ready may answer 200 only
// once the node has applied every record acknowledged before it stopped.
//
// An operator's tryout (2026-12-04): a restarted node answered /ready 200
// for about a second while its /status showed commit and applied index 0
// (raft learns the commit index from the leader's first AppendEntries with
// entries or a commit index, not from heartbeats), so a rolling upgrade
// waiting for /ready, or for "applied equal to commit" as the README said,
// went on to the next node at once, and stale reads from the node returned
// an empty log.
func TestReadyAfterRestartOnceReplayed(t *testing.T) {
	h := newServeHarness(t)
	nodes, addrs := startProcCluster(t, h, 3, "n", "")
	acked := h.appendBatches(addrs, "", "r", 20)
	var rows []statusJSON
	if out := h.mustCLI("status", "--addrs", addrs, "--json"); json.Unmarshal([]byte(out), &rows) != nil || len(rows) == 0 {
		t.Fatalf("status --json: %s", out)
	}
	var p *procNode
	for _, n := range nodes {
		if n.id == rows[0].LeaderID {
			p = n
		}
	}
	if p == nil {
		t.Fatalf("no node is the leader %q", rows[0].LeaderID)
	}
	h.stop(p)
	// While it is down, as an upgrade replaces its binary, the others go
	// on: it comes back behind, to a leader whose replication to it has
	// been failing and backing off.
	var others []string
	for _, n := range nodes {
		if n != p {
			others = append(others, n.client)
		}
	}
	acked = append(acked, h.appendBatches(strings.Join(others, ","), "", "down", 10)...)
	last := slices.Max(acked)
	down := time.NewTimer(2 * time.Second) // as long as an upgrade may keep it down
	<-down.C
	admin := freeAddrs(t, 1)[0]
	before, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	h.start(p, "--admin-addr", admin)
	hc := &http.Client{Timeout: 2 * time.Second}
	get := func(path string) (int, []byte) {
		resp, err := hc.Get("http://" + admin + path)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	var notReady []string // what /ready said before it was ready
	waitUntil(t, time.Minute, p.id+" ready after its restart", func() bool {
		code, body := get("/ready")
		if code != http.StatusOK && code != 0 && (len(notReady) == 0 || notReady[len(notReady)-1] != string(body)) {
			notReady = append(notReady, string(body))
		}
		return code == http.StatusOK
	})
	code, body := get("/status")
	var s struct {
		Node struct {
			Role    string `json:"role"`
			Commit  uint64 `json:"commit_index"`
			Applied uint64 `json:"applied_index"`
		} `json:"node"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &s) != nil {
		t.Fatalf("/status: %d %s", code, body)
	}
	if s.Node.Applied < last {
		t.Fatalf("%s answered /ready 200 while its /status shows role %s, commit index %d, applied index %d: "+
			"below %d, the last record acknowledged before its restart (before that /ready said %q)",
			p.id, s.Node.Role, s.Node.Commit, s.Node.Applied, last, notReady)
	}
	t.Logf("%s ready with applied index %d (>= %d); before that /ready said %q", p.id, s.Node.Applied, last, notReady)
	// Restarted without --bootstrap, it is not a new node waiting to be
	// added, and does not say so.
	if after, err := os.ReadFile(p.log); err != nil || strings.Contains(string(after[len(before):]), "a new node waits") {
		t.Fatalf("%s, restarted on its data dir, logs that it is a new node waiting for 'node join' (%v):\n%s", p.id, err, after[len(before):])
	}
	out := h.mustCLI("read", "--stale", "--addrs", p.client, "--from", "0")
	if idx, _ := parseRecords(t, out); len(idx) != len(acked) {
		t.Fatalf("a stale read from %s once ready returned %d records, want %d", p.id, len(idx), len(acked))
	}
}
