package node

// Named logs on a node: the replicas of the logs the catalog (catalog.go)
// places here, each its own raft group over the node's one raftstore DB
// and one raft listener (transport.RaftMux, the log's id as the group).
//
// A reconciler (reconcileLoop) makes the running replicas follow the
// node's copy of the catalog: it starts the replica of every active log
// the catalog places on the node, bootstrapping its raft group with the
// log's initial members when the node is one of them and holds no state
// of it (every initial member bootstraps the same configuration, taken
// from the committed catalog); and it shuts down and drops the data of
// every log that is gone. The node's copy of the catalog may lag behind
// the leader's (a restart replays it), so the reconciler drops a log only
// when the catalog has given out its id (the id is below the next id) and
// holds no log with it: ids are never reused, so such a log was deleted.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// namedCommitTimeout is a named log's raft CommitTimeout: an idle leader
// sends each follower an empty AppendEntries this often (the default log's
// is 5 ms). With 100 idle logs on 3 nodes, 5 ms cost each node 0.36-0.45
// of a core in those RPCs, 50 ms 0.12-0.13 (transport's
// TestRaftMuxIdleGroups). Acknowledgements wait for the leader's commit,
// not for this; it delays only when a follower learns the commit index
// after writes stop, so a stale read on a follower lags up to 50 ms more.
const namedCommitTimeout = 50 * time.Millisecond

// hostedLog is the replica of a named log running on the node.
type hostedLog struct {
	id   uint64
	name string
	r    *replica.Replica
	tr   *transport.RaftTransport // its group on the node's mux
	gate *voteGate                // over tr; always votes: lets leadergone.go call elections

	// transferring is set while a leadership transfer to the log's
	// preferred leader runs; notBefore, after one failed, is when the next
	// may start. Both guarded by logHost.mu.
	transferring bool
	notBefore    time.Time
}

// logHost holds the replicas of the named logs running on the node.
type logHost struct {
	mu     sync.Mutex
	logs   map[uint64]*hostedLog // by log id; guarded by mu
	closed bool                  // set by stopLogs; guarded by mu
	failed bool                  // set by stopRaft; guarded by mu
	warned map[uint64]bool       // logs warnLost has warned of; guarded by mu
	// drained are the nodes this node, leading, removed once drained
	// (moves.go), with the index of their removal; guarded by mu.
	drained map[string]uint64
	// damaged are the logs whose replica could not start here because
	// their data on this node is damaged (startLog), by id; guarded by mu.
	// The reconciler does not try them again: a repair of the stopped
	// node does ('node repair'), and a restart clears this.
	damaged map[uint64]damagedLog
}

// damagedLog is a log whose replica cannot start on the node.
type damagedLog struct {
	name string
	err  error // why: what CheckLog found
}

// markDamaged records that log id's replica cannot start, because of err.
func (h *logHost) markDamaged(id uint64, name string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.damaged == nil {
		h.damaged = map[uint64]damagedLog{}
	}
	h.damaged[id] = damagedLog{name: name, err: err}
}

// isDamaged reports whether log id's replica could not start because its
// data here is damaged.
func (h *logHost) isDamaged(id uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.damaged[id]
	return ok
}

// allDamaged returns the logs whose replica cannot start, by id.
func (h *logHost) allDamaged() map[uint64]damagedLog {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.damaged)
}

// stopRaft keeps the raft groups of the replicas running, and of those
// that start later, from taking a new term (voteGate.stopRaft): the
// node's store failed.
func (h *logHost) stopRaft() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failed = true
	for _, l := range h.logs {
		l.gate.stopRaft()
	}
}

// hosted returns the running replica of log id, nil if none.
func (h *logHost) hosted(id uint64) *hostedLog {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logs[id]
}

// all returns the running replicas.
func (h *logHost) all() []*hostedLog {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*hostedLog, 0, len(h.logs))
	for _, l := range h.logs {
		out = append(out, l)
	}
	return out
}

// logDir is the directory of log id's files besides its raftstore groups:
// its snapshots, and its name (logNameFile) for 'node repair'.
func (n *Node) logDir(id uint64) string {
	return filepath.Join(n.cfg.DataDir, "logs", strconv.FormatUint(id, 10))
}

// errNoNamedLogs is the refusal of a named-log operation on a node without
// a raft mux (the hashicorp raft transport serves one group).
func errNoNamedLogs() *transport.Error {
	return &transport.Error{Code: transport.CodeFailedPrecondition,
		Message: "named logs need the native raft transport (--raft-transport native); this node runs hashicorp's"}
}

