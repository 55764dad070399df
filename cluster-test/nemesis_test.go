package clustertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// faultKind names a nemesis.
type faultKind string

// The nemeses. Each injects its fault, holds it, heals it and waits until
// the cluster is healthy again.
const (
	faultKillLeader    faultKind = "kill-leader"     // SIGKILL the leader, restart it
	faultKillFollower  faultKind = "kill-follower"   // SIGKILL a follower, restart it
	faultKillRandom    faultKind = "kill-random"     // SIGKILL any node, restart it
	faultKillAll       faultKind = "kill-all"        // SIGKILL every node at once, restart them
	faultStopRestart   faultKind = "sigterm-restart" // SIGTERM any node (it must exit 0), restart it
	faultPauseLeader   faultKind = "pause-leader"    // SIGSTOP the leader, SIGCONT it
	faultPauseRandom   faultKind = "pause-random"    // SIGSTOP any node, SIGCONT it
	faultPartition     faultKind = "partition"       // cut a random minority off the majority
	faultIsolateLeader faultKind = "isolate-leader"  // cut the leader off from everyone
	faultBridge        faultKind = "bridge"          // 5 nodes: two halves that only a bridge node connects
	faultDisk          faultKind = "disk-failure"    // fail a node's disk; it must stop; wipe it and rejoin
	faultDiskFull      faultKind = "disk-full"       // a node's disk is full (ENOSPC), then no longer
	faultWipe          faultKind = "wipe"            // SIGKILL a node, delete its data dir, rejoin with --join
	// SIGKILL a node, delete its data dir, and restart it at once with its
	// original flags (--bootstrap), as a unit file does after a disk is
	// replaced: it must rejoin as a new member, never vote with its empty
	// log.
	faultWipeBootstrap faultKind = "wipe-bootstrap"
	// SIGKILL the leader of a named log chosen at random, restart it: a
	// node that leads that log and, as leaders spread, not all of the
	// others. Only in runs with named logs (not in allFaults).
	faultKillLogLeader faultKind = "kill-log-leader"
)

// allFaults lists every nemesis.
var allFaults = []faultKind{
	faultKillLeader, faultKillFollower, faultKillRandom, faultKillAll, faultStopRestart,
	faultPauseLeader, faultPauseRandom,
	faultPartition, faultIsolateLeader, faultBridge,
	faultDisk, faultDiskFull, faultWipe, faultWipeBootstrap,
}

// logFaults lists the nemeses that only runs with named logs use.
var logFaults = []faultKind{faultKillLogLeader}

// needsFaultInjection reports whether k needs nodes started with
// --fault-injection.
func (k faultKind) needsFaultInjection() bool {
	switch k {
	case faultPartition, faultIsolateLeader, faultBridge, faultDisk, faultDiskFull:
		return true
	}
	return false
}

// losesData reports whether k deletes a node's data dir.
func (k faultKind) losesData() bool {
	return k == faultDisk || k == faultWipe || k == faultWipeBootstrap
}

// minNodes is the smallest cluster k makes sense on.
func (k faultKind) minNodes() int {
	if k == faultBridge {
		return 5
	}
	return 3
}

// usableFaults returns the kinds of kinds that a cluster of n nodes can
// suffer, given whether the node binary can inject faults.
func usableFaults(kinds []faultKind, n int, canInject bool) []faultKind {
	var out []faultKind
	for _, k := range kinds {
		if n >= k.minNodes() && (canInject || !k.needsFaultInjection()) {
			out = append(out, k)
		}
	}
	return out
}

// overlapFaults are the kinds that may be injected while another fault
// holds, on a node that fault spares.
var overlapFaults = []faultKind{faultKillRandom, faultPauseRandom, faultWipe, faultWipeBootstrap}

// nemesis injects faults into a cluster: one at a time, or with
// probability overlap a second one while the first holds.
type nemesis struct {
	c       *cluster
	rec     *recorder
	rng     *rand.Rand
	hold    [2]time.Duration          // a fault lasts between hold[0] and hold[1]
	overlap float64                   // the probability of a second, overlapping fault
	probe   func(ctx context.Context) // appends one record through the workload, to make nodes write

	mu     sync.Mutex // guards the fields below
	counts map[faultKind]int
	errs   []string // the cluster did not recover, a fault could not be injected
	// snapshotRejoins counts wiped members that came back with a floor
	// above 1 and whose log shows that they installed a snapshot a
	// leader streamed to them: they were rebuilt from a snapshot stream
	// after a trim.
	snapshotRejoins int
	// partialLeaderKills counts SIGKILLs of a node that led some of the
	// logs it held and not others (runs with named logs only).
	partialLeaderKills int
	// rebuilds counts the replicas of named logs that wiped members got
	// back, rebuilt (cluster.waitRebuilt).
	rebuilds int
}

