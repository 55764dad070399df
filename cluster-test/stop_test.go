package clustertest

import (
	"context"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
)

// stopWithPausedPeerBound is how soon a SIGTERMed node must exit while a
// peer is paused: well below the raft transport's I/O timeout (10 s), for
// which a raft call to the paused peer would hold the node's stop.
const stopWithPausedPeerBound = 5 * time.Second

// TestStopWithAPausedPeer SIGTERMs the node leading the default log and a
// named log while another node is paused (SIGSTOP), right after appends
// to those logs: the raft calls it made to the paused node are unanswered.
// The node must exit 0 within stopWithPausedPeerBound: it hands its
// leaderships over and closes its raft transport before it shuts its
// replicas down. (Before, each replica's shutdown waited for its calls to
// the paused node to time out, 10 s, one replica after another.) Then the
// paused node resumes, the stopped one restarts, and every acknowledged
// append reads back.
func TestStopWithAPausedPeer(t *testing.T) {
	skipShort(t)
	c := newCluster(t, clusterConfig{nodes: 3})
	defer c.keepLogsIfFailed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.createLogs(ctx, 3, logReplicas); err != nil {
		t.Fatal(err)
	}
	cl, err := client.Dial(ctx, c.clientAddrs(), &client.Options{RetryTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The victim leads the default log and, once leaders spread, a named
	// log too.
	var (
		victim *member
		led    []string
	)
	err = poll(ctx, healthyTimeout, func() (bool, error) {
		lead, err := c.leader(ctx, healthyTimeout)
		if err != nil {
			return false, err
		}
		leads, _, err := lead.leads()
		victim, led = lead, leads
		return err == nil && len(leads) >= 2, nil
	})
	if err != nil {
		t.Fatalf("no node leads the default log and a named log (last: %v leads %v): %v", victim, led, err)
	}
	var paused *member
	for _, m := range c.members {
		if m != victim && paused == nil {
			paused = m
		}
	}
	if err := paused.pause(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]uint64{}
	for _, name := range led {
		actx, cancel := context.WithTimeout(ctx, opTimeout)
		idx, err := cl.Log(name).Append(actx, []byte("before the stop of "+victim.id))
		cancel()
		if err != nil {
			t.Fatalf("append to %s with %s paused: %v", name, paused.id, err)
		}
		acked[name] = idx[0]
	}
	start := time.Now()
	if err := victim.stop(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("%s (leading %v) exited %v after SIGTERM, with %s paused", victim.id, led, took, paused.id)
	if took > stopWithPausedPeerBound {
		t.Errorf("%s exited %v after SIGTERM with %s paused, want within %v", victim.id, took, paused.id, stopWithPausedPeerBound)
	}
	if err := paused.resume(); err != nil {
		t.Fatal(err)
	}
	if err := victim.restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.waitHealthy(ctx, healthyTimeout); err != nil {
		t.Fatal(err)
	}
	for name, idx := range acked {
		recs, _, err := cl.Log(name).Read(ctx, idx, client.ReadOptions{MaxRecords: 1})
		if err != nil || len(recs) != 1 || string(recs[0].Data) != "before the stop of "+victim.id {
			t.Errorf("%s: record %d after the restart: %v, %v", name, idx, recs, err)
		}
	}
}
