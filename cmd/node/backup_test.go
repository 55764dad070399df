package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/backup"
	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// startProcCluster starts n "node serve" processes that share a
// --bootstrap list, in data dirs named prefix1..n, and returns them and
// their client addresses, comma-separated. With restoreFrom set, each data
// dir is first written by "node restore" from that backup.
func startProcCluster(t *testing.T, h *serveHarness, n int, prefix, restoreFrom string) ([]*procNode, string) {
	t.Helper()
	var nodes []*procNode
	addrs := freeAddrs(t, 2*n)
	for i := 1; i <= n; i++ {
		nodes = append(nodes, h.procNode(fmt.Sprintf("n%d", i), prefix+strconv.Itoa(i), addrs[2*i-2], addrs[2*i-1]))
	}
	return nodes, startProcNodes(t, h, nodes, restoreFrom)
}

// procNode describes a node id with raft and client addresses, whose
// data dir and log are named name in the harness's directory.
func (h *serveHarness) procNode(id, name, raft, client string) *procNode {
	return &procNode{id: id, raft: raft, client: client, dir: filepath.Join(h.dir, name), log: filepath.Join(h.dir, name+".log")}
}

// startProcNodes starts nodes as a new cluster (restored from the backup
// restoreFrom, unless empty), waits until each answers status, and returns
// their client addresses for --addrs.
func startProcNodes(t *testing.T, h *serveHarness, nodes []*procNode, restoreFrom string) string {
	t.Helper()
	var clients []string
	for _, p := range nodes {
		clients = append(clients, p.client)
	}
	bootstrap := bootstrapOf(nodes)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range nodes {
				h.dumpLog(p)
			}
		}
	})
	for _, p := range nodes {
		if restoreFrom != "" {
			p.restored = h.mustCLI("restore", "--in", restoreFrom, "--id", p.id, "--data-dir", p.dir, "--bootstrap", bootstrap)
			t.Logf("restore %s: %s", p.id, strings.TrimSpace(p.restored))
		}
		h.start(p, "--bootstrap", bootstrap)
	}
	for _, p := range nodes {
		waitUntil(t, 2*time.Minute, p.id+" answering status", func() bool {
			select {
			case <-p.exited:
				t.Fatalf("%s exited before it answered status", p.id)
			default:
			}
			out, _, code := h.cli("status", "--addrs", p.client, "--json", "--timeout", "2s")
			return code == 0 && strings.Contains(out, `"node_id": "`+p.id+`"`)
		})
	}
	return strings.Join(clients, ",")
}

// bootstrapOf is the --bootstrap list of nodes: id=raft address, comma
// separated.
func bootstrapOf(nodes []*procNode) string {
	var peers []string
	for _, p := range nodes {
		peers = append(peers, p.id+"="+p.raft)
	}
	return strings.Join(peers, ",")
}

// waitUntil polls cond every 20 ms until it holds, for at most d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		timer := time.NewTimer(20 * time.Millisecond)
		<-timer.C
	}
}

// clientLoad appends records from a few goroutines through the Go client
// until stopped (at most max appends each) and remembers what was
// acknowledged.
type clientLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	// acked are the records acknowledged, errs the appends that failed;
	// both guarded by mu.
	acked []transport.Record
	errs  []error
}

func startClientLoad(t *testing.T, addrs string, workers, max int) *clientLoad {
	t.Helper()
	c, err := client.Dial(context.Background(), strings.Split(addrs, ","), nil)
	if err != nil {
		t.Fatal(err)
	}
	l := &clientLoad{stop: make(chan struct{})}
	for w := range workers {
		l.wg.Go(func() {
			for i := range max {
				select {
				case <-l.stop:
					return
				default:
				}
				data := fmt.Sprintf("load-%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				idx, err := c.Append(ctx, []byte(data))
				cancel()
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, err)
				} else {
					l.acked = append(l.acked, transport.Record{Index: idx[0], Data: []byte(data)})
				}
				l.mu.Unlock()
			}
		})
	}
	t.Cleanup(func() { l.halt(); c.Close() })
	return l
}

func (l *clientLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// failed reports whether an append failed.
func (l *clientLoad) failed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errs) > 0
}

func (l *clientLoad) ackedSoFar() []transport.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acked)
}

// readRecords reads the records of a cluster from index from to the end,
// with the CLI, by index; extra are more flags of read (--log, --stale).
func readRecords(t *testing.T, h *serveHarness, addrs string, from uint64, extra ...string) map[uint64]string {
	t.Helper()
	args := append([]string{"read", "--addrs", addrs, "--from", strconv.FormatUint(from, 10), "--timeout", "30s"}, extra...)
	idx, data := parseRecords(t, h.mustCLI(args...))
	recs := make(map[uint64]string, len(idx))
	for i, x := range idx {
		recs[x] = data[i]
	}
	return recs
}

