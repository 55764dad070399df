package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
)

// keepWindow is how long TestDefaultLogSnapshotWithNamedLogs watches a
// node that installed a snapshot stream for its records to go missing:
// the node reconciles its logs with the catalog every second.
const keepWindow = 5 * time.Second

// TestDefaultLogSnapshotWithNamedLogs is the smallest schedule of the
// loss TestLogs found: on a 3-node cluster with one named log (so the
// catalog has started), a follower is SIGKILLed, the default log is
// appended to and trimmed so that the follower must be sent a snapshot
// stream, and the follower is restarted. It installs the stream, whose
// records (from the floor up to the snapshot's index) go into the
// default log's second archive group. Then it must keep holding them:
// the run fails if, within keepWindow, the follower's log from the floor
// differs from the leader's, and then runs the checks of every run
// (every acknowledged append on every node, the same log everywhere).
//
// It fails on the node of 2026-12-01: every second the node's reconciler
// asks to start a replica of every log the catalog places on it, the
// default log included (the catalog gives it members at Start), and the
// node hosts the default log outside its table of named logs, so it opens
// a second replica of log 0 (node/logs.go startLog). Opening its snapshot
// store (replica.OpenSnapStore, recover) finds no snapshot in
// <data>/logs/0/snapshots, makes archive group 2 current and empties
// group 3, the archive the running default replica installed the stream
// into: the node loses the default log's records from the floor to the
// snapshot's index. Starting that replica then fails ("raft group already
// registered", or "raft's log, entry 1: log not found" once the log is
// trimmed), and it is tried again a second later.
func TestDefaultLogSnapshotWithNamedLogs(t *testing.T) {
	skipShort(t)
	const seed = 71
	ctx := context.Background()
	c := newCluster(t, clusterConfig{nodes: 3})
	if err := c.createLogs(ctx, 1, logReplicas); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	appendN := func(n int, prefix string) uint64 {
		t.Helper()
		var last uint64
		for i := range n {
			actx, cancel := context.WithTimeout(ctx, opTimeout)
			idx, err := appendRecorded(actx, cl, rec, 0, fmt.Sprintf("%s-%d", prefix, i))
			cancel()
			if err != nil {
				t.Fatalf("append: %v", err)
			}
			last = idx
		}
		return last
	}
	appendN(20, "before")
	lead, err := c.leader(ctx, healthyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	m := c.members[0]
	if m == lead {
		m = c.members[1]
	}
	if err := m.kill(); err != nil {
		t.Fatal(err)
	}
	last := appendN(50, "while-down")
	below := last - 5
	op := &operation{Lane: 1, Kind: kindTrim, Below: below, Call: rec.now()}
	tctx, cancel := context.WithTimeout(ctx, opTimeout)
	idx, err := cl.Trim(tctx, below)
	cancel()
	op.Return = rec.now()
	if err != nil {
		t.Fatalf("trim below %d: %v", below, err)
	}
	op.OK, op.Index = true, idx
	rec.add(op)
	// The leader drops its log below the floor once its snapshot covers
	// the trim; then m, which stopped before index 21, needs a stream.
	if err := poll(ctx, catchUpTimeout, func() (bool, error) {
		st, err := lead.status()
		return err == nil && st.FirstIndex >= below, nil
	}); err != nil {
		t.Fatalf("the leader did not raise its floor to %d: %v", below, err)
	}
	if err := m.restart(); err != nil {
		t.Fatal(err)
	}
	appendN(5, "after")
	if err := poll(ctx, catchUpTimeout, func() (bool, error) {
		_, since := m.snapshotInstalls()
		return since > 0, nil
	}); err != nil {
		t.Fatalf("%s installed no snapshot stream after its restart: %v", m.id, err)
	}
	lst, err := c.waitHealthy(ctx, healthyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.waitApplied(ctx, lst.CommitIndex, catchUpTimeout, m); err != nil {
		t.Fatal(err)
	}

	// m must go on holding what the leader holds from the floor on.
	scl, err := client.Dial(ctx, c.clientAddrs(), staleOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer scl.Close()
	stale := func(who *member) (string, error) {
		rctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		recs, _, err := scl.Read(rctx, below, client.ReadOptions{Stale: true, Addr: who.clientAddr, MaxRecords: 1000})
		if err != nil {
			return "", err
		}
		return fmt.Sprint(entries(recs)), nil
	}
	want, err := stale(lead)
	if err != nil {
		t.Fatalf("reading the leader %s: %v", lead.id, err)
	}
	var got string
	var rerr error
	err = poll(ctx, keepWindow, func() (bool, error) {
		got, rerr = stale(m)
		return rerr != nil || got != want, nil
	})
	switch {
	case err == nil && rerr != nil:
		t.Errorf("%s, which installed a snapshot stream of the default log, no longer reads from the floor %d: %v (the leader %s holds %s)", m.id, below, rerr, lead.id, want)
	case err == nil:
		t.Errorf("%s, which installed a snapshot stream of the default log, lost records: from the floor %d it holds %s, the leader %s %s", m.id, below, got, lead.id, want)
	}
	verify(t, verification{c: c, rec: rec, seed: seed, what: "a follower of the default log rebuilt from a snapshot stream while a named log exists",
		replay: "go test -run TestDefaultLogSnapshotWithNamedLogs -v ./cluster-test/", checkTimeout: time.Minute})
}
