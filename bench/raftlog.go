package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// raftlog in the cluster comparison: three `node serve` processes of the
// binary built from this repository, driven through the Go client.

// raftlogMaxInFlight is the nodes' --max-in-flight: the requests one
// client connection may have in flight (default 128), raised so that the
// 1,024-in-flight workload fits one connection.
const raftlogMaxInFlight = 1024

// raftlogNode is one node process.
type raftlogNode struct {
	id                  string
	raft, client, admin string   // addresses
	args                []string // its command line, to restart it (logs_failover.go)
	proc                *proc    // the running process; a restart replaces it (see raftlogCluster)
}

// raftlogCluster is a running 3-node raftlog cluster. Its fields are set
// by startRaftlog and not changed after it returns, except a node's proc,
// which runFailover replaces when it restarts the node, from the one
// goroutine that drives the cell.
type raftlogCluster struct {
	nodes []*raftlogNode
}

// startRaftlog starts three nodes under dir with the given flush mode
// (and --pprof when pprof is set), each with the full --bootstrap list,
// and waits until one leads and all vote.
func startRaftlog(ctx context.Context, e *clusterEnv, dir, flush string, pprof bool) (*raftlogCluster, error) {
	ports, err := freePorts(9)
	if err != nil {
		return nil, err
	}
	c := &raftlogCluster{}
	var boot []string
	for i := range 3 {
		n := &raftlogNode{
			id:     fmt.Sprintf("n%d", i+1),
			raft:   "127.0.0.1:" + strconv.Itoa(ports[3*i]),
			client: "127.0.0.1:" + strconv.Itoa(ports[3*i+1]),
			admin:  "127.0.0.1:" + strconv.Itoa(ports[3*i+2]),
		}
		c.nodes = append(c.nodes, n)
		boot = append(boot, n.id+"="+n.raft)
	}
	for _, n := range c.nodes {
		args := []string{"serve", "--id", n.id, "--data-dir", filepath.Join(dir, n.id),
			"--raft-addr", n.raft, "--client-addr", n.client, "--admin-addr", n.admin,
			"--bootstrap", strings.Join(boot, ","), "--flush", flush,
			"--max-in-flight", strconv.Itoa(raftlogMaxInFlight)}
		if pprof {
			args = append(args, "--pprof")
		}
		n.args = args
		if n.proc, err = e.procs.start("raftlog "+n.id, e.nodeBin, args, e.serverEnv(childEnv()), filepath.Join(dir, n.id+".log")); err != nil {
			return c, err
		}
	}
	if _, err := c.waitLeader(ctx, 60*time.Second); err != nil {
		return c, err
	}
	return c, nil
}

// servers returns the node processes.
func (c *raftlogCluster) servers() []*proc {
	var ps []*proc
	for _, n := range c.nodes {
		ps = append(ps, n.proc)
	}
	return ps
}

// clientAddrs returns the nodes' client addresses.
func (c *raftlogCluster) clientAddrs() []string {
	var as []string
	for _, n := range c.nodes {
		as = append(as, n.client)
	}
	return as
}

