package clustertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/raftlog/raftlog/client"
)

// runConfig describes one run: a cluster, a workload and a nemesis.
type runConfig struct {
	seed         uint64
	nodes        int
	flush        string      // "" or "async"
	kinds        []faultKind // the nemeses to mix; none: no faults
	duration     time.Duration
	quiet        time.Duration    // fault-free end of the workload
	hold         [2]time.Duration // a fault lasts between hold[0] and hold[1]
	gap          time.Duration    // quiet spell between faults
	overlap      float64          // probability of a second fault while one holds
	workload     workloadConfig
	checkTimeout time.Duration // porcupine gives up after this
	// logs, when not 0, is how many named logs (of logReplicas replicas)
	// the run creates beside the default log, each with a workload of
	// its own shaped like workload and checked on its own. A node that
	// loses its data dir gets its replicas of them rebuilt, and the
	// nemesis waits for that before it strikes again (caughtUp).
	logs int
	// wantPartialLeaderKill makes the run fail unless a node was
	// SIGKILLed while it led some of the logs it held and not others.
	wantPartialLeaderKill bool
	// replay is the command that replays the run; "" for TestRandomized's.
	replay string
	// wantSnapshotInstall makes the run fail unless some node installed
	// a snapshot a leader streamed to it.
	wantSnapshotInstall bool
	// wantSnapshotRejoin makes the run fail unless a wiped node was
	// rebuilt from a snapshot stream after a trim (see
	// nemesis.snapshotRejoins).
	wantSnapshotRejoin bool
	// wantRebuild makes the run fail unless a wiped node got a replica
	// of a named log back, rebuilt (see cluster.waitRebuilt).
	wantRebuild bool
}

func (rc runConfig) String() string {
	flush := rc.flush
	if flush == "" {
		flush = "sync"
	}
	var kinds []string
	for _, k := range rc.kinds {
		kinds = append(kinds, string(k))
	}
	w := rc.workload
	trim := "no trims"
	if w.trimEvery > 0 {
		trim = fmt.Sprintf("a trim every %v or so", w.trimEvery)
	}
	logs := ""
	if rc.logs > 0 {
		logs = fmt.Sprintf(", %d named logs of %d replicas beside the default log, each with this workload", rc.logs, logReplicas)
	}
	return fmt.Sprintf("seed %d: %d nodes, flush %s, %v, faults [%s] overlapping with probability %.2f, workload %d retrying + %d one-shot + %d batch appenders, %d readers, %d stale readers, tail %v, %s%s",
		rc.seed, rc.nodes, flush, rc.duration, strings.Join(kinds, " "), rc.overlap, w.retryAppenders, w.onceAppenders, w.batchAppenders, w.readers, w.staleReaders, w.tail, trim, logs)
}

// seededConfig derives a randomized run from seed: the cluster size, the
// flush mode, the nemeses to mix, the workload's shape, whether it trims
// (half of the seeds do; the choice has a random stream of its own, so
// that it changes nothing else a seed chose before trims existed) and
// whether it runs named logs (a third do, by a stream of its own too).
func seededConfig(seed uint64, duration time.Duration) runConfig {
	rng := rand.New(rand.NewPCG(seed, 0x636667))
	rc := runConfig{
		seed:         seed,
		nodes:        3,
		duration:     duration,
		quiet:        3 * time.Second,
		hold:         [2]time.Duration{time.Second, 2500 * time.Millisecond},
		gap:          time.Duration(200+rng.IntN(800)) * time.Millisecond,
		checkTimeout: 2 * time.Minute,
	}
	if rng.IntN(3) == 0 {
		rc.nodes = 5
	}
	if rng.IntN(2) == 0 {
		rc.overlap = 0.4
	}
	if rng.IntN(4) == 0 {
		rc.flush = "async"
	}
	perm := rng.Perm(len(allFaults))
	for _, p := range perm[:4+rng.IntN(len(allFaults)-3)] {
		rc.kinds = append(rc.kinds, allFaults[p])
	}
	rc.workload = workloadConfig{
		duration:       duration,
		retryAppenders: 1 + rng.IntN(3),
		onceAppenders:  1 + rng.IntN(2),
		batchAppenders: rng.IntN(2),
		readers:        1 + rng.IntN(2),
		staleReaders:   rng.IntN(2),
		tail:           true,
		opsPerWorker:   200,
	}
	rc.workload.think = duration / time.Duration(rc.workload.opsPerWorker)
	if trng := rand.New(rand.NewPCG(seed, 0x7472696d)); trng.IntN(2) == 0 {
		rc.workload.trimEvery = time.Duration(500+trng.IntN(1500)) * time.Millisecond
	}
	// A third of the seeds (not the CI seeds, ciSeeds) run three named
	// logs beside the default log, with kill-log-leader among the
	// nemeses. The choice has a random stream of its own too.
	if lrng := rand.New(rand.NewPCG(seed, 0x6c6f6773)); lrng.IntN(3) == 0 {
		rc.logs = seededLogs
		rc.kinds = append(rc.kinds, faultKillLogLeader)
	}
	return rc
}

