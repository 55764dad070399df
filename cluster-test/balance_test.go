package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
)

// TestLeaderNotHandedToDeadNode: a named log's leader hands the log's
// leadership back to its preferred leader only once that node answers and
// has caught up (node/peerseen.go). Three named logs on three nodes, each
// led by its preferred leader; the node leading log-1 is SIGKILLed and
// stays down.
// Another takes log-1 over and must start no transfer to the dead node:
// raft refuses appends while one runs, and one to a dead node runs an
// election timeout, after which the balancer tried again 3 s later, so
// the log stopped for 0.7 s every 3.7 s while the node was down. The test
// watches the survivors' transfer counts for 5 s while a client appends
// to log-1, then restarts the node and wants log-1's leadership handed
// back to it.
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

	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lg := cl.Log("log-1")
	load := &appendLoad{}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { load.run(loadCtx, lg) })
	defer func() {
		stopLoad()
		wg.Wait()
	}()
	if err := load.waitAcks(ctx, 50); err != nil {
		t.Fatal(err)
	}

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
	acked := load.acked()
	if err := load.waitAcks(ctx, acked+1); err != nil {
		t.Fatalf("no append to log-1 acknowledged after SIGKILL of its leader %s: %v", preferred.id, err)
	}
	// Watch for 5 s: the balancer runs every second, and an old node
	// started its first transfer within a second of leading.
	const watch = 5 * time.Second
	start := time.Now()
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
	t.Logf("log-1 took %d appends in the %v after %s died, its longest gap %v", load.acked()-acked, watch, preferred.id, load.longestGap(start).Round(time.Millisecond))

	if err := preferred.restart(); err != nil {
		t.Fatal(err)
	}
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
	if err := load.waitAcks(ctx, load.acked()+1); err != nil {
		t.Fatalf("no append to log-1 acknowledged after the leadership came back: %v", err)
	}
}

// appendLoad appends to one log, one record at a time, and keeps the
// acknowledgement times.
type appendLoad struct {
	mu    sync.Mutex
	times []time.Time
	err   error
	cond  chan struct{} // closed and replaced at each acknowledgement
}

// run appends until ctx ends or an append fails.
func (a *appendLoad) run(ctx context.Context, lg *client.Log) {
	for i := 0; ctx.Err() == nil && i < 1_000_000; i++ {
		_, err := lg.Append(ctx, []byte(fmt.Sprintf("record %d", i)))
		a.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				a.err = err
			}
		} else {
			a.times = append(a.times, time.Now())
		}
		if a.cond != nil {
			close(a.cond)
			a.cond = nil
		}
		a.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// acked returns the number of appends acknowledged.
func (a *appendLoad) acked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.times)
}

// waitAcks waits until n appends are acknowledged, for up to
// healthyTimeout.
func (a *appendLoad) waitAcks(ctx context.Context, n int) error {
	deadline := time.NewTimer(healthyTimeout)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		got, err := len(a.times), a.err
		if a.cond == nil {
			a.cond = make(chan struct{})
		}
		ch := a.cond
		a.mu.Unlock()
		switch {
		case got >= n:
			return nil
		case err != nil:
			return fmt.Errorf("%d of %d appends acknowledged, then: %w", got, n, err)
		}
		select {
		case <-ch:
		case <-deadline.C:
			return fmt.Errorf("%d of %d appends acknowledged after %v", got, n, healthyTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// longestGap returns the longest time between consecutive
// acknowledgements from since on.
func (a *appendLoad) longestGap(since time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var gap time.Duration
	prev := since
	for _, at := range a.times {
		if at.Before(since) {
			continue
		}
		gap = max(gap, at.Sub(prev))
		prev = at
	}
	return gap
}
