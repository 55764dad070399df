package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/transport"
)

// testCluster is an in-process cluster on loopback.
type testCluster struct {
	t     testing.TB
	dir   string
	nodes map[string]*Node
	cfg   func(*Config)
	addrs map[string][2]string // id -> raft and client address, reused on restart
}

// testLogger writes node logs to the test log at warn level, or at the
// level in RAFTLOG_TEST_LOG.
func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

func testConfig(t testing.TB, dir, id string) Config {
	return Config{
		ID:         id,
		DataDir:    filepath.Join(dir, id),
		RaftAddr:   "127.0.0.1:0",
		ClientAddr: "127.0.0.1:0",
		Logger:     testLogger(t),
	}
}

// newTestCluster starts n nodes: the first bootstraps alone, the others
// join through it.
func newTestCluster(t *testing.T, n int, tweak func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, dir: t.TempDir(), nodes: map[string]*Node{}, cfg: tweak, addrs: map[string][2]string{}}
	t.Cleanup(c.closeAll)
	first := c.start("n1", func(cfg *Config) { cfg.Bootstrap = []Peer{{ID: "n1", RaftAddr: "127.0.0.1:0"}} })
	c.waitLeader()
	for i := 2; i <= n; i++ {
		c.start(fmt.Sprintf("n%d", i), func(cfg *Config) { cfg.Join = []string{first.ClientAddr()} })
	}
	for _, nd := range c.nodes {
		c.waitVoter(nd)
	}
	return c
}

// waitVoter waits until a node is a voter (a joining node is promoted once
// it has caught up).
func (c *testCluster) waitVoter(n *Node) {
	c.t.Helper()
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	select {
	case <-n.Voting():
	case <-timer.C:
		c.t.Fatalf("%s not promoted to voter within 20s", n.ID())
	}
}

// start starts (or restarts) node id with the cluster's config.
func (c *testCluster) start(id string, tweak func(*Config)) *Node {
	c.t.Helper()
	cfg := testConfig(c.t, c.dir, id)
	if a, ok := c.addrs[id]; ok {
		cfg.RaftAddr, cfg.ClientAddr = a[0], a[1]
	}
	if c.cfg != nil {
		c.cfg(&cfg)
	}
	if tweak != nil {
		tweak(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg)
	if err != nil {
		c.t.Fatalf("start %s: %v", id, err)
	}
	c.nodes[id] = n
	c.addrs[id] = [2]string{n.RaftAddr(), n.ClientAddr()}
	return n
}

func (c *testCluster) stop(id string) {
	c.t.Helper()
	if err := c.nodes[id].Close(); err != nil {
		c.t.Errorf("close %s: %v", id, err)
	}
	delete(c.nodes, id)
}

func (c *testCluster) closeAll() {
	for id, n := range c.nodes {
		if err := n.Close(); err != nil {
			c.t.Errorf("close %s: %v", id, err)
		}
	}
}

// waitLeader waits for a node that leads and is ready.
func (c *testCluster) waitLeader() *Node {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range c.nodes {
			if n.IsLeader() {
				return n
			}
		}
		waitApplied(c.t, c.nodes, 50*time.Millisecond)
	}
	c.t.Fatal("no leader within 20s")
	return nil
}

// waitApplied waits until some node's applied index (of the default
// log) moves or d passes: polling without sleeping blindly.
func waitApplied(t testing.TB, nodes map[string]*Node, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)}}
	for _, n := range nodes {
		_, ch := n.fsm.AppliedCh()
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	reflect.Select(cases)
}

// follower returns a node of c that does not lead.
func (c *testCluster) follower() *Node {
	for _, n := range c.nodes {
		if !n.IsLeader() {
			return n
		}
	}
	c.t.Fatal("no follower")
	return nil
}

// dial opens a protocol connection to a node.
func dial(t *testing.T, n *Node) *transport.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := transport.Dial(ctx, n.ClientAddr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func call[Resp any](t *testing.T, c *transport.Conn, op transport.Op, req any) (*Resp, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var resp Resp
	err := c.Call(ctx, op, req, &resp)
	return &resp, err
}

// discardLogger is a logger that drops everything.
func discardLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
}

// waitForIn waits until cond holds, polling, and fails the test if it
// does not within d.
func waitForIn(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting: %s", d, what)
		}
		timer := time.NewTimer(20 * time.Millisecond)
		<-timer.C
	}
}

// waitLogLeader waits for a node that leads named log id and returns it.
func waitLogLeader(t *testing.T, c *testCluster, name string, id uint64) *Node {
	t.Helper()
	var lead *Node
	waitFor(t, "a leader of log "+name, func() bool { lead = logLeader(c, id); return lead != nil })
	return lead
}

// logLeader returns the node that leads named log id, nil if none does.
func logLeader(c *testCluster, id uint64) *Node {
	for _, n := range c.nodes {
		if h := n.host.hosted(id); h != nil && h.r.IsLeader() {
			return n
		}
	}
	return nil
}

// logServers returns the raft configuration of named log id as node n's
// replica has it, nil if n runs none.
func logServers(n *Node, id uint64) []raft.Server {
	h := n.host.hosted(id)
	if h == nil {
		return nil
	}
	c, _ := readConfig(h.r.Raft())
	return c.servers
}

// partitionFrom cuts node n's raft traffic off from every other node of c,
// on both sides (fault injection must be on); heal undoes it.
func (c *testCluster) partitionFrom(n *Node) (heal func()) {
	var others []string
	for _, o := range c.nodes {
		if o != n {
			others = append(others, o.RaftAddr())
			o.faults.layer.partition([]string{n.RaftAddr()})
		}
	}
	n.faults.layer.partition(others)
	return func() {
		for _, o := range c.nodes {
			o.faults.layer.partition(nil)
		}
	}
}

// waitStoppedOnEIO waits up to d for n to stop by itself after a storage
// failure (Done), and fails unless it stopped with an I/O error; still
// running after d, it fails with "<who> <running>" (the store's latched
// failure appended).
func waitStoppedOnEIO(t *testing.T, n *Node, d time.Duration, who, running string) {
	t.Helper()
	select {
	case <-n.Done():
	case <-time.After(d):
		t.Fatalf("%s %s (store: %v)", who, running, n.db.Err())
	}
	if err := n.Err(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("%s stopped with %v, want an I/O error", who, err)
	}
}
