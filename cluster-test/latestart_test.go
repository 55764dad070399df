package clustertest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
)

// TestLateBootstrapMember starts four of a five-node cluster's nodes, all
// with the five-node bootstrap list: they form the cluster without the
// fifth, which the catalog places named logs on all the same. The fifth
// then starts with the same flags, finds the cluster running and rejoins
// as a new member (it never voted in anything). Every named log must come
// to run on all of its replicas, the late node's included, with the late
// node voting in each, and take appends there.
//
//	go test -run TestLateBootstrapMember -v ./cluster-test/
func TestLateBootstrapMember(t *testing.T) {
	skipShort(t)
	c := newCluster(t, clusterConfig{nodes: 5, late: 1})
	defer c.keepLogsIfFailed(t)
	late := c.members[4]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Five logs of three replicas spread by count over five nodes: three
	// are placed on the late node.
	if err := c.addLogs(ctx, 5, logReplicas); err != nil {
		t.Fatal(err)
	}
	var onLate []string
	for _, l := range c.logs {
		if slices.Contains(l.members, late) {
			onLate = append(onLate, l.name)
		}
	}
	if len(onLate) == 0 {
		t.Fatalf("no log placed on the late node %s: %v", late.id, c.logs)
	}
	t.Logf("logs placed on the late node %s: %v", late.id, onLate)
	if err := c.startLate(late); err != nil {
		t.Fatal(err)
	}
	if err := c.waitVoter(ctx, late, 2*healthyTimeout); err != nil {
		t.Fatalf("the late node: %v", err)
	}
	for _, l := range c.logs {
		if _, err := c.waitLogHealthy(ctx, l.name, 2*healthyTimeout); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range onLate {
		err := poll(ctx, 2*healthyTimeout, func() (bool, error) {
			st, err := late.logStatus(name)
			return err == nil && st.Voting, nil
		})
		if err != nil {
			t.Fatalf("%s's replica of log %s does not vote: %v", late.id, name, err)
		}
	}
	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, name := range onLate {
		lg := cl.Log(name)
		actx, acancel := context.WithTimeout(ctx, opTimeout)
		idx, err := lg.Append(actx, []byte("after "+late.id+" started"))
		acancel()
		if err != nil {
			t.Fatalf("append to log %s: %v", name, err)
		}
		if err := c.waitLogApplied(ctx, name, idx[0], healthyTimeout, late); err != nil {
			t.Fatalf("log %s: %s did not apply the append at %d: %v", name, late.id, idx[0], err)
		}
	}
	t.Logf("every log runs on its %d replicas; %s votes in the %d placed on it", logReplicas, late.id, len(onLate))
}
