package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/backup"
	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/internal/testcert"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// namedBackup is a backup of a named log taken by backupNamedLog, with
// what it must hold.
type namedBackup struct {
	file []byte
	hdr  backup.Header
	// want holds every record acknowledged up to the backup's index
	// (the trimmed ones left out), by index.
	want map[uint64]string
	// sess is an append of a client session stored before the backup,
	// and resp its answer: a retry must get the same indexes.
	sess *transport.AppendRequest
	resp *transport.AppendResponse
}

// backupNamedLog creates the log name (3 replicas, a retention) on c,
// appends to it (a session's append, about 8 MiB of records, a trim),
// then takes a backup from its leader under appends while a trim drops
// entries the backup has yet to send, and checks that the leader kept
// them until the backup ended.
func backupNamedLog(t *testing.T, c *testCluster, name string) namedBackup {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clusterClient(t, c, nil)
	info, err := cl.CreateLog(ctx, name, client.CreateLogOptions{Replicas: 3, RetentionBytes: 1 << 30, RetentionAge: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	g := cl.Log(name)
	want := appendLog(t, ctx, g, "old", 10)
	floor := lastOf(want) - 4
	if _, err := g.Trim(ctx, floor); err != nil {
		t.Fatal(err)
	}
	for idx := range want {
		if idx < floor {
			delete(want, idx)
		}
	}
	leader := preferredLeader(t, c, info.ID, info.Members[0])
	conn := dial(t, leader)
	sess := &transport.AppendRequest{Log: name, ClientID: "app", Seq: 1, Base: 1, Records: [][]byte{[]byte("sess-a"), []byte("sess-b")}}
	sr, err := call[transport.AppendResponse](t, conn, transport.OpAppend, sess)
	if err != nil {
		t.Fatal(err)
	}
	for i, idx := range sr.Indexes {
		want[idx] = string(sess.Records[i])
	}
	// 3.6 MB of bulk records: a backup of several 1 MiB parts
	// (TestNamedLogRestoreCutShort).
	var bulkLast uint64
	for b := range 9 {
		req := &transport.AppendRequest{Log: name}
		for i := range 100 {
			req.Records = append(req.Records, bytes.Repeat([]byte{byte('a' + (b*100+i)%26)}, 4096))
		}
		resp, err := call[transport.AppendResponse](t, conn, transport.OpAppend, req)
		if err != nil {
			t.Fatal(err)
		}
		for i, idx := range resp.Indexes {
			want[idx] = string(req.Records[i])
		}
		bulkLast = resp.Indexes[len(resp.Indexes)-1]
	}
	load := startLoad(t, g, "load", 20000)
	load.waitAcked(t, 20)
	before := load.ackedSoFar()

	rep := leader.host.hosted(info.ID).r
	st := openLogBackup(t, ctx, dial(t, leader), name)
	var file bytes.Buffer
	var first transport.BackupItem
	if err := st.Recv(&first); err != nil {
		t.Fatal(err)
	}
	file.Write(first.Data)
	tr, err := g.Trim(ctx, bulkLast)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a snapshot of the log after the trim", func() bool {
		p := rep.Snapshots().Latest.Load()
		return p != nil && p.Index >= tr
	})
	if got := rep.View().First(); got > floor {
		t.Fatalf("the log's leader deleted entries up to %d while a backup from %d ran", got-1, floor)
	}
	if err := recvBackup(st, &file); err != nil {
		t.Fatalf("backup: %v", err)
	}
	waitFor(t, "the deletions held back during the backup", func() bool { return rep.View().First() >= bulkLast })
	load.halt()
	if load.err != nil {
		t.Fatal(load.err)
	}

	r, err := backup.NewReader(bytes.NewReader(file.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	hdr := r.Header()
	wantSrc := backup.Source{Name: name, Replicas: 3, RetentionBytes: 1 << 30, RetentionAge: 7 * 24 * time.Hour}
	if hdr.Version != backup.Version || hdr.Log != wantSrc || hdr.Floor != floor {
		t.Fatalf("backup header %+v, want version %d, log %+v, floor %d", hdr, backup.Version, wantSrc, floor)
	}
	for _, rec := range before {
		if rec.Index > hdr.Index {
			t.Fatalf("record %q acknowledged before the backup began is at %d, past the backup's index %d", rec.Data, rec.Index, hdr.Index)
		}
	}
	for _, rec := range load.ackedSoFar() {
		want[rec.Index] = string(rec.Data)
	}
	for idx := range want {
		if idx > hdr.Index {
			delete(want, idx)
		}
	}
	// The file holds exactly those records, at their indexes.
	got := map[uint64]string{}
	for {
		e, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := replica.RecordPayload(e.Data); ok {
			got[e.Index] = string(p)
		}
	}
	sameMap(t, "the backup of log "+name, got, want)
	t.Logf("backup of log %s at index %d (term %d) from %d: %d records, %d bytes", name, hdr.Index, hdr.Term, hdr.Floor, len(got), file.Len())
	return namedBackup{file: file.Bytes(), hdr: hdr, want: want, sess: sess, resp: sr}
}

// preferredLeader waits until log id is led by its preferred leader (the
// node leaders move to, see balanceLeaders), and returns it.
func preferredLeader(t *testing.T, c *testCluster, id uint64, preferred string) *Node {
	t.Helper()
	var leader *Node
	waitFor(t, "the log led by its preferred leader", func() bool {
		leader = logLeader(c, id)
		return leader != nil && leader.ID() == preferred
	})
	return leader
}

// A named log's leader serves its backup, as the default log's leader
// serves the default log's: every record acknowledged before it began,
// taken under appends and a trim; the file names the log and its
// settings. The default log's backup names it too.
func TestNamedLogBackup(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.waitLeader()
	backupNamedLog(t, c, "orders")

	cl := clusterClient(t, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var buf bytes.Buffer
	if _, err := cl.Backup(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	h, _, err := backup.Verify(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if want := (backup.Source{Name: transport.DefaultLog, Replicas: 3}); h.Log != want {
		t.Fatalf("the default log's backup names %+v, want %+v", h.Log, want)
	}
}

// A named log's backup is refused by a node that does not lead the log
// (NotLeader naming its leader), for a log that does not exist, by a
// cluster on hashicorp's raft transport, and under TLS to a client that
// is no admin, as is a restore.
func TestNamedLogBackupRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Run("tls", func(t *testing.T) {
		ca := testcert.NewCA(t, t.TempDir(), "cluster")
		c := tlsCluster(t, ca, 3, "ops")
		c.waitLeader()
		dialAs := func(n *Node, name string) *transport.Conn {
			t.Helper()
			cert, key := ca.Issue(t, name)
			conn, err := dialTLS(n.ClientAddr(), ca, cert, key)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return conn
		}
		cr, err := call[transport.CreateLogResponse](t, dialAs(c.waitLeader(), "ops"), transport.OpCreateLog, &transport.CreateLogRequest{Name: "orders", Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		leader := preferredLeader(t, c, cr.Log.ID, cr.Log.Members[0])
		if _, err := call[transport.AppendResponse](t, dialAs(leader, "app1"), transport.OpAppend, &transport.AppendRequest{Log: "orders", Records: [][]byte{[]byte("r")}}); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		err = recvBackup(openLogBackup(t, ctx, dialAs(leader, "app1"), "orders"), &buf)
		refused(t, "a named log's backup by a client that is no admin", err, `client "app1" may not take a backup of log "orders" (admins: ops)`)
		var rr transport.RestoreLogResponse
		err = dialAs(leader, "app1").Call(ctx, transport.OpRestoreLog, &transport.RestoreLogRequest{Log: "orders", Data: []byte("RLBACKUP")}, &rr)
		refused(t, "a restore by a client that is no admin", err, `client "app1" may not restore log "orders" (admins: ops)`)
		var f *Node
		for _, n := range c.nodes {
			if n != leader {
				f = n
			}
		}
		err = recvBackup(openLogBackup(t, ctx, dialAs(f, "ops"), "orders"), &buf)
		var te *transport.Error
		if !errors.As(err, &te) || te.Code != transport.CodeNotLeader || te.LeaderAddr != leader.ClientAddr() {
			t.Fatalf("a named log's backup from a follower: %v, want NotLeader naming %s", err, leader.ClientAddr())
		}
		err = recvBackup(openLogBackup(t, ctx, dialAs(c.waitLeader(), "ops"), "nosuch"), &buf)
		if !isCode(err, transport.CodeNotFound) || !strings.Contains(err.Error(), `"nosuch"`) {
			t.Fatalf("a backup of a log that does not exist: %v, want NotFound naming it", err)
		}
		if buf.Len() != 0 {
			t.Fatalf("refused backups sent %d bytes", buf.Len())
		}
		if err := recvBackup(openLogBackup(t, ctx, dialAs(leader, "ops"), "orders"), &buf); err != nil {
			t.Fatalf("a named log's backup by an admin: %v", err)
		}
		if h, s, err := backup.Verify(bytes.NewReader(buf.Bytes())); err != nil || s.Entries < 1 || h.Log.Name != "orders" {
			t.Fatalf("the admin's backup: %+v %+v, %v", h, s, err)
		}
	})
	t.Run("hashicorp transport", func(t *testing.T) {
		c := newTestCluster(t, 1, func(cfg *Config) { cfg.RaftTransport = RaftTransportHashicorp })
		leader := c.waitLeader()
		var buf bytes.Buffer
		err := recvBackup(openLogBackup(t, ctx, dial(t, leader), "orders"), &buf)
		if !isCode(err, transport.CodeFailedPrecondition) || !strings.Contains(err.Error(), "native raft transport") {
			t.Fatalf("a named log's backup on hashicorp's transport: %v, want FailedPrecondition", err)
		}
		if err := recvBackup(openLogBackup(t, ctx, dial(t, leader), ""), &buf); err != nil {
			t.Fatalf("the default log's backup on hashicorp's transport: %v", err)
		}
	})
}
