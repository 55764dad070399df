package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// The failover of `bench logs`: a light load on every log, SIGKILL of a
// node that leads several of them, and the gap until each log accepts
// appends again; the node is restarted between repetitions.

// failoverPace is the pause between the appends of one log under the
// light load: one synchronous Append at a time, at most one per pace. It
// is the resolution of a gap.
const failoverPace = 10 * time.Millisecond

// failoverRecovery bounds the wait, after a kill, for every log to
// acknowledge an append again; the clients retry for twice as long.
const failoverRecovery = 60 * time.Second

// failoverSettle is how long the light load runs with the leaders spread
// before each kill.
const failoverSettle = 2 * time.Second

// failoverRep is one SIGKILL.
type failoverRep struct {
	Rep    int    `json:"rep"`
	Victim string `json:"victim"` // node id killed
	// Gaps are the affected logs' gaps in seconds, by name: from the kill
	// to the first append of the log acknowledged after the process had
	// exited.
	Gaps map[string]float64 `json:"gaps_s"`
	// ExitSeconds is from the SIGKILL until the process was reaped. Its
	// sockets close only as it exits, after the kernel has torn down its
	// memory and every thread has left its system call (an fdatasync
	// under way finishes first): until then nothing tells its peers it is
	// gone, and the longer the busier the machine.
	ExitSeconds float64 `json:"exit_s"`
	// OthersMaxGap is the longest gap of the logs the victim did not
	// lead (their pace and any stall a neighbour's failover caused).
	OthersMaxGap float64 `json:"others_max_gap_s"`
	// BackSeconds is from the restart until the leaders were spread again.
	BackSeconds float64 `json:"back_s"`
}

// worst returns the longest gap of the affected logs.
func (r *failoverRep) worst() float64 {
	w := 0.0
	for _, g := range r.Gaps {
		w = max(w, g)
	}
	return w
}

// worstAfterExit returns the longest gap of the affected logs counted
// from the process's exit: the part the survivors and the clients take.
func (r *failoverRep) worstAfterExit() float64 { return r.worst() - r.ExitSeconds }

// failoverResult is one failover setup: the default log alone, or named
// logs beside it.
type failoverResult struct {
	Logs       int           `json:"logs"` // named logs; 0: the default log alone
	Reps       []failoverRep `json:"reps"`
	Acked      int           `json:"acked"`     // appends acknowledged, every log
	ReadBack   int           `json:"read_back"` // of them read back and matched
	Unacked    int           `json:"unacked_stored"`
	Errors     int           `json:"errors"` // appends that failed (the clients retry for 2 minutes)
	FirstError string        `json:"first_error,omitempty"`
}

// medianWorst returns the median over the repetitions of the longest
// affected gap.
func (f *failoverResult) medianWorst() float64 {
	var xs []float64
	for i := range f.Reps {
		xs = append(xs, f.Reps[i].worst())
	}
	return median(xs)
}

// medianWorstAfterExit returns the median over the repetitions of the
// longest affected gap counted from the process's exit.
func (f *failoverResult) medianWorstAfterExit() float64 {
	var xs []float64
	for i := range f.Reps {
		xs = append(xs, f.Reps[i].worstAfterExit())
	}
	return median(xs)
}

// medianExit returns the median over the repetitions of the time the
// killed process took to exit.
func (f *failoverResult) medianExit() float64 {
	var xs []float64
	for i := range f.Reps {
		xs = append(xs, f.Reps[i].ExitSeconds)
	}
	return median(xs)
}

// allGaps returns every affected log's gap of every repetition.
func (f *failoverResult) allGaps() []float64 {
	var xs []float64
	for _, r := range f.Reps {
		for _, g := range r.Gaps {
			xs = append(xs, g)
		}
	}
	return xs
}

// pacedLoader appends to one log, one synchronous Append per
// failoverPace, and records when each was acknowledged. Its goroutine
// (run) writes; mu guards what it records.
type pacedLoader struct {
	name string
	rc   *raftlogClient // immutable

	mu       sync.Mutex
	acks     []ack       // guarded by mu
	times    []time.Time // guarded by mu: when each of acks came back, rising
	errs     int         // guarded by mu
	firstErr error       // guarded by mu
}

