package replica

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/raftstore"
)

// Config configures a Replica. Fields without a default must be set.
type Config struct {
	// NodeID is this node's id, raft's LocalID.
	NodeID string
	// ClientAddr is this node's client address, recorded by the first
	// entry of each of its terms as leader so that followers can name it.
	ClientAddr string
	// Log is the log's id (GroupsOf); Name its name, "" for the default
	// log (errors name the log, and name a member when the leader is
	// unknown, only for a named log: older clients do not know that field).
	Log  uint64
	Name string
	// DB is the node's raftstore DB, opened with Options.Monotonic.
	DB *raftstore.DB
	// Cache bounds the recent entries the replica keeps in memory for
	// raft, shared with the node's other replicas (CacheBudget); nil gives
	// the replica a budget of DefaultCacheBytes of its own.
	Cache *CacheBudget
	// SnapshotDir holds the log's snapshot files; FS writes them (default
	// vfs.Default).
	SnapshotDir string
	FS          vfs.FS

	// Raft's timings (raft.Config). CommitTimeout, default 5 ms, is how
	// long an idle leader waits before it tells a follower the commit
	// index with an empty AppendEntries: each follower of each group gets
	// one that often while writes stop.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotThreshold  uint64

	// BatchLinger, BatchesInFlight: see Proposer.
	BatchLinger     time.Duration
	BatchesInFlight int
	// RetentionBytes and RetentionAge bound the log (0: no bound); the
	// leader checks them every RetentionCheck.
	RetentionBytes int64
	RetentionAge   time.Duration
	RetentionCheck time.Duration

	// Control, when set, is the state machine of the log's control
	// commands (control.go): the node's catalog, on the default log. A
	// named log (Log != 0) without one carries the mark of a restore into
	// it (restore.go).
	Control Control

	// Logger receives the replica's logs and raft's (named "raft").
	Logger hclog.Logger

	// Hooks, each optional.
	//
	// StoreError is called with every error of raft's log and stable
	// store; the node decides whether it must stop (a failed write or
	// sync) or waits for space.
	StoreError func(error)
	// Fail is called when a snapshot file cannot be written (a full disk
	// aside) or an install cannot tell whether it switched
	// (SnapStore.Fail): the node must stop.
	Fail func(error)
	// Batch is called with the size of each batch the proposer hands raft.
	Batch func(records int)
	// CheckAppend, called on the leader before each append, refuses it
	// with its error (the node's free-space check).
	CheckAppend func() error
	// LeaderChange is called with each value of raft's LeaderCh before the
	// replica acts on it (tests hold up a change with it).
	LeaderChange func(leader bool)
}

// Replica is one log's replica on a node: raft over the log's groups of
// the node's DB, its state machine and snapshots, and the leader's stints.
// Open it, decide with HasState whether to bootstrap, Start raft, and
// Shutdown raft before the DB is closed.
type Replica struct {
	cfg  Config
	view *LogView
	fsm  *FSM
	snap *SnapStore
	prop *Proposer
	raft *raft.Raft // set by Start, never changed
	// cache is raft's LogStore, in front of the store; set by Start, never
	// changed, closed once raft is down.
	cache *logCache
	// mark is a named log's control state machine, whether a restore
	// into it is under way (restore.go); nil for the default log. Set by
	// Open, never changed.
	mark *restoreMark
	// restoreGate keeps records out of a log while a restore into it
	// begins: Append holds it for reading from its check of the mark until
	// its records are in raft's queue, BeginRestore for writing from its
	// check that the log is empty until the mark is applied (restore.go).
	restoreGate sync.RWMutex

	ctx     context.Context // cancelled by Shutdown
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the loops Start began
	snapReq chan struct{}
	// raftDown is closed once raft has shut down (Shutdown): a future it
	// has not answered by then it never will (await). Closed once, under
	// downOnce.
	raftDown chan struct{}
	downOnce sync.Once

	lmu   sync.Mutex
	stint *Stint // guarded by lmu; nil when not leader
	// news announces a new leader heard of, or a stint begun
	// (leadernews.go).
	news leaderNews

	// applyMu is held for reading around each raft.Apply, and for writing
	// when draining is set (Drain).
	applyMu   sync.RWMutex
	draining  bool // guarded by applyMu: no more Applies
	drainOnce sync.Once
}