// replicaFor returns the replica to serve a record operation on the log
// the request's log field names: the default log's, or a named log's if
// the node hosts it. A log the node does not host gets NotLeader naming a
// member of the log; an unknown or deleting log gets NotFound.
func (n *Node) replicaFor(field string) (*replica.Replica, error) {
	if field == "" || field == transport.DefaultLog {
		return n.log, nil
	}
	l, err := n.lookupLog(field)
	if err != nil {
		return nil, err
	}
	if h := n.host.hosted(l.ID); h != nil {
		// A log being restored serves nothing until the restore is done
		// (restorelog.go).
		if err := h.r.CheckRestored(); err != nil {
			return nil, err
		}
		return h.r, nil
	}
	return nil, n.notHosted(l)
}

// lookupLog returns the active log named name from the node's copy of the
// catalog. A log being deleted gets NotFound. A name the copy does not hold
// gets NotFound only from the default log's leader, whose catalog holds
// every log created before the request came (a CreateLog is answered once
// its leader applied it); another node's copy may be behind (a node
// restarting replays it), so it answers NotLeader naming the default
// log's leader, where the client asks next.
func (n *Node) lookupLog(name string) (catalog.Log, error) {
	l, ok := n.catalog.State().Log(name)
	switch {
	case ok && l.State == catalog.LogActive:
		return l, nil
	case ok, n.log.IsLeader():
		return catalog.Log{}, transport.NotFoundLog(name)
	}
	e := n.log.NotLeader()
	e.Message = fmt.Sprintf("node %s does not know log %q yet; ask the default log's leader", n.cfg.ID, name)
	return catalog.Log{}, e
}

// notHosted is the NotLeader answer of a node that does not host log l:
// it names a member of the log to ask, one that is a member of this
// cluster (of the default log's configuration). A catalog can list nodes
// that are not: one restored by an older version kept the old cluster's
// (restore.go), and a client sent on to one of them had its appends
// stored, and acknowledged, by the other cluster.
func (n *Node) notHosted(l catalog.Log) *transport.Error {
	e := &transport.Error{Code: transport.CodeNotLeader,
		Message: fmt.Sprintf("node %s does not hold log %q", n.cfg.ID, l.Name)}
	s := n.catalog.State()
	members := map[string]bool{}
	if c, ok := readConfig(n.raft); ok {
		for _, srv := range c.servers {
			members[string(srv.ID)] = true
		}
	}
	var foreign []string
	for _, m := range l.Hosts() {
		nd, ok := s.Node(m)
		if !ok || nd.ClientAddr == "" || m == n.cfg.ID {
			continue
		}
		if !members[m] {
			foreign = append(foreign, m)
			continue
		}
		e.MemberID, e.MemberAddr = m, nd.ClientAddr
		return e
	}
	if len(foreign) > 0 {
		e.Message += fmt.Sprintf("; the catalog places it on %s, which %s not a member of this cluster",
			strings.Join(foreign, ", "), map[bool]string{true: "is", false: "are"}[len(foreign) == 1])
	}
	return e
}

// reconcileLoop makes the running replicas follow the catalog (see the
// top of this file), as it changes and every second.
func (n *Node) reconcileLoop() {
	defer n.wg.Done()
	// A new member catching up replays the catalog from its start: it
	// acts once it votes, caught up.
	select {
	case <-n.voting:
	case <-n.ctx.Done():
		return
	}
	// A drop cut short (the node stopped) is finished before any replica
	// starts: its log was deleted or moved away. A drop that fails while
	// the node runs leaves the log's groups, by which reconcile finds it
	// again.
	for _, id := range n.droppingLogs() {
		n.dropLog(id, nil, "finished dropping a log's data, deleted or moved away, that a stop cut short")
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		// The catalog holds every command of the entries applied, and s
		// is read after: it is at least as recent.
		applied := n.fsm.Applied.Load()
		s, changed := n.catalog.Watch()
		n.reconcile(s, applied >= n.joinedAt.Load())
		select {
		case <-n.ctx.Done():
			return
		case <-changed:
		case <-t.C:
		}
	}
}

