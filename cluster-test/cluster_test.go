package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/raftlog/raftlog/internal/testaddr"
)

// Bounds of the harness's waits. Each is generous: reaching one is a
// failure of the cluster (or of the machine), never a normal event.
const (
	startTimeout   = 20 * time.Second // a process serves /health
	stopTimeout    = 20 * time.Second // a SIGTERMed process exits
	killTimeout    = 10 * time.Second // a SIGKILLed process is reaped
	healthyTimeout = 30 * time.Second // a leader that every node follows
	catchUpTimeout = 60 * time.Second // a rejoined node holds the log
	adminTimeout   = time.Second      // one admin HTTP request
	pollInterval   = 50 * time.Millisecond
)

// clusterConfig describes a cluster to start.
type clusterConfig struct {
	nodes  int      // 3 or 5
	flush  string   // "" (sync, the default) or "async"
	faults bool     // start nodes with --fault-injection
	args   []string // more flags for every node's serve
	// late is how many of the last members newCluster leaves unstarted,
	// with every member in the bootstrap list: a test starts them with
	// startLate, as nodes that were slow to come up.
	late int
	// joiners is how many of the last members (after the late ones)
	// newCluster leaves unstarted and out of the bootstrap list: a test
	// starts them with startLate, and they join the running cluster
	// (--join through the other members), as nodes added later do.
	joiners int
}

// cluster is a set of node processes started by one test. Its methods
// may be called from any goroutine; they return errors rather than fail
// the test, so that a nemesis goroutine can use them.
type cluster struct {
	t       testing.TB
	cfg     clusterConfig
	bin     string
	dir     string       // under t.TempDir(): data dirs and node logs
	http    *http.Client // for admin endpoints; short timeouts
	members []*member    // immutable after newCluster
	// logs are the named logs the run created (createLogs), beside the
	// default log; set before the workload and the nemesis start,
	// read-only while a nemesis runs (a test that moves replicas updates
	// their members with refreshLogs, from its own goroutine, when none
	// runs).
	logs []namedLog

	mu       sync.Mutex // guards the fields below
	problems []string   // unexpected exits and the like, for the checks
	notes    []string   // observations worth a report that are not failures
}

// member is one node of a cluster: fixed id, addresses and data dir, and
// the process currently running it, if any.
type member struct {
	c                               *cluster
	id                              string
	raftAddr, clientAddr, adminAddr string // fixed once the cluster has formed
	dataDir, logPath                string

	// removed is set once the test has removed the node from the
	// cluster (node remove): heal leaves it down, and the cluster's
	// members (c.logMembers) leave it out from then on.
	removed atomic.Bool
	// late is set while the member is one newCluster left unstarted
	// (clusterConfig.late or joiners) and the test has not started yet:
	// the cluster's members (c.logMembers) leave it out until then.
	late atomic.Bool
	// joiner: the member is not in the bootstrap list; it starts with
	// --join (clusterConfig.joiners). Immutable.
	joiner bool

	mu     sync.Mutex // guards the fields below
	proc   *process   // the running process; nil when none
	paused bool       // proc is SIGSTOPped
	starts int        // processes started so far
}

// process is one node process and its reaper.
type process struct {
	cmd      *exec.Cmd
	log      *os.File
	done     chan struct{} // closed once the process has been reaped
	state    *os.ProcessState
	waitErr  error
	expected atomic.Bool // the test stopped it, or made it stop: exiting is no bug
	serving  atomic.Bool // it served /health; an exit before is start's error
}