// Open opens the log's view, state machine and snapshots (recovering what
// a crash left of a snapshot install). Raft does not run yet.
func Open(cfg Config) (*Replica, error) {
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	r := &Replica{cfg: cfg, snapReq: make(chan struct{}, 1), raftDown: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	var err error
	if r.view, err = NewLogView(cfg.DB, GroupsOf(cfg.Log)); err != nil {
		return nil, err
	}
	r.fsm = NewFSM(r.view, cfg.Logger.Named("fsm"))
	r.fsm.OnTrim = func(uint64) { r.RequestSnapshot() }
	switch {
	case cfg.Control != nil:
		r.fsm.SetControl(cfg.Control)
	case cfg.Log != 0:
		r.mark = &restoreMark{}
		r.fsm.SetControl(r.mark)
	}
	if r.snap, err = OpenSnapStore(cfg.FS, cfg.SnapshotDir, r.view, cfg.DB, cfg.Logger.Named("snapshots")); err != nil {
		return nil, err
	}
	r.snap.Fail = cfg.Fail
	maxBatch := raftMaxAppendEntries
	r.prop = NewProposer(ApplierFunc(r.apply), cfg.BatchLinger, maxBatch, cfg.BatchesInFlight, cfg.Batch)
	return r, nil
}

// raftMaxAppendEntries is raft's MaxAppendEntries, and the proposer's
// largest batch.
const raftMaxAppendEntries = 256

// View returns the log view; FSM the state machine; Snapshots the
// snapshot store.
func (r *Replica) View() *LogView { return r.view }

// FSM returns the replica's state machine.
func (r *Replica) FSM() *FSM { return r.fsm }

// Snapshots returns the replica's snapshot store.
func (r *Replica) Snapshots() *SnapStore { return r.snap }

// Proposer returns the replica's proposer.
func (r *Replica) Proposer() *Proposer { return r.prop }

// Raft returns raft, nil before Start.
func (r *Replica) Raft() *raft.Raft { return r.raft }

// HasState reports whether the log holds raft state (a term, entries or a
// snapshot): a replica without any is new, to be bootstrapped or added.
func (r *Replica) HasState() (bool, error) {
	return raft.HasExistingState(r.view.Live, r.view.Live, r.snap)
}

// raftConfig is the raft configuration of every log.
func (r *Replica) raftConfig() *raft.Config {
	c := r.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.NodeID)
	rc.Logger = c.Logger.Named("raft")
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = 5 * time.Millisecond
	if c.CommitTimeout > 0 {
		rc.CommitTimeout = c.CommitTimeout
	}
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = 10 * time.Second
	// Raft never compacts its log: the log is the data, and trims decide
	// what goes (fsm.go, logview.go).
	rc.TrailingLogs = math.MaxUint64
	rc.MaxAppendEntries = raftMaxAppendEntries
	rc.BatchApplyCh = true
	// raft's per-peer metrics only with the peer in a label (peer_id), not
	// also in the metric name.
	rc.NoLegacyTelemetry = true
	// A leader whose own removal commits steps down rather than shutting
	// raft down: a shutdown that is not Shutdown's would strand the
	// commands waiting in raft's queue (Drain). A member outside the
	// configuration does not campaign; the node finds out that it was
	// removed (node/removed.go) and shuts it down.
	rc.ShutdownOnRemove = false
	// Not RestoreCommittedLogs: in raft v1.8.0 a node restarted with it
	// skips the configuration entries below the stored commit index when
	// it looks for its configuration, and without a snapshot holding one
	// it forgets its peers ("no known peers, aborting election").
	return rc
}

// Start starts raft over trans, and the loops that follow its leadership
// and take snapshots after trims.
func (r *Replica) Start(trans raft.Transport) error {
	st := failStopStore{Store: r.view.Live, r: r}
	// The cache serves replication the entries just stored, without
	// reading and decoding them back.
	budget := r.cfg.Cache
	if budget == nil {
		budget = NewCacheBudget(DefaultCacheBytes)
	}
	logs := newLogCache(st, budget)
	r.view.LiveDeleter = logs
	rf, err := raft.NewRaft(r.raftConfig(), r.fsm, logs, st, r.snap, trans)
	if err != nil {
		logs.close()
		return fmt.Errorf("replica: start raft: %w", err)
	}
	r.cache = logs
	r.raft = rf
	obs := make(chan raft.Observation, 4)
	rf.RegisterObserver(raft.NewObserver(obs, false, isLeaderObservation))
	r.wg.Add(3)
	go r.watchLeadership()
	go r.snapshotLoop()
	go r.watchLeaderNews(obs)
	return nil
}

// Bootstrap bootstraps a new log with conf; a log that has state already
// is left as it is.
func (r *Replica) Bootstrap(conf raft.Configuration) error {
	if err := r.raft.BootstrapCluster(conf).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("replica: bootstrap: %w", err)
	}
	return nil
}