// seededLogs is how many named logs the randomized runs that run named
// logs create.
const seededLogs = 3

// runStats is what a run did, for summaries.
type runStats struct {
	ops          int // operations recorded
	checked      int // operations in the linearizability check
	faults       map[faultKind]int
	violations   int
	inconclusive bool // porcupine gave up
	checkTime    time.Duration
	dir          string // where a failing run wrote its artefacts
	trims        int    // trims acknowledged
	trimmedReads int    // linearizable and stale reads that failed with Trimmed
}

// runCluster runs rc on a new cluster, checks the history and reports
// violations, with the seed and the path of the artefacts, as errors of t.
func runCluster(t *testing.T, rc runConfig) runStats {
	t.Helper()
	nodeBinary(t)
	kinds := usableFaults(rc.kinds, rc.nodes, binFaults)
	if left := leftOut(rc.kinds, kinds); len(left) > 0 {
		t.Logf("leaving out %v: too few nodes, or node serve has no --fault-injection", left)
	}
	if rc.logs == 0 {
		kinds = withoutLogFaults(kinds)
	}
	inject := false
	for _, k := range kinds {
		inject = inject || k.needsFaultInjection()
	}
	t.Logf("run %v", rc)
	c := newCluster(t, clusterConfig{nodes: rc.nodes, flush: rc.flush, faults: inject})
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if rc.logs > 0 {
		if err := c.createLogs(ctx, rc.logs, logReplicas); err != nil {
			t.Fatalf("seed %d: %v%s", rc.seed, err, c.keepLogs(rc.seed))
		}
	}
	w, named, err := startWorkloads(ctx, c, rec, rc.workload, rc.seed)
	if err != nil {
		t.Fatalf("seed %d: %v%s", rc.seed, err, c.keepLogs(rc.seed))
	}
	probe := func(ctx context.Context) {
		w.probe(ctx)
		for _, nw := range named {
			nw.probe(ctx)
		}
	}
	nm := newNemesis(c, rec, rc.seed, rc.hold, rc.overlap, probe)
	done := make(chan struct{})
	go func() {
		defer close(done)
		nm.run(ctx, kinds, w.deadline.Add(-rc.quiet), rc.gap)
	}()
	<-done
	installs := c.snapshotInstalls()
	t.Logf("seed %d: %d snapshot streams installed", rc.seed, installs)
	if rc.wantSnapshotInstall && installs == 0 {
		t.Errorf("seed %d: no node installed a snapshot streamed from a leader (faults %s)", rc.seed, formatCounts(nm.faultCounts()))
	}
	if rc.wantSnapshotRejoin {
		if n := nm.snapshotRejoinCount(); n == 0 {
			t.Errorf("seed %d: no wiped node was rebuilt from a snapshot after a trim (faults %s)", rc.seed, formatCounts(nm.faultCounts()))
		} else {
			t.Logf("seed %d: %d wiped nodes rebuilt from a snapshot after a trim", rc.seed, n)
		}
	}
	if rc.logs > 0 {
		n := nm.partialLeaderKillCount()
		t.Logf("seed %d: %d SIGKILLs of a node leading some of its logs and not others", rc.seed, n)
		if rc.wantPartialLeaderKill && n == 0 {
			t.Errorf("seed %d: no node was SIGKILLed while leading some of its logs and not others (faults %s)", rc.seed, formatCounts(nm.faultCounts()))
		}
		r := nm.rebuildCount()
		t.Logf("seed %d: %d replicas of named logs rebuilt on wiped nodes", rc.seed, r)
		if rc.wantRebuild && r == 0 {
			t.Errorf("seed %d: no wiped node got a replica of a named log back (faults %s)", rc.seed, formatCounts(nm.faultCounts()))
		}
	}
	replay := rc.replay
	if replay == "" {
		replay = fmt.Sprintf("RAFTLOG_SEED=%d go test -run TestRandomized -v ./cluster-test/", rc.seed)
	}
	return verify(t, verification{
		c: c, rec: rec, w: w, named: named, seed: rc.seed, what: "run " + rc.String(),
		replay:       replay + " (the schedule replays; timing does not)",
		problems:     nm.failures(),
		faults:       nm.faultCounts(),
		checkTimeout: rc.checkTimeout,
	})
}