// exited reports whether p has exited (and been reaped).
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// newCluster starts a cluster and waits until it has a leader that every
// node follows. Every process is killed when t ends.
func newCluster(t *testing.T, cfg clusterConfig) *cluster {
	t.Helper()
	bin := nodeBinary(t)
	if cfg.faults && !binFaults {
		t.Fatal("cluster with fault injection, but node serve has no --fault-injection")
	}
	dir := t.TempDir() // before the Cleanup below, so that it is removed after the kills
	c := &cluster{
		t:    t,
		cfg:  cfg,
		bin:  bin,
		dir:  dir,
		http: &http.Client{Timeout: adminTimeout, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	for i := range cfg.nodes {
		id := fmt.Sprintf("n%d", i+1)
		c.members = append(c.members, &member{
			c:       c,
			id:      id,
			dataDir: filepath.Join(dir, id),
			logPath: filepath.Join(dir, id+".log"),
			joiner:  i >= cfg.nodes-cfg.joiners,
		})
		c.members[i].late.Store(i >= cfg.nodes-cfg.late-cfg.joiners)
	}
	t.Cleanup(c.shutdown)
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = c.startAll(); err == nil || !errors.Is(err, errPortInUse) {
			break
		}
		t.Logf("port clash starting the cluster, picking new ports: %v", err)
		c.killAll()
		for _, m := range c.members {
			os.RemoveAll(m.dataDir)
		}
	}
	if err != nil {
		t.Fatalf("starting a %d-node cluster: %v", cfg.nodes, err)
	}
	if _, err := c.waitHealthy(context.Background(), healthyTimeout); err != nil {
		t.Fatalf("a new %d-node cluster: %v", cfg.nodes, err)
	}
	return c
}

// errPortInUse marks a start that failed because a port was taken.
var errPortInUse = errors.New("address already in use")

// startAll picks free ports for every member and starts them all but the
// late ones, bootstrapping a new cluster.
func (c *cluster) startAll() error {
	ports, err := freePorts(3 * len(c.members))
	if err != nil {
		return err
	}
	for i, m := range c.members {
		m.raftAddr = fmt.Sprintf("127.0.0.1:%d", ports[3*i])
		m.clientAddr = fmt.Sprintf("127.0.0.1:%d", ports[3*i+1])
		m.adminAddr = fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])
	}
	errs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for i, m := range c.members {
		if m.late.Load() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.start(nil)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startLate starts m, a member newCluster left unstarted
// (clusterConfig.late or joiners), with its bootstrap flags (a joiner's:
// --join), and counts it among the cluster's members from then on.
func (c *cluster) startLate(m *member) error {
	if !m.late.Load() {
		return fmt.Errorf("%s: not a late member", m.id)
	}
	if err := m.start(nil); err != nil {
		return err
	}
	m.late.Store(false)
	return nil
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago, below the kernel's ephemeral range (see package testaddr).
func freePorts(n int) ([]int, error) { return testaddr.Ports(n) }

// bootstrapList is the --bootstrap value: every member's raft address
// but the joiners'.
func (c *cluster) bootstrapList() string {
	var parts []string
	for _, m := range c.members {
		if !m.joiner {
			parts = append(parts, m.id+"="+m.raftAddr)
		}
	}
	return strings.Join(parts, ",")
}

// clientAddrs returns every member's client address.
func (c *cluster) clientAddrs() []string {
	var addrs []string
	for _, m := range c.members {
		addrs = append(addrs, m.clientAddr)
	}
	return addrs
}

// problem records a failure that the run's checks report.
func (c *cluster) problem(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// note records an observation for the test's log.
func (c *cluster) note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
}

// takeProblems returns the problems recorded so far.
func (c *cluster) takeProblems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.problems...)
}

// takeNotes returns the notes recorded so far.
func (c *cluster) takeNotes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.notes...)
}

