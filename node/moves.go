package node

// Replica moves: the catalog's members of each log follow the nodes.
//
// The default log's leader plans (planLoop): it marks the nodes that are
// being removed leaving, records that a new log's group has started
// (catalog.LogStarted, once the log has a leader), begins the moves
// catalog.Plan gives (a leaving node's replicas go elsewhere; a node that
// joined takes replicas until the spread is even), begins the rebuild of
// lost replicas (below), cancels the moves whose target left, finishes a
// move once the log's committed raft configuration has the new replica as
// a voter and no longer the old one, removes a leaving node from the
// cluster once it holds no replica, and finishes the deletes a leader left
// half done (a log deleting, not yet deleted: see deleteLog).
//
// Each log's leader carries out its log's move (reconfigure.go): it adds
// the joining node as a nonvoter, promotes it once its replica has caught
// up (its node reports the replica's last index), then removes the
// leaving one (handing its own leadership over first if it is the one
// leaving), and removes any server the catalog no longer has the log on
// (a cancelled move's target). While the new replica catches up, commits
// need a majority of the old members only, so one of them failing does
// not stall the log; once it votes, a commit needs a majority of the old
// members and the new one, which holds every old member but one, so what
// was acknowledged stays on a majority throughout. When the leaving node
// has already left the cluster (it was removed, or is gone), it is
// removed first, so that no commit waits for a node that will never
// answer. The joining node starts the log's replica empty and receives
// the log from the leader (a snapshot carrying the retained records when
// the log was trimmed); the node that left drops its copy once its
// catalog is current and no longer places the log on it.
//
// Lost replicas. A node whose data dir was wiped rejoins the cluster as a
// new member (rejoin.go); the default log's leader first records in the
// catalog that it lost its replica of each named log it was a member of
// (recordLost: catalog.ReplicaDropped; a move that was adding it is
// cancelled). The node never starts such a replica with what it does not
// hold, and never votes in the log with its old membership: the log's
// leader demotes its old voter to a nonvoter; once that is committed, the
// planner begins a rebuild (a move of the member to itself), the node
// starts an empty replica, which the leader promotes once it has caught up
// past its demotion; the planner then finishes the rebuild. The new
// replica votes from its start (replicaVotes says why that is safe once
// the demotion is committed): were it to wait for the finish, a log whose
// leader died after the promotion would have no leader, the finish
// needing one and the election its vote.
//
// The states a log's raft configuration goes through, and what the next
// round does from each when a leader (the default log's or the log's)
// crashed at any step:
//
//	move begun, joining node absent      add it as a nonvoter
//	joining node a nonvoter              promote it once caught up
//	joining node a voter, leaving a voter  remove the leaving node
//	leaving node out, move not finished  the planner finishes it
//	move cancelled, target still in      remove the target (voter or not)
//	move finished, new member a nonvoter promote it once caught up
//	  (its promotion was lost)
//	lost member still a voter            demote it
//	lost member a nonvoter or absent     the planner begins the rebuild
//	rebuild begun, member a nonvoter     promote it once caught up
//	  or absent                          (absent: add it as a nonvoter)
//	rebuild begun, member a voter        the planner finishes it
//
// The planner acts only on configurations the log's leader has committed,
// so a crash cannot take back a step it saw, and only on descriptions by a
// leader that has just confirmed with a quorum that it leads, so a leader
// cut off from its followers cannot show it one it no longer holds.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// maxMoves bounds the moves under way at once in the cluster.
const maxMoves = 4

// planLoop plans on the default log's leader, every second; on every
// node it keeps the cluster's id, and on the leader it sets it
// (clusterid.go).
func (n *Node) planLoop() {
	defer n.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var idStint *replica.Stint // the stint the cluster's id was last proposed in
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		n.keepClusterID()
		idStint = n.proposeClusterID(idStint)
		if n.mux == nil || !n.log.IsLeader() || !n.catalog.State().Started() {
			continue
		}
		ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		if err := n.plan(ctx); err != nil && n.ctx.Err() == nil {
			n.cfg.Logger.Warn("planning replica moves", "error", err)
		}
		cancel()
	}
}

