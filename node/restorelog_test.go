package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

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

// uploadPart sends one part of a restore of b into log name to node n:
// the bytes [off, end) of b, the last part when end is len(b).
func uploadPart(t *testing.T, ctx context.Context, n *Node, name string, b []byte, off, end int) (*transport.RestoreLogResponse, error) {
	t.Helper()
	conn := dial(t, n)
	var resp transport.RestoreLogResponse
	err := conn.Call(ctx, transport.OpRestoreLog, &transport.RestoreLogRequest{Log: name, Offset: uint64(off), Data: b[off:end], Done: end == len(b)}, &resp)
	return &resp, err
}

// leaderOfLog waits for a leader of log name on c, its preferred leader
// (which leadership moves to while it runs) if preferred is set, and
// returns it.
func leaderOfLog(t *testing.T, c *testCluster, name string, preferred bool) *Node {
	t.Helper()
	var leader *Node
	waitFor(t, "a leader of log "+name, func() bool {
		l, ok := c.waitLeader().catalog.State().Log(name)
		if !ok {
			return false
		}
		leader = logLeader(c, l.ID)
		return leader != nil && (!preferred || leader.ID() == l.PreferredLeader())
	})
	return leader
}

// refusesAsRestoring checks that log name refuses appends, reads and
// backups as a log being restored, on every replica.
func refusesAsRestoring(t *testing.T, ctx context.Context, c *testCluster, cl *client.Client, name string) {
	t.Helper()
	const want = "is being restored, or holds a restore that did not finish"
	if _, err := cl.Log(name).Append(ctx, []byte("x")); !isCode(err, transport.CodeFailedPrecondition) || !strings.Contains(err.Error(), want) {
		t.Fatalf("an append to log %s during or after a cut restore: %v, want FailedPrecondition saying it %s", name, err, want)
	}
	if _, _, err := cl.Log(name).Read(ctx, 0, client.ReadOptions{}); !isCode(err, transport.CodeFailedPrecondition) {
		t.Fatalf("a read of log %s during or after a cut restore: %v, want FailedPrecondition", name, err)
	}
	if _, err := cl.Log(name).Backup(ctx, io.Discard); !isCode(err, transport.CodeFailedPrecondition) {
		t.Fatalf("a backup of log %s during or after a cut restore: %v, want FailedPrecondition", name, err)
	}
	for _, n := range logReplicas(t, c, name) {
		waitFor(t, n.ID()+" applying the mark of the restore", func() bool {
			l, _ := n.catalog.State().Log(name)
			h := n.host.hosted(l.ID)
			return h != nil && h.r.Restoring()
		})
		_, err := call[transport.ReadResponse](t, dial(t, n), transport.OpRead, &transport.ReadRequest{Log: name, Stale: true})
		if !isCode(err, transport.CodeFailedPrecondition) {
			t.Fatalf("a stale read of log %s on %s: %v, want FailedPrecondition", name, n.ID(), err)
		}
	}
}