func newNemesis(c *cluster, rec *recorder, seed uint64, hold [2]time.Duration, overlap float64, probe func(context.Context)) *nemesis {
	return &nemesis{c: c, rec: rec, rng: rand.New(rand.NewPCG(seed, 0x6e656d)), hold: hold, overlap: overlap, probe: probe, counts: map[faultKind]int{}}
}

// activeFault is an injected fault that awaits its heal.
type activeFault struct {
	kind    faultKind
	start   int64     // history time of the injection
	targets []*member // the members it hit
	detail  string
	heal    func(ctx context.Context) error // resumes, restarts, heals partitions; nil for none
	rejoin  func(ctx context.Context) error // brings wiped members back, after every heal; nil for none
}

// run injects faults of the given kinds, chosen at random, separated by
// gap, until the next one could not end before until. It stops at the
// first fault after which the cluster does not recover.
func (n *nemesis) run(ctx context.Context, kinds []faultKind, until time.Time, gap time.Duration) {
	var seconds []faultKind
	for _, k := range overlapFaults {
		for _, x := range kinds {
			if k == x {
				seconds = append(seconds, k)
			}
		}
	}
	for ctx.Err() == nil && len(kinds) > 0 {
		if time.Now().Add(n.hold[1]).After(until) {
			return
		}
		ks := []faultKind{kinds[n.rng.IntN(len(kinds))]}
		if len(seconds) > 0 && n.rng.Float64() < n.overlap {
			k := seconds[n.rng.IntN(len(seconds))]
			// One lost data dir at a time: two at once may hold every
			// copy of an entry, which no protocol could keep.
			if !(k.losesData() && ks[0].losesData()) {
				ks = append(ks, k)
			}
		}
		if err := n.inject(ctx, ks...); err != nil {
			return
		}
		t := time.NewTimer(gap) // a quiet spell between faults
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// faultCounts returns how many faults of each kind were injected.
func (n *nemesis) faultCounts() map[faultKind]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[faultKind]int, len(n.counts))
	for k, v := range n.counts {
		out[k] = v
	}
	return out
}

// failures returns the nemesis's failures.
func (n *nemesis) failures() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.errs...)
}

// inject injects faults of the kinds ks, each on members the earlier ones
// spared, holds them, heals them in reverse order, brings wiped members
// back and waits until the cluster is healthy.
func (n *nemesis) inject(ctx context.Context, ks ...faultKind) (err error) {
	var active []*activeFault
	busy := map[*member]bool{}
	defer func() {
		end := n.rec.now()
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, f := range active {
			ev := faultEvent{Kind: string(f.kind), Start: f.start, End: end, Detail: f.detail}
			if len(active) > 1 {
				ev.Detail += fmt.Sprintf(" (one of %d overlapping faults)", len(active))
			}
			n.counts[f.kind]++
			if err != nil && ctx.Err() == nil {
				ev.Err = err.Error()
			}
			n.rec.addFault(ev)
		}
		if err != nil && ctx.Err() == nil {
			var what []string
			for _, f := range active {
				what = append(what, fmt.Sprintf("%s at %s (%s)", f.kind, fmtNanos(f.start), f.detail))
			}
			if len(what) == 0 {
				what = append(what, fmt.Sprint(ks))
			}
			n.errs = append(n.errs, fmt.Sprintf("%s: %v", strings.Join(what, " with "), err))
		}
	}()
	for i, k := range ks {
		f, ferr := n.start(ctx, k, busy, i > 0)
		if f == nil && ferr == nil {
			continue // no member to spare for a second fault
		}
		if f != nil {
			active = append(active, f)
			for _, m := range f.targets {
				busy[m] = true
			}
		}
		if ferr != nil {
			n.healAll(ctx, active)
			return ferr
		}
	}
	d := n.holdFor(ctx)
	for _, f := range active {
		f.detail += fmt.Sprintf(", held %v", d.Round(time.Millisecond))
	}
	return n.healAll(ctx, active)
}

