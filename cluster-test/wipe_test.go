package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
)

// TestWipedNodeRejoin checks that a node that lost its data dir and
// rejoins under its old id and addresses (as the wipe nemesis does)
// cannot help elect a leader that lacks an acknowledged append. Raft
// counts on a voter never forgetting what it acknowledged; a wiped voter
// has forgotten. The schedule makes the danger certain rather than
// likely: on 3 nodes with leader L and followers A and B,
//
//  1. SIGKILL B;
//  2. append x: acknowledged, so held by L and A only;
//  3. SIGSTOP L (a long pause, as a VM stall makes);
//  4. SIGKILL A, wipe its data dir, restart it with --join through L and B;
//  5. restart B, which never saw x: it campaigns, and only A can answer;
//  6. SIGCONT L, and heal.
//
// If the wiped A votes for B, B leads with 2 of 3 votes without x and
// overwrites it on L. The final log must hold x at its index.
//
// A comes back in two ways: with --join, and with its original --bootstrap
// flags, as a unit file restarts a node after its disk was replaced (which
// lost every acknowledged append before the node asked its peers first).
func TestWipedNodeRejoin(t *testing.T) {
	skipShort(t)
	for _, how := range []string{"join", "bootstrap"} {
		t.Run(how, func(t *testing.T) { wipedNodeRejoin(t, how == "bootstrap") })
	}
}

func wipedNodeRejoin(t *testing.T, withBootstrap bool) {
	const seed = 51
	c := newCluster(t, clusterConfig{nodes: 3})
	ctx := context.Background()
	rec := newRecorder()
	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	appendOne := func(data string) uint64 {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		idx, err := appendRecorded(actx, cl, rec, 0, data)
		if err != nil {
			t.Fatalf("append %s: %v", data, err)
		}
		return idx
	}
	step := func(kind, detail string, do func() error) {
		t.Helper()
		start := rec.now()
		err := do()
		rec.addFault(faultEvent{Kind: kind, Start: start, End: rec.now(), Detail: detail})
		if err != nil {
			t.Fatalf("%s: %v", detail, err)
		}
		t.Logf("%s: %s", fmtNanos(start), detail)
	}

	for i := range 3 {
		appendOne(fmt.Sprintf("before-%d", i))
	}
	l, err := c.leader(ctx, healthyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var a, b *member
	for _, m := range c.members {
		switch {
		case m == l:
		case a == nil:
			a = m
		default:
			b = m
		}
	}
	step("kill", "SIGKILL follower "+b.id, b.kill)
	x := appendOne("x")
	t.Logf("x acknowledged at index %d by leader %s with %s", x, l.id, a.id)
	step("pause", "SIGSTOP leader "+l.id, l.pause)
	if withBootstrap {
		step("wipe", fmt.Sprintf("SIGKILL %s, wipe its data dir, restart it with its --bootstrap flags", a.id),
			func() error { return a.wipeRestartVia(nil) })
	} else {
		step("wipe", fmt.Sprintf("SIGKILL %s, wipe its data dir, restart it with --join %s,%s", a.id, l.clientAddr, b.clientAddr),
			func() error { return a.wipeRestartVia([]string{l.clientAddr, b.clientAddr}) })
	}
	step("restart", "restart "+b.id, b.restart)
	if nl, err := c.leader(ctx, 15*time.Second); err == nil {
		t.Logf("%s leads while %s is paused: the wiped %s voted for it", nl.id, l.id, a.id)
	} else {
		t.Logf("no leader while %s is paused: %v", l.id, err)
	}
	step("resume", "SIGCONT "+l.id, l.resume)
	verify(t, verification{c: c, rec: rec, seed: seed, what: "wiped-node rejoin schedule",
		replay: "go test -run TestWipedNodeRejoin -v ./cluster-test/", checkTimeout: time.Minute,
		faults: map[faultKind]int{faultKillFollower: 1, faultPauseLeader: 1, faultWipe: 1}})
}