// waitLeader waits up to d until one node leads and every node votes, and
// returns the leader.
func (c *raftlogCluster) waitLeader(ctx context.Context, d time.Duration) (*raftlogNode, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var cl *client.Client
	for cl == nil {
		var err error
		cl, err = client.Dial(ctx, c.clientAddrs(), &client.Options{RequestTimeout: time.Second, RetryTimeout: d})
		if err == nil {
			break
		}
		if !c.allRunning() {
			return nil, c.whyNot(err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, c.whyNot(fmt.Errorf("no node answers within %v: %w", d, err))
		}
	}
	defer cl.Close()
	last := "no answer"
	for {
		var leader *raftlogNode
		voting := 0
		var seen []string
		for _, n := range c.nodes {
			st, err := cl.Status(ctx, n.client)
			if err != nil {
				seen = append(seen, n.id+": "+err.Error())
				continue
			}
			seen = append(seen, fmt.Sprintf("%s: %s voting=%v", n.id, st.Role, st.Voting))
			if st.Voting {
				voting++
			}
			if st.Role == "Leader" {
				leader = n
			}
		}
		last = strings.Join(seen, "; ")
		if leader != nil && voting == len(c.nodes) {
			return leader, nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, c.whyNot(fmt.Errorf("no leader with every node voting within %v (%s)", d, last))
		}
	}
}

// allRunning reports whether every node process runs.
func (c *raftlogCluster) allRunning() bool {
	for _, n := range c.nodes {
		if !n.proc.running() {
			return false
		}
	}
	return true
}

// whyNot adds to err the exit of any node that is no longer running.
func (c *raftlogCluster) whyNot(err error) error {
	for _, n := range c.nodes {
		if !n.proc.running() {
			return errors.Join(err, n.proc.exitError())
		}
	}
	return err
}

// dial connects clients Clients, each set up for window appends in flight.
func (c *raftlogCluster) dial(ctx context.Context, clients, window int) ([]loadClient, error) {
	var out []loadClient
	for range clients {
		cl, err := client.Dial(ctx, c.clientAddrs(), raftlogClientOptions(window))
		if err != nil {
			closeClients(out)
			return nil, err
		}
		out = append(out, &raftlogClient{c: cl, l: cl.Log(transport.DefaultLog)})
	}
	return out, nil
}

// raftlogClientOptions are the options of a Client with window appends in
// flight, the rest defaults (one append request in flight, which keeps
// submission order, as a NATS connection does).
func raftlogClientOptions(window int) *client.Options {
	o := &client.Options{MaxInFlightAppends: window}
	o.Conn.MaxInFlight = max(window, transport.DefaultMaxInFlight)
	return o
}

// raftlogClient is one client.Client appending to one log.
type raftlogClient struct {
	c *client.Client
	l *client.Log // the log appended to: the default log, or a named log (logs.go)
}

// run appends with window records in flight: synchronous Append for a
// window of 1, else AppendAsync keeping window appends in flight from one
// goroutine, as NATS' PublishAsync does (runAsync).
func (rc *raftlogClient) run(ctx context.Context, stop <-chan struct{}, phase *atomic.Int32, window int, recs *records) *tally {
	if window > 1 {
		return rc.runAsync(ctx, stop, phase, window, recs)
	}
	t := &tally{}
	st := recs.appenderStamps()
	buf := make([]byte, len(recs.template))
	for !closed(stop) {
		s := st.fill(recs, buf)
		t0 := time.Now()
		idx, err := rc.l.Append(ctx, buf)
		lat := time.Since(t0)
		if err != nil {
			t.fail(err)
			break
		}
		t.add(phase, ack{idx[0], s}, lat)
	}
	return t
}

// raftlogSlot is one of the window's appends: its buffer, which the
// Client holds until the append completes, and what it was sent with.
type raftlogSlot struct {
	buf    []byte
	stamps *stamps
	stamp  uint64
	start  time.Time
	f      *client.AppendFuture
}

// runAsync keeps window AppendAsync calls in flight. Appends complete in
// submission order (one request in flight), so one goroutine waits for
// them in that order and hands each slot back as soon as its append
// completes.
func (rc *raftlogClient) runAsync(ctx context.Context, stop <-chan struct{}, phase *atomic.Int32, window int, recs *records) *tally {
	t := &tally{}
	free := make(chan *raftlogSlot, window)
	sent := make(chan *raftlogSlot, window)
	for range window {
		free <- &raftlogSlot{buf: make([]byte, len(recs.template)), stamps: recs.appenderStamps()}
	}
	var failed atomic.Bool // the waiter saw an append fail: stop sending
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sl := range sent {
			<-sl.f.Done()
			lat := time.Since(sl.start)
			if idx, err := sl.f.Indexes(), sl.f.Err(); err != nil {
				t.fail(err)
				failed.Store(true)
			} else {
				t.add(phase, ack{idx[0], sl.stamp}, lat)
			}
			free <- sl
		}
	}()
loop:
	for {
		var sl *raftlogSlot
		select {
		case <-stop:
			break loop
		case <-ctx.Done():
			break loop
		case sl = <-free:
		}
		if failed.Load() {
			break loop
		}
		sl.stamp = sl.stamps.fill(recs, sl.buf)
		sl.start = time.Now()
		sl.f = rc.l.AppendAsync(ctx, sl.buf)
		sent <- sl
	}
	close(sent)
	<-done
	return t
}

// close closes the Client.
func (rc *raftlogClient) close() error { return rc.c.Close() }

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// closeClients closes every client.
func closeClients(cs []loadClient) error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.close())
	}
	return errors.Join(errs...)
}

// verify reads the log from its start through the last acknowledged
// index, linearizably, and checks that every acknowledged record is at its
// index with the data that was appended.
func (c *raftlogCluster) verify(ctx context.Context, acks []ack, recs *records) (readBack, error) {
	return c.verifyLog(ctx, transport.DefaultLog, acks, recs)
}

// verifyLog is verify of the log name.
func (c *raftlogCluster) verifyLog(ctx context.Context, name string, acks []ack, recs *records) (readBack, error) {
	m, err := newMatcher(acks, recs)
	if err != nil || len(acks) == 0 {
		return readBack{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		return readBack{}, err
	}
	defer cl.Close()
	for from := uint64(1); from <= m.last(); {
		got, next, err := cl.Log(name).Read(ctx, from, client.ReadOptions{})
		if err != nil {
			return m.rb, fmt.Errorf("reading back log %s from index %d: %w", name, from, err)
		}
		if len(got) == 0 || next <= from {
			break
		}
		for _, r := range got {
			if err := m.see(r.Index, r.Data); err != nil {
				return m.rb, err
			}
		}
		from = next
	}
	return m.result()
}

// cmpUint64 orders a and b.
func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// leaderProfiler finds the leader and returns a function that writes a
// CPU profile of it over seconds to path, from its admin port's
// /debug/pprof/profile (the nodes run with --pprof).
func (c *raftlogCluster) leaderProfiler(ctx context.Context) (profiler, error) {
	leader, err := c.waitLeader(ctx, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, seconds int, path string) error {
		return fetchProfile(ctx, profileURL(leader.admin, seconds), path)
	}, nil
}

// checkProfiling checks what -pprof needs: windows of whole seconds and
// the directory the profiles go to.
func checkProfiling(window time.Duration, dir string) error {
	if window < time.Second {
		return fmt.Errorf("-pprof needs a -duration of at least 1s (profiles last whole seconds), not %v", window)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("-pprof-dir %q is not a directory", dir)
	}
	return nil
}

// profileURL is the CPU profile over seconds of the node whose admin
// address is admin (the nodes run with --pprof).
func profileURL(admin string, seconds int) string {
	return fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, seconds)
}

// profileNodes writes a CPU profile of every node over seconds, taken at
// once, to dir/logs<n>-<node>.pprof (with -round<R> when rounds > 1).
func (c *raftlogCluster) profileNodes(ctx context.Context, seconds int, dir string, n, round, rounds int) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, nd := range c.nodes {
		name := fmt.Sprintf("logs%d-%s", n, nd.id)
		if rounds > 1 {
			name += fmt.Sprintf("-round%d", round+1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fetchProfile(ctx, profileURL(nd.admin, seconds), filepath.Join(dir, name+".pprof"))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fetchProfile GETs url and writes the body to path.
func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return f.Close()
}