// run appends until stop is closed or ctx ends.
func (p *pacedLoader) run(ctx context.Context, stop <-chan struct{}, recs *records) {
	st := recs.appenderStamps()
	buf := make([]byte, len(recs.template))
	tick := time.NewTicker(failoverPace)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s := st.fill(recs, buf)
		idx, err := p.rc.l.Append(ctx, buf)
		now := time.Now()
		p.mu.Lock()
		if err != nil {
			if p.errs == 0 {
				p.firstErr = err
			}
			p.errs++
		} else {
			p.acks = append(p.acks, ack{idx[0], s})
			p.times = append(p.times, now)
		}
		p.mu.Unlock()
	}
}

// firstAckAfter returns when the first append acknowledged after t came
// back, and false if none has yet.
func (p *pacedLoader) firstAckAfter(t time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := sort.Search(len(p.times), func(i int) bool { return p.times[i].After(t) })
	if i == len(p.times) {
		return time.Time{}, false
	}
	return p.times[i], true
}

// waitAcks waits up to d until every loader has an append acknowledged
// after t.
func waitAcks(ctx context.Context, loaders []*pacedLoader, t time.Time, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(failoverPace / 2)
	defer tick.Stop()
	for {
		var waiting []string
		for _, p := range loaders {
			if _, ok := p.firstAckAfter(t); !ok {
				waiting = append(waiting, p.name)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("%d logs acknowledged no append within %v (%s)", len(waiting), d, firstFew(waiting))
		}
	}
}

// pickVictim returns the node to kill in repetition rep: one leading at
// least 2 of names (the default log's leader when names is the default
// log alone), taken in turn by id across repetitions.
func pickVictim(leaders map[string]string, names []string, nodes []*raftlogNode, rep int) (*raftlogNode, error) {
	var cands []*raftlogNode
	for _, n := range nodes {
		k := countLeads(leaders, names, n.id)
		if (len(names) == 1 && k == 1) || (len(names) > 1 && k >= 2) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("no node leads %s", map[bool]string{true: "the log", false: "2 or more of the logs"}[len(names) == 1])
	}
	slices.SortFunc(cands, func(a, b *raftlogNode) int { return strings.Compare(a.id, b.id) })
	return cands[rep%len(cands)], nil
}

// runFailover starts a fresh cluster with n named logs (0: the default
// log alone), waits for spread leaders, runs the light load on every log,
// the default one included, and repeats cfg.failoverReps times: SIGKILL a
// node leading at least 2 of the named logs (the default log's leader for
// n = 0), measure each log's gap, restart the node, wait until the leaders
// are spread again. At the end it reads every acknowledged record back.
func runFailover(ctx context.Context, cfg *logsConfig, e *clusterEnv, base string, n int) (_ *failoverResult, err error) {
	dir, finish, err := e.cellDir(base, fmt.Sprintf("failover%d-", n), cfg.keep)
	if err != nil {
		return nil, err
	}
	defer finish(&err)
	c, err := startRaftlog(ctx, e, dir, cfg.flush, false)
	if err != nil {
		return nil, err
	}
	spread := logNames(n) // the logs whose leaders are spread and killed
	names := spread       // the logs under load
	if n > 0 {
		names = append([]string{transport.DefaultLog}, spread...)
	}
	preferred, err := c.createLogs(ctx, spread)
	if err != nil {
		return nil, err
	}
	if _, err := c.waitSpread(ctx, spread, preferred, logsSpreadWait); err != nil {
		return nil, err
	}

	loaders := make([]*pacedLoader, len(names))
	defer func() {
		for _, p := range loaders {
			if p != nil {
				if cerr := p.rc.close(); err == nil {
					err = cerr
				}
			}
		}
	}()
	for i, name := range names {
		cl, err := client.Dial(ctx, c.clientAddrs(), &client.Options{RetryTimeout: 2 * failoverRecovery})
		if err != nil {
			return nil, err
		}
		loaders[i] = &pacedLoader{name: name, rc: &raftlogClient{c: cl, l: cl.Log(name)}}
	}
	recs := newRecords(cfg.size, cfg.seed+1000+uint64(n))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range loaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.run(ctx, stop, recs)
		}()
	}
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			wg.Wait()
		}
	}()

	res := &failoverResult{Logs: n}
	for rep := range cfg.failoverReps {
		// The load runs steadily for failoverSettle, every log acknowledging
		// appends, before each kill: a restarted node has caught up and the
		// clients have found the leaders again.
		settled := time.Now()
		if err := sleepCtx(ctx, failoverSettle); err != nil {
			return res, err
		}
		if err := waitAcks(ctx, loaders, settled, failoverRecovery); err != nil {
			return res, fmt.Errorf("before SIGKILL %d: %w", rep+1, err)
		}
		leaders, err := c.leadersNow(ctx)
		if err != nil {
			return res, err
		}
		victim, err := pickVictim(leaders, spread, c.nodes, rep)
		if err != nil {
			return res, err
		}
		r := failoverRep{Rep: rep + 1, Victim: victim.id, Gaps: map[string]float64{}}
		tKill := time.Now()
		if err := victim.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return res, fmt.Errorf("SIGKILL %s: %w", victim.proc.name, err)
		}
		<-victim.proc.exited
		tDead := time.Now()
		r.ExitSeconds = tDead.Sub(tKill).Seconds()
		e.procs.forget(victim.proc)
		if err := waitAcks(ctx, loaders, tDead, failoverRecovery); err != nil {
			return res, fmt.Errorf("after SIGKILL of %s: %w", victim.id, err)
		}
		for _, p := range loaders {
			at, _ := p.firstAckAfter(tDead)
			gap := at.Sub(tKill).Seconds()
			if leaders[p.name] == victim.id {
				r.Gaps[p.name] = gap
			} else {
				r.OthersMaxGap = max(r.OthersMaxGap, gap)
			}
		}
		back := time.Now()
		if victim.proc, err = e.procs.start("raftlog "+victim.id, e.nodeBin, victim.args, e.serverEnv(childEnv()), filepath.Join(dir, victim.id+".log")); err != nil {
			return res, err
		}
		if _, err := c.waitLeader(ctx, logsSpreadWait); err != nil {
			return res, fmt.Errorf("after restarting %s: %w", victim.id, err)
		}
		if _, err := c.waitSpread(ctx, spread, preferred, logsSpreadWait); err != nil {
			return res, fmt.Errorf("after restarting %s: %w", victim.id, err)
		}
		r.BackSeconds = time.Since(back).Seconds()
		res.Reps = append(res.Reps, r)
		others := ""
		if n > 0 {
			others = "; longest gap of the others " + fmtSeconds(r.OthersMaxGap)
		}
		fmt.Fprintf(e.progress, "  %d/%d: SIGKILL %s (exited after %s), leading %s%s; leaders spread again %s after the restart\n",
			rep+1, cfg.failoverReps, victim.id, fmtSeconds(r.ExitSeconds), describeGaps(r.Gaps), others, fmtSeconds(r.BackSeconds))
	}

	stopped = true
	close(stop)
	wg.Wait()
	for _, p := range loaders {
		p.mu.Lock()
		res.Acked += len(p.acks)
		if p.errs > 0 && res.Errors == 0 {
			res.FirstError = p.firstErr.Error()
		}
		res.Errors += p.errs
		p.mu.Unlock()
	}
	for _, nd := range c.nodes {
		if !nd.proc.running() {
			return res, nd.proc.exitError()
		}
	}
	var verrs []error
	for _, p := range loaders {
		rb, verr := c.verifyLog(ctx, p.name, p.acks, recs)
		res.ReadBack += rb.acked
		res.Unacked += rb.others
		if verr != nil {
			verrs = append(verrs, fmt.Errorf("READ-BACK FAILED: log %s, after %d of %d acknowledged records: %w", p.name, rb.acked, len(p.acks), verr))
		}
	}
	if err := errors.Join(verrs...); err != nil {
		return res, err
	}
	if res.Errors > 0 {
		return res, fmt.Errorf("%d appends failed; the first: %s", res.Errors, res.FirstError)
	}
	return res, nil
}

// describeGaps lists gaps by log name, in name order.
func describeGaps(gaps map[string]float64) string {
	var names []string
	for name := range gaps {
		names = append(names, name)
	}
	slices.Sort(names)
	s := ""
	for i, name := range names {
		if i > 0 {
			s += ", "
		}
		s += name + " " + fmtSeconds(gaps[name])
	}
	if s == "" {
		return "no log"
	}
	return s
}