// Restores that cannot be: into a log that holds records, the default
// log, of a damaged file (refused naming the cause and the byte; the log
// is then marked as holding a restore that did not finish), on hashicorp's
// raft transport. And one that can: the default log's backup restored as a
// named log.
func TestNamedLogRestoreRefusals(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	def := appendLog(t, ctx, cl.Log(transport.DefaultLog), "default", 30)
	var file bytes.Buffer
	if _, err := cl.Backup(ctx, &file); err != nil {
		t.Fatal(err)
	}
	b := file.Bytes()

	if _, err := cl.CreateLog(ctx, "orders", client.CreateLogOptions{}); err != nil {
		t.Fatal(err)
	}
	appendLog(t, ctx, cl.Log("orders"), "o", 3)
	if _, err := cl.Log("orders").Restore(ctx, bytes.NewReader(b)); !isCode(err, transport.CodeFailedPrecondition) || !strings.Contains(err.Error(), "is not empty") {
		t.Fatalf("a restore into a log that holds records: %v, want FailedPrecondition", err)
	}
	appendLog(t, ctx, cl.Log("orders"), "still", 1) // not marked
	if _, err := cl.Log(transport.DefaultLog).Restore(ctx, bytes.NewReader(b)); !isCode(err, transport.CodeBadRequest) {
		t.Fatalf("a restore into the default log: %v, want BadRequest", err)
	}

	if _, err := cl.CreateLog(ctx, "cut", client.CreateLogOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := cl.Log("cut").Restore(ctx, bytes.NewReader(b[:len(b)-5]))
	if !isCode(err, transport.CodeBadRequest) || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), "byte") {
		t.Fatalf("a restore of a truncated file: %v, want BadRequest naming the cause and the byte", err)
	}
	refusesAsRestoring(t, ctx, c, cl, "cut")
	if _, err := cl.DeleteLog(ctx, "cut"); err != nil {
		t.Fatalf("deleting a log whose restore did not finish: %v", err)
	}

	// The default log's backup as a named log: the default log's records
	// at their indexes; its catalog is not carried over.
	res := restoreInto(t, ctx, cl, "fromdefault", b)
	sameMap(t, "the default log's backup restored as a named log", upTo(readLog(t, ctx, cl.Log("fromdefault")), res.BackupIndex), upTo(def, res.BackupIndex))
	for _, n := range logReplicas(t, c, "fromdefault") {
		l, _ := n.catalog.State().Log("fromdefault")
		if st := n.host.hosted(l.ID).r.FSM().State(); st[0] == 3 {
			t.Fatalf("%s's replica of the restored log holds a control state", n.ID())
		}
	}

	hc := newTestCluster(t, 1, func(cfg *Config) { cfg.RaftTransport = RaftTransportHashicorp })
	_, err = uploadPart(t, ctx, hc.waitLeader(), "orders", b, 0, len(b))
	if !isCode(err, transport.CodeFailedPrecondition) || !strings.Contains(err.Error(), "native raft transport") {
		t.Fatalf("a restore on hashicorp's transport: %v, want FailedPrecondition", err)
	}
}

