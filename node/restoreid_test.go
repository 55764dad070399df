package node

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/raftlog/raftlog/backup"
	"github.com/raftlog/raftlog/catalog"
)

// readBackup reads a whole backup file and returns its header, summary and
// state.
func readBackup(t *testing.T, file []byte) (backup.Header, backup.Summary, []byte) {
	t.Helper()
	br, err := backup.NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if err := br.Verify(); err != nil {
		t.Fatal(err)
	}
	return br.Header(), br.Summary(), br.State()
}

// Every member of one restore (one file, one member list, one token) gets
// the same cluster id in its data dir's cluster-id file, whatever the order
// of the list; another member list, another token or another backup gives
// another id, and the backup's own cluster id goes into it.
func TestRestoredClusterID(t *testing.T) {
	file, _, _, _ := syntheticBackup(t, 10)
	peers := []Peer{{ID: "n1", RaftAddr: "127.0.0.1:7001"}, {ID: "n2", RaftAddr: "127.0.0.1:7011"}, {ID: "n3", RaftAddr: "127.0.0.1:7021"}}
	dir := t.TempDir()
	var ids []catalog.ClusterID
	for i, p := range peers {
		members := slices.Clone(peers)
		if i == 1 {
			slices.Reverse(members) // one operator wrote the list the other way round
		}
		info, err := Restore(bytes.NewReader(file), RestoreConfig{ID: p.ID, DataDir: filepath.Join(dir, p.ID), Bootstrap: members})
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, p.ID, clusterIDFile))
		if err != nil || string(b) != info.ClusterID.String()+"\n" || info.ClusterID.IsZero() {
			t.Fatalf("%s's cluster-id file holds %q (%v); the restore said %q", p.ID, b, err, info.ClusterID)
		}
		ids = append(ids, info.ClusterID)
	}
	if ids[0] != ids[1] || ids[0] != ids[2] {
		t.Fatalf("the members of one restore got cluster ids %v", ids)
	}
	hdr, sum, state := readBackup(t, file)
	if got, err := RestoredClusterID(hdr, sum, state, peers, ""); err != nil || got != ids[0] {
		t.Fatalf("RestoredClusterID: %v, %v; the restore gave %v", got, err, ids[0])
	}

	other, _, _, _ := syntheticBackup(t, 10) // the same records, another backup
	oHdr, oSum, _ := readBackup(t, other)
	moved := slices.Clone(peers)
	moved[2].RaftAddr = "127.0.0.1:7031"
	for _, tc := range []struct {
		name   string
		hdr    backup.Header
		sum    backup.Summary
		old    catalog.ClusterID
		peers  []Peer
		token  string
		differ bool
	}{
		{"the same restore", hdr, sum, catalog.ClusterID{}, peers, "", false},
		{"a token", hdr, sum, catalog.ClusterID{}, peers, "staging", true},
		{"another token", hdr, sum, catalog.ClusterID{}, peers, "staging-2", true},
		{"a member fewer", hdr, sum, catalog.ClusterID{}, peers[:2], "", true},
		{"a member at another address", hdr, sum, catalog.ClusterID{}, moved, "", true},
		{"another backup", oHdr, oSum, catalog.ClusterID{}, peers, "", true},
		{"a backup of a cluster with an id", hdr, sum, catalog.ClusterID{1}, peers, "", true},
	} {
		got := restoredClusterID(tc.hdr, tc.sum, tc.old, tc.peers, tc.token)
		if got.IsZero() || got == tc.old || (got != ids[0]) != tc.differ {
			t.Errorf("%s: cluster id %v, the restore's %v; want another: %v", tc.name, got, ids[0], tc.differ)
		}
	}

	// A restore given a token writes the id RestoredClusterID gives with it.
	info, err := Restore(bytes.NewReader(file), RestoreConfig{ID: "n1", DataDir: filepath.Join(dir, "token"), Bootstrap: peers, ClusterToken: "staging"})
	if want := restoredClusterID(hdr, sum, catalog.ClusterID{}, peers, "staging"); err != nil || info.ClusterID != want {
		t.Fatalf("restore with a token: cluster id %v (%v), want %v", info.ClusterID, err, want)
	}
	for _, bad := range [][]Peer{nil, {{ID: "n1", RaftAddr: "127.0.0.1:1"}, {ID: "n1", RaftAddr: "127.0.0.1:2"}}, {{ID: "n1", RaftAddr: "no port"}}} {
		if _, err := RestoredClusterID(hdr, sum, state, bad, ""); err == nil {
			t.Errorf("RestoredClusterID of the members %v: no error", bad)
		}
	}
}

// restoredIDOf returns the cluster id a restore of file onto peers gives,
// checking that the backup's cluster id, old, went into it.
func restoredIDOf(t *testing.T, file []byte, old catalog.ClusterID, peers []Peer) catalog.ClusterID {
	t.Helper()
	hdr, sum, state := readBackup(t, file)
	id, err := RestoredClusterID(hdr, sum, state, peers, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := restoredClusterID(hdr, sum, old, peers, ""); id != want || id.IsZero() || id == old {
		t.Fatalf("a restore of a backup of cluster %s gives cluster id %s, want %s, derived from the old id", old, id, want)
	}
	return id
}