// plan is one round of planLoop.
func (n *Node) plan(ctx context.Context) error {
	// Nodes that joined the cluster join the catalog, and take replicas.
	if err := n.syncCatalog(ctx); err != nil {
		return err
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	inCluster := map[string]bool{}
	for _, srv := range f.Configuration().Servers {
		inCluster[string(srv.ID)] = true
	}
	s := n.catalog.State()
	// Nodes removed from the cluster leave; a leaving node that holds no
	// replica any more is forgotten.
	for _, nd := range s.Nodes() {
		if !inCluster[nd.ID] && nd.State == catalog.NodeActive {
			if err := n.commitCatalog(ctx, &catalog.MarkLeaving{ID: nd.ID}); err != nil {
				return err
			}
		}
	}
	s = n.catalog.State()
	for _, nd := range s.Nodes() {
		if nd.State == catalog.NodeLeaving && len(s.LogsOf(nd.ID)) == 0 {
			if inCluster[nd.ID] {
				if err := n.removeDrained(nd.ID); err != nil {
					return err
				}
			}
			if err := n.commitCatalog(ctx, &catalog.ForgetNode{ID: nd.ID}); err != nil {
				return err
			}
		}
	}
	s = n.catalog.State()
	// A delete is two commands (deleteLog); a leader that failed between
	// them left the log deleting. Its hosts drop its data either way.
	for _, l := range s.Logs() {
		if l.State == catalog.LogDeleting {
			if err := n.commitCatalog(ctx, &catalog.LogDeleted{ID: l.ID, Version: l.Version}); err != nil {
				return err
			}
			n.cfg.Logger.Info("finished a log's delete", "log", l.Name, "id", l.ID)
		}
	}
	s = n.catalog.State()
	moving := 0
	for _, l := range s.Logs() {
		if l.ID == catalog.DefaultID || l.State != catalog.LogActive {
			continue
		}
		if l.Initial != nil {
			if d, err := n.describeAnywhere(ctx, l); err == nil && d.Log.LeaderID != "" {
				if err := n.commitCatalog(ctx, &catalog.LogStarted{ID: l.ID, Version: l.Version}); err != nil {
					return err
				}
			}
			continue
		}
		if !l.Moving() {
			if len(l.Dropped) > 0 && moving < maxMoves {
				began, err := n.beginRebuild(ctx, l)
				if err != nil {
					return err
				}
				if began {
					moving++
				}
			}
			continue
		}
		moving++
		// Only a committed configuration counts: one the next leader has.
		d, err := n.describeAnywhere(ctx, l)
		if err != nil || d.ConfigIndex > d.CommitIndex {
			continue
		}
		if !voting(role(d, l.Joining)) {
			continue
		}
		if r := role(d, l.Leaving); l.Rebuilding() || r == transport.RolePending || r == "" {
			if n.faults.holdMoves.Load() {
				continue // fault injection: the move stays at its last step
			}
			if err := n.commitCatalog(ctx, &catalog.FinishMove{ID: l.ID, Version: l.Version}); err != nil {
				return err
			}
			n.cfg.Logger.Info("moved a log's replica", "log", l.Name, "from", l.Leaving, "to", l.Joining)
		}
	}
	s = n.catalog.State()
	for _, m := range catalog.StaleMoves(s) {
		if err := n.commitCatalog(ctx, m.Cancel()); err != nil {
			return err
		}
	}
	for _, m := range catalog.Plan(n.catalog.State(), nil) {
		if moving >= maxMoves {
			break
		}
		if err := n.commitCatalog(ctx, m.Command()); err != nil {
			return err
		}
		moving++
		n.cfg.Logger.Info("moving a log's replica", "log", m.Name, "from", m.From, "to", m.To)
	}
	return nil
}

// commitCatalog commits a catalog command; a refusal (the state changed
// since it was planned) is logged, not returned: the next round plans
// again.
func (n *Node) commitCatalog(ctx context.Context, cmd catalog.Command) error {
	res, err := n.proposeCatalog(ctx, cmd)
	if err != nil {
		return err
	}
	if res.Err != nil {
		n.cfg.Logger.Debug("catalog command refused", "kind", cmd.Kind(), "error", res.Err)
	}
	return nil
}

// removeDrained removes a drained leaving node from the default log's
// raft configuration, as Remove does.
func (n *Node) removeDrained(id string) error {
	resp, err := n.remove(n.ctx, &transport.RemoveRequest{NodeID: id})
	if err != nil {
		return err
	}
	n.host.mu.Lock()
	if n.host.drained == nil {
		n.host.drained = map[string]uint64{}
	}
	n.host.drained[id] = resp.Index
	n.host.mu.Unlock()
	n.cfg.Logger.Info("removed a drained node from the cluster", "id", id)
	return nil
}

// beginRebuild begins the rebuild of log l's first lost replica once its
// old voter is out of the log's committed configuration (demoted by the
// log's leader, reconfigure), and reports whether it did. A lost replica
// on a leaving node is not rebuilt: catalog.Plan moves it away.
func (n *Node) beginRebuild(ctx context.Context, l catalog.Log) (bool, error) {
	id := l.Dropped[0]
	if nd, ok := n.catalog.State().Node(id); l.Initial != nil || !ok || nd.State != catalog.NodeActive {
		return false, nil
	}
	d, err := n.describeAnywhere(ctx, l)
	if err != nil || d.ConfigIndex > d.CommitIndex || voting(role(d, id)) || role(d, id) == transport.RoleLeaving {
		return false, nil
	}
	if err := n.commitCatalog(ctx, &catalog.BeginMove{ID: l.ID, Version: l.Version, From: id, To: id}); err != nil {
		return false, err
	}
	n.cfg.Logger.Info("rebuilding a lost replica of a log", "log", l.Name, "node", id)
	return true, nil
}

// voting reports whether a member's role is a voter's.
func voting(role string) bool { return role == transport.RoleFollower || role == transport.RoleLeader }

// role returns the role of node id in a log's description, "" when it is
// not listed.
func role(d *transport.DescribeLogResponse, id string) string {
	for _, m := range d.Members {
		if m.NodeID == id {
			return m.Role
		}
	}
	return ""
}

// describeAnywhere describes log l from its leader: this node's replica if
// it leads the log, else through the client protocol, asking the log's
// hosts and following one NotLeader.
func (n *Node) describeAnywhere(ctx context.Context, l catalog.Log) (*transport.DescribeLogResponse, error) {
	if h := n.host.hosted(l.ID); h != nil && h.r.IsLeader() {
		// Confirmed, as describeLog does: a leader cut off from its
		// followers would describe a stale configuration.
		if _, err := h.r.Linearize(ctx); err == nil {
			return describe(logInfo(l), l.Hosts(), h.r, n.catalog.State()), nil
		}
	}
	s := n.catalog.State()
	var last error
	for _, id := range l.Hosts() {
		nd, ok := s.Node(id)
		if !ok || nd.ClientAddr == "" || id == n.cfg.ID {
			continue
		}
		d, err := n.callDescribe(ctx, nd.ClientAddr, l.Name)
		var te *transport.Error
		if errors.As(err, &te) && te.Code == transport.CodeNotLeader && te.LeaderAddr != "" {
			d, err = n.callDescribe(ctx, te.LeaderAddr, l.Name)
		}
		if err == nil {
			return d, nil
		}
		last = err
	}
	if last == nil {
		last = fmt.Errorf("node: no host of log %q to ask", l.Name)
	}
	return nil, last
}

// callDescribe sends a DescribeLog to the node at addr.
func (n *Node) callDescribe(ctx context.Context, addr, name string) (*transport.DescribeLogResponse, error) {
	var resp transport.DescribeLogResponse
	if err := n.callNode(ctx, addr, transport.OpDescribeLog, &transport.DescribeLogRequest{Name: name}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// inCluster reports whether node id is in the default log's raft
// configuration: a member of the cluster.
func (n *Node) inCluster(id string) bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return true
	}
	return slices.ContainsFunc(f.Configuration().Servers, func(srv raft.Server) bool { return string(srv.ID) == id })
}

// drain, for a Remove of a node that holds replicas of named logs, marks
// the node leaving and waits (until ctx ends) for the planner to move its
// replicas away and remove it (plan): a replica moves before its node
// goes, so no log has fewer copies than its replicas. It reports false
// when the node holds none: Remove then removes it at once.
func (n *Node) drain(ctx context.Context, id string) (bool, error) {
	n.host.mu.Lock()
	_, done := n.host.drained[id]
	n.host.mu.Unlock()
	if done && !n.inCluster(id) {
		return true, nil // a retry of a Remove whose drain finished
	}
	s := n.catalog.State()
	if n.mux == nil || !s.Started() {
		return false, nil
	}
	nd, known := s.Node(id)
	if !known || len(s.LogsOf(id)) == 0 {
		return false, nil
	}
	leaving := nd.State != catalog.NodeActive
	if !leaving {
		if err := undrainable(s, id); err != nil {
			return true, err
		}
	}
	// A log without a leader cannot move: the drain would wait for good,
	// and each Remove until its client gave up, the outcome unknown. A
	// log of 1 replica on a node that is down has none, for as long as
	// the node is down. (A log of more replicas may be between leaders:
	// the drain waits for it.)
	if stuck := n.leaderless(ctx, onlyOn(s, id)); len(stuck) > 0 {
		return true, stuckError(id, leaving, stuck)
	}
	if !leaving {
		if err := n.commitCatalog(ctx, &catalog.MarkLeaving{ID: id}); err != nil {
			return true, err
		}
		n.cfg.Logger.Info("draining a node before its removal", "id", id, "logs", len(s.LogsOf(id)))
	}
	// Wait less than a client's attempt (its RequestTimeout, 10 s by
	// default): the client retries the Unavailable answer, and the drain
	// goes on meanwhile.
	ctx, cancel := context.WithTimeout(ctx, drainWait)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for n.inCluster(id) {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-t.C:
		}
	}
	return true, nil
}