// healAll heals the faults in reverse order, then brings wiped members
// back, then waits until the cluster is healthy.
func (n *nemesis) healAll(ctx context.Context, active []*activeFault) error {
	var errs []error
	for i := len(active) - 1; i >= 0; i-- {
		if h := active[i].heal; h != nil {
			errs = append(errs, h(ctx))
		}
	}
	for _, f := range active {
		if f.rejoin != nil {
			errs = append(errs, f.rejoin(ctx))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_, err := n.c.waitHealthy(ctx, healthyTimeout)
	return err
}

// holdFor waits for the fault's duration: this is the fault, not a
// synchronisation.
func (n *nemesis) holdFor(ctx context.Context) time.Duration {
	d := n.hold[0]
	if n.hold[1] > n.hold[0] {
		d += time.Duration(n.rng.Int64N(int64(n.hold[1] - n.hold[0])))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return d
}

// pick returns a random member of ms, nil when ms is empty.
func (n *nemesis) pick(ms []*member) *member {
	if len(ms) == 0 {
		return nil
	}
	return ms[n.rng.IntN(len(ms))]
}

// spared returns the members not in busy.
func (n *nemesis) spared(busy map[*member]bool) []*member {
	var out []*member
	for _, m := range n.c.members {
		if !busy[m] {
			out = append(out, m)
		}
	}
	return out
}

// others returns the members of the cluster other than those in not.
func (n *nemesis) others(not ...*member) []*member {
	busy := map[*member]bool{}
	for _, m := range not {
		busy[m] = true
	}
	return n.spared(busy)
}

// start injects a fault of kind k on members not in busy and returns it;
// nil and no error when every member is busy. A second, overlapping fault
// (second) is one of overlapFaults.
func (n *nemesis) start(ctx context.Context, k faultKind, busy map[*member]bool, second bool) (*activeFault, error) {
	c := n.c
	f := &activeFault{kind: k, start: n.rec.now()}
	target := func(m *member) *activeFault {
		f.targets = append(f.targets, m)
		return f
	}
	leader := func() (*member, error) {
		l, err := c.leader(ctx, healthyTimeout)
		if err != nil {
			return nil, fmt.Errorf("finding the leader: %w", err)
		}
		return l, nil
	}
	restart := func(m *member) func(context.Context) error {
		return func(context.Context) error { return m.restart() }
	}
	switch k {
	case faultKillLeader, faultKillFollower, faultKillRandom:
		m := n.pick(n.spared(busy))
		if k != faultKillRandom {
			l, err := leader()
			if err != nil {
				return nil, err
			}
			m = l
			if k == faultKillFollower {
				m = n.pick(n.others(l))
			}
		}
		if m == nil {
			return nil, nil
		}
		target(m).detail = "SIGKILL " + m.id + n.leadsBeforeKill(m)
		f.heal = restart(m)
		return f, m.kill()

	case faultKillLogLeader:
		if len(c.logs) == 0 {
			return nil, fmt.Errorf("%s: the run has no named log", k)
		}
		name := c.logs[n.rng.IntN(len(c.logs))].name
		m, err := c.logLeader(ctx, name, healthyTimeout)
		if err != nil {
			return nil, err
		}
		if busy[m] {
			return nil, nil
		}
		target(m).detail = "SIGKILL " + m.id + ", leader of " + name + n.leadsBeforeKill(m)
		f.heal = restart(m)
		return f, m.kill()

	case faultKillAll:
		f.detail = "SIGKILL every node"
		f.targets = c.members
		f.heal = func(context.Context) error {
			errs := make([]error, len(c.members))
			var wg sync.WaitGroup
			for i, m := range c.members {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = m.restart()
				}()
			}
			wg.Wait()
			return errors.Join(errs...)
		}
		var errs []error
		for _, m := range c.members {
			errs = append(errs, m.kill())
		}
		return f, errors.Join(errs...)

	case faultStopRestart:
		m := n.pick(n.spared(busy))
		if m == nil {
			return nil, nil
		}
		d, _ := c.describeLeads(m)
		target(m).detail = "SIGTERM " + m.id + d
		f.heal = restart(m)
		if err := m.stop(); err != nil {
			c.problem("graceful stop: %v", err)
		}
		return f, nil

	case faultPauseLeader, faultPauseRandom:
		m := n.pick(n.spared(busy))
		if k == faultPauseLeader {
			l, err := leader()
			if err != nil {
				return nil, err
			}
			m = l
		}
		if m == nil {
			return nil, nil
		}
		d, _ := c.describeLeads(m)
		target(m).detail = "SIGSTOP " + m.id + d
		f.heal = func(context.Context) error { return m.resume() }
		return f, m.pause()

	case faultPartition, faultIsolateLeader, faultBridge:
		var sides [][]*member
		switch k {
		case faultPartition:
			perm := n.rng.Perm(len(c.members))
			size := 1 + n.rng.IntN((len(c.members)-1)/2) // 1 of 3; 1 or 2 of 5
			var minority, majority []*member
			for i, p := range perm {
				if i < size {
					minority = append(minority, c.members[p])
				} else {
					majority = append(majority, c.members[p])
				}
			}
			sides = [][]*member{minority, majority}
		case faultIsolateLeader:
			l, err := leader()
			if err != nil {
				return nil, err
			}
			sides = [][]*member{{l}, n.others(l)}
		case faultBridge:
			perm := n.rng.Perm(len(c.members))
			ms := make([]*member, len(perm))
			for i, p := range perm {
				ms[i] = c.members[p]
			}
			// ms[2] is the bridge: in neither side, so it talks to both.
			sides = [][]*member{ms[:2], ms[3:]}
		}
		f.detail = describeSides(k, sides, c.members)
		// No targets: a second fault may hit any node. A node that
		// restarts meanwhile comes back without the cut on its side.
		f.heal = func(context.Context) error {
			var errs []error
			for _, m := range c.members {
				if m.running() != nil { // a node that restarts starts whole
					errs = append(errs, m.partition(nil))
				}
			}
			return errors.Join(errs...)
		}
		return f, cut(sides[0], sides[1])

	case faultDisk:
		m := n.pick(n.spared(busy))
		if m == nil {
			return nil, nil
		}
		target(m).detail = "fail the disk of " + m.id
		f.rejoin = func(ctx context.Context) error { return n.rejoin(ctx, m) }
		if err := m.failDisk(); err != nil {
			return f, err
		}
		how, err := n.waitStopped(ctx, m)
		f.detail += "; " + how + "; then wipe it and rejoin"
		if err != nil {
			c.problem("disk failure of %s: %v", m.id, err)
		}
		return f, nil

	case faultDiskFull:
		m := n.pick(n.spared(busy))
		if m == nil {
			return nil, nil
		}
		target(m).detail = "fill the disk of " + m.id
		f.heal = func(context.Context) error { return m.noSpace(false) }
		return f, m.noSpace(true)

	case faultWipe:
		m := n.pick(n.spared(busy))
		if m == nil {
			return nil, nil
		}
		target(m).detail = "SIGKILL " + m.id + " and wipe its data dir; rejoin with --join"
		f.rejoin = func(ctx context.Context) error { return n.rejoin(ctx, m) }
		if err := m.kill(); err != nil {
			return f, err
		}
		return f, os.RemoveAll(m.dataDir)
	case faultWipeBootstrap:
		m := n.pick(n.spared(busy))
		if m == nil {
			return nil, nil
		}
		target(m).detail = "SIGKILL " + m.id + ", wipe its data dir, restart it at once with its --bootstrap flags"
		f.rejoin = func(ctx context.Context) error { return n.caughtUp(ctx, m) }
		return f, m.wipeRestartVia(nil)
	}
	return nil, fmt.Errorf("unknown fault %q", k)
}

// rejoin starts m, whose data dir is gone, with --join through the
// members that are up, then waits until it holds everything committed
// when it came back.
func (n *nemesis) rejoin(ctx context.Context, m *member) error {
	if err := m.wipeRestart(); err != nil {
		return err
	}
	return n.caughtUp(ctx, m)
}

// caughtUp waits until m, which came back without its data dir, holds
// everything committed when it came back and is a voter again.
func (n *nemesis) caughtUp(ctx context.Context, m *member) error {
	lead, err := n.c.waitHealthy(ctx, catchUpTimeout)
	if err != nil {
		return err
	}
	if err := n.c.waitApplied(ctx, lead.CommitIndex, catchUpTimeout, m); err != nil {
		return err
	}
	// A wiped member votes again only once the leader has promoted it.
	// Until then the cluster has one voter fewer: a second data-losing
	// fault before that would take its quorum, so the fault lasts until
	// the promotion.
	if err := n.c.waitVoter(ctx, m, catchUpTimeout); err != nil {
		return err
	}
	// So does each of its replicas of the named logs: until it is rebuilt
	// and votes again, its log runs on its other two replicas, and a
	// second fault on one of them would stall it.
	rebuilt, err := n.c.waitRebuilt(ctx, m, catchUpTimeout)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.rebuilds += rebuilt
	n.mu.Unlock()
	_, installs := m.snapshotInstalls()
	if st, err := m.status(); err == nil && st.FirstIndex > 1 && installs > 0 {
		n.mu.Lock()
		n.snapshotRejoins++
		n.mu.Unlock()
	}
	return nil
}

// leadsBeforeKill describes which logs m, about to be SIGKILLed, leads
// (in runs with named logs; "" in others) and counts the kill if m leads
// some of its logs and not others.
func (n *nemesis) leadsBeforeKill(m *member) string {
	d, partial := n.c.describeLeads(m)
	if partial {
		n.mu.Lock()
		n.partialLeaderKills++
		n.mu.Unlock()
	}
	return d
}

// partialLeaderKillCount returns how many SIGKILLs hit a node that led
// some of its logs and not others.
func (n *nemesis) partialLeaderKillCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.partialLeaderKills
}

// withoutLogFaults returns the kinds of kinds that need no named log.
func withoutLogFaults(kinds []faultKind) []faultKind {
	var out []faultKind
	for _, k := range kinds {
		if !slices.Contains(logFaults, k) {
			out = append(out, k)
		}
	}
	return out
}

// rebuildCount returns how many replicas of named logs wiped members got
// back, rebuilt.
func (n *nemesis) rebuildCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rebuilds
}