// startLightWorkloads starts, for the 20 s of a test that moves
// replicas, a light workload on the default log and on each named log of c
// (startWorkloads): a retrying and a one-shot appender, a reader and a
// tail each. They stop when the test ends, if verify has not waited for
// them.
func startLightWorkloads(ctx context.Context, t *testing.T, c *cluster, rec *recorder, seed uint64) (*workload, []*workload) {
	t.Helper()
	const duration = 20 * time.Second
	w, named, err := startWorkloads(ctx, c, rec, workloadConfig{
		duration: duration, retryAppenders: 1, onceAppenders: 1, readers: 1, tail: true,
		opsPerWorker: 150, think: duration / 150,
	}, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.stop()
		for _, nw := range named {
			nw.stop()
		}
	})
	return w, named
}

// startWorkloads starts a workload shaped by cfg on the default log and
// one on each named log of c (c.logs), each with a seed of its own
// derived from seed.
func startWorkloads(ctx context.Context, c *cluster, rec *recorder, cfg workloadConfig, seed uint64) (*workload, []*workload, error) {
	w, err := startWorkload(ctx, c, rec, cfg, seed)
	if err != nil {
		return nil, nil, fmt.Errorf("starting the workload: %w", err)
	}
	var named []*workload
	for i, l := range c.logs {
		lcfg := cfg
		lcfg.log = l.name
		nw, err := startWorkload(ctx, c, rec, lcfg, seed^uint64(i+1)<<40)
		if err != nil {
			return nil, nil, fmt.Errorf("starting the workload of log %s: %w", l.name, err)
		}
		named = append(named, nw)
	}
	return w, named, nil
}

// verification is what verify needs of a run.
type verification struct {
	c            *cluster
	rec          *recorder
	w            *workload   // nil when the test appended on its own
	named        []*workload // the workloads of the cluster's named logs (c.logs), in order
	seed         uint64
	what         string   // the run, for the report
	replay       string   // how to run it again
	problems     []string // found during the run
	faults       map[faultKind]int
	checkTimeout time.Duration
}

