package node

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// A node that starts with no raft state and a bootstrap list naming other
// members cannot tell, on its own, a new cluster from a running one whose
// member it was before it lost its data dir (a disk replaced, a volume
// recreated, a unit file that starts it with the same flags as on day
// one). Bootstrapping in the second case would be dangerous: the node
// would vote at once with an empty log, and a candidate missing entries
// that its old self acknowledged could win with its vote and overwrite
// them on every node. So it does not vote until it knows (the vote gate
// stays closed), and asks the other listed members over their raft ports
// (probe.go):
//
//   - if any of them has run a cluster (a log past the bootstrap
//     configuration, or a new member joining), the node takes the path of a
//     member that lost its data (rejoin.go): it joins as a new member and
//     votes once it has caught up;
//   - if enough of them answer that they have not (see bootstrapQuorum), it
//     bootstraps the new cluster and votes;
//   - otherwise it waits, and asks again.
//
// "Enough" is what makes waiting safe: an entry committed without this
// node is held by a majority of the members, so if every member but a
// minority-less-one answered that it holds none, no such entry exists.
//
// The decision survives restarts: the marker file "bootstrapping" is
// written before raft starts and removed once the node bootstrapped (or
// replaced by "joining" once it chose to rejoin). A node whose bootstrap
// list names only itself has no one to ask; it bootstraps at once, as a
// single-node cluster must.

// ClusterState says how a node with no raft state and a bootstrap list
// starts (Config.InitialClusterState).
type ClusterState string

const (
	// ClusterNew (the default) bootstraps a new cluster once the other
	// listed members answer that none of them has run one, and rejoins
	// as a new member if one has.
	ClusterNew ClusterState = "new"
	// ClusterExisting never bootstraps: the node waits until a listed
	// member answers that the cluster runs, and joins it as a new member.
	// For a member restarted after it lost its data dir.
	ClusterExisting ClusterState = "existing"
)

// bootstrapQuorum is how many of the n-1 other members of an n-member
// bootstrap list must answer that they never ran a cluster before a node
// without state may bootstrap: enough that the members that did not
// answer, with this node, are fewer than a majority, and so cannot hold a
// committed entry between them.
func bootstrapQuorum(n int) int {
	majority := n/2 + 1
	return n - majority + 1
}

// probeTimeout bounds one probe of a peer.
const probeTimeout = time.Second

