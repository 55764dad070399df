package node

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/raftlog/raftlog/backup"
	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/replica"
)

// The cluster id of a cluster made by a full restore (restore.go).
//
// A restored cluster is a new cluster, and it has its id from the restore
// itself: Restore writes it into each data dir's cluster-id file
// (clusterid.go), so that every restored node says it in its hellos from
// its first start, and the first leader proposes that copy into the
// catalog. Until then a node that knows no id admits a peer by its id and
// raft address alone (Node.admitPeer), which let a node of the old cluster
// that still ran at an address the restore's member list reuses make the
// restored nodes follow it and take its records after the backup.
//
// The restore runs on each member apart, so the id is derived, the same on
// every member of one restore, as etcd derives its cluster id from the
// member list and --initial-cluster-token: the first 16 bytes of a SHA-256
// of
//
//   - a domain string (restoredIDDomain), so that no other raftlog id, and
//     no id drawn at random, is derived the same way;
//   - the backup's identity: its header (format version, index, term,
//     floor, creation time, log name), its counts, size and file checksum
//     (backup.Summary), and the old cluster's id that the catalog in its
//     state holds, if any;
//   - the new cluster's members, sorted by id: each id and raft address;
//   - the operator's cluster token (RestoreConfig.ClusterToken), "" if
//     none.
//
// Each string goes in with its length before it, so no two inputs read
// alike. The id is never the zero id nor the old cluster's id: should the
// hash give either (odds of 2^-127), a counter after the input is raised
// until it gives neither. So a restored cluster's nodes and the old
// cluster's refuse each other by id, and two restores of one backup onto
// different members (another id or raft address) have different ids. Two
// restores of one backup onto the same member list have the same id
// unless given different tokens: restoring twice to the same ids and
// addresses (a staging copy on hosts whose names match) makes two
// clusters that would admit each other.

// restoredIDDomain starts the input of a restored cluster's id; version 1
// of the derivation. Wire format: changing it changes every restored id.
const restoredIDDomain = "raftlog restored cluster id v1\x00"

// RestoredClusterID returns the cluster id that a full restore of a backup
// onto members with token gives the new cluster (see above): hdr, sum and
// state are the backup's (backup.Reader's Header, Summary and State once
// Next returned io.EOF, the whole file read). An error names a member list
// a restore refuses, or a catalog in the state that does not read (it
// wraps backup.ErrCorrupt).
func RestoredClusterID(hdr backup.Header, sum backup.Summary, state []byte, members []Peer, token string) (catalog.ClusterID, error) {
	if err := checkMembers(members); err != nil {
		return catalog.ClusterID{}, err
	}
	cat, err := backupCatalog(state)
	if err != nil {
		return catalog.ClusterID{}, err
	}
	var old catalog.ClusterID
	if cat != nil {
		old = cat.ClusterID()
	}
	return restoredClusterID(hdr, sum, old, members, token), nil
}

// restoredClusterID derives a restored cluster's id from the backup's
// header, summary and old cluster id (zero if none), the members and the
// token.
func restoredClusterID(hdr backup.Header, sum backup.Summary, old catalog.ClusterID, members []Peer, token string) catalog.ClusterID {
	u32 := binary.BigEndian.AppendUint32
	u64 := binary.BigEndian.AppendUint64
	str := func(b []byte, s string) []byte { return append(u32(b, uint32(len(s))), s...) }

	b := []byte(restoredIDDomain)
	b = u32(b, hdr.Version)
	b = u64(b, hdr.Index)
	b = u64(b, hdr.Term)
	b = u64(b, hdr.Floor)
	b = u64(b, uint64(hdr.Created.UnixNano()))
	b = str(b, hdr.Log.Name)
	b = u64(b, sum.Entries)
	b = u64(b, sum.DataBytes)
	b = u64(b, uint64(sum.Size))
	b = u32(b, sum.Checksum)
	b = append(b, old[:]...)
	sorted := slices.SortedFunc(slices.Values(members), func(x, y Peer) int { return strings.Compare(x.ID, y.ID) })
	b = u32(b, uint32(len(sorted)))
	for _, p := range sorted {
		b = str(b, p.ID)
		b = str(b, p.RaftAddr)
	}
	b = str(b, token)
	for round := uint32(0); ; round++ {
		d := sha256.Sum256(u32(b, round))
		var id catalog.ClusterID
		copy(id[:], d[:])
		if !id.IsZero() && id != old {
			return id
		}
	}
}

// checkMembers checks a restore's member list: each member with an id of
// its own and a raft address of host and port.
func checkMembers(members []Peer) error {
	if len(members) == 0 {
		return errors.New("node: restore: no members: give the new cluster's members (the bootstrap list)")
	}
	seen := map[string]bool{}
	for _, p := range members {
		if p.ID == "" || seen[p.ID] {
			return fmt.Errorf("node: restore: member id %q empty or given twice", p.ID)
		}
		if _, _, err := net.SplitHostPort(p.RaftAddr); err != nil {
			return fmt.Errorf("node: restore: member %s: raft address %q: %v", p.ID, p.RaftAddr, err)
		}
		seen[p.ID] = true
	}
	return nil
}

// backupCatalog reads the catalog in a default log's backup state
// (backup.Reader.State); nil if the state holds none. An error wraps
// backup.ErrCorrupt.
func backupCatalog(state []byte) (*catalog.State, error) {
	sum, err := replica.SummarizeState(state)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", backup.ErrCorrupt, err)
	}
	if len(sum.Control) == 0 {
		return nil, nil
	}
	cat, err := catalog.ReadSnapshot(bytes.NewReader(sum.Control))
	if err != nil {
		return nil, fmt.Errorf("%w: the catalog in its state: %v", backup.ErrCorrupt, err)
	}
	return cat, nil
}
