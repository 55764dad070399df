package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/backup"
	"github.com/raftlog/raftlog/client"
)

// upToIndex returns the records of m at or below index.
func upToIndex(m map[uint64]string, index uint64) map[uint64]string {
	out := map[uint64]string{}
	for i, v := range m {
		if i <= index {
			out[i] = v
		}
	}
	return out
}

// sameRecordMaps fails unless got holds exactly want.
// waitLogRecordsOn reads log's records from index from on node p alone
// (stale reads) until done says they are all there, within two minutes,
// and returns them by index; when says at what point, for a failure.
func waitLogRecordsOn(t *testing.T, h *serveHarness, p *procNode, log string, from uint64, when string, done func(map[uint64]string) bool) map[uint64]string {
	t.Helper()
	var got map[uint64]string
	waitUntil(t, 2*time.Minute, when+": "+p.id+" holding log "+log, func() bool {
		out, _, code := h.cli("read", "--log", log, "--addrs", p.client, "--stale", "--from", strconv.FormatUint(from, 10), "--timeout", "5s")
		if code != 0 || strings.TrimSpace(out) == "" {
			return false
		}
		i, d := parseRecords(t, out)
		got = map[uint64]string{}
		for k, x := range i {
			got[x] = d[k]
		}
		return done(got)
	})
	return got
}

func sameRecordMaps(t *testing.T, what string, got, want map[uint64]string) {
	t.Helper()
	for i, w := range want {
		if got[i] != w {
			t.Fatalf("%s: index %d holds %q, want %q", what, i, got[i], w)
		}
	}
	for i, g := range got {
		if _, ok := want[i]; !ok {
			t.Fatalf("%s: index %d holds %q, want nothing", what, i, g)
		}
	}
}

