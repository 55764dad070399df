package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/backup"
	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/internal/testcert"
	"github.com/raftlog/raftlog/transport"
)

// openBackup opens a Backup stream of the default log on conn with a
// window of one item.
func openBackup(t *testing.T, ctx context.Context, conn *transport.Conn) *transport.Stream {
	t.Helper()
	return openLogBackup(t, ctx, conn, "")
}

// openLogBackup opens a Backup stream of the log whose log field is log.
func openLogBackup(t *testing.T, ctx context.Context, conn *transport.Conn, log string) *transport.Stream {
	t.Helper()
	st, err := conn.OpenStream(ctx, transport.OpBackup, &transport.BackupRequest{Log: log}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// recvBackup receives the rest of a Backup stream into buf.
func recvBackup(st *transport.Stream, buf *bytes.Buffer) error {
	for {
		var item transport.BackupItem
		err := st.Recv(&item)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if len(item.Data) == 0 {
			return errors.New("an empty backup item")
		}
		buf.Write(item.Data)
	}
}

// loadAppender appends one record at a time through a Go client until
// stopped, for at most n appends, and remembers what was acknowledged.
// The client follows the log's leader and retries within its session, so
// a change of leader (a starved host misses a heartbeat) neither stops the
// load nor stores a record twice.
type loadAppender struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	// acked holds the records acknowledged, in order; err the first
	// failure, after which it stops. Both guarded by mu.
	acked []transport.Record
	err   error
}

// startLoad starts a loadAppender on log g whose records are prefix-i.
func startLoad(t *testing.T, g *client.Log, prefix string, n int) *loadAppender {
	l := &loadAppender{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := range n {
			select {
			case <-l.stop:
				return
			default:
			}
			data := []byte(fmt.Sprintf("%s-%d", prefix, i))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			idx, err := g.Append(ctx, data)
			cancel()
			l.mu.Lock()
			if err != nil {
				l.err = fmt.Errorf("load append %d: %w", i, err)
			} else {
				l.acked = append(l.acked, transport.Record{Index: idx[0], Data: data})
			}
			l.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(l.halt)
	return l
}

// ackedSoFar returns the records acknowledged so far.
func (l *loadAppender) ackedSoFar() []transport.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acked)
}

// halt stops the load and waits for its last append to return.
func (l *loadAppender) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// waitAcked waits until n appends were acknowledged.
func (l *loadAppender) waitAcked(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(l.ackedSoFar()) < n {
		select {
		case <-l.done:
			t.Fatalf("the load stopped after %d appends: %v", len(l.ackedSoFar()), l.err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d appends acknowledged in 30s, want %d", len(l.ackedSoFar()), n)
		}
	}
}

// restoreCluster restores the backup b into n new data dirs and starts a
// cluster of them, every member with the same list.
func restoreCluster(t *testing.T, b []byte, n int) *testCluster {
	t.Helper()
	c := &testCluster{t: t, dir: t.TempDir(), nodes: map[string]*Node{}, addrs: map[string][2]string{}}
	t.Cleanup(c.closeAll)
	raftAddrs, clientAddrs := freeAddrs(t, n), freeAddrs(t, n)
	var peers []Peer
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		peers = append(peers, Peer{ID: id, RaftAddr: raftAddrs[i]})
		c.addrs[id] = [2]string{raftAddrs[i], clientAddrs[i]}
	}
	for _, p := range peers {
		info, err := Restore(bytes.NewReader(b), RestoreConfig{ID: p.ID, DataDir: filepath.Join(c.dir, p.ID), Bootstrap: peers, Logger: testLogger(t)})
		if err != nil {
			t.Fatalf("restore %s: %v", p.ID, err)
		}
		if info.Sessions == 0 {
			t.Errorf("restore %s: no client sessions carried over: %+v", p.ID, info)
		}
	}
	c.cfg = func(cfg *Config) { cfg.Bootstrap = peers }
	for _, p := range peers {
		c.start(p.ID, nil)
	}
	return c
}

// A backup taken from a 3-node cluster under load, while a trim drops the
// entries it has yet to send, holds every record acknowledged before it
// began; a new 3-node cluster restored from it serves each record at its
// index, answers a retried append of a client session with the original
// indexes, and takes appends after the backup's index.
func TestBackupRestore(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	conn := dial(t, leader)
	want := map[uint64][]byte{} // every record appended, by index

	old := appendN(t, conn, "old", 10)
	floor := old[5]
	if _, err := call[transport.TrimResponse](t, conn, transport.OpTrim, &transport.TrimRequest{Below: floor}); err != nil {
		t.Fatal(err)
	}
	for i, idx := range old[5:] {
		want[idx] = []byte(fmt.Sprintf("old-%d", i+5))
	}
	sess := &transport.AppendRequest{ClientID: "app", Seq: 1, Base: 1, Records: [][]byte{[]byte("sess-a"), []byte("sess-b")}}
	sr, err := call[transport.AppendResponse](t, conn, transport.OpAppend, sess)
	if err != nil {
		t.Fatal(err)
	}
	for i, idx := range sr.Indexes {
		want[idx] = sess.Records[i]
	}
	// About 10 MiB of records: the backup is many stream items, and the
	// node reads most of the log after the first one is sent.
	var bulkLast uint64
	for b := range 25 {
		req := &transport.AppendRequest{}
		for i := range 100 {
			req.Records = append(req.Records, bytes.Repeat([]byte{byte('a' + (b*100+i)%26)}, 4096))
		}
		resp, err := call[transport.AppendResponse](t, conn, transport.OpAppend, req)
		if err != nil {
			t.Fatal(err)
		}
		for i, idx := range resp.Indexes {
			want[idx] = req.Records[i]
		}
		bulkLast = resp.Indexes[len(resp.Indexes)-1]
	}

	cl := clusterClient(t, c, nil)
	load := startLoad(t, cl.Log(""), "load", 20000)
	load.waitAcked(t, 20)
	before := load.ackedSoFar()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := openBackup(t, ctx, dial(t, leader))
	var file bytes.Buffer
	var first transport.BackupItem
	if err := st.Recv(&first); err != nil {
		t.Fatal(err)
	}
	file.Write(first.Data)
	// A trim, and the snapshot after it, while the node has most of the
	// entries still to send: the backup's pin keeps them.
	trimIndex, err := cl.Trim(ctx, bulkLast)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a snapshot after the trim", func() bool {
		p := leader.snap.Latest.Load()
		return p != nil && p.Index >= trimIndex
	})
	if got := leader.view.First(); got > floor {
		t.Fatalf("the leader deleted entries up to %d while a backup from %d ran", got-1, floor)
	}
	if err := recvBackup(st, &file); err != nil {
		t.Fatalf("backup: %v", err)
	}
	waitFor(t, "the deletions held back during the backup", func() bool { return leader.view.First() >= bulkLast })
	load.halt()
	if load.err != nil {
		t.Fatal(load.err)
	}

	r, err := backup.NewReader(bytes.NewReader(file.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	hdr := r.Header()
	if _, s, err := backup.Verify(bytes.NewReader(file.Bytes())); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("backup of index %d (term %d) from %d: %d entries, %d bytes; %d load appends acknowledged before it",
			hdr.Index, hdr.Term, hdr.Floor, s.Entries, s.Size, len(before))
	}
	if hdr.Floor != floor {
		t.Fatalf("backup floor %d, want %d", hdr.Floor, floor)
	}
	for _, rec := range before {
		if rec.Index > hdr.Index {
			t.Fatalf("record %q acknowledged before the backup began is at %d, past the backup's index %d", rec.Data, rec.Index, hdr.Index)
		}
	}
	for _, rec := range load.ackedSoFar() {
		want[rec.Index] = rec.Data
	}
	var expect []transport.Record
	for idx, data := range want {
		if idx <= hdr.Index {
			expect = append(expect, transport.Record{Index: idx, Data: data})
		}
	}
	slices.SortFunc(expect, func(a, b transport.Record) int { return int(a.Index - b.Index) })

	c2 := restoreCluster(t, file.Bytes(), 3)
	leader2 := c2.waitLeader()
	conn2 := dial(t, leader2)
	got := readAll(t, leader2, false)
	var upTo []transport.Record
	for _, rec := range got {
		if rec.Index <= hdr.Index {
			upTo = append(upTo, rec)
		}
	}
	sameRecords(t, "restored cluster", upTo, expect)
	if st := leader2.Status(); st.FirstIndex != floor || st.Term <= hdr.Term {
		t.Errorf("restored leader: first index %d, term %d; want %d and a term past the backup's %d", st.FirstIndex, st.Term, floor, hdr.Term)
	}

	// Exactly once survives the restore: the session's retry is known.
	dup, err := call[transport.AppendResponse](t, conn2, transport.OpAppend, sess)
	if err != nil || !dup.Duplicate || !slices.Equal(dup.Indexes, sr.Indexes) {
		t.Fatalf("retried session append on the restored cluster: %+v, %v; want a duplicate of %v", dup, err, sr.Indexes)
	}
	after := appendN(t, conn2, "after", 5)
	if after[0] <= hdr.Index {
		t.Fatalf("new appends at %v, not after the backup's index %d", after, hdr.Index)
	}
	for _, n := range c2.nodes {
		waitCaughtUp(t, n, after[4])
		recs := readAll(t, n, true)
		if len(recs) != len(got)+5 || recs[len(recs)-1].Index != after[4] || !bytes.Equal(recs[len(recs)-1].Data, []byte("after-4")) {
			t.Fatalf("%s holds %d records ending at %d, want %d ending with after-4 at %d", n.ID(), len(recs), recs[len(recs)-1].Index, len(got)+5, after[4])
		}
	}
	// The old cluster's client addresses are forgotten: followers name
	// the new leader.
	f := followerOf(c2, leader2)
	waitFor(t, "a follower naming the new leader's client address", func() bool {
		return f.notLeader().LeaderAddr == leader2.ClientAddr()
	})
}

