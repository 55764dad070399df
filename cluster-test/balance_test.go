package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestLeaderNotHandedToDeadNode: a named log's leader hands the log's
// leadership back to its preferred leader only once that node answers and
// has caught up (node/peerseen.go). Three named logs on three nodes, each
// led by its preferred leader; the node leading log-1 is SIGKILLed and
// stays down. Another takes log-1 over and must start no transfer to the dead node:
// raft refuses appends while one runs, and one to a dead node runs an
// election timeout, after which the balancer tried again 3 s later, so
// the log stopped for 0.7 s every 3.7 s while the node was down. The test
// watches the survivors' transfer counts for 5 s while the run's workload
// appends to every log, then restarts the node and wants log-1's
// leadership handed back to it, and no acknowledged append lost.
func TestLeaderNotHandedToDeadNode(t *testing.T) {
	skipShort(t)
	c := newCluster(t, clusterConfig{nodes: 3})
	defer c.keepLogsIfFailed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.createLogs(ctx, 3, 3); err != nil {
		t.Fatal(err)
	}
	// The balancer hands each log to its preferred leader, the first of
	// its members.
	err := poll(ctx, healthyTimeout, func() (bool, error) {
		for _, l := range c.logs {
			leads, _, err := l.members[0].leads()
			if err != nil || !slices.Contains(leads, l.name) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the named logs never came to their preferred leaders: %v", err)
	}
	preferred := c.logs[0].members[0]

	rec := newRecorder()
	const seed = 53
	w, named, err := startWorkloads(ctx, c, rec, workloadConfig{
		duration:       2 * time.Minute,
		retryAppenders: 2,
		opsPerWorker:   100_000,
		think:          3 * time.Millisecond,
	}, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		w.stop()
		for _, nw := range named {
			nw.stop()
		}
	}()
	// log1Acks returns when log-1's appends were acknowledged, in order.
	log1Acks := func() []int64 {
		var acks []int64
		for _, op := range rec.snapshot().forLog("log-1").Ops {
			if op.Kind == kindAppend && op.OK {
				acks = append(acks, op.Return)
			}
		}
		slices.Sort(acks)
		return acks
	}
	waitLog1 := func(n int, what string) {
		t.Helper()
		if err := poll(ctx, healthyTimeout, func() (bool, error) { return len(log1Acks()) >= n, nil }); err != nil {
			t.Fatalf("%d appends to log-1 acknowledged %s: %v", n, what, err)
		}
	}
	waitLog1(50, "before the kill")

	killAt := rec.now()
	if err := preferred.kill(); err != nil {
		t.Fatal(err)
	}
	var survivors []*member
	for _, m := range c.members {
		if m != preferred {
			survivors = append(survivors, m)
		}
	}
	// The counts before: the balancer spread the leaders with transfers.
	before := map[*member][2]string{}
	for _, m := range survivors {
		before[m] = [2]string{metric(t, m, `raftlog_leader_transfers_total{result="failed"}`), metric(t, m, `raftlog_leader_transfers_total{result="handed"}`)}
	}
	acked := len(log1Acks())
	waitLog1(acked+1, "after SIGKILL of its leader "+preferred.id)
	// Watch for 5 s: the balancer runs every second, and an old node
	// started its first transfer within a second of leading.
	const watch = 5 * time.Second
	start, from := time.Now(), rec.now()
	err = poll(ctx, watch, func() (bool, error) {
		for _, m := range survivors {
			if v := metric(t, m, `raftlog_leader_transfers_total{result="failed"}`); v != before[m][0] {
				return false, fmt.Errorf("%s counts %s failed transfers of a log's leadership, %s before %s died (%v after)", m.id, v, before[m][0], preferred.id, time.Since(start).Round(time.Millisecond))
			}
			if v := metric(t, m, `raftlog_leader_transfers_total{result="handed"}`); v != before[m][1] {
				return false, fmt.Errorf("%s counts %s transfers of a log's leadership handed, %s before %s died", m.id, v, before[m][1], preferred.id)
			}
		}
		return false, nil
	})
	if !errors.Is(err, errPollTimeout) {
		t.Fatal(err)
	}
	acks := log1Acks()
	gap, _, _ := longestGap(acks, from, rec.now())
	t.Logf("log-1 took %d appends in the %v after %s died, its longest gap %v", len(acks)-acked, watch, preferred.id, gap.Round(time.Millisecond))

	if err := preferred.restart(); err != nil {
		t.Fatal(err)
	}
	rec.addFault(faultEvent{Kind: string(faultKillLogLeader), Start: killAt, End: rec.now(), Detail: "SIGKILL " + preferred.id + ", log-1's leader, kept down " + watch.String()})
	err = poll(ctx, healthyTimeout, func() (bool, error) {
		leads, _, err := preferred.leads()
		return err == nil && slices.Contains(leads, "log-1"), nil
	})
	if err != nil {
		t.Fatalf("log-1's leadership never came back to %s after its restart: %v", preferred.id, err)
	}
	handed := 0
	for _, m := range survivors {
		now, _ := strconv.Atoi(metric(t, m, `raftlog_leader_transfers_total{result="handed"}`))
		was, _ := strconv.Atoi(before[m][1])
		handed += now - was
	}
	if handed == 0 {
		t.Errorf("%s leads log-1 again, but no survivor counts a transfer handed", preferred.id)
	}
	waitLog1(len(log1Acks())+1, "after the leadership came back")
	w.stop()
	for _, nw := range named {
		nw.stop()
	}
	verify(t, verification{c: c, rec: rec, w: w, named: named, seed: seed, what: "run with log-1's preferred leader down",
		replay: "go test -run TestLeaderNotHandedToDeadNode -v ./cluster-test/", faults: map[faultKind]int{faultKillLogLeader: 1},
		checkTimeout: 2 * time.Minute})
}