// Shutdown ends the replica's stint, drains raft's queue (Drain), shuts
// raft down and waits for the replica's loops. It does not close the DB.
func (r *Replica) Shutdown() error {
	r.cancel()
	err := r.StopRaft()
	r.wg.Wait()
	return err
}

// StopRaft drains raft's queue (Drain) and shuts raft down; the replica's
// loops go on until Shutdown. Once raft is down, a future it did not
// answer gives up (await). It may be called more than once.
func (r *Replica) StopRaft() error {
	if r.raft == nil {
		return nil
	}
	r.Drain()
	err := r.raft.Shutdown().Error()
	r.cache.close() // its share goes to the node's other logs
	r.downOnce.Do(func() { close(r.raftDown) })
	return err
}

// Apply hands cmd to raft (raft.Apply), or fails with raft.ErrRaftShutdown
// once the replica drains; the future's Error gives up with
// raft.ErrRaftShutdown if raft shuts down without answering it (await),
// and Index and Response are then not to be called. Every command of the
// replica and of its node but the proposer's goes through it.
func (r *Replica) Apply(cmd []byte, timeout time.Duration) raft.ApplyFuture {
	f := r.apply(cmd, timeout)
	if _, failed := f.(errFuture); failed {
		return f
	}
	return guardedFuture{f, r}
}

// apply is Apply without the guard: the proposer's futures are waited on
// with await, all of a request at once.
func (r *Replica) apply(cmd []byte, timeout time.Duration) raft.ApplyFuture {
	r.applyMu.RLock()
	defer r.applyMu.RUnlock()
	if r.draining {
		return errFuture{raft.ErrRaftShutdown}
	}
	return r.raft.Apply(cmd, timeout)
}

// drainTimeout bounds how long Drain waits for raft to take its queue.
const drainTimeout = 5 * time.Second

// Drain stops new commands (Apply fails with raft.ErrRaftShutdown) and
// waits, up to drainTimeout, until raft has taken every command already
// in its queue, so that each gets its real answer. raft (v1.8.0, with
// BatchApplyCh) never answers a command still in its queue when it shuts
// down (hashicorp/raft#498); it takes from its queue in every state,
// answering a follower's commands with ErrNotLeader and a leader's once
// committed, or ErrLeadershipLost when it steps down or shuts down, so a
// barrier queued behind them is answered once they were all taken. When
// raft takes nothing for drainTimeout (its store stalled), the commands
// left are given up on once raft is down (await). It may be called more
// than once.
func (r *Replica) Drain() {
	r.drainOnce.Do(func() {
		r.applyMu.Lock()
		r.draining = true
		r.applyMu.Unlock()
		if r.raft == nil || r.raft.State() == raft.Shutdown {
			return
		}
		done := make(chan error, 1)
		go func() { done <- r.raft.Barrier(drainTimeout).Error() }()
		t := time.NewTimer(drainTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			r.cfg.Logger.Warn("raft took no command from its queue for a while; shutting down with commands queued, given up on", "waited", drainTimeout)
		}
	})
}

// errFuture is a raft.ApplyFuture that failed before it reached raft.
type errFuture struct{ err error }

func (f errFuture) Error() error          { return f.err }
func (f errFuture) Index() uint64         { return 0 }
func (f errFuture) Response() interface{} { return nil }

// guardedFuture is Apply's future.
type guardedFuture struct {
	raft.ApplyFuture
	r *Replica
}

// Error implements raft.Future.
func (g guardedFuture) Error() error {
	if !await(g.r, []raft.ApplyFuture{g.ApplyFuture}) {
		return raft.ErrRaftShutdown
	}
	return g.ApplyFuture.Error()
}

// await waits until every future of fs has completed, and reports true;
// false when raft has shut down with one still unanswered: then that one
// never will be (see Drain). The futures are waited on by a goroutine of
// their own, which stays blocked on such a future after the replica gave
// up on it.
func await[F raft.Future](r *Replica, fs []F) bool {
	done := make(chan struct{})
	go func() {
		for _, f := range fs {
			f.Error()
		}
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-r.raftDown:
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// RequestSnapshot asks for a snapshot, which deletes trimmed entries once
// durable.
func (r *Replica) RequestSnapshot() {
	select {
	case r.snapReq <- struct{}{}:
	default:
	}
}

func (r *Replica) snapshotLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.snapReq:
		}
		err := r.raft.Snapshot().Error()
		if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && r.ctx.Err() == nil {
			r.cfg.Logger.Warn("snapshot after trim", "error", err)
		}
	}
}

// Voters returns the number of voters in raft's latest configuration.
func (r *Replica) Voters() int {
	f := r.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	v := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			v++
		}
	}
	return v
}