// reconcile starts the replicas s places here and drops those of logs s
// says are gone. recent says that s records what the node lost when it
// last rejoined without its data (joinedAt): a replica that starts
// empty here votes (replicaVotes), so only then may one start. A node
// restarted with a catalog from an older snapshot shows, until it catches
// up, its replicas as they were before it lost them.
func (n *Node) reconcile(s *catalog.State, recent bool) {
	if n.mux == nil {
		return
	}
	held := n.db.Groups()
	stored := storedLogs(held)
	for _, l := range s.LogsOf(n.cfg.ID) {
		if l.ID == catalog.DefaultID || l.State != catalog.LogActive || n.host.hosted(l.ID) != nil || n.host.isDamaged(l.ID) {
			continue // the default log's replica is n.log, never a second one
		}
		if l.Lost(n.cfg.ID) && l.Joining != n.cfg.ID {
			n.warnLost(l) // started empty once its rebuild begins (moves.go)
			continue
		}
		cs := s
		if !slices.Contains(stored, l.ID) {
			// An empty start (a bootstrap, or a new member that catches
			// up) only from a current catalog, and judged by the catalog
			// read after it said so: a node restarted from an older
			// snapshot would otherwise bootstrap a log created there that
			// has since moved away or been deleted, and a 1-replica log
			// so bootstrapped would take appends no other replica holds.
			if !recent || !n.catalogCurrent() {
				continue
			}
			cs = n.catalog.State()
			cur, ok := cs.LogByID(l.ID)
			if !ok || cur.State != catalog.LogActive || !cur.HostedBy(n.cfg.ID) || (cur.Lost(n.cfg.ID) && cur.Joining != n.cfg.ID) {
				continue
			}
			l = cur
		}
		switch err := n.startLog(cs, l); {
		case err == nil || n.ctx.Err() != nil:
		case n.host.isDamaged(l.ID):
			n.cfg.Logger.Error("a log's data on this node is damaged: its replica does not start here (/status shows it Damaged)", "log", l.Name, "id", l.ID, "error", err)
		default:
			n.cfg.Logger.Error("starting a log's replica", "log", l.Name, "id", l.ID, "error", err)
		}
	}
	gone := func(id uint64) bool {
		l, ok := s.LogByID(id)
		return id < s.NextID() && (!ok || l.State == catalog.LogDeleting)
	}
	// A log moved away (its move finished) is dropped only from a current
	// catalog: a copy being replayed may show a time before the log moved
	// here. Current is the catalog read after catalogCurrent said so, not
	// s: s was read before, perhaps before the node caught up (a node
	// restarted from a snapshot older than the move that brought it the
	// log reads that snapshot's catalog at once, and applies the leader's
	// commit index while it starts the replicas s places here).
	movedAway := func(id uint64) (catalog.Log, bool) {
		if l, ok := s.LogByID(id); !ok || l.State != catalog.LogActive || l.HostedBy(n.cfg.ID) || !n.catalogCurrent() {
			return catalog.Log{}, false
		}
		l, ok := n.catalog.State().LogByID(id)
		return l, ok && l.State == catalog.LogActive && !l.HostedBy(n.cfg.ID)
	}
	// dropped drops log id's data if the log was deleted or moved away,
	// saying which (and where it went, from a current catalog), and
	// reports whether it did.
	dropped := func(id uint64, h *hostedLog) bool {
		switch l, moved := movedAway(id); {
		case gone(id):
			n.dropLog(id, h, "dropped a deleted log's data")
		case moved:
			n.dropLog(id, h, "dropped its replica of a log that moved away", "log", l.Name, "now_on", strings.Join(l.Members, ","))
		default:
			return false
		}
		return true
	}
	dropsNow := map[uint64]bool{}
	for _, h := range n.host.all() {
		if dropped(h.id, h) {
			dropsNow[h.id] = true // stored was listed before: not again below
			continue
		}
		if l, ok := s.LogByID(h.id); ok {
			h.gate.allowed.Store(replicaVotes(l, n.cfg.ID))
		}
		n.reconfigure(s, h)
	}
	n.balanceLeaders(s)
	for _, id := range append(stored, n.leftDirs(held)...) {
		if n.host.hosted(id) == nil && !dropsNow[id] {
			dropped(id, nil)
		}
	}
}

// transferRetry is how long a leader waits after a failed transfer of a
// log's leadership to its preferred leader before it tries again.
const transferRetry = 3 * time.Second

// The results of a transfer to a preferred leader (the label "result" of
// raftlog_leader_transfers_total).
const (
	transferHanded = "handed"
	transferFailed = "failed"
)

// transferLag is how far behind the leader's last index the preferred
// leader's log may be for a transfer to start: raft brings it up to date
// first, refusing appends meanwhile, so a few batches at most.
const transferLag = 4 * 256

