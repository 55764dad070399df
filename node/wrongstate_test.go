package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// Membership requests that the cluster's state makes impossible are
// refused with a code and a message naming the cause, never Internal.
// (cmd/node's TestClientCommandsOnCluster covers the cases that need more
// than one voter.)
func TestWrongStateRequests(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, []string{leader.ClientAddr()}, &client.Options{RetryTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, tc := range []struct {
		name string
		call func() error
		code transport.Code
		say  string
	}{
		{"transfer to the leader", func() error { return cl.TransferLeadership(ctx, "n1") }, transport.CodeFailedPrecondition, "node n1 already leads"},
		{"transfer without another voter", func() error { return cl.TransferLeadership(ctx, "") }, transport.CodeFailedPrecondition, "only voter"},
		{"transfer to an unknown node", func() error { return cl.TransferLeadership(ctx, "n7") }, transport.CodeNotFound, `node "n7" is not a member`},
		{"remove the only voter", func() error { _, err := cl.Remove(ctx, "n1"); return err }, transport.CodeFailedPrecondition, `node "n1" is the only voter`},
		{"remove an unknown node", func() error { _, err := cl.Remove(ctx, "n7"); return err }, transport.CodeNotFound, `node "n7" is not a member`},
	} {
		err := tc.call()
		if transport.ErrorCode(err) != tc.code || !strings.Contains(err.Error(), tc.say) {
			t.Errorf("%s: %v, want %v saying %q", tc.name, err, tc.code, tc.say)
		}
	}
	if !leader.IsLeader() {
		t.Error("n1 no longer leads")
	}
}