// decideLoop runs while the node decides whether to bootstrap a new
// cluster or rejoin a running one.
func (n *Node) decideLoop() {
	defer n.wg.Done()
	c := n.cfg
	others := n.otherPeers()
	need := bootstrapQuorum(len(c.Bootstrap))
	backoff := 50 * time.Millisecond
	var logged time.Time
	for n.ctx.Err() == nil {
		// Entries past the bootstrap configuration reached this node
		// from a leader: a cluster runs.
		replicated := n.raft.LastIndex() > 1
		results := n.probes.probeAll(others, probeRequest{ID: c.ID, Addr: n.raftAdvertised}, probeTimeout)
		var heard, ran []string
		inConfig := false
		for _, r := range results {
			if r.err != nil || r.a.Starting {
				continue
			}
			heard = append(heard, r.a.ID)
			if r.a.ranCluster() {
				ran = append(ran, r.a.ID)
				inConfig = inConfig || r.a.InConfig
			}
		}
		joinVia := joinAddrs(results)
		switch {
		case (len(ran) > 0 || replicated) && len(joinVia) > 0:
			if len(ran) > 0 && !inConfig && !replicated {
				n.failStop(fmt.Errorf("node: %s at %s is not in the configuration of the running cluster (%s answered): it was removed, its address changed, or the bootstrap list is another cluster's; bootstrapping would start a second cluster, so the node stops. To add it as a new member, start it with --join", c.ID, n.raftAdvertised, strings.Join(ran, ", ")))
				return
			}
			c.Logger.Warn("no raft state, but the cluster runs: rejoining as a new member that votes once caught up, not bootstrapping",
				"members_with_state", ran, "entries_received", replicated)
			if err := n.becomeJoining(joinVia); err != nil {
				n.failStop(err)
				return
			}
			n.promoteLoop()
			return
		case len(ran) == 0 && !replicated && len(heard) >= need && c.InitialClusterState != ClusterExisting:
			if err := n.bootstrapNew(); err != nil {
				if errors.Is(err, raft.ErrCantBootstrap) {
					continue // entries arrived meanwhile: ask again
				}
				n.failStop(err)
				return
			}
			return
		}
		if time.Since(logged) >= 5*time.Second {
			logged = time.Now()
			if c.InitialClusterState == ClusterExisting {
				c.Logger.Info("no raft state: waiting for a member of the running cluster to answer, to rejoin it (initial cluster state existing)",
					"answered", heard, "asked", others)
			} else {
				c.Logger.Info("no raft state: waiting for the other members to answer before bootstrapping a new cluster, so as not to vote in one that ran without this node",
					"answered", heard, "need", need, "asked", others)
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-n.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// bootstrapNew bootstraps a new cluster of the bootstrap list, forgets the
// bootstrapping state and starts voting. raft.ErrCantBootstrap means that
// entries from a leader arrived first.
func (n *Node) bootstrapNew() error {
	var conf raft.Configuration
	for _, p := range n.cfg.Bootstrap {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
	}
	err := n.raft.BootstrapCluster(conf).Error()
	if errors.Is(err, raft.ErrCantBootstrap) && n.raft.LastIndex() <= 1 {
		err = nil // bootstrapped before a crash that left the marker
	}
	if err != nil {
		if errors.Is(err, raft.ErrCantBootstrap) {
			return err
		}
		return fmt.Errorf("node: bootstrap: %w", err)
	}
	if err := n.marks.remove(bootstrapFile); err != nil {
		return err
	}
	n.deciding.Store(false)
	n.startVoting()
	n.cfg.Logger.Info("bootstrapped a new cluster", "members", len(conf.Servers))
	return nil
}

// becomeJoining turns a deciding node into a new member that joins
// through the client addresses via.
func (n *Node) becomeJoining(via []string) error {
	if err := n.marks.markJoining(0); err != nil {
		return err
	}
	if err := n.marks.remove(bootstrapFile); err != nil {
		return err
	}
	n.joiningNow.Store(true)
	// Admit no raft connection until a member's status says which
	// cluster this is (joinid.go); the bootstrap list stops counting.
	n.setJoinWaiting(true)
	n.deciding.Store(false)
	return n.joinCluster(n.ctx, via)
}

// checkBootstrapEntry checks that the bootstrap list names this node at
// the raft address it advertises, and returns the list with that entry
// as the node advertises it.
func checkBootstrapEntry(peers []Peer, id, listen, advertised string) ([]Peer, error) {
	out := make([]Peer, len(peers))
	copy(out, peers)
	for i, p := range out {
		if p.ID != id {
			continue
		}
		switch {
		case p.RaftAddr == advertised:
		case p.RaftAddr == listen && strings.HasSuffix(listen, ":0"):
			// A port picked at start (tests, a single-node cluster).
			out[i].RaftAddr = advertised
		case sameTCPAddr(p.RaftAddr, advertised):
		default:
			return nil, fmt.Errorf("node: the bootstrap list names %s at raft address %s, but the node advertises %s (--raft-addr, or --raft-advertise): peers would dial the wrong address; make them agree", id, p.RaftAddr, advertised)
		}
	}
	return out, nil
}

// sameTCPAddr reports whether a and b are the same address, or resolve to
// the same IP and port.
func sameTCPAddr(a, b string) bool {
	if a == b {
		return true
	}
	ta, err := net.ResolveTCPAddr("tcp", a)
	if err != nil {
		return false
	}
	tb, err := net.ResolveTCPAddr("tcp", b)
	if err != nil {
		return false
	}
	return ta.Port == tb.Port && ta.IP.Equal(tb.IP)
}

// otherPeers returns the raft addresses of the bootstrap list's other
// members.
func (n *Node) otherPeers() []string {
	var others []string
	for _, p := range n.cfg.Bootstrap {
		if p.ID != n.cfg.ID {
			others = append(others, p.RaftAddr)
		}
	}
	return others
}

// joinAddrs returns the client addresses that probe results name, the
// leaders' first, without repeats.
func joinAddrs(results []probeResult) []string {
	var addrs []string
	for _, r := range results {
		if r.err != nil || r.a.Starting {
			continue
		}
		if r.a.LeaderClientAddr != "" {
			addrs = append([]string{r.a.LeaderClientAddr}, addrs...)
		}
		if r.a.ClientAddr != "" {
			addrs = append(addrs, r.a.ClientAddr)
		}
	}
	return dedupe(addrs)
}

// dedupe returns s without repeats, in order.
func dedupe(s []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