// balanceLeaders hands the leadership of each log this node leads, but is
// not the catalog's preferred leader of (the first member, chosen at
// create so that leaders spread evenly), to the preferred leader when it is
// a voter of the log's group that answered the leader within a heartbeat
// timeout with a log at most transferLag entries behind (peerseen.go):
// after a node returns, the logs it should lead come back to it once it
// has caught up. raft first brings the target up to date; a transfer that
// fails (the node died meanwhile) is retried after transferRetry.
func (n *Node) balanceLeaders(s *catalog.State) {
	for _, h := range n.host.all() {
		l, ok := s.LogByID(h.id)
		if !ok || l.State != catalog.LogActive || l.Moving() || n.uploads.active(h.id) {
			continue // an upload of a restore is the leader's (restorelog.go)
		}
		want := l.PreferredLeader()
		rf := h.r.Raft()
		if want == "" || want == n.cfg.ID || l.Lost(want) || rf.State() != raft.Leader {
			continue
		}
		f := rf.GetConfiguration()
		if f.Error() != nil || !slices.ContainsFunc(f.Configuration().Servers, func(srv raft.Server) bool {
			return string(srv.ID) == want && srv.Suffrage == raft.Voter
		}) {
			continue
		}
		nd, ok := s.Node(want)
		if !ok || nd.State != catalog.NodeActive || !h.gate.caughtUp(raft.ServerID(want), rf.LastIndex(), n.cfg.HeartbeatTimeout, transferLag) {
			continue
		}
		n.host.mu.Lock()
		start := !h.transferring && time.Now().After(h.notBefore)
		h.transferring = h.transferring || start
		n.host.mu.Unlock()
		if !start {
			continue
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			err := rf.LeadershipTransferToServer(raft.ServerID(want), raft.ServerAddress(nd.RaftAddr)).Error()
			n.host.mu.Lock()
			h.transferring = false
			if err != nil {
				h.notBefore = time.Now().Add(transferRetry)
			}
			n.host.mu.Unlock()
			if err != nil {
				n.metrics.transfers.WithLabelValues(transferFailed).Inc()
				n.cfg.Logger.Debug("handing a log's leadership to its preferred leader", "log", h.name, "to", want, "error", err)
				return
			}
			n.metrics.transfers.WithLabelValues(transferHanded).Inc()
			n.cfg.Logger.Info("handed a log's leadership to its preferred leader", "log", h.name, "to", want)
		}()
	}
}

// replicaVotes reports whether node id's replica of log l may vote in the
// log's raft group: unless the catalog records it lost and its rebuild
// has not begun.
//
// A lost replica is one whose node rejoined without its data; its old
// self acknowledged entries and granted votes it no longer holds. The node
// runs a lost replica only once its rebuild has begun (reconcile), started
// empty, and a rebuild begins only once the log's leader has committed a
// configuration D in which the old replica does not vote (beginRebuild).
// From then on the new replica may vote, before the catalog records the
// rebuild finished (that needs a leader of the log, which may need its
// vote): it behaves as a member whose log lags, which raft allows. An
// entry committed before D is on a majority of D's voters, who refuse a
// candidate that lacks it (it lacks D); the others and the new replica are
// fewer than a majority of any configuration before D. A candidate in a
// configuration after D holds D, and one that counts the new replica as a
// voter holds the promotion that made it one. The votes its old self gave
// in a term cannot elect a second leader of that term: a candidate of it
// needs a majority whose term is still below or at it, and D's voters are
// past it, or at it having heard from its leader, which makes them refuse
// a candidate of that term.
func replicaVotes(l catalog.Log, id string) bool {
	return !l.Lost(id) || l.Joining == id
}

// warnLost logs, once per log, that the node does not start a log whose
// replica here the catalog records lost (recordLost), until its rebuild
// begins.
func (n *Node) warnLost(l catalog.Log) {
	n.host.mu.Lock()
	if n.host.warned == nil {
		n.host.warned = map[uint64]bool{}
	}
	first := !n.host.warned[l.ID]
	n.host.warned[l.ID] = true
	n.host.mu.Unlock()
	if first {
		n.cfg.Logger.Warn("not starting a log this node holds no data of although it should: it may have lost it (its data dir was wiped), and a replica that forgot its votes must not vote; the log runs on its other replicas until its replica here is rebuilt",
			"log", l.Name, "id", l.ID)
	}
}