// verify heals the cluster, checks that it serves appends again, waits for
// the workload, reads every node's final log and runs every check. It
// reports violations as errors of t, with the seed and the path of a
// directory holding the history, porcupine's visualisation, the final logs
// and the node logs.
func verify(t *testing.T, v verification) runStats {
	t.Helper()
	ctx := context.Background()
	c, rec := v.c, v.rec
	problems := v.problems
	if err := c.heal(ctx); err != nil {
		problems = append(problems, "the cluster did not recover after the faults were healed: "+err.Error())
	}
	healed := rec.now()
	if v.w != nil {
		v.w.probe(ctx)
		for _, nw := range v.named {
			nw.probe(ctx)
		}
	} else if err := livenessAppend(ctx, c, rec); err != nil {
		problems = append(problems, "liveness: "+err.Error())
	}
	names := append([]string{""}, logNames(c.logs)...)
	multi := len(names) > 1
	// prefix names the log in a violation when the run has several.
	prefix := func(name string) string {
		if !multi {
			return ""
		}
		return "log " + logLabel(name) + ": "
	}
	h := rec.snapshot()
	for _, name := range names {
		if !ackedAfter(h.forLog(name), healed) {
			problems = append(problems, fmt.Sprintf("%sliveness: no append acknowledged within %v after the cluster healed at %s", prefix(name), opTimeout, fmtNanos(healed)))
		}
	}
	if v.w != nil {
		v.w.wait()
		for _, nw := range v.named {
			nw.wait()
		}
	}

	h = rec.snapshot()
	st := runStats{ops: len(h.Ops), faults: v.faults}
	var checks []logCheck
	for _, name := range names {
		logs, err := c.finalLogs(ctx, name)
		if err != nil {
			problems = append(problems, prefix(name)+"reading the final logs: "+err.Error())
		}
		lh := h.forLog(name)
		res := checkRun(lh, logs, v.checkTimeout)
		for _, p := range res.violations {
			problems = append(problems, prefix(name)+p)
		}
		checks = append(checks, logCheck{name: name, logs: logs, res: res})
		st.checked += res.checkedOps
		st.checkTime += res.checkTime
		st.inconclusive = st.inconclusive || res.linearizable == porcupine.Unknown
		if multi {
			t.Logf("seed %d: log %s: %s; final floor %d; %d checked for linearizability: %s in %v; %d violations",
				v.seed, logLabel(name), describeOps(lh), res.floor, res.checkedOps, res.linearizable, res.checkTime.Round(time.Millisecond), len(res.violations))
		}
	}
	problems = append(problems, c.takeProblems()...)
	problems = append(problems, c.scanLogs()...)
	for _, n := range dedupe(c.takeNotes()) {
		t.Logf("note: %s", n)
	}

	st.violations = len(problems)
	for _, op := range h.Ops {
		switch {
		case op.Kind == kindTrim && op.OK:
			st.trims++
		case op.Trimmed:
			st.trimmedReads++
		}
	}
	if multi {
		t.Logf("seed %d: %d logs: %d operations; %d checked for linearizability in %v; faults %s; %d violations",
			v.seed, len(names), st.ops, st.checked, st.checkTime.Round(time.Millisecond), formatCounts(st.faults), len(problems))
	} else {
		res := checks[0].res
		t.Logf("seed %d: %s; final floor %d; %d checked for linearizability: %s in %v; faults %s; %d violations",
			v.seed, describeOps(h), res.floor, st.checked, res.linearizable, res.checkTime.Round(time.Millisecond), formatCounts(st.faults), len(problems))
	}
	if st.inconclusive {
		t.Logf("seed %d: porcupine gave up after %v: linearizability not decided", v.seed, v.checkTimeout)
	}
	if len(problems) > 0 {
		header := fmt.Sprintf("%s\n%d violations:", v.what, len(problems))
		dir, err := artefactDir(v.seed)
		if err == nil {
			err = writeArtefacts(dir, c, h, checks, header+"\n"+strings.Join(problems, "\n"))
		}
		if err != nil {
			t.Logf("writing the artefacts: %v", err)
		}
		st.dir = dir
		t.Errorf("FAILED seed %d: %s\nreplay: %s\nhistory, porcupine visualisation, final logs and node logs: %s\n%s",
			v.seed, header, v.replay, dir, strings.Join(problems, "\n"))
	}
	return st
}

// logCheck is the final logs of one log of a run and its checks.
type logCheck struct {
	name string // "" for the default log
	logs []nodeLog
	res  *checkResult
}

// livenessAppend appends one record to the default log, and one to each
// named log of c, through a new Client and records them.
func livenessAppend(ctx context.Context, c *cluster, rec *recorder) error {
	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	var errs []error
	for _, name := range append([]string{""}, logNames(c.logs)...) {
		prefix := ""
		if name != "" {
			prefix = name + "/"
		}
		actx, cancel := context.WithTimeout(ctx, opTimeout)
		_, err = appendRecordedLog(actx, cl.Log(name), rec, name, 0, fmt.Sprintf("%sliveness-%d", prefix, rec.now()))
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("log %s: %w", logLabel(name), err))
		}
	}
	return errors.Join(errs...)
}

// appendRecorded appends one record to the default log and records the
// operation on lane.
func appendRecorded(ctx context.Context, cl *client.Client, rec *recorder, lane int, data string) (uint64, error) {
	return appendRecordedLog(ctx, cl.Log(""), rec, "", lane, data)
}

