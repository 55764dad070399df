package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
)

// TestRemoveWhileRunning removes a running follower while clients append
// and read. It must stay removed: the node learns it (its /status says
// Removed), the leader's configuration no longer lists it, also long
// after (its register loop used to put it back within a second), and a
// restart with its original flags refuses to start, naming the removal.
// Wiped and started with --join it comes back as a new member, and no
// acknowledged append is lost throughout.
func TestRemoveWhileRunning(t *testing.T) {
	skipShort(t)
	const seed = 61
	c := newCluster(t, clusterConfig{nodes: 3})
	ctx := context.Background()
	rec := newRecorder()
	w, err := startWorkload(ctx, c, rec, workloadConfig{
		duration: 30 * time.Second, retryAppenders: 2, readers: 1, opsPerWorker: 400, think: 20 * time.Millisecond,
	}, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer w.stop()
	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	l, err := c.leader(ctx, healthyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var victim *member
	for _, m := range c.members {
		if m != l {
			victim = m
			break
		}
	}
	start := rec.now()
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	_, err = cl.Remove(rctx, victim.id)
	cancel()
	if err != nil {
		t.Fatalf("remove %s: %v", victim.id, err)
	}
	t.Logf("%s: removed %s", fmtNanos(start), victim.id)
	// It stays out while the others commit: check the configuration
	// until the commit index has moved well past the removal.
	first, err := l.status()
	if err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, 30*time.Second, func() (bool, error) {
		if ids := c.configIDs(t, l); slices.Contains(ids, victim.id) {
			return false, fmt.Errorf("the leader's configuration lists the removed %s again: %v", victim.id, ids)
		}
		st, err := l.status()
		return err == nil && st.CommitIndex >= first.CommitIndex+50, nil
	}); err != nil {
		t.Fatal(err)
	}
	// And it knows.
	if err := poll(ctx, 30*time.Second, func() (bool, error) {
		st, err := victim.status()
		return err == nil && st.Role == "Removed", nil
	}); err != nil {
		t.Fatalf("%s never reported itself removed: %v; log ends:\n%s", victim.id, err, victim.logTail(4096))
	}

	// Restarted with its original flags, it refuses to start.
	if err := victim.stop(); err != nil {
		t.Fatal(err)
	}
	err = victim.restart()
	if err == nil || !strings.Contains(err.Error(), "removed from the cluster") {
		t.Fatalf("restart of the removed %s: %v, want a refusal naming the removal", victim.id, err)
	}

	// Wiped and started with --join, it is a new member again.
	if err := victim.wipeRestartVia([]string{l.clientAddr}); err != nil {
		t.Fatal(err)
	}
	if err := c.waitVoter(ctx, victim, catchUpTimeout); err != nil {
		t.Fatal(err)
	}
	verify(t, verification{c: c, rec: rec, w: w, seed: seed, what: "remove a running follower, then re-add it",
		replay: "go test -run TestRemoveWhileRunning -v ./cluster-test/", checkTimeout: time.Minute})
}

// configIDs returns the ids in m's /status member list.
func (c *cluster) configIDs(t *testing.T, m *member) []string {
	t.Helper()
	body, err := m.admin("GET", "/status")
	if err != nil {
		t.Fatalf("%s: /status: %v", m.id, err)
	}
	var st struct {
		Members []struct {
			ID string `json:"id"`
		} `json:"members"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%s: /status: %v", m.id, err)
	}
	var ids []string
	for _, s := range st.Members {
		ids = append(ids, s.ID)
	}
	return ids
}
