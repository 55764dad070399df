package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/client"
)

// TestNoRedirectOutsideTheCluster: a node asked for a log it does not hold
// sends the client on to a host of the log only if that host is a member
// of its own cluster. An operator's tryout: a data dir restored by an
// older version kept the old cluster's catalog, and an append of a named
// log sent to the restored cluster was redirected to the old cluster's
// node that led it, which stored and acknowledged it. Here the catalog
// is given a node of no cluster, "ghost", and a log placed on it alone.
func TestNoRedirectOutsideTheCluster(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := clusterClient(t, c, &client.Options{RetryTimeout: 3 * time.Second})
	if _, err := cl.CreateLog(ctx, "first", client.CreateLogOptions{Replicas: 3}); err != nil {
		t.Fatal(err) // the catalog starts with it
	}

	// ghost's client address: a port nothing listens on.
	ghost := freeAddrs(t, 1)[0]
	for _, cmd := range []catalog.Command{
		&catalog.AddNode{ID: "ghost", RaftAddr: "127.0.0.1:1", ClientAddr: ghost},
		&catalog.CreateLog{Name: "foreign", Settings: catalog.Settings{Replicas: 1}, Members: []string{"ghost"}},
	} {
		if res, err := leader.proposeCatalog(ctx, cmd); err != nil || res.Err != nil {
			t.Fatalf("%T: %v %v", cmd, err, res.Err)
		}
	}

	l, ok := leader.catalog.State().Log("foreign")
	if !ok {
		t.Fatal("log foreign is not in the catalog")
	}
	for id, n := range c.nodes {
		waitForIn(t, 10*time.Second, id+" knowing log foreign", func() bool { _, ok := n.catalog.State().Log("foreign"); return ok })
		if e := n.notHosted(l); e.MemberAddr != "" || !strings.Contains(e.Message, "not a member of this cluster") {
			t.Fatalf("%s sends a client asking for log foreign to %q (%s): a node of no cluster", id, e.MemberAddr, e.Message)
		}
	}
	_, err := cl.Log("foreign").Append(ctx, []byte("to the right cluster"))
	if err == nil || !strings.Contains(err.Error(), "not a member of this cluster") {
		t.Fatalf("append to a log placed outside the cluster: %v, want an error saying its host is not a member", err)
	}
}
