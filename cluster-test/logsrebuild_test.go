package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
)

// TestLogRebuildLeaderLoss: a log must keep working when its leader dies
// right after it made a rebuilt replica a voter again.
//
// A 3-node cluster serves one named log of three replicas under load. A
// member of the log that leads neither it nor the default log has its data
// dir wiped and rejoins; its replica of the log is rebuilt (README,
// "Named logs"). The planner holds moves at their last step (fault
// injection, /fault/hold-moves, on every node): the catalog does not yet
// record the rebuild finished, as when the default log's leader is slow,
// busy or dies at that moment. Once the log's leader has committed a
// configuration in which the rebuilt replica votes, the test SIGKILLs that
// leader. The two nodes left, one of them the rebuilt replica, must elect a
// leader of the log and take appends on it; then the planner may finish,
// the killed node comes back, and the log's history passes every check.
//
// It failed before the rebuilt replica voted from its rebuild's start: its
// node kept the replica's vote gate closed until the catalog recorded the
// rebuild finished, which needs a leader of the log, which needed its vote.
func TestLogRebuildLeaderLoss(t *testing.T) {
	skipShort(t)
	const seed = 71
	c := newCluster(t, clusterConfig{nodes: 3, faults: true})
	defer c.keepLogsIfFailed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.createLogs(ctx, 1, logReplicas); err != nil {
		t.Fatal(err)
	}
	name := c.logs[0].name
	for _, m := range c.members {
		if err := m.holdMoves(true); err != nil {
			t.Fatal(err)
		}
	}
	rec := newRecorder()
	w, named := startLightWorkloads(ctx, t, c, rec, seed)

	lead, err := c.leader(ctx, healthyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	ll, err := c.logLeader(ctx, name, healthyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var victim *member
	var join []string
	for _, m := range c.members {
		if m != lead && m != ll && victim == nil {
			victim = m
		} else {
			join = append(join, m.clientAddr)
		}
	}
	start := rec.now()
	if err := victim.wipeRestartVia(join); err != nil {
		t.Fatal(err)
	}
	rec.addFault(faultEvent{Kind: string(faultWipe), Start: start, End: rec.now(), Detail: fmt.Sprintf("SIGKILL %s and wipe its data dir; rejoin with --join", victim.id)})
	if err := victim.holdMoves(true); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: wiped %s, rejoining; %s leads the default log, %s leads %s", fmtNanos(start), victim.id, lead.id, ll.id, name)

	// The victim's node starts its replica of the log once the rebuild
	// has begun, after the log's leader demoted its old replica; then the
	// leader promotes the new one, and the catalog keeps the rebuild
	// unfinished.
	if err := poll(ctx, catchUpTimeout, func() (bool, error) {
		_, err := victim.logStatus(name)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("%s's replica of %s did not start: %v\n%s", victim.id, name, err, c.describeLogState(name))
	}
	if err := c.waitRebuiltVoter(ctx, name, victim, catchUpTimeout); err != nil {
		t.Fatalf("%v\n%s", err, c.describeLogState(name))
	}
	ll, err = c.logLeader(ctx, name, healthyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if ll == victim {
		t.Fatalf("the rebuilt %s leads %s already: nothing to test", victim.id, name)
	}
	st, err := victim.logStatus(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s votes in %s's committed configuration (its node says voting=%v); SIGKILL the log's leader %s", fmtNanos(rec.now()), victim.id, name, st.Voting, ll.id)
	start = rec.now()
	if err := ll.kill(); err != nil {
		t.Fatal(err)
	}
	var left []*member
	for _, m := range c.members {
		if m != ll {
			left = append(left, m)
		}
	}
	nl, err := c.logLeaderAmong(ctx, name, left, healthyTimeout)
	if err != nil {
		t.Fatalf("log %s: no leader among %v after its leader's SIGKILL, with its rebuilt replica a voter: %v\n%s", name, left, err, c.describeLogState(name))
	}
	t.Logf("%s: %s leads %s", fmtNanos(rec.now()), nl.id, name)
	named[0].probe(ctx)
	if !ackedAfter(rec.snapshot().forLog(name), start) {
		t.Fatalf("log %s took no append after its leader's SIGKILL, with %s leading it", name, nl.id)
	}
	for _, m := range left {
		if err := m.holdMoves(false); err != nil {
			t.Fatal(err)
		}
	}
	if err := ll.restart(); err != nil {
		t.Fatal(err)
	}
	rec.addFault(faultEvent{Kind: string(faultKillLogLeader), Start: start, End: rec.now(), Detail: fmt.Sprintf("SIGKILL %s, leader of %s, once the rebuilt %s voted; restart it", ll.id, name, victim.id)})
	if _, err := c.waitRebuilt(ctx, victim, catchUpTimeout); err != nil {
		t.Fatal(err)
	}
	verify(t, verification{c: c, rec: rec, w: w, named: named, seed: seed, faults: map[faultKind]int{faultWipe: 1, faultKillLogLeader: 1},
		what:   fmt.Sprintf("wipe %s, rebuild its replica of %s, SIGKILL the log's leader %s once the rebuilt replica votes, before the catalog records the rebuild finished", victim.id, name, ll.id),
		replay: "go test -run TestLogRebuildLeaderLoss -v ./cluster-test/", checkTimeout: time.Minute})
}

// holdMoves makes m's planner hold every move at its last step (on), or
// finish them again.
func (m *member) holdMoves(on bool) error { return m.faultSwitch("hold-moves", on) }

// waitRebuiltVoter waits until the leader of log name describes m as a
// voter in a committed configuration.
func (c *cluster) waitRebuiltVoter(ctx context.Context, name string, m *member, timeout time.Duration) error {
	cl, err := client.Dial(ctx, c.clientAddrs(), &client.Options{RequestTimeout: 2 * time.Second, RetryTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cl.Close()
	var why string
	err = poll(ctx, timeout, func() (bool, error) {
		d, err := cl.Log(name).Describe(ctx)
		if err != nil {
			why = err.Error()
			return false, nil
		}
		var ok bool
		ok, why = committedVoter(d, m.id)
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("%s's replica of log %s was not made a voter within %v (%s): %w", m.id, name, timeout, why, err)
	}
	return nil
}