// catalogCurrent reports whether the node's copy of the catalog holds
// every command committed until a moment ago: it leads the default log, or
// follows a leader that sent it a commit index within a heartbeat timeout,
// in raft's current term, and has applied that index.
//
// raft's own commit index is no measure: a node restarted from a
// snapshot older than its log holds the snapshot's index as its commit
// index until an AppendEntries with entries or a commit index comes, and
// a heartbeat, which carries neither, makes it a follower of a leader just
// heard from before that. A node that had taken a log's replica by a move
// after its last snapshot then read the catalog of that snapshot as
// current, found the log hosted elsewhere, and dropped the replica's data
// (an operator's tryout, 2026-12-04: a log of one replica lost its 50
// records).
func (n *Node) catalogCurrent() bool {
	if n.log.IsLeader() {
		return true
	}
	r := n.raft
	if _, id := r.LeaderWithID(); id == "" || r.State() != raft.Follower {
		return false
	}
	c := n.gate.commit.Load()
	return c != nil && c.term == r.CurrentTerm() && time.Since(c.at) < n.cfg.HeartbeatTimeout && n.fsm.Applied.Load() >= c.index
}

// leaderCommit is a commit index a leader sent in an AppendEntries.
type leaderCommit struct {
	term  uint64 // the leader's term
	index uint64
	at    time.Time
}

// storedLogs returns the ids of the named logs whose groups are among
// groups (the node's DB's).
func storedLogs(groups []uint64) []uint64 {
	var ids []uint64
	for _, g := range groups {
		if id := g / 4; g%4 != 0 && id != 0 && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// replicaConfig is the configuration of the replica of log id (named
// name, "" for the default log) that every log's replica shares: the
// node's identity, DB, raft timings, batching and hooks. The caller adds
// what differs: retention, the control state machine, the logger.
func (n *Node) replicaConfig(id uint64, name, snapshotDir string) replica.Config {
	c := n.cfg
	return replica.Config{
		NodeID: c.ID, ClientAddr: n.clientAddr, Log: id, Name: name, DB: n.db, Cache: n.cache,
		SnapshotDir: snapshotDir, FS: n.storeFS(),
		HeartbeatTimeout: c.HeartbeatTimeout, ElectionTimeout: c.ElectionTimeout,
		LeaderLeaseTimeout: c.LeaderLeaseTimeout, SnapshotThreshold: c.SnapshotThreshold,
		BatchLinger: c.BatchLinger, BatchesInFlight: c.BatchesInFlight, RetentionCheck: c.RetentionCheck,
		Logger:      c.Logger,
		StoreError:  n.storeError,
		Fail:        n.failStop,
		Batch:       func(k int) { n.metrics.batch.Observe(float64(k)) },
		CheckAppend: n.checkSpace,
	}
}

// startLog starts the replica of log l, which s places on the node.
func (n *Node) startLog(s *catalog.State, l catalog.Log) error {
	c := n.cfg
	if l.ID == catalog.DefaultID {
		return errors.New("node: the default log's replica is not a named log's")
	}
	dir := n.logDir(l.ID)
	if err := vfs.Default.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := recordLogName(dir, l.Name); err != nil {
		return fmt.Errorf("node: log %q: %w", l.Name, err)
	}
	// An upload of a restore lives only while its node leads the log
	// (restorelog.go): one left by an earlier run is of no use.
	if err := os.Remove(filepath.Join(dir, restoreUploadFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.Logger.Warn("removing an old upload of a restore", "log", l.Name, "error", err)
	}
	rc := n.replicaConfig(l.ID, l.Name, filepath.Join(dir, "snapshots"))
	rc.CommitTimeout = namedCommitTimeout
	rc.RetentionBytes, rc.RetentionAge = l.Settings.RetentionBytes, l.Settings.RetentionAge
	rc.Logger = c.Logger.Named("log." + l.Name)
	r, err := replica.Open(rc)
	if err != nil {
		return err
	}
	if err := r.CheckLog(); err != nil {
		// Trying again cannot help: the log runs on its other replicas
		// until the node is stopped and repaired.
		err = damagedReplica(c.DataDir, fmt.Errorf("node: log %q: %w", l.Name, err))
		n.host.markDamaged(l.ID, l.Name, err)
		return err
	}
	existing, err := r.HasState()
	if err != nil {
		return err
	}
	tr, err := n.mux.Group(l.ID)
	if err != nil {
		return err
	}
	lost := l.Lost(c.ID)
	gate := newVoteGate(tr, replicaVotes(l, c.ID), c.ID, n.wakeOnRefusedVote)
	var trans raft.Transport = gate
	if h := c.hooks; h != nil && h.logTransport != nil {
		trans = h.logTransport(l.ID, gate)
	}
	if err := r.Start(trans); err != nil {
		gate.Close()
		return err
	}
	gate.raft.Store(r.Raft())
	if !existing && !lost && slices.Contains(l.Initial, c.ID) {
		var conf raft.Configuration
		for _, m := range l.Initial {
			nd, ok := s.Node(m)
			if !ok {
				r.Shutdown()
				gate.Close()
				return fmt.Errorf("node: log %q: initial member %s is not a node of the catalog", l.Name, m)
			}
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m), Address: raft.ServerAddress(nd.RaftAddr)})
		}
		if err := r.Bootstrap(conf); err != nil {
			r.Shutdown()
			gate.Close()
			return err
		}
	}
	n.host.mu.Lock()
	if n.host.closed {
		n.host.mu.Unlock()
		r.Shutdown()
		gate.Close()
		return errors.New("node: closed")
	}
	if n.host.logs == nil {
		n.host.logs = map[uint64]*hostedLog{}
	}
	if n.host.failed {
		gate.stopRaft()
	}
	n.host.logs[l.ID] = &hostedLog{id: l.ID, name: l.Name, r: r, tr: tr, gate: gate}
	n.host.mu.Unlock()
	c.Logger.Info("started a log's replica", "log", l.Name, "id", l.ID, "bootstrapped", !existing && !lost && slices.Contains(l.Initial, c.ID), "rebuilding", lost)
	return nil
}

