package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/replica"
)

// logLoad appends to one named log from one goroutine through the Go
// client until stopped (at most limit appends) and remembers what was
// acknowledged, and how long the longest wait for an acknowledgement was.
type logLoad struct {
	name    string
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	acked   map[uint64]string // guarded by mu
	errs    []error           // guarded by mu
	maxWait time.Duration     // guarded by mu
}

func startLogLoad(t *testing.T, c *client.Client, name string, limit int) *logLoad {
	t.Helper()
	l := &logLoad{name: name, stop: make(chan struct{}), done: make(chan struct{}), acked: map[uint64]string{}}
	g := c.Log(name)
	go func() {
		defer close(l.done)
		for i := 0; i < limit; i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			rec := fmt.Sprintf("%s-%d", name, i)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			start := time.Now()
			idx, err := g.Append(ctx, []byte(rec))
			cancel()
			l.mu.Lock()
			l.maxWait = max(l.maxWait, time.Since(start))
			if err != nil {
				l.errs = append(l.errs, err)
			} else {
				l.acked[idx[0]] = rec
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *logLoad) halt() map[uint64]string {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked
}

// count returns how many appends were acknowledged so far.
func (l *logLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// Three "node serve" processes serve two named logs beside the default
// log. SIGKILL of the node leading one of them: that log gets a new leader
// and goes on, the other log never stops; every acknowledged record of
// both is read back after the node restarts. Then a delete removes a
// log's data from every node's data dir.
func TestNamedLogsProcesses(t *testing.T) {
	h := newServeHarness(t)
	nodes, addrs := startProcCluster(t, h, 3, "n", "")
	for _, name := range []string{"orders", "audit"} {
		out := h.mustCLI("log", "create", name, "--replicas", "3", "--addrs", addrs)
		t.Logf("log create %s: %s", name, strings.TrimSpace(out))
	}
	var list []logJSON
	if err := json.Unmarshal([]byte(h.mustCLI("log", "list", "--json", "--addrs", addrs)), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].Name != "audit" || list[1].Name != "default" || list[2].Name != "orders" {
		t.Fatalf("log list: %+v", list)
	}

	c, err := client.Dial(context.Background(), strings.Split(addrs, ","), &client.Options{RetryTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info := func(name string) infoJSON {
		var in infoJSON
		waitUntil(t, time.Minute, "a leader of log "+name, func() bool {
			out, _, code := h.cli("log", "info", name, "--json", "--addrs", addrs, "--timeout", "5s")
			return code == 0 && json.Unmarshal([]byte(out), &in) == nil && in.LeaderID != ""
		})
		return in
	}
	orders := startLogLoad(t, c, "orders", 100000)
	audit := startLogLoad(t, c, "audit", 100000)
	waitUntil(t, time.Minute, "appends to both logs", func() bool { return orders.count() >= 50 && audit.count() >= 50 })

	// Kill the leader of orders, unless it also leads audit: then the
	// kill would stall both; kill it anyway, but check audit only when it
	// is led elsewhere. First each log's leadership settles on its
	// preferred leader (the first member), so that the node spreading
	// leaders does not move it away while the victim is chosen.
	settled := func(name string) infoJSON {
		var in infoJSON
		waitUntil(t, time.Minute, "log "+name+" led by its preferred leader", func() bool {
			in = info(name)
			return len(in.Members) > 0 && in.LeaderID == in.Members[0]
		})
		return in
	}
	ol, al := settled("orders").LeaderID, settled("audit").LeaderID
	var victim *procNode
	for _, p := range nodes {
		if p.id == ol {
			victim = p
		}
	}
	if err := victim.cmd.Process.Kill(); err != nil { // this test's own process, by its pid
		t.Fatal(err)
	}
	<-victim.exited
	t.Logf("killed %s, the leader of orders (audit's leader: %s)", victim.id, al)
	before := orders.count()
	auditBefore := audit.count()
	waitUntil(t, time.Minute, "orders appends after the kill", func() bool { return orders.count() >= before+50 })
	if al != victim.id {
		waitUntil(t, time.Minute, "audit appends after the kill", func() bool { return audit.count() >= auditBefore+50 })
	}
	if nl := info("orders").LeaderID; nl == victim.id {
		t.Fatalf("orders is still led by the killed node %s", nl)
	}
	// A survivor saw the leader's raft port refuse connections and called
	// the election of orders at once, rather than wait out raft's timeout.
	called := false
	for _, p := range nodes {
		if b, err := os.ReadFile(p.log); p != victim && err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				called = called || strings.Contains(line, "calling an election now") && strings.Contains(line, "log=orders")
			}
		}
	}
	if !called {
		t.Fatal("no survivor called the election of log orders when its leader's process was gone")
	}
	h.start(victim)
	waitUntil(t, time.Minute, "the killed node back", func() bool {
		out, _, code := h.cli("status", "--addrs", victim.client, "--json", "--timeout", "2s")
		return code == 0 && strings.Contains(out, `"node_id": "`+victim.id+`"`)
	})
	ackedOrders, ackedAudit := orders.halt(), audit.halt()
	for _, l := range []*logLoad{orders, audit} {
		if len(l.errs) > 0 {
			t.Logf("%s: %d appends failed (their outcome is unknown), the first: %v", l.name, len(l.errs), l.errs[0])
		}
		t.Logf("%s: %d appends acknowledged, the longest wait %v", l.name, len(l.acked), l.maxWait.Round(time.Millisecond))
	}
	for name, acked := range map[string]map[uint64]string{"orders": ackedOrders, "audit": ackedAudit} {
		got := readNamed(t, c, name)
		for idx, rec := range acked {
			if got[idx] != rec {
				t.Fatalf("log %s lost acknowledged record %q at index %d (holds %q)", name, rec, idx, got[idx])
			}
		}
		for idx, rec := range got {
			if !strings.HasPrefix(rec, name+"-") {
				t.Fatalf("log %s holds %q at index %d: another log's record", name, rec, idx)
			}
		}
	}

	// Delete audit: every node drops its groups and its directory.
	id := info("audit").ID
	h.mustCLI("log", "delete", "audit", "--yes", "--addrs", addrs)
	groupDir := fmt.Sprintf("%020d", replica.GroupsOf(id).Live)
	for _, p := range nodes {
		waitUntil(t, time.Minute, p.id+" dropping log audit", func() bool {
			_, errIndex := os.Stat(filepath.Join(p.dir, "store", "index", groupDir))
			_, errDir := os.Stat(filepath.Join(p.dir, "logs", fmt.Sprint(id)))
			return errors.Is(errIndex, os.ErrNotExist) && errors.Is(errDir, os.ErrNotExist)
		})
	}
	if _, errOut, code := h.cli("append", "--log", "audit", "--addrs", addrs, "x"); code == 0 || !strings.Contains(errOut, `log "audit" does not exist`) {
		t.Fatalf("append to the deleted log: exit %d, %s", code, errOut)
	}
	for _, p := range nodes {
		h.stop(p)
	}
}

// readNamed reads every record of a named log.
func readNamed(t *testing.T, c *client.Client, name string) map[uint64]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := map[uint64]string{}
	var from uint64
	for {
		recs, next, err := c.Log(name).Read(ctx, from, client.ReadOptions{})
		if err != nil {
			t.Fatalf("read log %s from %d: %v", name, from, err)
		}
		for _, r := range recs {
			got[r.Index] = string(r.Data)
		}
		if len(recs) == 0 {
			return got
		}
		from = next
	}
}
