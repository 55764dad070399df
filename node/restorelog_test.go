package node

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/raftlog/raftlog/backup"
	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// restoreInto creates the log name with the settings of backup file b and
// restores b into it.
func restoreInto(t *testing.T, ctx context.Context, cl *client.Client, name string, b []byte) client.RestoreResult {
	t.Helper()
	h, _, err := backup.Verify(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateLog(ctx, name, client.CreateLogOptions{Replicas: int(h.Log.Replicas), RetentionBytes: h.Log.RetentionBytes, RetentionAge: h.Log.RetentionAge}); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	res, err := cl.Log(name).Restore(ctx, bytes.NewReader(b))
	if err != nil {
		t.Fatalf("restore into %s: %v", name, err)
	}
	if res.BackupIndex != h.Index || res.Index <= h.Index || res.Bytes != int64(len(b)) {
		t.Fatalf("restore into %s: %+v; want the backup's index %d, an index past it, %d bytes", name, res, h.Index, len(b))
	}
	return res
}

// logReplicas returns the nodes of c that run a replica of log name.
func logReplicas(t *testing.T, c *testCluster, name string) []*Node {
	t.Helper()
	var out []*Node
	for _, n := range c.nodes {
		l, ok := n.catalog.State().Log(name)
		if ok && n.host.hosted(l.ID) != nil {
			out = append(out, n)
		}
	}
	return out
}

// waitLogApplied waits until n's replica of log name has applied index.
func waitLogApplied(t *testing.T, n *Node, name string, index uint64) {
	t.Helper()
	waitFor(t, n.ID()+" applying the log "+name, func() bool {
		l, ok := n.catalog.State().Log(name)
		if !ok {
			return false
		}
		h := n.host.hosted(l.ID)
		return h != nil && h.r.FSM().Applied.Load() >= index
	})
}

// upTo returns the records of m at or below index.
func upTo(m map[uint64]string, index uint64) map[uint64]string {
	out := map[uint64]string{}
	for i, v := range m {
		if i <= index {
			out[i] = v
		}
	}
	return out
}

// A named log's backup, taken under appends and a trim, restored into a
// new log of the running cluster: every record at its original index on
// every replica, the client session kept (a retried append gets its
// original indexes), appends after the restore's index, and all of it
// after a restart of every node.
func TestNamedLogRestore(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.waitLeader()
	nb := backupNamedLog(t, c, "orders")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	res := restoreInto(t, ctx, cl, "copy", nb.file)
	if res.Replicas != 3 {
		t.Fatalf("the restore is on %d replicas when it returns, want 3", res.Replicas)
	}
	d, err := cl.Log("copy").Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Log.Replicas != 3 || d.Log.RetentionBytes != 1<<30 || d.Log.RetentionAge != 7*24*time.Hour {
		t.Fatalf("the restored log's settings: %+v, want the backup's", d.Log)
	}
	check := func(when string) {
		t.Helper()
		var reps []*Node
		waitFor(t, when+": 3 replicas of the restored log running", func() bool {
			reps = logReplicas(t, c, "copy")
			return len(reps) == 3
		})
		for _, n := range reps {
			waitLogApplied(t, n, "copy", res.Index)
			sameMap(t, when+": "+n.ID()+"'s replica up to the backup's index", upTo(readLogOn(t, n, "copy"), nb.hdr.Index), nb.want)
		}
	}
	check("after the restore")

	var leader *Node
	waitFor(t, "a leader of the restored log", func() bool {
		l, _ := c.waitLeader().catalog.State().Log("copy")
		leader = logLeader(c, l.ID)
		return leader != nil
	})
	dup := *nb.sess
	dup.Log = "copy"
	again, err := call[transport.AppendResponse](t, dial(t, leader), transport.OpAppend, &dup)
	if err != nil || !again.Duplicate || !slices.Equal(again.Indexes, nb.resp.Indexes) {
		t.Fatalf("a retried append of a session the backup holds: %+v, %v; want a duplicate at %v", again, err, nb.resp.Indexes)
	}
	after := appendLog(t, ctx, cl.Log("copy"), "after", 5)
	for idx := range after {
		if idx <= res.Index {
			t.Fatalf("an append after the restore at %d, not past the restore's index %d", idx, res.Index)
		}
	}

	for _, id := range []string{"n1", "n2", "n3"} {
		c.stop(id)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		c.start(id, nil)
	}
	c.waitLeader()
	check("after a restart of every node")
	cl2 := clusterClient(t, c, nil)
	got := readLog(t, ctx, cl2.Log("copy"))
	holdsAll(t, "the restored log after a restart", got, after)
	sameMap(t, "the restored log after a restart, up to the backup's index", upTo(got, nb.hdr.Index), nb.want)
	if _, err := cl2.Log("copy").Append(ctx, []byte("after a restart")); err != nil {
		t.Fatal(err)
	}
}
