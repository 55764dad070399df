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

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/replica"
)

// The cluster's id (hello.go says what it is for).
//
// The default log's leader sets it in the catalog once: the data dir's
// copy if it has one, else a random 128-bit value once every voter of the
// log's configuration has answered its hello (firstClusterID). A new
// cluster gets one a second or so after its bootstrap, a cluster created
// by an older version once all its members run this version (an older one
// ignores the command). A cluster restored from a full backup (whose
// catalog the restore drops) has its new id from the restore, which writes
// it into every member's data dir (restoreid.go), so its nodes say it from
// their first start and its first leader proposes that one. Each leader
// proposes its id again once per stint, which changes nothing where it is
// known and gives it to a node that missed it.
//
// Every node keeps the id its catalog holds in the data dir's file
// cluster-id as well, so that from its start it says the id in its hellos,
// before raft has replayed the catalog's entries after the last snapshot.
// A new member knows the id of the cluster it joins before its catalog
// does (joinid.go).

// clusterIDFile is the data dir's copy of the cluster's id.
const clusterIDFile = "cluster-id"

// clusterIDs is a node's knowledge of its cluster's id.
type clusterIDs struct {
	mu   sync.Mutex
	file catalog.ClusterID // what the data dir's cluster-id holds; guarded by mu
	join joinerState       // a new member's, of the cluster it joins (joinid.go); guarded by mu
	// waitLogged is the stint in which the leader last logged why it sets
	// no id yet; only planLoop's goroutine uses it.
	waitLogged *replica.Stint
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
// data dir's copy while the catalog has none, or (a new member) the id of
// the cluster it joins (joinid.go); zero when it knows none.
func (n *Node) clusterID() catalog.ClusterID {
	if id := n.catalog.State().ClusterID(); !id.IsZero() {
		return id
	}
	n.clusterIDs.mu.Lock()
	defer n.clusterIDs.mu.Unlock()
	if !n.clusterIDs.file.IsZero() {
		return n.clusterIDs.file
	}
	return n.clusterIDs.join.expect
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
	if err := n.writeClusterIDFile(id); err != nil {
		n.cfg.Logger.Warn("keeping the cluster id in the data dir", "error", err)
	}
}

// writeClusterIDFile writes id to the data dir's cluster-id, durably. The
// caller holds n.clusterIDs.mu.
func (n *Node) writeClusterIDFile(id catalog.ClusterID) error {
	if err := replica.WriteFileSync(filepath.Join(n.cfg.DataDir, clusterIDFile), []byte(id.String()+"\n")); err != nil {
		return err
	}
	n.clusterIDs.file = id
	return nil
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
	if h := n.cfg.hooks; h != nil && h.holdClusterID != nil && h.holdClusterID.Load() {
		return last
	}
	id := n.clusterID() // the data dir's copy if the catalog has none
	if id.IsZero() {
		var why string
		if id, why = n.firstClusterID(); why != "" {
			if n.clusterIDs.waitLogged != st {
				n.clusterIDs.waitLogged = st
				n.cfg.Logger.Info("not setting the cluster's id yet", "why", why)
			}
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

// firstClusterID returns the id the default log's leader sets when
// neither its catalog nor its data dir holds one, or why it sets none yet.
//
// Every other voter of the log's configuration must have answered this
// node's hello, which shows it runs a version that keeps the id: an older
// one ignores the catalog's command (catalog.SetClusterID), and once it
// has taken a snapshot past it, it misses the id for good; upgraded and
// then leading, it would set an id of its own, and the members that hold
// the first would refuse the others' connections. A voter that is down
// delays the id until it is back or removed; nonvoters do not wait for
// it. When members name an id in their answers (a cluster that went
// through such an upgrade before this rule, or a leader whose catalog
// lost it), the leader takes it; when they name several, it sets none and
// says so.
func (n *Node) firstClusterID() (catalog.ClusterID, string) {
	c, ok := readConfig(n.log.Raft())
	if !ok {
		return catalog.ClusterID{}, "the default log's raft configuration cannot be read"
	}
	if n.probes == nil {
		return chooseClusterID(n.cfg.ID, c.servers, nil)
	}
	return chooseClusterID(n.cfg.ID, c.servers, n.probes.hellos.peer)
}

// chooseClusterID is firstClusterID's choice for the node self of a
// configuration of servers, given what each answered to the last hello
// said to it (nil: hellos are off, nothing to wait for).
func chooseClusterID(self string, servers []raft.Server, peer func(raft.ServerAddress) (peerHello, bool)) (catalog.ClusterID, string) {
	var zero catalog.ClusterID
	named := map[string][]string{} // cluster id -> the members that named it
	for _, s := range servers {
		if string(s.ID) == self || peer == nil {
			continue
		}
		ph, ok := peer(s.Address)
		switch {
		case s.Suffrage != raft.Voter:
			// A nonvoter does not hold the id back (one gone for
			// good, not yet removed, would hold it for ever); one
			// that missed it takes it from the voters' answers
			// once promoted and leading.
			if ok && ph.cluster != "" {
				named[ph.cluster] = append(named[ph.cluster], string(s.ID))
			}
		case !ok:
			return zero, fmt.Sprintf("this node has not reached %s at %s since it started", s.ID, s.Address)
		case !ph.answered:
			return zero, fmt.Sprintf("%s at %s runs a version that does not keep the cluster's id (it answers no hello); the id is set once every member is upgraded", s.ID, s.Address)
		case ph.cluster != "":
			named[ph.cluster] = append(named[ph.cluster], string(s.ID))
		}
	}
	switch len(named) {
	case 0:
		id, err := catalog.NewClusterID()
		if err != nil {
			return zero, "choosing an id: " + err.Error()
		}
		return id, ""
	case 1:
		for s := range named {
			id, err := catalog.ParseClusterID(s)
			if err != nil {
				return zero, fmt.Sprintf("the id %q its members name: %v", s, err)
			}
			return id, ""
		}
	}
	return zero, fmt.Sprintf("its members name different cluster ids (%v); a cluster's members must agree: see the README's Cluster identity", named)
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
	if n.joinWaiting() {
		return whyJoining
	}
	if peer.Cluster != "" && own.Cluster != "" {
		if peer.Cluster != own.Cluster {
			return fmt.Sprintf("this node belongs to cluster %s", own.Cluster)
		}
		return ""
	}
	members, what := n.knownMembers()
	if len(members) == 0 {
		// A new member added by an operator, before its leader's first
		// entry.
		return n.pinCluster(peer)
	}
	for _, m := range members {
		if m.ID != peer.ID {
			continue
		}
		if !sameTCPAddr(m.RaftAddr, peer.Addr) {
			return fmt.Sprintf("this node's %s has %s at %s, not at %s", what, peer.ID, m.RaftAddr, orUnknown(peer.Addr))
		}
		if what == whatJoinTarget {
			return n.pinCluster(peer)
		}
		return ""
	}
	return fmt.Sprintf("%s is not in this node's %s", orUnknown(peer.ID), what)
}

// whatJoinTarget is what knownMembers calls the members a join target
// listed.
const whatJoinTarget = "join target's member list"

// knownMembers returns the members of the node's latest raft
// configuration, or of its bootstrap list while it has none and decides
// whether to bootstrap (or has not started raft), or those its join
// target listed (joinid.go), and which of these it is; none for a new
// member added by an operator, before its leader's first entry.
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
	if n.deciding.Load() || n.raftRef.Load() == nil && len(n.cfg.Bootstrap) > 0 {
		return n.cfg.Bootstrap, "bootstrap list"
	}
	if ms := n.joinTargetMembers(); len(ms) > 0 {
		return ms, whatJoinTarget
	}
	return nil, ""
}

// refusedHello logs a raft connection refused (admitPeer said why), at
// most once a minute for each peer and reason, and counts it.
func (n *Node) refusedHello(remote net.Addr, peer, own helloMsg, why string) {
	reason := refusedOtherCluster
	if why == whyJoining {
		reason = refusedJoining
	}
	n.metrics.refusedPeers.WithLabelValues(reason).Inc()
	key := peer.ID + " " + peer.Addr + " " + peer.Cluster + " " + why
	n.foreignLogged.mu.Lock()
	defer n.foreignLogged.mu.Unlock()
	if at, ok := n.foreignLogged.at[key]; ok && time.Since(at) < time.Minute {
		return
	}
	if n.foreignLogged.at == nil || len(n.foreignLogged.at) >= maxForeignLogged {
		// The keys come from peers' hellos: bounded, whoever sends them.
		n.foreignLogged.at = map[string]time.Time{}
	}
	n.foreignLogged.at[key] = time.Now()
	if reason == refusedJoining {
		n.cfg.Logger.Info("refused a raft connection: this node is joining a cluster and has not yet learnt its id from its join target",
			"remote", remote, "its_node", orUnknown(peer.ID), "its_addr", orUnknown(peer.Addr), "its_cluster", orUnknown(peer.Cluster))
		return
	}
	n.cfg.Logger.Error("refused a raft connection from a node of another cluster: a node of that cluster has this node's address in its configuration (a reused host and port?); this node serves its own cluster only",
		"why", why, "remote", remote, "its_node", orUnknown(peer.ID), "its_addr", orUnknown(peer.Addr), "its_cluster", orUnknown(peer.Cluster), "this_cluster", orUnknown(own.Cluster))
}

// maxForeignLogged bounds foreignLog's keys; past it, it forgets them.
const maxForeignLogged = 1024

// foreignLog limits how often refusedHello logs.
type foreignLog struct {
	mu sync.Mutex
	at map[string]time.Time // peer and reason -> when last logged; guarded by mu
}