// start starts m's process: with --join through the client addresses
// join when join is not nil, with --bootstrap (ignored by a node that has
// state) otherwise, but a joiner's with --join through the members of the
// bootstrap list (as ignored). It returns once the process serves
// /health; an error wrapping errPortInUse when it could not listen.
func (m *member) start(join []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil && !m.proc.exited() {
		return fmt.Errorf("%s: already running", m.id)
	}
	c := m.c
	if join == nil && m.joiner {
		for _, o := range c.members {
			if !o.joiner {
				join = append(join, o.clientAddr)
			}
		}
	}
	args := []string{"serve",
		"--id", m.id,
		"--data-dir", m.dataDir,
		"--raft-addr", m.raftAddr,
		"--client-addr", m.clientAddr,
		"--admin-addr", m.adminAddr,
		"--join-timeout", "2m",
	}
	if join != nil {
		args = append(args, "--join", strings.Join(join, ","))
	} else {
		args = append(args, "--bootstrap", c.bootstrapList())
	}
	if c.cfg.flush != "" {
		args = append(args, "--flush", c.cfg.flush)
	}
	if c.cfg.faults {
		args = append(args, "--fault-injection")
	}
	args = append(args, c.cfg.args...)
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	m.starts++
	fmt.Fprintf(logf, "\n=== cluster-test: start #%d at %s: node %s\n", m.starts, time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(c.bin, args...)
	cmd.Env = childEnv()
	cmd.Stdout = logf
	cmd.Stderr = logf
	if err := spawn(cmd); err != nil {
		logf.Close()
		return fmt.Errorf("%s: start: %w", m.id, err)
	}
	p := &process{cmd: cmd, log: logf, done: make(chan struct{})}
	go m.reap(p)
	m.proc, m.paused = p, false

	var exitErr error
	err = poll(context.Background(), startTimeout, func() (bool, error) {
		if p.exited() {
			tail := m.logTail(2048)
			exitErr = fmt.Errorf("%s: exited while starting (%v); log ends:\n%s", m.id, p.state, tail)
			if strings.Contains(tail, "address already in use") {
				exitErr = fmt.Errorf("%w: %w", errPortInUse, exitErr)
			}
			return false, exitErr
		}
		return m.get("/health") == nil, nil
	})
	if err != nil && exitErr == nil {
		err = fmt.Errorf("%s: not serving /health %v after start: %v; log ends:\n%s", m.id, startTimeout, err, m.logTail(2048))
	}
	p.serving.Store(err == nil)
	return err
}

// reap waits for p and records an exit the test did not cause.
func (m *member) reap(p *process) {
	p.waitErr = p.cmd.Wait()
	p.state = p.cmd.ProcessState
	p.log.Close()
	close(p.done)
	if p.serving.Load() && !p.expected.Load() {
		m.c.problem("node %s (pid %d) exited unexpectedly: %v; log ends:\n%s", m.id, p.cmd.Process.Pid, p.state, m.logTail(4096))
	}
}

// running returns m's process when one runs, else nil.
func (m *member) running() *process {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil || m.proc.exited() {
		return nil
	}
	return m.proc
}

// isUp reports whether m runs and is not paused.
func (m *member) isUp() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc != nil && !m.proc.exited() && !m.paused
}

// kill SIGKILLs m's process, if one runs, and waits until it is reaped.
func (m *member) kill() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proc
	if p == nil || p.exited() {
		return nil
	}
	p.expected.Store(true)
	p.cmd.Process.Signal(syscall.SIGKILL) // fails only once it exited
	m.paused = false
	select {
	case <-p.done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("%s: pid %d not reaped %v after SIGKILL", m.id, p.cmd.Process.Pid, killTimeout)
	}
}

// stop SIGTERMs m's process and waits for it to exit; a graceful stop
// must exit 0 within stopTimeout, else the process is killed and stop
// returns an error.
func (m *member) stop() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proc
	if p == nil || p.exited() {
		return nil
	}
	p.expected.Store(true)
	if m.paused {
		p.cmd.Process.Signal(syscall.SIGCONT)
		m.paused = false
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		// SIGQUIT first: the Go runtime writes every goroutine's stack
		// to the log, which says where the stop hung.
		p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(killTimeout):
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
		return fmt.Errorf("%s: still running %v after SIGTERM; SIGQUIT for its stacks (in its log), then killed; log ends:\n%s", m.id, stopTimeout, m.logTail(2048))
	}
	if !p.state.Success() {
		return fmt.Errorf("%s: SIGTERM: exited with %v, want exit status 0; log ends:\n%s", m.id, p.state, m.logTail(2048))
	}
	return nil
}

// pause SIGSTOPs m's process.
func (m *member) pause() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proc
	if p == nil || p.exited() {
		return fmt.Errorf("%s: pause: not running", m.id)
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("%s: SIGSTOP: %w", m.id, err)
	}
	m.paused = true
	return nil
}

// resume SIGCONTs m's process if it is paused.
func (m *member) resume() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proc
	if p == nil || p.exited() || !m.paused {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("%s: SIGCONT: %w", m.id, err)
	}
	m.paused = false
	return nil
}

// restart starts m again with its data dir as it is, retrying while its
// ports are taken (a port of a dead process can be in use for a moment).
func (m *member) restart() error {
	return m.startRetrying(nil)
}