// dropLog shuts down the replica h of log id, if it runs, and removes the
// log's data from the node: its raftstore groups and its directory
// (snapshots, name); then it logs done, which says why, with kv.
//
// The drop is made restartable by a rename: the directory first becomes
// <id>.dropping (durably), then the groups are dropped, then the renamed
// directory is removed. A node stopped part-way finds the .dropping
// directory when it starts (droppingLogs) and finishes the drop before it
// starts any replica, so it never runs a log whose groups or snapshots
// are half gone. (A directory left without groups, by the order before
// this one, is found by leftDirs.)
func (n *Node) dropLog(id uint64, h *hostedLog, done string, kv ...any) {
	n.host.mu.Lock()
	delete(n.host.damaged, id)
	n.host.mu.Unlock()
	if h != nil {
		n.host.mu.Lock()
		delete(n.host.logs, id)
		n.host.mu.Unlock()
		if err := h.r.Shutdown(); err != nil {
			n.cfg.Logger.Warn("shutting a replica down to drop its data", "id", id, "error", err)
		}
		h.gate.Close()
	}
	if err := n.dropLogData(id); err != nil {
		n.cfg.Logger.Error("dropping a log's data", "id", id, "error", err)
		return
	}
	n.cfg.Logger.Info(done, append([]any{"id", id}, kv...)...)
}

// droppingSuffix marks the directory of a log whose drop has begun.
const droppingSuffix = ".dropping"

