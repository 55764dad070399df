package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/replica"
)

// The cluster's id (hello.go says what it is for).
//
// The default log's leader sets it in the catalog once, a random 128-bit
// value, at its first stint: a new cluster gets one a second or so after
// its bootstrap, a cluster created by an older version at its first
// leader of this version, a cluster restored from a full backup (whose
// catalog the restore drops) a new one. Each leader proposes its id again
// once per stint, which changes nothing where it is known and gives it to
// a node that missed it (one that ran an older version then).
//
// Every node keeps the id its catalog holds in the data dir's file
// cluster-id as well, so that from its start it says the id in its hellos,
// before raft has replayed the catalog's entries after the last snapshot.

// clusterIDFile is the data dir's copy of the cluster's id.
const clusterIDFile = "cluster-id"

// clusterIDs is a node's knowledge of its cluster's id.
type clusterIDs struct {
	mu   sync.Mutex
	file catalog.ClusterID // what the data dir's cluster-id holds; guarded by mu
}

// loadClusterID reads the data dir's cluster-id, if any.
func (n *Node) loadClusterID() error {
	s, ok, err := n.marks.read(clusterIDFile)
	if err != nil || !ok {
		return err
	}
	id, err := catalog.ParseClusterID(strings.TrimSpace(s))
	if err != nil {
		path := filepath.Join(n.cfg.DataDir, clusterIDFile)
		return fmt.Errorf("node: %s: %w (the file holds the id of the node's cluster; remove it, and the node learns the id again from the cluster)", path, err)
	}
	n.clusterIDs.mu.Lock()
	n.clusterIDs.file = id
	n.clusterIDs.mu.Unlock()
	return nil
}

// clusterID returns the id of the node's cluster: its catalog's, or the
// data dir's copy while the catalog has none; zero when it knows none.
func (n *Node) clusterID() catalog.ClusterID {
	if id := n.catalog.State().ClusterID(); !id.IsZero() {
		return id
	}
	n.clusterIDs.mu.Lock()
	defer n.clusterIDs.mu.Unlock()
	return n.clusterIDs.file
}

// keepClusterID writes the catalog's cluster id to the data dir's copy
// when the copy differs.
func (n *Node) keepClusterID() {
	id := n.catalog.State().ClusterID()
	n.clusterIDs.mu.Lock()
	defer n.clusterIDs.mu.Unlock()
	if id.IsZero() || id == n.clusterIDs.file {
		return
	}
	if !n.clusterIDs.file.IsZero() {
		n.cfg.Logger.Warn("the catalog names another cluster id than the data dir's cluster-id file; the node goes by the catalog's", "catalog", id, "file", n.clusterIDs.file)
	}
	if err := replica.WriteFileSync(filepath.Join(n.cfg.DataDir, clusterIDFile), []byte(id.String()+"\n")); err != nil {
		n.cfg.Logger.Warn("keeping the cluster id in the data dir", "error", err)
		return
	}
	n.clusterIDs.file = id
}

// proposeClusterID, on the default log's leader, sets the cluster's id in
// the catalog when it has none, and proposes it again once per stint (see
// the top of this file). last is the stint it last proposed in; it returns
// the stint it has proposed in now.
func (n *Node) proposeClusterID(last *replica.Stint) *replica.Stint {
	st := n.log.Stint()
	if st == nil || st == last || !n.log.IsLeader() {
		return last
	}
	id := n.clusterID() // the data dir's copy if the catalog has none
	if id.IsZero() {
		var err error
		if id, err = catalog.NewClusterID(); err != nil {
			n.cfg.Logger.Warn("choosing the cluster's id", "error", err)
			return last
		}
	}
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	res, err := n.proposeCatalog(ctx, &catalog.SetClusterID{ID: id})
	if err == nil && res.Err != nil && !errors.Is(res.Err, catalog.ErrExists) {
		err = res.Err
	}
	if err != nil {
		if n.ctx.Err() == nil {
			n.cfg.Logger.Warn("setting the cluster's id", "error", err)
		}
		return last
	}
	return st
}

// hello is this node's hello (hello.go).
func (n *Node) hello() helloMsg {
	m := helloMsg{ID: n.cfg.ID, Addr: n.raftAdvertised}
	if id := n.clusterID(); !id.IsZero() {
		m.Cluster = id.String()
	}
	return m
}

// admitPeer says why the raft connection whose hello is peer may not go
// on, "" if it may (hello.go has the rules).
func (n *Node) admitPeer(peer, own helloMsg) string {
	if peer.Cluster != "" && own.Cluster != "" {
		if peer.Cluster != own.Cluster {
			return fmt.Sprintf("this node belongs to cluster %s", own.Cluster)
		}
		return ""
	}
	members, what := n.knownMembers()
	if len(members) == 0 {
		return "" // a new member, before its leader's first entry
	}
	for _, m := range members {
		if m.ID != peer.ID {
			continue
		}
		if sameTCPAddr(m.RaftAddr, peer.Addr) {
			return ""
		}
		return fmt.Sprintf("this node's %s has %s at %s, not at %s", what, peer.ID, m.RaftAddr, orUnknown(peer.Addr))
	}
	return fmt.Sprintf("%s is not in this node's %s", orUnknown(peer.ID), what)
}

// knownMembers returns the members of the node's latest raft
// configuration, or of its bootstrap list while it has none and decides
// whether to bootstrap, and which of the two it is; none for a new member
// before its leader's first entry (whose leader may be a node the
// bootstrap list does not name).
func (n *Node) knownMembers() ([]Peer, string) {
	if r := n.raftRef.Load(); r != nil {
		if c, ok := readConfig(r); ok && len(c.servers) > 0 {
			ps := make([]Peer, len(c.servers))
			for i, s := range c.servers {
				ps[i] = Peer{ID: string(s.ID), RaftAddr: string(s.Address)}
			}
			return ps, "raft configuration"
		}
	}
	if n.deciding.Load() || n.raftRef.Load() == nil {
		return n.cfg.Bootstrap, "bootstrap list"
	}
	return nil, ""
}

// refusedHello logs a raft connection refused (admitPeer said why), at
// most once a minute for each peer and reason, and counts it.
func (n *Node) refusedHello(remote net.Addr, peer, own helloMsg, why string) {
	n.metrics.refusedPeers.WithLabelValues(refusedOtherCluster).Inc()
	key := peer.ID + " " + peer.Addr + " " + peer.Cluster + " " + why
	n.foreignLogged.mu.Lock()
	defer n.foreignLogged.mu.Unlock()
	if at, ok := n.foreignLogged.at[key]; ok && time.Since(at) < time.Minute {
		return
	}
	if n.foreignLogged.at == nil {
		n.foreignLogged.at = map[string]time.Time{}
	}
	n.foreignLogged.at[key] = time.Now()
	n.cfg.Logger.Error("refused a raft connection from a node of another cluster: a node of that cluster has this node's address in its configuration (a reused host and port?); this node serves its own cluster only",
		"why", why, "remote", remote, "its_node", orUnknown(peer.ID), "its_addr", orUnknown(peer.Addr), "its_cluster", orUnknown(peer.Cluster), "this_cluster", orUnknown(own.Cluster))
}

// foreignLog limits how often refusedHello logs.
type foreignLog struct {
	mu sync.Mutex
	at map[string]time.Time // peer and reason -> when last logged; guarded by mu
}