// A backup is the leader's to serve, and under TLS an admin's to ask for.
func TestBackupRefusals(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "cluster")
	c := tlsCluster(t, ca, 3, "ops")
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
	appendN(t, dialAs(leader, "app1"), "r", 3)

	var buf bytes.Buffer
	err := recvBackup(openBackup(t, ctx, dialAs(leader, "app1")), &buf)
	refused(t, "a backup by a client that is no admin", err, `client "app1" may not take a backup (admins: ops)`)
	f := followerOf(c, leader)
	err = recvBackup(openBackup(t, ctx, dialAs(f, "ops")), &buf)
	var te *transport.Error
	if !errors.As(err, &te) || te.Code != transport.CodeNotLeader || te.LeaderAddr != leader.ClientAddr() {
		t.Fatalf("a backup from a follower: %v, want NotLeader naming %s", err, leader.ClientAddr())
	}
	if buf.Len() != 0 {
		t.Fatalf("refused backups sent %d bytes", buf.Len())
	}
	if err := recvBackup(openBackup(t, ctx, dialAs(leader, "ops")), &buf); err != nil {
		t.Fatalf("a backup by an admin: %v", err)
	}
	if _, s, err := backup.Verify(bytes.NewReader(buf.Bytes())); err != nil || s.Entries < 3 {
		t.Fatalf("the admin's backup: %+v, %v", s, err)
	}
}