// dropLogData drops log id's data from the node (see dropLog).
func (n *Node) dropLogData(id uint64) error {
	dir := n.logDir(id)
	dropping := dir + droppingSuffix
	err := os.Rename(dir, dropping)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(dropping); serr == nil {
			// A drop begun before: that directory is the mark.
			err = os.RemoveAll(dir)
		}
	}
	switch {
	case err == nil:
		if err := vfs.Default.SyncDir(filepath.Dir(dir)); err != nil {
			return fmt.Errorf("node: marking log %d's data dropped: %w", id, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("node: marking log %d's data dropped: %w", id, err)
	}
	gs := replica.GroupsOf(id)
	for _, g := range []uint64{gs.Live, gs.ArchiveA, gs.ArchiveB} {
		if err := n.db.DropGroup(g); err != nil {
			return fmt.Errorf("node: dropping log %d's group %d: %w", id, g, err)
		}
	}
	if err := os.RemoveAll(dropping); err != nil {
		return fmt.Errorf("node: removing log %d's snapshots: %w", id, err)
	}
	return nil
}

// droppingLogs returns the ids of the logs whose drop began and did not
// finish (a .dropping directory under logs/).
func (n *Node) droppingLogs() []uint64 {
	var ids []uint64
	for _, name := range n.logDirNames() {
		if s, ok := strings.CutSuffix(name, droppingSuffix); ok {
			if id, err := strconv.ParseUint(s, 10, 64); err == nil && id != catalog.DefaultID {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// logDirNames lists the names in the data dir's logs/ directory.
func (n *Node) logDirNames() []string {
	ents, err := os.ReadDir(filepath.Join(n.cfg.DataDir, "logs"))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			n.cfg.Logger.Warn("listing the data dir's logs", "error", err)
		}
		return nil
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// leftDirs returns the ids of the named logs that have a directory under
// the data dir's logs/ but neither a running replica nor groups in held
// (the DB's): what a drop stopped between its steps left when it dropped
// the groups before the directory, as nodes before droppingSuffix did.
func (n *Node) leftDirs(held []uint64) []uint64 {
	stored := storedLogs(held)
	var ids []uint64
	for _, name := range n.logDirNames() {
		id, err := strconv.ParseUint(name, 10, 64)
		if err != nil || id == catalog.DefaultID || slices.Contains(stored, id) || n.host.hosted(id) != nil {
			continue
		}
		ids = append(ids, id)
	}
	return ids
}

// stopLogs shuts every named log's replica down (Close), all at once.
func (n *Node) stopLogs() []error {
	n.host.mu.Lock()
	n.host.closed = true
	n.host.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, h := range n.host.all() {
		wg.Go(func() {
			err := h.r.Shutdown()
			h.gate.Close()
			if err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

// createLog serves CreateLog on the default log's leader: it starts the
// catalog if need be, places the log's replicas and commits the log.
func (n *Node) createLog(ctx context.Context, r *transport.CreateLogRequest) (*transport.CreateLogResponse, error) {
	if n.mux == nil {
		return nil, errNoNamedLogs()
	}
	if _, err := n.log.Leading(ctx); err != nil {
		return nil, err
	}
	if err := n.syncCatalog(ctx); err != nil {
		return nil, err
	}
	settings := catalog.Settings{Replicas: int(r.Replicas), RetentionBytes: int64(min(r.RetentionBytes, 1<<63-1)), RetentionAge: r.RetentionAge}
	if settings.Replicas == 0 {
		settings.Replicas = 3
	}
	s := n.catalog.State()
	if _, ok := s.Log(r.Name); ok {
		return nil, transport.DuplicateLog(r.Name)
	}
	members, err := catalog.Place(s, settings.Replicas, nil)
	if err != nil {
		return nil, catalogError(r.Name, err)
	}
	res, err := n.proposeCatalog(ctx, &catalog.CreateLog{Name: r.Name, Settings: settings, Members: members})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, catalogError(r.Name, res.Err)
	}
	n.cfg.Logger.Info("created a log", "log", r.Name, "id", res.Log.ID, "members", res.Log.Members)
	return &transport.CreateLogResponse{Log: logInfo(*res.Log)}, nil
}

// deleteLog serves DeleteLog on the default log's leader: the log leaves
// the catalog, after which every member drops its data (reconcile). It
// takes two catalog commands: DeleteLog (the log is deleting: refused to
// every operation, its data dropped), then LogDeleted (its name is free).
// A leader that fails between them leaves the log deleting; the planner
// (moves.go) of the next leader finishes the delete.
func (n *Node) deleteLog(ctx context.Context, r *transport.DeleteLogRequest) (*transport.DeleteLogResponse, error) {
	if _, err := n.log.Leading(ctx); err != nil {
		return nil, err
	}
	l, ok := n.catalog.State().Log(r.Name)
	if !ok {
		return nil, transport.NotFoundLog(r.Name)
	}
	if l.State == catalog.LogActive {
		res, err := n.proposeCatalog(ctx, &catalog.DeleteLog{ID: l.ID})
		if err != nil {
			return nil, err
		}
		if res.Err != nil {
			return nil, catalogError(r.Name, res.Err)
		}
		l = *res.Log
	}
	info := logInfo(l)
	res, err := n.proposeCatalog(ctx, &catalog.LogDeleted{ID: l.ID})
	if err != nil {
		return nil, err
	}
	if res.Err != nil && !errors.Is(res.Err, catalog.ErrNotFound) {
		return nil, catalogError(r.Name, res.Err)
	}
	n.cfg.Logger.Info("deleted a log", "log", r.Name, "id", l.ID)
	return &transport.DeleteLogResponse{Log: info}, nil
}

// listLogs serves ListLogs from the node's copy of the catalog, sorted by
// name; a log's leader is named when the node holds a replica of the log
// (its raft knows the leader).
func (n *Node) listLogs() *transport.ListLogsResponse {
	s := n.catalog.State()
	resp := &transport.ListLogsResponse{Logs: []transport.LogInfo{n.defaultLogInfo()}}
	for _, l := range s.LogsByName() {
		if l.ID == catalog.DefaultID {
			continue
		}
		info := logInfo(l)
		if h := n.host.hosted(l.ID); h != nil {
			if _, id := h.r.Raft().LeaderWithID(); id != "" {
				info.LeaderID = string(id)
			}
		}
		resp.Logs = append(resp.Logs, info)
	}
	slices.SortFunc(resp.Logs, func(a, b transport.LogInfo) int { return strings.Compare(a.Name, b.Name) })
	return resp
}

// defaultLogInfo describes the default log: its members are the voters of
// its raft configuration.
func (n *Node) defaultLogInfo() transport.LogInfo {
	info := transport.LogInfo{Name: transport.DefaultLog, ID: 0, State: transport.LogActive,
		RetentionBytes: uint64(max(n.cfg.RetentionBytes, 0)), RetentionAge: n.cfg.RetentionAge}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				info.Members = append(info.Members, string(s.ID))
			}
		}
	}
	info.Replicas = uint32(len(info.Members))
	if _, id := n.raft.LeaderWithID(); id != "" {
		info.LeaderID = string(id)
	}
	return info
}

// describeLog serves DescribeLog on the log's leader, once it has
// confirmed that it leads; another node answers NotLeader naming the
// leader or a member, unless the request is Local and the node holds a
// replica of the log: it then describes its own.
func (n *Node) describeLog(ctx context.Context, req *transport.DescribeLogRequest) (*transport.DescribeLogResponse, error) {
	var (
		info  transport.LogInfo
		hosts []string
		r     *replica.Replica
	)
	if req.Name == "" || req.Name == transport.DefaultLog {
		info, r = n.defaultLogInfo(), n.log
		hosts = info.Members
	} else {
		l, err := n.lookupLog(req.Name)
		if err != nil {
			return nil, err
		}
		info, hosts = logInfo(l), l.Hosts()
		h := n.host.hosted(l.ID)
		if h == nil {
			return nil, n.notHosted(l)
		}
		r = h.r
		if _, id := r.Raft().LeaderWithID(); id != "" {
			info.LeaderID = string(id)
		}
	}
	if req.Local {
		return describe(info, hosts, r, n.catalog.State()), nil
	}
	// A leader cut off from its followers leads on, unaware, until its
	// lease runs out, and would describe what it last knew: a stale
	// configuration, shown committed. The replica planner acts on what a
	// description shows committed (moves.go), so the leader first confirms
	// with a quorum that it still leads (Linearize).
	if _, err := r.Linearize(ctx); err != nil {
		return nil, err
	}
	return describe(info, hosts, r, n.catalog.State()), nil
}

// describe describes a log its leader r serves (or any replica r, for a
// Local request): info, and how r's raft group stands. A member's
// CaughtUp is known for the leader only (raft does not tell a follower's
// progress). ConfigIndex is configIndex's bound on the configuration's
// index, and the commit index is read after it, so that on a leader
// ConfigIndex <= CommitIndex proves the roles committed.
//
// hosts are the nodes the catalog has the log on, a move's joining node
// included: a voter among them is a Follower, a voter not among them is
// Leaving.
func describe(info transport.LogInfo, hosts []string, r *replica.Replica, s *catalog.State) *transport.DescribeLogResponse {
	rf := r.Raft()
	c, _ := readConfig(rf)
	servers := c.servers
	resp := &transport.DescribeLogResponse{Log: info, LastIndex: rf.LastIndex(), ConfigIndex: c.index}
	resp.CommitIndex = awaitCommit(rf, c.index)
	resp.Bytes = r.FSM().RecordBytes()
	if floor := r.FSM().ReadView().Floor; resp.LastIndex >= floor {
		resp.FirstIndex = floor
	}
	addr := func(id string) string {
		if nd, ok := s.Node(id); ok && nd.ClientAddr != "" {
			return nd.ClientAddr
		}
		return r.FSM().Member(id)
	}
	_, leader := rf.LeaderWithID()
	resp.Log.LeaderID = string(leader)
	resp.LeaderAddr = addr(string(leader))
	inConfig := map[string]raft.Server{}
	for _, srv := range servers {
		inConfig[string(srv.ID)] = srv
	}
	seen := map[string]bool{}
	add := func(id string) {
		if seen[id] {
			return
		}
		seen[id] = true
		m := transport.LogMember{NodeID: id, ClientAddr: addr(id), Role: transport.RolePending}
		srv, ok := inConfig[id]
		switch {
		case !ok:
		case raft.ServerID(id) == leader:
			m.Role, m.CaughtUp = transport.RoleLeader, true
		case srv.Suffrage == raft.Voter && slices.Contains(hosts, id):
			m.Role = transport.RoleFollower
		case srv.Suffrage == raft.Voter:
			m.Role = transport.RoleLeaving
		default:
			m.Role = transport.RoleNonvoter
		}
		resp.Members = append(resp.Members, m)
	}
	for _, id := range info.Members {
		add(id)
	}
	ids := make([]string, 0, len(inConfig))
	for id := range inConfig {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		add(id)
	}
	return resp
}

// storeFS returns the file system of the node's store and snapshots.
func (n *Node) storeFS() vfs.FS {
	if n.fs != nil {
		return n.fs
	}
	return vfs.Default
}