// appendBulkCLI appends n lines of about 4 KB with "node append --stdin";
// extra are more flags of append (--log).
func appendBulkCLI(t *testing.T, h *serveHarness, addrs string, n int, extra ...string) {
	t.Helper()
	var bulk strings.Builder
	for i := range n {
		fmt.Fprintf(&bulk, "bulk-%d-%s\n", i, strings.Repeat("x", 4000))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"append", "--addrs", addrs, "--stdin", "--timeout", "30s"}, extra...)
	appendCmd := exec.CommandContext(ctx, h.bin, args...)
	appendCmd.Env, appendCmd.Stdin = cleanEnv(), strings.NewReader(bulk.String())
	if out, err := appendCmd.CombinedOutput(); err != nil {
		t.Fatalf("append --stdin: %v: %s", err, out)
	}
}

// TestBackupRestoreProcesses takes a backup with "node backup" from a
// 3-node cluster of processes under load, restores it with "node restore"
// into a new 3-node cluster, and checks that the new cluster holds every
// record the old one had up to the backup's index, each at its index with
// the same content (every append acknowledged before the backup began
// among them), and takes appends after that index. A damaged backup is
// refused, naming the cause, and leaves no data dir behind.
func TestBackupRestoreProcesses(t *testing.T) {
	h := newServeHarness(t)
	old, oldAddrs := startProcCluster(t, h, 3, "old", "")
	h.mustCLI("append", "--addrs", oldAddrs, "--timeout", "30s", "first", "second", "third")
	h.mustCLI("trim", "--addrs", oldAddrs, "--below", "3") // the backup's floor is then above 1
	// About 8 MiB of lines: the backup is several stream items long.
	appendBulkCLI(t, h, oldAddrs, 2000)
	load := startClientLoad(t, oldAddrs, 4, 20000)
	waitUntil(t, 2*time.Minute, "200 load appends", func() bool { return len(load.ackedSoFar()) >= 200 || load.failed() })
	before := load.ackedSoFar()
	file := filepath.Join(h.dir, "cluster.backup")
	out := h.mustCLI("backup", "--addrs", oldAddrs, "--out", file)
	during := len(load.ackedSoFar()) - len(before)
	n := len(load.ackedSoFar())
	waitUntil(t, 2*time.Minute, "appends after the backup", func() bool { return len(load.ackedSoFar()) >= n+20 || load.failed() })
	load.halt()
	t.Logf("%s(%d load appends acknowledged before the backup began, %d while it ran, %d in all)", out, len(before), during, len(load.ackedSoFar()))
	if during == 0 {
		t.Log("no append was acknowledged while the backup ran")
	}
	if len(load.errs) > 0 {
		t.Fatalf("%d load appends failed, the first: %v", len(load.errs), load.errs[0])
	}
	if _, err := os.Stat(file + ".part"); !os.IsNotExist(err) {
		t.Fatalf("%s.part is left: %v", file, err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	r, err := backup.NewReader(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	hdr := r.Header()
	if hdr.Floor != 3 {
		t.Fatalf("backup floor %d, want 3", hdr.Floor)
	}
	for _, rec := range before {
		if rec.Index > hdr.Index {
			t.Fatalf("%q was acknowledged before the backup began, at index %d, past the backup's %d", rec.Data, rec.Index, hdr.Index)
		}
	}
	if msg := h.mustCLI("restore", "--check", "--in", file); !strings.Contains(msg, fmt.Sprintf("of index %d", hdr.Index)) {
		t.Fatalf("restore --check: %s", msg)
	}
	if _, _, code := h.cli("backup", "--addrs", oldAddrs, "--out", file); code != 1 {
		t.Fatalf("a backup over an existing file: exit status %d, want 1", code)
	}
	// To stdout, the report to stderr.
	stdout, stderr, code := h.cli("backup", "--addrs", oldAddrs, "--out", "-")
	if h2, _, err := backup.Verify(strings.NewReader(stdout)); code != 0 || err != nil || h2.Index < hdr.Index || !strings.HasPrefix(stderr, "backup of index") {
		t.Fatalf("backup --out -: exit status %d, %v, index %d (first backup's %d), stderr %q", code, err, h2.Index, hdr.Index, stderr)
	}

	// The old cluster's records up to the backup's index.
	want := map[uint64]string{}
	for idx, data := range readRecords(t, h, oldAddrs, hdr.Floor) {
		if idx <= hdr.Index {
			want[idx] = data
		}
	}
	for _, rec := range load.ackedSoFar() {
		if got, ok := want[rec.Index]; rec.Index <= hdr.Index && (!ok || got != string(rec.Data)) {
			t.Fatalf("the old cluster holds %q at %d, where %q was acknowledged", got, rec.Index, rec.Data)
		}
	}

	// Damaged backups are refused and leave nothing.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	flipped := slices.Clone(b)
	flipped[len(b)/2] ^= 0x04
	for _, tc := range []struct{ name, want string }{{"truncated", "truncated"}, {"flipped", "corrupt"}} {
		bad := filepath.Join(h.dir, tc.name+".backup")
		content := b[:len(b)-5]
		if tc.name == "flipped" {
			content = flipped
		}
		if err := os.WriteFile(bad, content, 0o644); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(h.dir, "bad-"+tc.name)
		_, errOut, code := h.cli("restore", "--in", bad, "--id", "n1", "--data-dir", dir, "--bootstrap", "n1=127.0.0.1:1")
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Fatalf("restore of a %s backup: exit status %d, stderr %q; want 1 and %q", tc.name, code, errOut, tc.want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("a refused restore left %s: %v", dir, err)
		}
		if _, errOut, code := h.cli("restore", "--check", "--in", bad); code != 1 || !strings.Contains(errOut, tc.want) {
			t.Fatalf("restore --check of a %s backup: exit status %d, stderr %q", tc.name, code, errOut)
		}
	}

	// A new cluster from the backup: the same records at the same indexes.
	restored, newAddrs := startProcCluster(t, h, 3, "new", file)
	if _, errOut, code := h.cli("restore", "--in", file, "--id", "n1", "--data-dir", restored[0].dir, "--bootstrap", "n1=127.0.0.1:1"); code != 1 || !strings.Contains(errOut, "not empty") {
		t.Fatalf("restore into a running node's data dir: exit status %d, stderr %q", code, errOut)
	}
	checkRestoredClusterID(t, h, file, old, restored)
	got := readRecords(t, h, newAddrs, hdr.Floor)
	for idx, data := range want {
		if got[idx] != data {
			t.Fatalf("the restored cluster holds %q at %d, the old one %q", got[idx], idx, data)
		}
	}
	for idx, data := range got {
		if _, ok := want[idx]; !ok && idx <= hdr.Index {
			t.Fatalf("the restored cluster holds %q at %d, the old one nothing", data, idx)
		}
	}
	if _, _, code := h.cli("read", "--addrs", newAddrs, "--from", "1", "--max", "1", "--timeout", "5s"); code != 1 {
		t.Fatalf("a read below the restored floor: exit status %d, want 1 (Trimmed)", code)
	}

	// Appends go on after the backup's index, on every node.
	idx, err := strconv.ParseUint(strings.TrimSpace(h.mustCLI("append", "--addrs", newAddrs, "after the restore")), 10, 64)
	if err != nil || idx <= hdr.Index {
		t.Fatalf("append on the restored cluster: index %d (%v), want one past %d", idx, err, hdr.Index)
	}
	for _, p := range restored {
		waitUntil(t, 2*time.Minute, p.id+" holding the new append", func() bool {
			out, _, code := h.cli("read", "--addrs", p.client, "--stale", "--from", strconv.FormatUint(idx, 10), "--timeout", "5s")
			return code == 0 && out == fmt.Sprintf("%d\tafter the restore\n", idx)
		})
	}
	for _, p := range append(restored, old...) {
		h.stop(p)
	}
}

// restoredIDLine is how "node restore" and "restore --check --bootstrap"
// name the cluster id a restore gives.
var restoredIDLine = regexp.MustCompile(`the new cluster's id is ([0-9a-f]{32})\b`)

// checkRestoredClusterID checks the cluster id of the cluster that "node
// restore" made of file on restored: every member's restore printed the
// same id and wrote it into its data dir's cluster-id file, each node
// reports it in status, "restore --check" with the same --bootstrap list
// prints it too (and another with a --cluster-token), and it is not the id
// of the old cluster, which still runs.
func checkRestoredClusterID(t *testing.T, h *serveHarness, file string, old, restored []*procNode) {
	t.Helper()
	oldID := clusterIDOf(t, h, old)
	var newID string
	for _, p := range restored {
		m := restoredIDLine.FindStringSubmatch(p.restored)
		if m == nil || newID != "" && m[1] != newID {
			t.Fatalf("restore of %s printed %q; want the new cluster's id, the same on every member (%q)", p.id, p.restored, newID)
		}
		newID = m[1]
		if b, err := os.ReadFile(filepath.Join(p.dir, "cluster-id")); err != nil || string(b) != newID+"\n" {
			t.Fatalf("%s's cluster-id file: %q, %v; want %s", p.id, b, err, newID)
		}
	}
	if newID == oldID {
		t.Fatalf("the restored cluster has the old cluster's id %s", oldID)
	}
	if got := clusterIDOf(t, h, restored); got != newID {
		t.Fatalf("the restored nodes report cluster id %s, the restore printed %s", got, newID)
	}
	check := h.mustCLI("restore", "--check", "--in", file, "--bootstrap", bootstrapOf(restored))
	if m := restoredIDLine.FindStringSubmatch(check); m == nil || m[1] != newID {
		t.Fatalf("restore --check --bootstrap: %q; want the restore's id %s", check, newID)
	}
	check = h.mustCLI("restore", "--check", "--in", file, "--bootstrap", bootstrapOf(restored), "--cluster-token", "staging")
	if m := restoredIDLine.FindStringSubmatch(check); m == nil || m[1] == newID || m[1] == oldID {
		t.Fatalf("restore --check with a --cluster-token: %q; want an id other than %s and %s", check, newID, oldID)
	}
	t.Logf("old cluster %s, restored cluster %s", oldID, newID)
}