// undrainable refuses to drain node id when a log it holds has no other
// active node to move to (a log of 3 replicas on 3 nodes): the drain would
// wait for good, with the node marked leaving.
func undrainable(s *catalog.State, id string) error {
	active := s.ActiveNodes()
	for _, l := range s.LogsOf(id) {
		if l.ID == catalog.DefaultID {
			continue
		}
		spare := false
		for _, a := range active {
			spare = spare || a != id && !l.HostedBy(a)
		}
		if !spare {
			return &transport.Error{Code: transport.CodeFailedPrecondition, Message: fmt.Sprintf(
				"node %s holds a replica of log %q (%s) and no other node can take it: add a node first, then remove %s",
				id, l.Name, plural(l.Settings.Replicas, "replica"), id)}
		}
	}
	return nil
}

// leaderWait bounds how long a Remove waits for the leader of each log of
// 1 replica on the node to be removed to describe the log, before it
// refuses the removal.
const leaderWait = 3 * time.Second

// onlyOn returns the named logs whose only replica is on node id.
func onlyOn(s *catalog.State, id string) []catalog.Log {
	var logs []catalog.Log
	for _, l := range s.LogsOf(id) {
		if l.ID != catalog.DefaultID && l.State == catalog.LogActive && slices.Equal(l.Members, []string{id}) {
			logs = append(logs, l)
		}
	}
	return logs
}