// snapshotRejoinCount returns how many wiped members were rebuilt from a
// snapshot stream after a trim.
func (n *nemesis) snapshotRejoinCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.snapshotRejoins
}

// cut partitions the members of a from those of b, on both sides.
func cut(a, b []*member) error {
	for _, m := range a {
		if err := m.partition(b); err != nil {
			return err
		}
	}
	for _, m := range b {
		if err := m.partition(a); err != nil {
			return err
		}
	}
	return nil
}

func describeSides(k faultKind, sides [][]*member, all []*member) string {
	name := func(ms []*member) string {
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.id)
		}
		return "{" + strings.Join(ids, ",") + "}"
	}
	s := fmt.Sprintf("%s %s | %s", k, name(sides[0]), name(sides[1]))
	if k == faultBridge {
		for _, m := range all {
			inSide := false
			for _, side := range sides {
				for _, x := range side {
					inSide = inSide || x == m
				}
			}
			if !inSide {
				s += " bridged by " + m.id
			}
		}
	}
	return s
}

// stopBound is how long a node whose disk failed may take to stop.
const stopBound = 20 * time.Second

// waitStopped waits until m, whose disk failed, stops acknowledging: its
// process exits, or it no longer serves clients. Records are appended
// meanwhile so that every node has something to write. It describes how
// m stopped, and returns an error when m kept serving or acknowledged an
// append sent to it directly.
func (n *nemesis) waitStopped(ctx context.Context, m *member) (string, error) {
	start := time.Now()
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 50 && pctx.Err() == nil; i++ {
			n.probe(pctx)
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	var how string
	err := poll(ctx, stopBound, func() (bool, error) {
		p := m.running()
		if p == nil {
			how = fmt.Sprintf("its process exited after %v", time.Since(start).Round(time.Millisecond))
			return true, nil
		}
		if refuses(m.adminAddr) && refuses(m.clientAddr) {
			how = fmt.Sprintf("it stopped serving after %v, but its process still runs", time.Since(start).Round(time.Millisecond))
			return true, nil
		}
		return false, nil
	})
	if err == nil {
		if m.running() != nil {
			n.c.note("node %s stopped serving after its disk failed but its process did not exit (serve does not exit after a fail-stop)", m.id)
		}
		return how, nil
	}
	how = fmt.Sprintf("still serving %v after the disk failed", stopBound)
	if idx, perr := directAppend(ctx, m.clientAddr, fmt.Sprintf("disk-probe-%s-%d", m.id, start.UnixNano())); perr == nil {
		return how, fmt.Errorf("%s: acknowledged an append at index %d after its disk failed", m.id, idx)
	}
	return how, fmt.Errorf("%s: %s", m.id, how)
}

// refuses reports whether nothing accepts connections at addr.
func refuses(addr string) bool {
	nc, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return true
	}
	nc.Close()
	return false
}

// directAppend sends one append to the node at addr itself, without
// following it to the leader, and returns the acknowledged index.
func directAppend(ctx context.Context, addr, rec string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := transport.Dial(ctx, addr, nil)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var resp transport.AppendResponse
	if err := conn.Call(ctx, transport.OpAppend, &transport.AppendRequest{Records: [][]byte{[]byte(rec)}}, &resp); err != nil {
		return 0, err
	}
	if len(resp.Indexes) != 1 {
		return 0, fmt.Errorf("%d indexes for 1 record", len(resp.Indexes))
	}
	return resp.Indexes[0], nil
}