// Restores cut short: the client stops after the first part, or the
// log's leader dies during the upload: the log is marked as holding a
// restore that did not finish, on every replica, until it is deleted or
// restored again. The leader cut off from its followers once it installed
// the restore, then killed: the followers, which do not have it, lead a
// log still marked. Each can be deleted, and the name restored again.
func TestNamedLogRestoreCutShort(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.FaultInjection = true })
	c.waitLeader()
	nb := backupNamedLog(t, c, "orders")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	part := 1 << 20
	if len(nb.file) < 3*part {
		t.Fatalf("a backup of %d bytes: want several parts", len(nb.file))
	}
	create := func(name string) {
		t.Helper()
		if _, err := cl.CreateLog(ctx, name, client.CreateLogOptions{Replicas: 3}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("client stops", func(t *testing.T) {
		create("a")
		if _, err := uploadPart(t, ctx, leaderOfLog(t, c, "a", true), "a", nb.file, 0, part); err != nil {
			t.Fatal(err)
		}
		refusesAsRestoring(t, ctx, c, cl, "a")
		if _, err := cl.DeleteLog(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		restoreInto(t, ctx, cl, "a", nb.file)
		sameMap(t, "log a restored again", upTo(readLog(t, ctx, cl.Log("a")), nb.hdr.Index), nb.want)
	})

	t.Run("leader dies during the upload", func(t *testing.T) {
		create("b")
		leader := leaderOfLog(t, c, "b", true)
		if _, err := uploadPart(t, ctx, leader, "b", nb.file, 0, part); err != nil {
			t.Fatal(err)
		}
		c.stop(leader.ID())
		t.Cleanup(func() {
			if c.nodes[leader.ID()] == nil {
				c.start(leader.ID(), nil)
			}
		})
		next := leaderOfLog(t, c, "b", false)
		_, err := uploadPart(t, ctx, next, "b", nb.file, part, 2*part)
		if !isCode(err, transport.CodeFailedPrecondition) || !strings.Contains(err.Error(), "upload the backup again") {
			t.Fatalf("the next part at the log's new leader: %v, want FailedPrecondition", err)
		}
		refusesAsRestoring(t, ctx, c, cl, "b")
		// The marked, empty log takes the whole upload again.
		res, err := cl.Log("b").Restore(ctx, bytes.NewReader(nb.file))
		if err != nil {
			t.Fatalf("a restore into the marked log: %v", err)
		}
		sameMap(t, "log b restored again", upTo(readLog(t, ctx, cl.Log("b")), nb.hdr.Index), nb.want)
		l, _ := next.catalog.State().Log("b")
		upload := filepath.Join(leader.logDir(l.ID), restoreUploadFile)
		if _, err := os.Stat(upload); err != nil {
			t.Fatalf("the stopped leader's upload: %v", err)
		}
		c.start(leader.ID(), nil)
		waitLogApplied(t, c.nodes[leader.ID()], "b", res.Index)
		if _, err := os.Stat(upload); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the upload the restarted node held before: %v, want it removed", err)
		}
		sameMap(t, "log b on the node that came back", upTo(readLogOn(t, c.nodes[leader.ID()], "b"), nb.hdr.Index), nb.want)
	})

	t.Run("leader cut off after installing the restore", func(t *testing.T) {
		create("c")
		leader := leaderOfLog(t, c, "c", true)
		for off := 0; off+part < len(nb.file); off += part {
			if _, err := uploadPart(t, ctx, leader, "c", nb.file, off, off+part); err != nil {
				t.Fatal(err)
			}
		}
		heal := c.partitionFrom(leader)
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := uploadPart(t, dctx, leader, "c", nb.file, len(nb.file)/part*part, len(nb.file))
		dcancel()
		if err == nil {
			t.Fatal("a restore by a leader cut off from its followers succeeded")
		}
		l, _ := leader.catalog.State().Log("c")
		if h := leader.host.hosted(l.ID); h == nil || h.r.Restoring() {
			t.Fatalf("the cut-off leader did not install the restore")
		}
		c.stop(leader.ID())
		heal()
		refusesAsRestoring(t, ctx, c, cl, "c")
		if _, err := cl.DeleteLog(ctx, "c"); err != nil {
			t.Fatal(err)
		}
		c.start(leader.ID(), nil)
		restoreInto(t, ctx, cl, "c", nb.file)
		for _, n := range logReplicas(t, c, "c") {
			waitLogApplied(t, n, "c", nb.hdr.Index+1)
			sameMap(t, "log c restored again on "+n.ID(), upTo(readLogOn(t, n, "c"), nb.hdr.Index), nb.want)
		}
	})
}

// heldSnapshots is a named log's raft transport that holds the first
// InstallSnapshot of log target for hold before raft sees it, and every
// request behind it (heartbeats too: they reach raft the same way).
type heldSnapshots struct {
	raft.Transport
	id     uint64         // the log's id; immutable
	target *atomic.Uint64 // the id of the log whose installs to hold
	hold   time.Duration  // immutable
	held   *atomic.Int32  // installs held so far
	out    chan raft.RPC  // what raft consumes; set once, by Consumer
	once   sync.Once
}

func (h *heldSnapshots) Consumer() <-chan raft.RPC {
	h.once.Do(func() {
		h.out = make(chan raft.RPC)
		go func() {
			for rpc := range h.Transport.Consumer() {
				if _, ok := rpc.Command.(*raft.InstallSnapshotRequest); ok && h.id == h.target.Load() && h.held.Add(1) <= 2 {
					time.Sleep(h.hold)
				}
				h.out <- rpc
			}
		}()
	})
	return h.out
}

// A restore whose leader loses its lease while its followers install the
// restore (they answer no heartbeat meanwhile, as with a large backup):
// the leader has installed it, the next leader has it too, and the
// restore is answered as done once an entry after it commits.
func TestNamedLogRestoreLeaderLosesLease(t *testing.T) {
	var target atomic.Uint64
	var held atomic.Int32
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.hooks = &testHooks{logTransport: func(id uint64, tr raft.Transport) raft.Transport {
			return &heldSnapshots{Transport: tr, id: id, target: &target, hold: 2 * DefaultLeaderLeaseTimeout, held: &held}
		}}
	})
	c.waitLeader()
	nb := backupNamedLog(t, c, "orders")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	info, err := cl.CreateLog(ctx, "copy", client.CreateLogOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	leader := leaderOfLog(t, c, "copy", true)
	term := leader.host.hosted(info.ID).r.Raft().CurrentTerm()
	target.Store(info.ID)
	res, err := cl.Log("copy").Restore(ctx, bytes.NewReader(nb.file))
	if err != nil {
		t.Fatalf("a restore whose leader lost its lease after installing it: %v", err)
	}
	if held.Load() == 0 {
		t.Fatal("no snapshot install was held up")
	}
	now := leaderOfLog(t, c, "copy", false)
	if got := now.host.hosted(info.ID).r.Raft().CurrentTerm(); got == term {
		t.Fatalf("the log's term is still %d: its leader kept its lease", term)
	}
	for _, n := range logReplicas(t, c, "copy") {
		waitLogApplied(t, n, "copy", res.Index)
		sameMap(t, "the restored log on "+n.ID(), upTo(readLogOn(t, n, "copy"), nb.hdr.Index), nb.want)
	}
}