// wipeRestart kills m, deletes its data dir and starts it again with the
// same id and addresses, joining through the members that are up.
func (m *member) wipeRestart() error {
	var join []string
	for _, o := range m.c.members {
		if o != m && o.isUp() {
			join = append(join, o.clientAddr)
		}
	}
	if len(join) == 0 {
		return fmt.Errorf("%s: no live member to join through", m.id)
	}
	return m.wipeRestartVia(join)
}

// wipeRestartVia is wipeRestart joining through the client addresses join,
// or, with join nil, starting with the original --bootstrap flags.
func (m *member) wipeRestartVia(join []string) error {
	if err := m.kill(); err != nil {
		return err
	}
	if err := os.RemoveAll(m.dataDir); err != nil {
		return err
	}
	return m.startRetrying(join)
}

func (m *member) startRetrying(join []string) error {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = m.start(join); err == nil || !errors.Is(err, errPortInUse) {
			return err
		}
		time.Sleep(250 * time.Millisecond) // nothing to wait on: another process holds the port
	}
	return err
}

// logTail returns the last n bytes of m's log.
func (m *member) logTail(n int64) string {
	f, err := os.Open(m.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// logSize returns the size of m's log, 0 if it cannot be read.
func (m *member) logSize() int64 {
	st, err := os.Stat(m.logPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// logSince returns m's log from byte offset on.
func (m *member) logSince(offset int64) []byte {
	b, err := os.ReadFile(m.logPath)
	if err != nil || offset > int64(len(b)) {
		return nil
	}
	return b[offset:]
}

// snapshotInstallMark is what raft logs when a node has installed a
// snapshot a leader streamed to it.
const snapshotInstallMark = "Installed remote snapshot"

// snapshotInstalls counts the snapshot streams from a leader that m
// installed: in all, and since it last started.
func (m *member) snapshotInstalls() (all, sinceStart int) {
	b, err := os.ReadFile(m.logPath)
	if err != nil {
		return 0, 0
	}
	all = bytes.Count(b, []byte(snapshotInstallMark))
	if i := bytes.LastIndex(b, []byte("=== cluster-test: start #")); i >= 0 {
		b = b[i:]
	}
	return all, bytes.Count(b, []byte(snapshotInstallMark))
}

// snapshotInstalls counts the snapshot streams from a leader that the
// members installed.
func (c *cluster) snapshotInstalls() int {
	n := 0
	for _, m := range c.members {
		all, _ := m.snapshotInstalls()
		n += all
	}
	return n
}

// get fetches an admin endpoint and returns an error unless it answers 200.
func (m *member) get(path string) error {
	_, err := m.admin(http.MethodGet, path)
	return err
}

// admin makes one admin request and returns the body of a 200 answer.
func (m *member) admin(method, path string) ([]byte, error) {
	req, err := http.NewRequest(method, "http://"+m.adminAddr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := m.c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("%s %s on %s: %s: %s", method, path, m.id, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// nodeStatus is what the tests use of a node's /status.
type nodeStatus struct {
	ID, Role, LeaderID                         string
	Term, LastIndex, CommitIndex, AppliedIndex uint64
	FirstIndex                                 uint64 // the floor: the first retained index
	// Voting: the node (for a named log, its replica of the log) votes.
	// Only from logStatus of a named log.
	Voting bool
}

// status fetches m's /status.
func (m *member) status() (nodeStatus, error) {
	body, err := m.admin(http.MethodGet, "/status")
	if err != nil {
		return nodeStatus{}, err
	}
	st, err := decodeStatus(body)
	if err != nil {
		return st, fmt.Errorf("%s: /status: %w", m.id, err)
	}
	return st, nil
}

// decodeStatus decodes the "node" object of /status. It matches keys
// without regard to case and underscores, so that NodeID and node_id
// both work: the field names of /status are not settled.
func decodeStatus(body []byte) (nodeStatus, error) {
	var top struct {
		Node map[string]json.RawMessage `json:"node"`
	}
	if err := json.Unmarshal(body, &top); err != nil {
		return nodeStatus{}, err
	}
	if top.Node == nil {
		return nodeStatus{}, errors.New(`no "node" object`)
	}
	fields := map[string]json.RawMessage{}
	for k, v := range top.Node {
		fields[strings.ToLower(strings.ReplaceAll(k, "_", ""))] = v
	}
	str := func(k string) string {
		var s string
		json.Unmarshal(fields[k], &s)
		return s
	}
	num := func(k string) uint64 {
		var n uint64
		json.Unmarshal(fields[k], &n)
		return n
	}
	return nodeStatus{
		ID:           str("nodeid"),
		Role:         str("role"),
		LeaderID:     str("leaderid"),
		Term:         num("term"),
		LastIndex:    num("lastindex"),
		CommitIndex:  num("commitindex"),
		AppliedIndex: num("appliedindex"),
		FirstIndex:   num("firstindex"),
	}, nil
}

// partition makes m refuse raft traffic with the given members; none heals.
func (m *member) partition(from []*member) error {
	var addrs []string
	for _, o := range from {
		addrs = append(addrs, o.raftAddr)
	}
	_, err := m.admin(http.MethodPost, "/fault/partition?peers="+url.QueryEscape(strings.Join(addrs, ",")))
	return err
}

// noSpace makes m's disk full (new files and preallocation fail with
// ENOSPC, free space reads 0) or no longer full.
func (m *member) noSpace(on bool) error { return m.faultSwitch("nospace", on) }

// faultSwitch turns m's fault-injection switch name (POST
// /fault/<name>?on=1|0) on or off.
func (m *member) faultSwitch(name string, on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	_, err := m.admin(http.MethodPost, "/fault/"+name+"?on="+v)
	return err
}

// failDisk makes every later write and sync of m fail. From then on m's
// process may exit: that is expected.
func (m *member) failDisk() error {
	if p := m.running(); p != nil {
		p.expected.Store(true)
	}
	_, err := m.admin(http.MethodPost, "/fault/disk")
	return err
}

// leader waits until some member that is up reports itself leader and
// returns it.
func (c *cluster) leader(ctx context.Context, timeout time.Duration) (*member, error) {
	var l *member
	err := poll(ctx, timeout, func() (bool, error) {
		var best *member
		var bestTerm uint64
		for _, m := range c.members {
			if !m.isUp() {
				continue
			}
			st, err := m.status()
			if err == nil && st.Role == "Leader" && st.Term >= bestTerm {
				best, bestTerm = m, st.Term
			}
		}
		l = best
		return l != nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no leader: %w", err)
	}
	return l, nil
}

// waitHealthy waits until every member runs unpaused, one of them leads
// and every member reports that leader and the same term, and returns
// the leader's status. With named logs, it then waits until each of them
// is healthy the same way on its members.
func (c *cluster) waitHealthy(ctx context.Context, timeout time.Duration) (nodeStatus, error) {
	deadline := time.Now().Add(timeout)
	lead, err := c.waitLogHealthy(ctx, "", timeout)
	if err != nil {
		return lead, err
	}
	for _, l := range c.logs {
		if _, err := c.waitLogHealthy(ctx, l.name, max(time.Until(deadline), pollInterval)); err != nil {
			return lead, err
		}
	}
	return lead, nil
}

// waitApplied waits until every member has applied index of the default
// log.
func (c *cluster) waitApplied(ctx context.Context, index uint64, timeout time.Duration, only ...*member) error {
	return c.waitLogApplied(ctx, "", index, timeout, only...)
}

// waitVoter waits until m's own /status lists it as a voter.
func (c *cluster) waitVoter(ctx context.Context, m *member, timeout time.Duration) error {
	var why string
	err := poll(ctx, timeout, func() (bool, error) {
		body, err := m.admin(http.MethodGet, "/status")
		if err != nil {
			why = err.Error()
			return false, nil
		}
		var st struct {
			Node struct {
				Voting bool `json:"voting"`
			} `json:"node"`
			Members []struct {
				ID       string `json:"id"`
				Suffrage string `json:"suffrage"`
			} `json:"members"`
		}
		if err := json.Unmarshal(body, &st); err != nil {
			return false, fmt.Errorf("%s: /status: %w", m.id, err)
		}
		for _, s := range st.Members {
			if s.ID == m.id {
				// A wiped member's configuration names its old self a
				// voter until the leader replaces it: only the node's
				// own voting state says it was promoted.
				why = fmt.Sprintf("%s is a %s, voting %v", m.id, s.Suffrage, st.Node.Voting)
				return s.Suffrage == "Voter" && st.Node.Voting, nil
			}
		}
		why = fmt.Sprintf("%s is not a member", m.id)
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%s not a voter within %v (%s): %w", m.id, timeout, why, err)
	}
	return nil
}

// heal resumes paused members, lifts every partition, starts members that
// are down (but those the test removed), and waits until the cluster is
// healthy.
func (c *cluster) heal(ctx context.Context) error {
	ms := c.logMembers("")
	for _, m := range ms {
		if err := m.resume(); err != nil {
			return err
		}
	}
	for _, m := range ms {
		if m.running() == nil {
			if err := m.restart(); err != nil {
				return err
			}
		}
	}
	if c.cfg.faults {
		for _, m := range ms {
			if err := m.partition(nil); err != nil {
				return err
			}
		}
	}
	_, err := c.waitHealthy(ctx, healthyTimeout)
	return err
}

// killAll SIGKILLs every member.
func (c *cluster) killAll() {
	for _, m := range c.members {
		if err := m.kill(); err != nil {
			c.t.Logf("%v", err)
		}
	}
}

// shutdown kills and reaps every process of the cluster (t.Cleanup).
func (c *cluster) shutdown() {
	c.killAll()
}

// errPollTimeout is poll's error when timeout passed.
var errPollTimeout = errors.New("timed out")

// poll calls cond every pollInterval until it returns true or an error,
// ctx ends or timeout passes (errPollTimeout). It is for waiting on other
// processes, which cannot signal the test.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if !time.Now().Before(deadline) {
			return errPollTimeout
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// copyLogs copies every member's log into dir.
func (c *cluster) copyLogs(dir string) {
	for _, m := range c.members {
		b, err := os.ReadFile(m.logPath)
		if err == nil {
			os.WriteFile(filepath.Join(dir, m.id+".log"), b, 0o644)
		}
	}
}

// keepLogs copies every member's log into a new artefact directory, for a
// run that failed before it had a history to write, and returns a phrase
// for the failure's message: the directory, and the last warnings and
// errors of each node (a CI machine's directories are gone with it).
func (c *cluster) keepLogs(seed uint64) string {
	dir, err := artefactDir(seed)
	if err != nil {
		return fmt.Sprintf(" (node logs not kept: %v)%s", err, c.logTails(tailLines))
	}
	c.copyLogs(dir)
	return " (node logs in " + dir + ")" + c.logTails(tailLines)
}

// keepLogsIfFailed keeps the node logs as keepLogs does when t failed, and
// says where.
func (c *cluster) keepLogsIfFailed(t *testing.T) {
	if t.Failed() {
		t.Log("node logs:" + c.keepLogs(0))
	}
}

// tailLines is how many warnings and errors of each node logTails gives.
const tailLines = 12

// logTails returns the last n warning and error lines of each member's
// log, one block per member.
func (c *cluster) logTails(n int) string {
	var b strings.Builder
	for _, m := range c.members {
		data, err := os.ReadFile(m.logPath)
		if err != nil {
			continue
		}
		var lines []string
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "[WARN]") || strings.Contains(l, "[ERROR]") || strings.Contains(l, "=== cluster-test") {
				lines = append(lines, l)
			}
		}
		lines = lines[max(0, len(lines)-n):]
		fmt.Fprintf(&b, "\n--- %s: last %d warnings and errors\n%s", m.id, len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

// scanLogs returns a problem for every node log that holds a Go panic or
// fatal runtime error.
func (c *cluster) scanLogs() []string {
	var out []string
	for _, m := range c.members {
		b, err := os.ReadFile(m.logPath)
		if err != nil {
			continue
		}
		for _, needle := range []string{"panic: ", "fatal error: ", "WARNING: DATA RACE"} {
			if i := bytes.Index(b, []byte(needle)); i >= 0 {
				end := min(len(b), i+2048)
				out = append(out, fmt.Sprintf("node %s log holds %q:\n%s", m.id, strings.TrimSpace(needle), b[i:end]))
			}
		}
	}
	return out
}

// String names m for messages.
func (m *member) String() string { return m.id }
