package node

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// catchUpProbe bounds the DescribeLog call that asks a nonvoter's node
// how far its replica has got.
const catchUpProbe = 2 * time.Second

// groupConfig is a log's raft configuration as its leader reads it, for
// one round of reconfigure.
type groupConfig struct {
	servers []raft.Server
	// index is at or above the index of the configuration's entry, on a
	// leader (see readConfig); 0 when the configuration could not be read.
	index uint64
}

// readConfig reads rf's latest configuration, and bounds its index: the
// last index read after it. hashicorp/raft v1.8.0 does not give a
// configuration's own index (ConfigurationFuture.Index is always 0: its
// GetConfiguration skips the main loop, which knows it). A leader stores
// a configuration's entry in its log before it makes it its latest, so
// on a leader that configuration is committed once the commit index
// reaches the bound. (A follower takes a configuration from an entry
// before it advances its last index, so there the bound can fall short
// by the entries of one AppendEntries.)
func readConfig(rf *raft.Raft) (groupConfig, bool) {
	f := rf.GetConfiguration()
	if f.Error() != nil {
		return groupConfig{}, false
	}
	return groupConfig{servers: f.Configuration().Servers, index: rf.LastIndex()}, true
}

// commitWait bounds how long awaitCommit waits.
const commitWait = 250 * time.Millisecond

// awaitCommit returns rf's commit index once it reaches index, or after
// commitWait: a leader's last index is usually ahead of its commit index
// by the entries in flight, and a bound from readConfig would otherwise
// seldom prove a configuration committed on a busy log. It waits only on
// a leader (a follower learns the commit index from its leader's next
// AppendEntries, up to a heartbeat away).
func awaitCommit(rf *raft.Raft, index uint64) uint64 {
	commit := rf.CommitIndex()
	if commit >= index || rf.State() != raft.Leader {
		return commit
	}
	deadline := time.Now().Add(commitWait)
	for commit < index && time.Now().Before(deadline) && rf.State() == raft.Leader {
		time.Sleep(2 * time.Millisecond) // raft signals no commit to a waiter outside it
		commit = rf.CommitIndex()
	}
	return commit
}

// suffrage returns node id's suffrage, and false when it is not in the
// configuration.
func (c groupConfig) suffrage(id string) (raft.ServerSuffrage, bool) {
	for _, srv := range c.servers {
		if string(srv.ID) == id {
			return srv.Suffrage, true
		}
	}
	return 0, false
}

// voter reports whether node id is a voter.
func (c groupConfig) voter(id string) bool {
	s, ok := c.suffrage(id)
	return ok && s == raft.Voter
}

