//go:build unix

package transport

import (
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestRaftMuxIdleGroups measures what idle raft groups cost: it runs
// RAFTLOG_IDLE_GROUPS groups (say 100) of hashicorp/raft on three nodes in
// this process, each node a RaftMux on loopback TCP, with the raft
// configuration and transport settings of a node (node/node.go,
// node/timeouts.go), leaders spread evenly, one command applied in each;
// then, for RAFTLOG_IDLE_SECONDS (default 10), it does nothing and
// measures the process's CPU time (getrusage) and the requests each mux
// sent and served. It logs the figures and asserts nothing about them:
// they depend on the machine. RAFTLOG_IDLE_COMMIT_TIMEOUT overrides raft's
// CommitTimeout (the node's is 5ms), to see what it costs;
// RAFTLOG_IDLE_MAX_IN_FLIGHT sets the transports' MaxInFlight (the node's default
// is 1, no pipelining).
//
//	RAFTLOG_IDLE_GROUPS=100 go test -run TestRaftMuxIdleGroups -v ./transport
func TestRaftMuxIdleGroups(t *testing.T) {
	groups, _ := strconv.Atoi(os.Getenv("RAFTLOG_IDLE_GROUPS"))
	if groups <= 0 {
		t.Skip("set RAFTLOG_IDLE_GROUPS to the number of groups to measure")
	}
	seconds := 10
	if s, err := strconv.Atoi(os.Getenv("RAFTLOG_IDLE_SECONDS")); err == nil && s > 0 {
		seconds = min(s, 600)
	}
	commitTimeout := 5 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("RAFTLOG_IDLE_COMMIT_TIMEOUT")); err == nil && d > 0 {
		commitTimeout = d
	}
	// The node's settings: node/node.go's startRaft and raftTransport,
	// node/timeouts.go's defaults, Config.RaftMaxInFlight's default of 1.
	nodeConf := func(c *raft.Config) {
		c.HeartbeatTimeout = 700 * time.Millisecond
		c.ElectionTimeout = 700 * time.Millisecond
		c.LeaderLeaseTimeout = 700 * time.Millisecond
		c.CommitTimeout = commitTimeout
		c.SnapshotInterval = 10 * time.Second
		c.TrailingLogs = math.MaxUint64
		c.MaxAppendEntries = 256
		c.BatchApplyCh = true
		c.NoLegacyTelemetry = true
	}
	inFlight := 1
	if n, err := strconv.Atoi(os.Getenv("RAFTLOG_IDLE_MAX_IN_FLIGHT")); err == nil && n > 0 {
		inFlight = n
	}
	tc := RaftTransportConfig{Timeout: 10 * time.Second, MaxPool: 4, MaxInFlight: inFlight}
	c := newMuxCluster(t, 3, tc, nodeConf)
	for g := range uint64(groups) {
		c.addGroup(g)
	}
	// Leaders spread evenly: group g led by node g mod 3.
	for g := range uint64(groups) {
		want := c.nodes[g%3]
		c.waitFor("leaders spread", func() bool {
			leader := c.waitLeader(g, nil)
			if leader.node == want {
				return true
			}
			leader.raft.LeadershipTransferToServer(want.id, want.mux.LocalAddr()).Error()
			return false
		})
	}
	for g := range uint64(groups) {
		c.apply(g, 1)
	}
	for g := range uint64(groups) {
		c.waitConverged(g)
	}

	before := make([]RaftMuxStats, len(c.nodes))
	for i, n := range c.nodes {
		before[i] = n.mux.Stats()
	}
	leaders0 := c.leaders()
	cpu0 := processCPU(t)
	start := time.Now()
	time.Sleep(time.Duration(seconds) * time.Second) // the interval measured: nothing to wait for
	elapsed := time.Since(start)
	cpu := processCPU(t) - cpu0
	leaders1 := c.leaders()
	t.Logf("groups with a leader: %d before the interval, %d after", leaders0, leaders1)
	if dump := os.Getenv("RAFTLOG_IDLE_DUMP"); dump != "" && leaders1 < groups {
		if f, err := os.Create(dump); err == nil {
			pprof.Lookup("goroutine").WriteTo(f, 1)
			f.Close()
		}
	}

	perNode := cpu.Seconds() / elapsed.Seconds() / float64(len(c.nodes))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("%d idle groups on %d nodes, CommitTimeout %v, MaxInFlight %d, over %.1fs: process CPU %.3f cores, %.3f cores per node, %.2f ms CPU per group per second per node; %d goroutines, %.0f MiB heap in use",
		groups, len(c.nodes), commitTimeout, inFlight, elapsed.Seconds(), cpu.Seconds()/elapsed.Seconds(), perNode,
		1000*perNode/float64(groups), runtime.NumGoroutine(), float64(ms.HeapInuse)/(1<<20))
	for i, n := range c.nodes {
		s := n.mux.Stats()
		t.Logf("%s: leads %d groups; requests sent %.0f/s, served %.0f/s; connections open %d (dialled %d, accepted %d in all)",
			n.id, c.leaderCount(n), float64(s.Sent-before[i].Sent)/elapsed.Seconds(), float64(s.Served-before[i].Served)/elapsed.Seconds(), s.Conns, s.Dialled, s.Accepted)
	}
	moved := 0
	for g := range uint64(groups) {
		if c.waitLeader(g, nil).node != c.nodes[g%3] {
			moved++
		}
	}
	t.Logf("%d groups changed leader while idle", moved)
	if os.Getenv("RAFTLOG_IDLE_LOG") != "" {
		os.WriteFile(os.Getenv("RAFTLOG_IDLE_LOG"), []byte(c.logs.String()), 0o644)
	}
}

// leaders returns the number of groups that have a leader.
func (c *muxCluster) leaders() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	count := 0
	for _, rs := range c.groups {
		for _, r := range rs {
			if r.raft.State() == raft.Leader {
				count++
				break
			}
		}
	}
	return count
}

// leaderCount returns the number of groups n leads.
func (c *muxCluster) leaderCount(n *muxNode) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	count := 0
	for _, rs := range c.groups {
		for _, r := range rs {
			if r.node == n && r.raft.State() == raft.Leader {
				count++
			}
		}
	}
	return count
}

// processCPU returns the user and system CPU time the process has used.
func processCPU(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
