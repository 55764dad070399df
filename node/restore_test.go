package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/backup"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// syntheticBackup writes the backup a leader would send of a log holding
// raft's configuration entry, a member's address and one append of n
// records by client "app" (sequence number 1). It returns the file, the
// records by index, the append's indexes, and the file with the entry of
// one record left out (valid as a file, but not with its state).
func syntheticBackup(t *testing.T, n int) (file []byte, records map[uint64][]byte, appended []uint64, missing []byte) {
	t.Helper()
	f := replica.NewFSM(nil, discardLogger())
	logs := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration},
		{Index: 2, Term: 2, Type: raft.LogCommand, Data: replica.EncodeMemberCmd("n1", "192.0.2.1:7000")},
		{Index: 3, Term: 2, Type: raft.LogNoop},
	}
	records = map[uint64][]byte{}
	for i := range n {
		idx := uint64(4 + i)
		payload := []byte(fmt.Sprintf("record-%d", i))
		logs = append(logs, &raft.Log{Index: idx, Term: 2, Type: raft.LogCommand, AppendedAt: time.Unix(0, int64(idx)),
			Data: replica.AppendRecordCmd(nil, "app", 1, uint64(i), uint64(n), 1, 0, payload)})
		records[idx] = payload
		appended = append(appended, idx)
	}
	last := uint64(4 + n)
	logs = append(logs, &raft.Log{Index: last, Term: 2, Type: raft.LogConfiguration})
	f.ApplyBatch(logs)
	state := f.State()
	write := func(skip uint64) []byte {
		var buf bytes.Buffer
		w, err := backup.NewWriter(&buf, backup.Header{Index: last, Term: 2, Floor: 1, Created: time.Now()}, state)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range logs {
			if l.Type == raft.LogCommand && l.Index != skip {
				if err := w.Add(backup.Entry{Index: l.Index, Term: l.Term, AppendedAt: l.AppendedAt.UnixNano(), Data: l.Data}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	return write(0), records, appended, write(5)
}

// A restored data dir starts a node that serves every record at its index,
// knows the client sessions, has forgotten the old members' addresses and
// takes appends after the backup's index.
func TestRestoreSingleNode(t *testing.T) {
	file, records, appended, _ := syntheticBackup(t, 20)
	dir := filepath.Join(t.TempDir(), "n1")
	addr := freeAddrs(t, 1)[0]
	peers := []Peer{{ID: "n1", RaftAddr: addr}}
	info, err := Restore(bytes.NewReader(file), RestoreConfig{ID: "n1", DataDir: dir, Bootstrap: peers})
	if err != nil {
		t.Fatal(err)
	}
	if info.Header.Index != 24 || info.Summary.Entries != 21 || info.Sessions != 1 {
		t.Fatalf("restore info %+v, want index 24, 21 entries, 1 session", info)
	}
	if _, err := os.Stat(filepath.Join(dir, restoringFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the restoring marker is left: %v", err)
	}
	// The snapshot's state names no member: the old cluster's addresses
	// would send clients there.
	files, err := replica.ReadSnapFiles(vfs.Default, filepath.Join(dir, "snapshots"), logGroups)
	if err != nil || len(files) != 1 {
		t.Fatalf("snapshots: %v, %v", files, err)
	}
	sf := files[0]
	sum, err := replica.SummarizeState(sf.State)
	if err != nil || len(sum.Members) != 0 || sum.Sessions != 1 {
		t.Fatalf("restored state: %v, members %v, %d sessions; want no members, 1 session", err, sum.Members, sum.Sessions)
	}
	if sf.Meta.Index != 24 || sf.Meta.Term != 2 || len(sf.Meta.Configuration.Servers) != 1 || sf.Meta.Configuration.Servers[0].Address != raft.ServerAddress(addr) {
		t.Fatalf("restored snapshot %+v", sf.Meta)
	}

	cfg := testConfig(t, filepath.Dir(dir), "n1")
	cfg.RaftAddr, cfg.Bootstrap = addr, peers
	c := &testCluster{t: t, nodes: map[string]*Node{}}
	t.Cleanup(c.closeAll)
	ctxStart(t, c, cfg)
	leader := c.waitLeader()
	got := readAll(t, leader, false)
	if len(got) != len(records) {
		t.Fatalf("%d records, want %d", len(got), len(records))
	}
	for _, r := range got {
		if !bytes.Equal(r.Data, records[r.Index]) {
			t.Fatalf("index %d holds %q, want %q", r.Index, r.Data, records[r.Index])
		}
	}
	conn := dial(t, leader)
	var recs [][]byte
	for _, idx := range appended {
		recs = append(recs, records[idx])
	}
	dup, err := call[transport.AppendResponse](t, conn, transport.OpAppend, &transport.AppendRequest{ClientID: "app", Seq: 1, Base: 1, Records: recs})
	if err != nil || !dup.Duplicate || !slices.Equal(dup.Indexes, appended) {
		t.Fatalf("retried append: %+v, %v; want a duplicate at %v", dup, err, appended)
	}
	if idx := appendN(t, conn, "after", 1); idx[0] <= 24 {
		t.Fatalf("appended at %d, not after the backup's index 24", idx[0])
	}
}

// ctxStart starts a node of cfg into c.
func ctxStart(t *testing.T, c *testCluster, cfg Config) {
	t.Helper()
	n, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.nodes[cfg.ID] = n
}

// Restore refuses a data dir that is not empty, and a damaged backup, with
// an error naming the cause, and leaves the data dir as it found it.
func TestRestoreRefusals(t *testing.T) {
	file, _, _, missing := syntheticBackup(t, 3000) // about 170 KiB
	flipped := bytes.Clone(file)
	flipped[len(flipped)*2/3] ^= 0x10
	version := bytes.Clone(file)
	binary.BigEndian.PutUint32(version[8:], 7)
	binary.BigEndian.PutUint32(version[48:], crc32.Checksum(version[:48], crc32.MakeTable(crc32.Castagnoli)))
	var newer bytes.Buffer // a state machine state of a version to come
	w, err := backup.NewWriter(&newer, backup.Header{Index: 5, Term: 1, Floor: 1}, []byte{replica.StateVersion + 1, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	peers := []Peer{{ID: "n1", RaftAddr: "127.0.0.1:7001"}, {ID: "n2", RaftAddr: "127.0.0.1:7011"}}
	for _, tc := range []struct {
		name  string
		file  []byte
		exist bool // the data dir exists, empty, before
		id    string
		want  error
		msg   string
	}{
		{"truncated, no dir", file[:len(file)/2], false, "n1", backup.ErrTruncated, "the file ends"},
		{"truncated, empty dir", file[:len(file)-1], true, "n1", backup.ErrTruncated, "the file ends"},
		{"bit flip", flipped, true, "n1", backup.ErrCorrupt, "checksum"},
		{"version", version, false, "n1", backup.ErrUnsupportedVersion, "format version 7"},
		{"not a backup", []byte("SQLite format 3\x00 and so on, and so on, and so on, and on"), true, "n1", backup.ErrNotBackup, "RLBACKUP"},
		{"state and entries differ", missing, true, "n2", backup.ErrCorrupt, "do not belong together"},
		{"state version", newer.Bytes(), false, "n1", backup.ErrUnsupportedVersion, fmt.Sprintf("state in it has version %d", replica.StateVersion+1)},
		{"not a member", file, true, "n3", nil, "do not include this node (n3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if tc.exist {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Restore(bytes.NewReader(tc.file), RestoreConfig{ID: tc.id, DataDir: dir, Bootstrap: peers})
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("restore: %v, want %v saying %q", err, tc.want, tc.msg)
			}
			names, rerr := os.ReadDir(dir)
			switch {
			case !tc.exist && !errors.Is(rerr, os.ErrNotExist):
				t.Fatalf("the data dir was missing; after a failed restore: %v, %v", names, rerr)
			case tc.exist && (rerr != nil || len(names) != 0):
				t.Fatalf("the data dir was empty; after a failed restore it holds %v (%v)", names, rerr)
			}
		})
	}

	// A data dir that holds anything is refused, and left alone.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "precious"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Restore(bytes.NewReader(file), RestoreConfig{ID: "n1", DataDir: dir, Bootstrap: peers})
	if !errors.Is(err, ErrDataDirNotEmpty) || !strings.Contains(err.Error(), "precious") {
		t.Fatalf("restore into a data dir that is not empty: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "precious")); err != nil || string(b) != "keep me" {
		t.Fatalf("the data dir's file after a refused restore: %q, %v", b, err)
	}
}

// A restore cut short (its marker left behind) is never taken for a
// node's state: the node refuses to start, and restore to go on.
func TestUnfinishedRestoreRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, "n1")
	cfg.Bootstrap = []Peer{{ID: "n1", RaftAddr: "127.0.0.1:0"}}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, restoringFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := Start(t.Context(), cfg)
	if err == nil {
		n.Close()
		t.Fatal("a node started from an unfinished restore")
	}
	if !errors.Is(err, ErrRestoreIncomplete) || !strings.Contains(err.Error(), "node restore") {
		t.Fatalf("start: %v, want %v", err, ErrRestoreIncomplete)
	}
	file, _, _, _ := syntheticBackup(t, 3)
	_, err = Restore(bytes.NewReader(file), RestoreConfig{ID: "n1", DataDir: cfg.DataDir, Bootstrap: cfg.Bootstrap})
	if !errors.Is(err, ErrDataDirNotEmpty) || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("restore over an unfinished one: %v", err)
	}
}

// Restored on a majority of the members, a backup is enough: a member
// started with an empty data dir and the same bootstrap list finds that
// the others run a cluster, joins, and gets the records from the leader.
func TestRestoreMajorityThenJoin(t *testing.T) {
	file, records, _, _ := syntheticBackup(t, 50)
	c := &testCluster{t: t, dir: t.TempDir(), nodes: map[string]*Node{}, addrs: map[string][2]string{}}
	t.Cleanup(c.closeAll)
	raftAddrs, clientAddrs := freeAddrs(t, 3), freeAddrs(t, 3)
	var peers []Peer
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		peers = append(peers, Peer{ID: id, RaftAddr: raftAddrs[i]})
		c.addrs[id] = [2]string{raftAddrs[i], clientAddrs[i]}
	}
	for _, p := range peers[:2] {
		if _, err := Restore(bytes.NewReader(file), RestoreConfig{ID: p.ID, DataDir: filepath.Join(c.dir, p.ID), Bootstrap: peers}); err != nil {
			t.Fatal(err)
		}
	}
	c.cfg = func(cfg *Config) { cfg.Bootstrap = peers }
	for _, p := range peers {
		c.start(p.ID, nil)
	}
	c.waitVoter(c.nodes["n3"])
	leader := c.waitLeader()
	idx := appendN(t, dial(t, leader), "after", 1)
	waitCaughtUp(t, c.nodes["n3"], idx[0])
	got := readAll(t, c.nodes["n3"], true)
	if len(got) != len(records)+1 {
		t.Fatalf("n3 holds %d records, want %d", len(got), len(records)+1)
	}
	for _, r := range got[:len(records)] {
		if !bytes.Equal(r.Data, records[r.Index]) {
			t.Fatalf("n3 holds %q at %d, want %q", r.Data, r.Index, records[r.Index])
		}
	}
}

// A full restore whose member list reuses the old cluster's ids and raft
// addresses while a node of the old cluster still runs (the operator
// restores n2 and n3 where they ran and forgets to stop the old leader):
// the restored nodes say the restore's cluster id from their first start,
// so each side refuses the other's raft connections by id. Without it the
// two sides admitted each other by id and address, and the restored nodes
// followed the old node and took the old cluster's records written after
// the backup, undoing the restore.
func TestRestoreBesideOldNode(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	old := c.waitLeader()
	waitFor(t, "the old cluster's id on every node", func() bool {
		for _, n := range c.nodes {
			if id := n.clusterID(); id.IsZero() || id != old.clusterID() {
				return false
			}
		}
		return true
	})
	oldID := old.clusterID()
	waitFor(t, "three voters in the old leader's configuration", func() bool {
		f := old.raft.GetConfiguration()
		if f.Error() != nil {
			return false
		}
		voters := 0
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters++
			}
		}
		return voters == 3
	})
	conn := dial(t, old)
	appendN(t, conn, "pre", 5)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var file bytes.Buffer
	if err := recvBackup(openBackup(t, ctx, conn), &file); err != nil {
		t.Fatal(err)
	}
	br, err := backup.NewReader(bytes.NewReader(file.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	backupIndex := br.Header().Index
	post := appendN(t, conn, "post", 5)
	for _, n := range c.nodes {
		waitCaughtUp(t, n, post[len(post)-1])
	}
	oldRecs := readAll(t, old, true)
	var want []transport.Record // what the restored cluster must hold
	for _, r := range oldRecs {
		if r.Index <= backupIndex {
			want = append(want, r)
		}
	}
	if len(want) == len(oldRecs) {
		t.Fatalf("the old cluster holds no record after the backup's index %d", backupIndex)
	}

	var peers []Peer
	var ids []string // the restored nodes' ids
	for _, id := range []string{"n1", "n2", "n3"} {
		peers = append(peers, Peer{ID: id, RaftAddr: c.addrs[id][0]})
		if id != old.ID() {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		c.stop(id)
	}
	c.dir = t.TempDir()
	for _, id := range ids {
		if _, err := Restore(bytes.NewReader(file.Bytes()), RestoreConfig{ID: id, DataDir: filepath.Join(c.dir, id), Bootstrap: peers}); err != nil {
			t.Fatal(err)
		}
	}
	newID := restoredIDOf(t, file.Bytes(), oldID, peers)
	var restored []*Node
	for _, id := range ids {
		n := c.start(id, func(cfg *Config) { cfg.Bootstrap = peers })
		restored = append(restored, n)
		if got := n.clusterID(); got != newID {
			t.Errorf("restored %s starts knowing cluster id %q (the old cluster's is %s); want the restore's own, %s", id, got, oldID, newID)
		}
	}

	// The restored nodes elect a leader of their own, in a term after the
	// backup's, rather than follow the old node.
	var leader *Node
	deadline := time.Now().Add(20 * time.Second)
	for leader == nil {
		for _, n := range restored {
			if n.IsLeader() {
				leader = n
			}
		}
		if leader != nil {
			break
		}
		if time.Now().After(deadline) {
			var states []string
			for _, n := range slices.Concat(restored, []*Node{old}) {
				_, lid := n.raft.LeaderWithID()
				states = append(states, fmt.Sprintf("%s %v term %d last %d leader %q", n.ID(), n.raft.State(), n.raft.CurrentTerm(), n.raft.LastIndex(), lid))
			}
			t.Fatalf("no restored node leads within 20s: %s", strings.Join(states, "; "))
		}
		waitApplied(t, c.nodes, 50*time.Millisecond)
	}
	if term := leader.raft.CurrentTerm(); term <= br.Header().Term {
		t.Errorf("restored %s leads in term %d, not after the backup's %d", leader.ID(), term, br.Header().Term)
	}
	idx := appendN(t, dial(t, leader), "new", 1)
	want = append(want, transport.Record{Index: idx[0], Data: []byte("new-0")})
	for _, n := range restored {
		waitCaughtUp(t, n, idx[0])
		sameRecords(t, "restored "+n.ID(), readAll(t, n, true), want)
	}
	sameRecords(t, "the old "+old.ID(), readAll(t, old, true), oldRecs)

	// Each side refused the other's raft connections, and counted them.
	refused := func(n *Node) float64 {
		return counterValue(n.metrics.refusedPeers.WithLabelValues(refusedOtherCluster))
	}
	waitFor(t, "the old node refusing the restored nodes", func() bool { return refused(old) > 0 })
	waitFor(t, "the restored nodes refusing the old node", func() bool { return refused(restored[0])+refused(restored[1]) > 0 })
	if got := old.clusterID(); got != oldID {
		t.Errorf("the old node's cluster id went from %s to %s", oldID, got)
	}
	// The restored leader proposes the data dir's id into the catalog.
	waitFor(t, "the restore's cluster id in the restored nodes' catalogs", func() bool {
		for _, n := range restored {
			if got := n.catalog.State().ClusterID(); got != newID {
				return false
			}
		}
		return true
	})
	t.Logf("refusals: old %s %v, restored %s %v and %s %v", old.ID(), refused(old), restored[0].ID(), refused(restored[0]), restored[1].ID(), refused(restored[1]))
}