// reconfigure, on the leader of log h, moves the log's raft configuration
// one or more steps towards the catalog's record of the log (see the top
// of moves.go), every round (reconcile: every second and at each catalog
// change). Each step is one configuration change that raft commits before
// the next; a step that fails, or a leader that crashes, leaves a state
// the next round (on this leader or the next) goes on from:
//
//  1. a lost member's old voter (catalog.Log.Lost) is demoted, unless its
//     rebuild is under way (a voter then is one promoted after it);
//  2. a move's leaving node that already left the cluster is removed
//     before the joining node is added, so that no commit waits for it;
//  3. a host that is not a voter (a move's joining node, a lost member
//     being rebuilt, a nonvoter a crash left behind) and is in the
//     cluster is added as a nonvoter, and promoted once it has caught up
//     (caughtUp);
//  4. a move's leaving node is removed once the joining node votes, and a
//     server the catalog does not place the log on (a cancelled move's
//     target) is removed; a leader that must go hands its leadership over
//     first, and the next leader removes it.
func (n *Node) reconfigure(s *catalog.State, h *hostedLog) {
	l, ok := s.LogByID(h.id)
	rf := h.r.Raft()
	if !ok || l.State != catalog.LogActive || !h.r.IsLeader() {
		return
	}
	c, ok := readConfig(rf)
	if !ok {
		return
	}
	change := func(what, id string, fut raft.Future) bool {
		if err := fut.Error(); err != nil {
			n.cfg.Logger.Warn("changing a log's raft configuration", "log", l.Name, "change", what, "node", id, "error", err)
			return false
		}
		n.cfg.Logger.Info("changed a log's raft configuration", "log", l.Name, "change", what, "node", id)
		return true
	}
	handOver := func(id string) bool {
		if id != n.cfg.ID {
			return false
		}
		// The leader goes: another member takes over and goes on.
		change("hand leadership over", id, rf.LeadershipTransfer())
		return true
	}
	leave := func(id string) bool {
		if handOver(id) {
			return false
		}
		return change("remove", id, rf.RemoveServer(raft.ServerID(id), 0, replica.EnqueueTimeout))
	}
	// 1. Lost members' old voters.
	for _, id := range l.Dropped {
		if id == l.Joining || !c.voter(id) {
			continue
		}
		if handOver(id) || !change("demote a lost replica", id, rf.DemoteVoter(raft.ServerID(id), 0, replica.EnqueueTimeout)) {
			return
		}
		if c, ok = readConfig(rf); !ok {
			return
		}
	}
	move := l.Moving() && !l.Rebuilding()
	// 2. A leaving node gone from the cluster.
	if move && !c.voter(l.Joining) && c.voter(l.Leaving) && !n.inCluster(l.Leaving) {
		if !leave(l.Leaving) {
			return
		}
		if c, ok = readConfig(rf); !ok {
			return
		}
	}
	// 3. Hosts that do not vote yet.
	for _, id := range l.Hosts() {
		if c.voter(id) || move && id == l.Leaving || l.Lost(id) && id != l.Joining {
			continue
		}
		nd, known := s.Node(id)
		if !known || !n.inCluster(id) {
			continue // a node gone from the cluster never catches up
		}
		addr := raft.ServerAddress(nd.RaftAddr)
		if _, in := c.suffrage(id); !in {
			// Caught up or not, it is checked from the next round on.
			change("add nonvoter", id, rf.AddNonvoter(raft.ServerID(id), addr, 0, replica.EnqueueTimeout))
			continue
		}
		// Caught up with what the leader has committed, and with the
		// configuration that made it a nonvoter: a lost member's replica
		// then holds its own demotion before it votes.
		if !n.caughtUp(s, l, id, max(rf.CommitIndex(), c.index)) {
			continue
		}
		if !change("promote", id, rf.AddVoter(raft.ServerID(id), addr, 0, replica.EnqueueTimeout)) {
			return
		}
		if c, ok = readConfig(rf); !ok {
			return
		}
	}
	// 4. Servers to remove.
	for _, srv := range c.servers {
		id := string(srv.ID)
		if l.HostedBy(id) && !(move && id == l.Leaving && c.voter(l.Joining)) {
			continue
		}
		if !leave(id) {
			return
		}
	}
}

// caughtUp reports whether node id's replica of log l holds the log up to
// index target, asking the node (DescribeLog, Local): raft does not tell
// its leader how far a follower has got. Any failure reports false; the
// next round asks again.
func (n *Node) caughtUp(s *catalog.State, l catalog.Log, id string, target uint64) bool {
	nd, ok := s.Node(id)
	if !ok || nd.ClientAddr == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(n.ctx, catchUpProbe)
	defer cancel()
	var d transport.DescribeLogResponse
	if err := n.callNode(ctx, nd.ClientAddr, transport.OpDescribeLog, &transport.DescribeLogRequest{Name: l.Name, Local: true}, &d); err != nil {
		n.cfg.Logger.Debug("asking a new replica how far it has caught up", "log", l.Name, "node", id, "error", err)
		return false
	}
	if d.LastIndex < target {
		n.cfg.Logger.Debug("a new replica is catching up", "log", l.Name, "node", id, "last", d.LastIndex, "target", target)
		return false
	}
	return true
}