// appendRecordedLog appends one record through g, a handle on the log
// named log ("" for the default log), and records the operation on lane.
func appendRecordedLog(ctx context.Context, g *client.Log, rec *recorder, log string, lane int, data string) (uint64, error) {
	op := &operation{Log: log, Lane: lane, Kind: kindAppend, Record: data}
	op.Call = rec.now()
	idx, err := g.Append(ctx, []byte(data))
	op.Return = rec.now()
	if err != nil {
		op.Err = err.Error()
	} else {
		op.OK, op.Index = true, idx[0]
	}
	rec.add(op)
	if err != nil {
		return 0, err
	}
	return op.Index, nil
}

// leftOut returns the kinds of all that are not in some.
func leftOut(all, some []faultKind) []faultKind {
	var out []faultKind
	for _, k := range all {
		found := false
		for _, x := range some {
			found = found || x == k
		}
		if !found {
			out = append(out, k)
		}
	}
	return out
}

// ackedAfter reports whether h holds an append acknowledged after t.
func ackedAfter(h history, t int64) bool {
	for _, op := range h.Ops {
		if op.Kind == kindAppend && op.OK && op.Return >= t {
			return true
		}
	}
	return false
}

// describeOps counts a history's operations by kind and outcome.
func describeOps(h history) string {
	count := map[string]int{}
	for _, op := range h.Ops {
		outcome := "ok"
		switch {
		case op.Trimmed:
			outcome = "trimmed"
		case !op.OK:
			outcome = "failed"
		}
		count[op.Kind+" "+outcome]++
	}
	tail, tailErrs, restarts := 0, 0, 0
	for _, ev := range h.Tail {
		if ev.Record != nil {
			tail++
		} else {
			tailErrs++
		}
		if ev.Restart {
			restarts++
		}
	}
	return fmt.Sprintf("%d operations: appends %d acknowledged, %d unknown; reads %d ok, %d trimmed, %d failed; stale reads %d ok, %d trimmed, %d failed; trims %d acknowledged, %d unknown; tail %d records, %d errors (%d reopened after a trim)",
		len(h.Ops), count["append ok"], count["append failed"], count["read ok"], count["read trimmed"], count["read failed"],
		count["stale-read ok"], count["stale-read trimmed"], count["stale-read failed"], count["trim ok"], count["trim failed"], tail, tailErrs, restarts)
}