// TestNamedLogBackupRestoreProcesses: "node backup --log" of a named log
// of a 3-node cluster of processes, under appends, after a trim; the log
// is deleted and "node restore --log" brings it back into the running
// cluster: every record at its original index on every node, a client
// session's retried append answered with its original index, appends
// after the backup's index, and all of it after a restart of every node.
// A restore over an existing log, of a damaged file, or of a named log's
// backup into a new cluster's data dir is refused.
func TestNamedLogBackupRestoreProcesses(t *testing.T) {
	h := newServeHarness(t)
	nodes, addrs := startProcCluster(t, h, 3, "n", "")
	h.mustCLI("log", "create", "orders", "--replicas", "3", "--retention-age", "7d", "--addrs", addrs)
	var idx []uint64
	for _, f := range strings.Fields(h.mustCLI("append", "--log", "orders", "--addrs", addrs, "--timeout", "30s", "first", "second", "third")) {
		i, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		idx = append(idx, i)
	}
	floor := idx[1]
	h.mustCLI("trim", "--log", "orders", "--addrs", addrs, "--below", strconv.FormatUint(floor, 10))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sess, err := client.Dial(ctx, strings.Split(addrs, ","), &client.Options{ClientID: "app", RetryTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sessIdx, err := sess.Log("orders").Append(ctx, []byte("session record"))
	sess.Close()
	if err != nil {
		t.Fatal(err)
	}
	appendBulkCLI(t, h, addrs, 1000, "--log", "orders") // about 4 MiB: several stream items

	c, err := client.Dial(ctx, strings.Split(addrs, ","), &client.Options{RetryTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	load := startLogLoad(t, c, "orders", 20000)
	waitUntil(t, 2*time.Minute, "200 load appends", func() bool { return load.count() >= 200 })
	load.mu.Lock()
	before := map[uint64]string{}
	for i, r := range load.acked {
		before[i] = r
	}
	load.mu.Unlock()
	file := filepath.Join(h.dir, "orders.backup")
	out := h.mustCLI("backup", "--log", "orders", "--addrs", addrs, "--out", file)
	n := load.count()
	waitUntil(t, 2*time.Minute, "appends after the backup", func() bool { return load.count() >= n+20 })
	load.halt()
	t.Logf("%s(%d load appends acknowledged before the backup began, %d in all)", out, len(before), load.count())
	if !strings.HasPrefix(out, "backup of log orders of index") {
		t.Fatalf("backup --log: %q", out)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	hdr, _, err := backup.Verify(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Floor != floor || hdr.Log.Name != "orders" || hdr.Log.Replicas != 3 || hdr.Log.RetentionAge != 7*24*time.Hour {
		t.Fatalf("backup header %+v, want floor %d and log orders with 3 replicas, 7d", hdr, floor)
	}
	for i, r := range before {
		if i > hdr.Index {
			t.Fatalf("%q was acknowledged before the backup began, at index %d, past the backup's %d", r, i, hdr.Index)
		}
	}
	if msg := h.mustCLI("restore", "--check", "--in", file); !strings.Contains(msg, "of log orders (3 replicas, retention 7d), of index "+strconv.FormatUint(hdr.Index, 10)) {
		t.Fatalf("restore --check: %s", msg)
	}
	want := upToIndex(readRecords(t, h, addrs, floor, "--log", "orders"), hdr.Index)
	for i, r := range load.acked {
		if got, ok := want[i]; i <= hdr.Index && (!ok || got != r) {
			t.Fatalf("the log holds %q at %d, where %q was acknowledged", got, i, r)
		}
	}
	if want[sessIdx[0]] != "session record" {
		t.Fatalf("the session's record is not at %d", sessIdx[0])
	}

	// Refusals: over an existing log; a damaged file (nothing created);
	// a named log's backup into a new cluster's data dir.
	if _, errOut, code := h.cli("restore", "--log", "orders", "--in", file, "--addrs", addrs); code != 1 || !strings.Contains(errOut, `log "orders" exists already`) {
		t.Fatalf("a restore over an existing log: exit status %d, stderr %q", code, errOut)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(h.dir, "truncated.backup")
	if err := os.WriteFile(bad, b[:len(b)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := h.cli("restore", "--log", "bad", "--in", bad, "--addrs", addrs); code != 1 || !strings.Contains(errOut, "truncated") || !strings.Contains(errOut, "byte") {
		t.Fatalf("a restore of a truncated file: exit status %d, stderr %q", code, errOut)
	}
	if out := h.mustCLI("log", "list", "--addrs", addrs); strings.Contains(out, "bad") {
		t.Fatalf("a refused restore left a log: %s", out)
	}
	dir := filepath.Join(h.dir, "offline")
	if _, errOut, code := h.cli("restore", "--in", file, "--id", "n1", "--data-dir", dir, "--bootstrap", "n1=127.0.0.1:1"); code != 1 || !strings.Contains(errOut, "is of a named log") {
		t.Fatalf("a named log's backup into a data dir: exit status %d, stderr %q", code, errOut)
	}

	// Delete the log, and restore it under its name.
	h.mustCLI("log", "delete", "orders", "--yes", "--addrs", addrs)
	waitUntil(t, time.Minute, "log orders gone", func() bool {
		return !strings.Contains(h.mustCLI("log", "list", "--addrs", addrs), "orders")
	})
	out = h.mustCLI("restore", "--log", "orders", "--in", file, "--addrs", addrs)
	t.Logf("restore --log: %s", strings.TrimSpace(out))
	m := regexp.MustCompile(`on (\d) of its 3 replicas now; appends go after index (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("restore --log says %q", out)
	}
	restoreIdx, _ := strconv.ParseUint(m[2], 10, 64)
	if restoreIdx <= hdr.Index {
		t.Fatalf("the restore's index %d is not past the backup's %d", restoreIdx, hdr.Index)
	}

	check := func(when string) {
		t.Helper()
		for _, p := range nodes {
			got := waitLogRecordsOn(t, h, p, "orders", floor, when, func(got map[uint64]string) bool {
				return len(upToIndex(got, hdr.Index)) >= len(want)
			})
			sameRecordMaps(t, when+": "+p.id, upToIndex(got, hdr.Index), want)
		}
	}
	check("after the restore")

	// The session's retry is known; new appends go after the restore.
	again, err := client.Dial(ctx, strings.Split(addrs, ","), &client.Options{ClientID: "app", RetryTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	dup, err := again.Log("orders").Append(ctx, []byte("session record"))
	again.Close()
	if err != nil || len(dup) != 1 || dup[0] != sessIdx[0] {
		t.Fatalf("the session's retried append: %v, %v; want its original index %d", dup, err, sessIdx[0])
	}
	next, err := strconv.ParseUint(strings.TrimSpace(h.mustCLI("append", "--log", "orders", "--addrs", addrs, "after the restore")), 10, 64)
	if err != nil || next <= restoreIdx {
		t.Fatalf("an append after the restore: index %d (%v), want one past %d", next, err, restoreIdx)
	}

	for _, p := range nodes {
		h.stop(p)
	}
	for _, p := range nodes {
		h.start(p, "--bootstrap", bootstrapOf(nodes))
	}
	check("after a restart of every node")
	if got := readRecords(t, h, addrs, next, "--log", "orders"); got[next] != "after the restore" {
		t.Fatalf("after a restart: %q at %d, want %q", got[next], next, "after the restore")
	}
	for _, p := range nodes {
		h.stop(p)
	}
}

// TestClusterRestoreWithNamedLogs is an operator's disaster recovery: a
// cluster with two named logs is backed up (the default log, and one named
// log on its own) and a new cluster is restored from the default log's
// backup. The default log's backup carries the catalog but none of the
// named logs' records: the restore says which logs it leaves out and how
// to bring them back, and the new cluster starts without them. It used to
// keep them in its catalog, leaderless for good, their names taken, so the
// named log's own backup could not be restored either. Restored from that
// backup, the named log reads back as it was; the other is created again.
func TestClusterRestoreWithNamedLogs(t *testing.T) {
	h := newServeHarness(t)
	old, oldAddrs := startProcCluster(t, h, 3, "old", "")
	h.mustCLI("log", "create", "orders", "--replicas", "3", "--addrs", oldAddrs)
	h.mustCLI("log", "create", "audit", "--replicas", "1", "--addrs", oldAddrs)
	h.mustCLI("append", "--addrs", oldAddrs, "--timeout", "30s", "d1", "d2")
	h.mustCLI("append", "--log", "orders", "--addrs", oldAddrs, "--timeout", "30s", "o1", "o2", "o3")
	h.mustCLI("append", "--log", "audit", "--addrs", oldAddrs, "--timeout", "30s", "a1")
	ordersFile := filepath.Join(h.dir, "orders.backup")
	clusterFile := filepath.Join(h.dir, "cluster.backup")
	h.mustCLI("backup", "--log", "orders", "--addrs", oldAddrs, "--out", ordersFile)
	h.mustCLI("backup", "--addrs", oldAddrs, "--out", clusterFile)
	want := readRecords(t, h, oldAddrs, 1, "--log", "orders")
	for _, p := range old {
		h.stop(p)
	}

	if out := h.mustCLI("restore", "--check", "--in", clusterFile); !strings.Contains(out, "named logs audit, orders") {
		t.Fatalf("restore --check does not say which named logs a restore starts without:\n%s", out)
	}
	out := h.mustCLI("restore", "--in", clusterFile, "--id", "n1", "--data-dir", filepath.Join(h.dir, "scratch"), "--bootstrap", "n1=127.0.0.1:1")
	if !strings.Contains(out, "2 named logs (audit, orders)") || !strings.Contains(out, "node restore --log NAME") {
		t.Fatalf("restore does not say which named logs the new cluster starts without, and how to restore them:\n%s", out)
	}
	nodes, addrs := startProcCluster(t, h, 3, "new", clusterFile)
	if got := readRecords(t, h, addrs, 1); len(got) < 2 {
		t.Fatalf("the restored default log holds %d records, want the 2 appended", len(got))
	}
	if list := h.mustCLI("log", "list", "--addrs", addrs); strings.Contains(list, "orders") || strings.Contains(list, "audit") {
		t.Fatalf("the restored cluster lists named logs it holds no records of:\n%s", list)
	}
	out = h.mustCLI("restore", "--log", "orders", "--in", ordersFile, "--addrs", addrs)
	t.Logf("restore --log orders: %s", strings.TrimSpace(out))
	for _, p := range nodes {
		got := waitLogRecordsOn(t, h, p, "orders", 1, "after the restore", func(got map[uint64]string) bool { return len(got) >= len(want) })
		sameRecordMaps(t, p.id, got, want)
	}
	h.mustCLI("log", "create", "audit", "--replicas", "1", "--addrs", addrs)
	h.mustCLI("append", "--log", "audit", "--addrs", addrs, "--timeout", "30s", "a2")
	for _, p := range nodes {
		h.stop(p)
	}
}