// appendBulk appends n records of 4 KiB, 100 to a request, and returns
// the last index.
func appendBulk(t *testing.T, conn *transport.Conn, n int) uint64 {
	t.Helper()
	var last uint64
	for b := 0; b < n; b += 100 {
		req := &transport.AppendRequest{}
		for i := range min(100, n-b) {
			req.Records = append(req.Records, bytes.Repeat([]byte{byte('a' + (b+i)%26)}, 4096))
		}
		resp, err := call[transport.AppendResponse](t, conn, transport.OpAppend, req)
		if err != nil {
			t.Fatal(err)
		}
		last = resp.Indexes[len(resp.Indexes)-1]
	}
	return last
}

// A backup whose client stops taking it gives its pin up after a while,
// so that trims free the disk; it then fails, rather than skip an entry.
func TestStalledBackupGivesUpItsPin(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) { cfg.hooks = &testHooks{backupStall: 300 * time.Millisecond} })
	leader := c.waitLeader()
	conn := dial(t, leader)
	last := appendBulk(t, conn, 2500) // about 10 MiB
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := openBackup(t, ctx, dial(t, leader))
	var file bytes.Buffer
	var first transport.BackupItem
	if err := st.Recv(&first); err != nil {
		t.Fatal(err)
	}
	file.Write(first.Data)
	// The client takes nothing more; a trim comes.
	if _, err := call[transport.TrimResponse](t, conn, transport.OpTrim, &transport.TrimRequest{Below: last}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the trimmed entries deleted while a backup stalls", func() bool { return leader.view.First() >= last })
	err := recvBackup(st, &file)
	var te *transport.Error
	if !errors.As(err, &te) || te.Code != transport.CodeUnavailable || !strings.Contains(te.Message, "no longer on node") {
		t.Fatalf("the stalled backup, resumed after its entries were deleted: %v", err)
	}
	if _, _, err := backup.Verify(bytes.NewReader(file.Bytes())); !errors.Is(err, backup.ErrTruncated) {
		t.Fatalf("what the failed backup sent: %v, want a truncated file", err)
	}
}