// plural writes n and noun, with an s unless n is 1: "1 replica", "3
// replicas".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// stuckLog is a log that has no leader to move its replica, and the error
// of the first attempt to reach one.
type stuckLog struct {
	log catalog.Log
	err error
}

// leaderless returns the logs of logs whose leader does not describe them
// within leaderWait (asked again until then), in logs' order.
func (n *Node) leaderless(ctx context.Context, logs []catalog.Log) []stuckLog {
	ctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	errs := make([]error, len(logs))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, l := range logs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			for {
				d, err := n.describeAnywhere(ctx, l)
				if err == nil && d.Log.LeaderID != "" {
					errs[i] = nil
					return
				}
				if err == nil {
					err = errors.New("no leader")
				}
				if errs[i] == nil {
					errs[i] = err // the first says most: later ones may be the deadline's
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	wg.Wait()
	var stuck []stuckLog
	for i, err := range errs {
		if err != nil {
			stuck = append(stuck, stuckLog{logs[i], err})
		}
	}
	return stuck
}

// stuckError is Remove's refusal of node id, which holds the only replica
// of each log of stuck, which have no leader to move it (id is down);
// leaving says the drain had begun.
func stuckError(id string, leaving bool, stuck []stuckLog) error {
	var b strings.Builder
	if leaving {
		fmt.Fprintf(&b, "node %s is being drained, but it holds", id)
	} else {
		fmt.Fprintf(&b, "node %s cannot be removed now: it holds", id)
	}
	for i, st := range stuck {
		switch {
		case i == 0:
			b.WriteString(" ")
		case i == len(stuck)-1:
			b.WriteString(" and ")
		default:
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "the only replica of log %q", st.log.Name)
	}
	name := "NAME"
	if len(stuck) == 1 {
		name = stuck[0].log.Name
	}
	fmt.Fprintf(&b, ", which has no leader to move it (%v): %s does not answer. Start %s again and remove it then (its logs move off it first), "+
		"or delete the log (node log delete %s --yes) if its records may go", stuck[0].err, id, id, name)
	if !leaving {
		b.WriteString("; nothing changed")
	}
	return &transport.Error{Code: transport.CodeFailedPrecondition, Message: b.String()}
}

// drainWait is how long a Remove waits for a drain before it answers
// Unavailable.
const drainWait = 8 * time.Second

// removeOutcome is Remove's answer for a drained node: done, or still
// draining when the request's time ran out.
func (n *Node) removeOutcome(id string, err error) (*transport.RemoveResponse, error) {
	switch {
	case err == nil:
		return &transport.RemoveResponse{Index: n.raft.LastIndex()}, nil
	case ctxErr(err):
		left := 0
		for _, l := range n.catalog.State().LogsOf(id) {
			if l.ID != catalog.DefaultID {
				left++
			}
		}
		return nil, &transport.Error{Code: transport.CodeUnavailable,
			Message: fmt.Sprintf("node %s is being drained: %s of logs still to move; it leaves the cluster once none is left (run remove again to wait)", id, plural(left, "replica"))}
	}
	if te := (*transport.Error)(nil); errors.As(err, &te) {
		return nil, te
	}
	return nil, n.raftError(err)
}

// ctxErr reports whether err is a context's end.
func ctxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