func dedupe(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// formatCounts formats fault counts in a fixed order.
func formatCounts(m map[faultKind]int) string {
	var parts []string
	for _, k := range append(slices.Clone(allFaults), logFaults...) {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// finalLogs waits until every member of the log name ("" for the
// default log) has applied what its leader has committed, then reads
// each member's whole log with stale reads from that member, up to that
// commit index (appends that commit later were never seen by any
// operation).
func (c *cluster) finalLogs(ctx context.Context, name string) ([]nodeLog, error) {
	lead, err := c.waitLogHealthy(ctx, name, healthyTimeout)
	if err != nil {
		return nil, err
	}
	// A leader elected just now reports the commit index raft restarted
	// with (0 after a restart) until its stint's first entry commits:
	// wait until it has committed every entry it holds, or the read below
	// would stop short of records it was acknowledged for.
	var m *member
	for _, x := range c.logMembers(name) {
		if x.id == lead.ID {
			m = x
		}
	}
	if m == nil {
		return nil, fmt.Errorf("the leader %s of log %q is not one of its members", lead.ID, name)
	}
	err = poll(ctx, catchUpTimeout, func() (bool, error) {
		st, err := m.logStatus(name)
		if err != nil || st.Role != "Leader" || st.Term != lead.Term {
			return false, nil // polled again until the timeout
		}
		lead = st
		return st.CommitIndex >= st.LastIndex, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the leader %s of log %q did not commit its entries (commit index %d, last %d): %w", lead.ID, name, lead.CommitIndex, lead.LastIndex, err)
	}
	upTo := lead.CommitIndex
	if err := c.waitLogApplied(ctx, name, upTo, catchUpTimeout); err != nil {
		return nil, err
	}
	cl, err := client.Dial(ctx, c.clientAddrs(), &client.Options{RetryTimeout: 20 * time.Second})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	g := cl.Log(name)
	var logs []nodeLog
	for _, m := range c.logMembers(name) {
		l := nodeLog{Node: m.id}
		if st, err := m.logStatus(name); err != nil {
			l.Err = err.Error()
		} else {
			l.Floor = st.FirstIndex
		}
		var from uint64
	read:
		for range 100_000 {
			recs, next, err := g.Read(ctx, from, client.ReadOptions{Stale: true, Addr: m.clientAddr, MaxRecords: 4096})
			if err != nil {
				l.Err = err.Error()
				break
			}
			for _, r := range recs {
				if r.Index > upTo {
					break read
				}
				l.Entries = append(l.Entries, entry{Index: r.Index, Data: string(r.Data)})
			}
			if len(recs) == 0 || next > upTo {
				break
			}
			from = next
		}
		logs = append(logs, l)
	}
	return logs, nil
}

// ciSeeds are the seeds of TestRandomized in CI.
var ciSeeds = []uint64{1, 7}

// envSeed returns RAFTLOG_SEED, if set.
func envSeed(t *testing.T) (uint64, bool) {
	s := os.Getenv("RAFTLOG_SEED")
	if s == "" {
		return 0, false
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("RAFTLOG_SEED=%q: %v", s, err)
	}
	return seed, true
}

// TestRandomized runs randomized runs from a fixed list of seeds, in
// parallel, or the one seed in RAFTLOG_SEED: each seed picks the cluster
// size, flush mode, nemeses and workload, and the nemesis schedule.
func TestRandomized(t *testing.T) {
	skipShort(t)
	seeds := ciSeeds
	duration := 20 * time.Second
	if s, ok := envSeed(t); ok {
		seeds = []uint64{s}
		duration = 30 * time.Second
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			t.Parallel()
			runCluster(t, seededConfig(seed, duration))
		})
	}
}

// TestNemeses runs each nemesis on its own against a small workload, on
// a cluster of its own; the subtests run in parallel (go test -parallel).
func TestNemeses(t *testing.T) {
	skipShort(t)
	nodeBinary(t)
	const duration = 8 * time.Second
	for i, k := range allFaults {
		t.Run(string(k), func(t *testing.T) {
			if k.needsFaultInjection() && !binFaults {
				t.Skip("node serve has no --fault-injection flag yet")
			}
			t.Parallel() // two small clusters at a time: they mostly wait
			runCluster(t, nemesisConfig(uint64(100+i), k.minNodes(), duration, k))
		})
	}
	// Trims while followers are killed: a follower that comes back more
	// than the trimmed tail behind must be sent a snapshot stream.
	t.Run("trim-kill-follower", func(t *testing.T) {
		t.Parallel()
		runCluster(t, trimNemesisConfig(131, duration, faultKillFollower))
	})
	// Trims while nodes are killed and wiped: a wiped node rejoins after
	// the leader has dropped the log below the floor, so it must be
	// rebuilt from a snapshot stream, and the run fails unless one was.
	// It failed every time until the node stopped letting hashicorp/raft
	// wipe the log of a follower holding entries past an installed
	// snapshot (node/failstop.go).
	t.Run("trim-wipe-kill-follower", func(t *testing.T) {
		t.Parallel()
		// One fault at a time: with a kill or a second wipe on top of a
		// wipe, a 3-node cluster can be left with one voter that holds
		// data until the wiped node is promoted, and stall.
		rc := trimNemesisConfig(132, duration, faultWipe, faultKillFollower)
		rc.wantSnapshotRejoin = true
		runCluster(t, rc)
	})
}

// trimNemesisConfig is the run of a TestNemeses subtest that trims every
// 400ms or so while the nemeses kinds strike a 3-node cluster, and that
// fails unless some node installed a snapshot stream.
func trimNemesisConfig(seed uint64, duration time.Duration, kinds ...faultKind) runConfig {
	rc := nemesisConfig(seed, 3, duration, kinds...)
	rc.workload.readers = 2
	rc.workload.trimEvery = 400 * time.Millisecond
	rc.wantSnapshotInstall = true
	return rc
}

// nemesisConfig is the run of one TestNemeses subtest: a small workload
// of every kind of client under the given faults, one at a time.
func nemesisConfig(seed uint64, nodes int, duration time.Duration, kinds ...faultKind) runConfig {
	return runConfig{
		seed:     seed,
		nodes:    nodes,
		kinds:    kinds,
		duration: duration,
		quiet:    2 * time.Second,
		hold:     [2]time.Duration{time.Second, 1500 * time.Millisecond},
		gap:      300 * time.Millisecond,
		workload: workloadConfig{
			duration:       duration,
			retryAppenders: 2,
			onceAppenders:  1,
			batchAppenders: 1,
			readers:        1,
			staleReaders:   1,
			tail:           true,
			opsPerWorker:   100,
			think:          duration / 100,
		},
		checkTimeout: time.Minute,
	}
}

// TestAsyncFlushCrash runs a cluster with --flush async and SIGKILLs its
// nodes, one at a time and all at once: a process crash keeps what the
// process wrote in the page cache, so nothing acknowledged may be lost.
// (A power loss could lose it; this test cannot show that and does not.)
func TestAsyncFlushCrash(t *testing.T) {
	skipShort(t)
	const duration = 15 * time.Second
	runCluster(t, runConfig{
		seed:     31,
		nodes:    3,
		flush:    "async",
		kinds:    []faultKind{faultKillLeader, faultKillRandom, faultKillAll},
		overlap:  0.3,
		duration: duration,
		quiet:    2 * time.Second,
		hold:     [2]time.Duration{200 * time.Millisecond, time.Second},
		gap:      300 * time.Millisecond,
		workload: workloadConfig{
			duration:       duration,
			retryAppenders: 3,
			onceAppenders:  1,
			batchAppenders: 1,
			readers:        1,
			tail:           true,
			opsPerWorker:   300,
			think:          duration / 300,
		},
		checkTimeout: time.Minute,
	})
}

// TestSoak runs randomized runs with new seeds for RAFTLOG_SOAK (a
// duration) and prints a summary: duration, operations checked, faults
// injected per kind, violations. Without RAFTLOG_SOAK it is skipped.
func TestSoak(t *testing.T) {
	skipShort(t)
	s := os.Getenv("RAFTLOG_SOAK")
	if s == "" {
		t.Skip("set RAFTLOG_SOAK=<duration> to soak")
	}
	total, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("RAFTLOG_SOAK=%q: %v", s, err)
	}
	start := time.Now()
	end := start.Add(total)
	if d, ok := t.Deadline(); ok && d.Add(-2*time.Minute).Before(end) {
		end = d.Add(-2 * time.Minute)
		t.Logf("go test's -timeout cuts the soak to %v; use -timeout 0", time.Until(end).Round(time.Second))
	}
	var (
		runs, ops, checked, violations, inconclusive int
		trimRuns, trims, trimmedReads                int
		logRuns                                      int
		faults                                       = map[faultKind]int{}
		failed                                       []string
	)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	for {
		seed := rng.Uint64() % 1_000_000_000
		rc := seededConfig(seed, time.Duration(20+rand.N(21))*time.Second)
		if time.Now().Add(rc.duration + 30*time.Second).After(end) {
			break
		}
		runs++
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			st := runCluster(t, rc)
			ops += st.ops
			checked += st.checked
			if rc.workload.trimEvery > 0 {
				trimRuns++
			}
			if rc.logs > 0 {
				logRuns++
			}
			trims += st.trims
			trimmedReads += st.trimmedReads
			violations += st.violations
			if st.inconclusive {
				inconclusive++
			}
			for k, v := range st.faults {
				faults[k] += v
			}
			if st.violations > 0 {
				failed = append(failed, fmt.Sprintf("seed %d: %d violations, artefacts in %s", seed, st.violations, st.dir))
			}
		})
	}
	var kinds []string
	for k := range faults {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	total2 := 0
	for _, v := range faults {
		total2 += v
	}
	summary := fmt.Sprintf("soak summary: %v, %d runs with new seeds (%d trimming: %d trims acknowledged, %d reads answered Trimmed; %d with %d named logs), %d operations recorded, %d checked for linearizability (%d checks inconclusive), %d faults injected (%s), %d violations",
		time.Since(start).Round(time.Second), runs, trimRuns, trims, trimmedReads, logRuns, seededLogs, ops, checked, inconclusive, total2, formatCounts(faults), violations)
	if len(failed) > 0 {
		summary += "\nfailing seeds:\n  " + strings.Join(failed, "\n  ")
	}
	t.Log(summary)
	fmt.Println(summary)
}
