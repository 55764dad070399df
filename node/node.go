package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/raftstore"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// logGroups are the raftstore groups of the node's log (replica.Groups).
var logGroups = replica.GroupsOf(0)

// logCacheSize is how many recent entries raft keeps in memory for
// replication.
const logCacheSize = 1024

// Node is one running member of a raftlog cluster.
type Node struct {
	cfg  Config
	db   *raftstore.DB
	view *replica.LogView
	fsm  *replica.FSM
	snap *replica.SnapStore
	raft *raft.Raft
	tr   netTransport
	gate *voteGate
	prop *replica.Proposer

	clientLn   net.Listener
	clientAddr string // advertised
	adminLn    net.Listener
	admin      *http.Server

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  chan struct{} // one token per open client connection

	lmu   sync.Mutex
	stint *leaderStint // nil when not leader

	snapReq chan struct{}
	tls     *tlsConfigs // nil without TLS
	metrics *nodeMetrics
	space   *spaceGuard

	faults struct {
		layer *faultLayer
		fs    *faultFS
	}
	marks   *markers                  // the data dir's marker files
	probes  *probeLayer               // answers and sends probes (probe.go)
	raftRef atomic.Pointer[raft.Raft] // raft, once started, for probe answers

	deciding   atomic.Bool   // no raft state yet: bootstrap or rejoin? (bootstrap.go)
	joiningNow atomic.Bool   // a new member, not yet promoted (rejoin.go)
	removed    atomic.Bool   // removed from the cluster (removed.go)
	voting     chan struct{} // closed once the node votes
	joinedAt   atomic.Uint64 // index of the entry that added it, 0 if unknown
	failOnce   sync.Once
	failed     chan struct{}
	failErr    error

	closeOnce sync.Once
	closeErr  error
	dirLock   io.Closer // the data dir's lock (datadir.go); released last by close
}

// leaderStint is one period of leadership: one term. watchLeadership
// begins and ends stints as raft's LeaderCh reports changes, which it may
// see late or merge (raft overwrites an unread value), so a stint can
// outlive its term; whoever relies on one checks its term (linearize).
type leaderStint struct {
	ready chan struct{} // closed once the stint's barrier is applied
	done  chan struct{} // closed when the stint ends
	// term is the term in which the stint's barrier committed, the term of
	// its leadership. Written by lead before ready is closed; read only
	// after ready is.
	term uint64
	ctx  context.Context
	stop context.CancelFunc
}

// testHooks let this package's tests hold up or wrap parts of a node; nil
// outside tests.
type testHooks struct {
	// leaderChange, when set, is called by watchLeadership with each value
	// of raft's LeaderCh before it acts on it.
	leaderChange func(leader bool)
	// transport, when set, wraps the node's raft transport.
	transport func(raft.Transport) raft.Transport
	// backupStall, when set, replaces backupStallTimeout (backup.go).
	backupStall time.Duration
}

// Start opens the node's data dir, starts raft and the listeners, and
// bootstraps or joins a cluster when the data dir is new. With Join it
// returns once the cluster has added the node, or ctx ends.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	n, err := startNode(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if len(n.cfg.Join) > 0 {
		if err := n.joinCluster(ctx, n.cfg.Join); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

// startNode starts a node without joining a cluster.
func startNode(ctx context.Context, cfg Config) (*Node, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// The data dir and every directory under it are made durable as they
	// are created: a power loss soon after the first start must not undo
	// them and leave a node that bootstraps a new cluster.
	if err := vfs.Default.MkdirAll(c.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("node: create data dir: %w", err)
	}
	// MkdirAll syncs only the parents of what it creates; a data dir made
	// by hand just before the first start is made durable here.
	if abs, err := filepath.Abs(c.DataDir); err == nil {
		if err := vfs.Default.SyncDir(filepath.Dir(abs)); err != nil {
			return nil, fmt.Errorf("node: sync the data dir's parent: %w", err)
		}
	}
	lock, err := lockDataDir(c.DataDir)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: c, snapReq: make(chan struct{}, 1), conns: make(chan struct{}, c.MaxConns), failed: make(chan struct{}), voting: make(chan struct{}), dirLock: lock}
	n.marks = &markers{dir: c.DataDir}
	if err := checkNoRepair(c.DataDir); err != nil {
		lock.Close()
		return nil, err
	}
	if err := n.checkNotRemoved(); err != nil {
		lock.Close()
		return nil, err
	}
	if err := n.checkRestoreDone(); err != nil {
		return nil, err
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	if err := n.start(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// start does the work of Start; Close undoes whatever it did.
func (n *Node) start(ctx context.Context) (err error) {
	c := n.cfg
	n.metrics = newNodeMetrics()
	if c.TLS != nil {
		if n.tls, err = c.TLS.load(c.ID); err != nil {
			return err
		}
		n.tls.refusedPeer = n.refusedPeer
	}
	flush := raftstore.SyncFlush
	if c.Flush == FlushAsync {
		flush = raftstore.AsyncFlush
	}
	n.space = &spaceGuard{dir: c.DataDir, reserve: c.MinFreeBytes, free: statfsFree(c.DataDir)}
	// The store's metrics are exported natively (raftlog_store_*), not
	// through go-metrics, whose bridge costs a quantile update per sample.
	// Monotonic: the node installs snapshots itself (failStopStore), so a
	// gap in either group is a bug to refuse, not a snapshot install.
	opts := &raftstore.Options{Flush: flush, SegmentSize: c.SegmentSize, Metrics: n.metrics, NoGoMetrics: true, Monotonic: true}
	if c.FaultInjection {
		n.faults.fs = &faultFS{FS: vfs.Default}
		opts.FS = n.faults.fs
		real := n.space.free
		n.space.free = func() (int64, error) {
			if n.faults.fs.noSpace.Load() {
				return 0, nil
			}
			return real()
		}
	}
	n.db, err = raftstore.OpenDB(filepath.Join(c.DataDir, "store"), opts)
	if err != nil {
		return damaged(c.DataDir, err)
	}
	if n.view, err = replica.NewLogView(n.db, logGroups); err != nil {
		return err
	}
	n.fsm = replica.NewFSM(n.view, c.Logger.Named("fsm"))
	n.fsm.OnTrim = func(uint64) { n.requestSnapshot() }
	snapFS := vfs.Default
	if opts.FS != nil {
		snapFS = opts.FS
	}
	if n.snap, err = replica.OpenSnapStore(snapFS, filepath.Join(c.DataDir, "snapshots"), n.view, n.db, c.Logger.Named("snapshots")); err != nil {
		return err
	}
	n.snap.Fail = n.failStop

	if _, err := raftBridge(); err != nil {
		return fmt.Errorf("node: metrics: %w", err)
	}
	// The client address is known before raft starts: probes tell it.
	if err := n.openClientListener(); err != nil {
		return err
	}
	if err := n.startRaft(); err != nil {
		return err
	}
	if err := n.metrics.registerNode(n); err != nil {
		return fmt.Errorf("node: metrics: %w", err)
	}
	if err := n.listen(); err != nil {
		return err
	}
	n.wg.Add(3)
	go n.watchLeadership()
	go n.snapshotLoop()
	go n.registerLoop()
	n.wg.Add(2)
	go n.spaceLoop()
	go n.leaderGoneLoop()
	switch {
	case n.deciding.Load():
		n.wg.Add(1)
		go n.decideLoop()
	case n.joiningNow.Load():
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if n.joinedAt.Load() == 0 && len(n.cfg.Join) == 0 && len(n.cfg.Bootstrap) > 1 {
				// A rejoin chosen by decideLoop that did not finish:
				// the bootstrap list tells whom to ask.
				if err := n.joinCluster(n.ctx, nil); err != nil && n.ctx.Err() == nil {
					n.cfg.Logger.Error("rejoining", "error", err)
				}
			}
			n.promoteLoop()
		}()
	}
	return nil
}

func (n *Node) startRaft() error {
	c := n.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.Logger = c.Logger.Named("raft")
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = 5 * time.Millisecond
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = 10 * time.Second
	// Raft never compacts its log: the log is the data, and trims decide
	// what goes (package replica).
	rc.TrailingLogs = math.MaxUint64
	rc.MaxAppendEntries = 256
	rc.BatchApplyCh = true
	// raft's per-peer metrics only with the peer in a label (peer_id), not
	// also in the metric name (metrics.go).
	rc.NoLegacyTelemetry = true
	// Not RestoreCommittedLogs: in raft v1.8.0 a node restarted with it
	// skips the configuration entries below the stored commit index when
	// it looks for its configuration, and without a snapshot holding one
	// it forgets its peers ("no known peers, aborting election").

	tr, err := n.raftTransport()
	if err != nil {
		return err
	}
	n.tr = tr
	if err := n.checkRaftLog(); err != nil {
		return err
	}
	existing, err := raft.HasExistingState(n.view.Live, n.view.Live, n.snap)
	if err != nil {
		return err
	}
	joining, added, err := n.marks.joiningIndex()
	if err != nil {
		return err
	}
	deciding, err := n.marks.has(bootstrapFile)
	if err != nil {
		return err
	}
	if joining && deciding {
		// A crash between the two steps of becomeJoining.
		if err := n.marks.remove(bootstrapFile); err != nil {
			return err
		}
		deciding = false
	}
	bootstrapAtOnce := false
	if !existing && !joining && !deciding {
		switch {
		case len(c.Bootstrap) == 0:
			if err := n.marks.markJoining(0); err != nil {
				return err
			}
			joining = true
		case len(c.Bootstrap) == 1 && c.InitialClusterState != ClusterExisting:
			bootstrapAtOnce = true // no one to ask
		default:
			if err := n.marks.write(bootstrapFile, []byte("\n")); err != nil {
				return err
			}
			deciding = true
		}
	}
	n.joiningNow.Store(joining)
	n.deciding.Store(deciding)
	n.joinedAt.Store(added)
	n.gate = newVoteGate(tr, false, c.ID)
	if !joining && !deciding {
		n.startVoting()
	}
	store := failStopStore{Store: n.view.Live, n: n}
	// The proposer exists before raft, which tells it (through the
	// store) when the leader has stored a batch; it proposes only through
	// a stint, once raft runs.
	n.prop = replica.NewProposer(replica.ApplierFunc(func(cmd []byte, timeout time.Duration) raft.ApplyFuture {
		return n.raft.Apply(cmd, timeout)
	}), n.cfg.BatchLinger, rc.MaxAppendEntries, n.cfg.BatchesInFlight, func(k int) { n.metrics.batch.Observe(float64(k)) })
	// The cache serves replication the entries just stored, without
	// reading and decoding them back.
	logs, err := raft.NewLogCache(logCacheSize, store)
	if err != nil {
		return err
	}
	n.view.LiveDeleter = logs
	var trans raft.Transport = n.gate
	if h := c.hooks; h != nil && h.transport != nil {
		trans = h.transport(trans)
	}
	if n.raft, err = raft.NewRaft(rc, n.fsm, logs, store, n.snap, trans); err != nil {
		n.gate.Close()
		return fmt.Errorf("node: start raft: %w", err)
	}
	n.gate.raft.Store(n.raft)
	n.raftRef.Store(n.raft)
	if bootstrapAtOnce {
		conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(c.ID), Address: tr.LocalAddr()}}}
		if err := n.raft.BootstrapCluster(conf).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("node: bootstrap: %w", err)
		}
	}
	if existing {
		n.warnAddressChange(string(tr.LocalAddr()))
	}
	return nil
}

// warnAddressChange warns when the configuration names this node at
// another raft address than the one it advertises: peers dial the
// configuration's.
func (n *Node) warnAddressChange(advertised string) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.cfg.ID && string(s.Address) != advertised {
			n.cfg.Logger.Warn("the raft configuration names this node at another address than it advertises; peers dial the configuration's address. To change it, remove the node and add it again",
				"configured", s.Address, "advertised", advertised)
		}
	}
}

// raftTransport returns the raft transport (Config.RaftTransport) over
// TCP, or mutual TLS when configured, under faultLayer when fault
// injection is on, under probeLayer always. The transport's address is
// the one the node advertises.
func (n *Node) raftTransport() (netTransport, error) {
	c := n.cfg
	logger := c.Logger.Named("transport")
	ln, err := net.Listen("tcp", c.RaftAddr)
	if err != nil {
		return nil, fmt.Errorf("node: raft transport on %s: %w", c.RaftAddr, err)
	}
	advertise := advertisedAddr(c.RaftAddr, c.RaftAdvertise, ln.Addr())
	if err := checkDialable(advertise); err != nil {
		ln.Close()
		return nil, err
	}
	if len(c.Bootstrap) > 0 {
		peers, err := checkBootstrapEntry(c.Bootstrap, c.ID, c.RaftAddr, advertise)
		if err != nil {
			ln.Close()
			return nil, err
		}
		n.cfg.Bootstrap = peers
	}
	layer := &streamLayer{Listener: ln, dial: dialTCP, advertise: tcpAddrString(advertise)}
	if n.tls != nil {
		layer.Listener = tls.NewListener(ln, n.tls.raftIn)
		layer.dial = n.tls.dialRaft
	}
	var stream raft.StreamLayer = layer
	if c.FaultInjection {
		n.faults.layer = newFaultLayer(layer, advertise)
		stream = n.faults.layer
	}
	n.probes = newProbeLayer(stream, n.probeAnswer)
	if c.RaftTransport == RaftTransportHashicorp {
		// MaxRPCsInFlight 1: no pipelined replication. hashicorp/raft
		// v1.8.0's netPipeline can park forever after a follower answers
		// Success=false (a failed store, a log mismatch): the leader then
		// sends that follower heartbeats but never another entry, and
		// raft.Shutdown waits for it (grafana/pyroscope#5518 has the
		// analysis). It is not slower here: node bench --local, sync, 64
		// appenders, 3 runs each, 14,957-15,186 records/s pipelined
		// against 16,368-17,451 without.
		return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: n.probes, MaxPool: 4, MaxRPCsInFlight: 1, Timeout: raftIOTimeout, Logger: logger,
		}), nil
	}
	// The native transport pipelines safely (transport/raftpipe.go), but
	// by default it does not pipeline (see Config.RaftMaxInFlight).
	tr, err := transport.NewRaftTransport(n.probes, &transport.RaftTransportConfig{
		Timeout: raftIOTimeout, MaxPool: 4, MaxInFlight: c.RaftMaxInFlight, MaxFrameSize: raftFrameSize(c.Limits), Logger: logger,
	})
	if err != nil {
		n.probes.Close()
		return nil, fmt.Errorf("node: raft transport: %w", err)
	}
	return tr, nil
}

// raftIOTimeout bounds a raft transport's dials, request writes and waits
// for a response (snapshots get longer, by size).
const raftIOTimeout = 10 * time.Second

// raftFrameSize is the native raft transport's frame limit: its default,
// or room for the largest record in one AppendEntries when records may be
// larger. (An AppendEntries larger than a frame goes out in parts.)
func raftFrameSize(l transport.Limits) int {
	l, _ = l.WithDefaults() // checked by withDefaults
	return min(max(transport.DefaultRaftMaxFrameSize, l.MaxRecordSize+1<<20), 1<<30)
}

// advertisedAddr is the raft address the node gives peers: advertise when
// set, else the listen address as given, else (port 0, or no host) the
// address the listener got.
func advertisedAddr(listen, advertise string, bound net.Addr) string {
	if advertise != "" {
		return advertise
	}
	if host, port, err := net.SplitHostPort(listen); err == nil && host != "" && port != "0" {
		return listen
	}
	return bound.String()
}

// checkDialable refuses an advertised address peers cannot dial.
func checkDialable(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("node: raft address %s: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("node: raft address %s cannot be dialled by peers; give RaftAdvertise", addr)
	}
	return nil
}

// openClientListener listens on the client address.
func (n *Node) openClientListener() error {
	c := n.cfg
	ln, err := net.Listen("tcp", c.ClientAddr)
	if err != nil {
		return fmt.Errorf("node: client listener: %w", err)
	}
	if n.tls != nil {
		ln = tls.NewListener(ln, n.tls.client)
	}
	n.clientLn = ln
	n.clientAddr = ln.Addr().String()
	if c.ClientAdvertise != "" {
		n.clientAddr = c.ClientAdvertise
	}
	return nil
}

// listen serves the client listener and starts the admin server.
func (n *Node) listen() error {
	c := n.cfg
	n.wg.Add(1)
	go n.acceptLoop()
	if c.AdminAddr != "" {
		var err error
		if n.adminLn, err = net.Listen("tcp", c.AdminAddr); err != nil {
			return fmt.Errorf("node: admin listener: %w", err)
		}
		if n.tls != nil {
			n.adminLn = tls.NewListener(n.adminLn, n.tls.admin)
		}
		n.admin = &http.Server{Handler: n.adminHandler(), ReadHeaderTimeout: 10 * time.Second}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.admin.Serve(n.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.cfg.Logger.Error("admin server", "error", err)
			}
		}()
	}
	return nil
}

func (n *Node) acceptLoop() {
	defer n.wg.Done()
	h := metricsHandler{h: &handler{n: n}, m: n.metrics}
	for {
		nc, err := n.clientLn.Accept()
		if err != nil {
			if n.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				n.cfg.Logger.Error("client listener", "error", err)
			}
			return
		}
		select {
		case n.conns <- struct{}{}:
		default:
			n.metrics.refuseConn()
			n.cfg.Logger.Warn("refusing client connection: too many open", "remote", nc.RemoteAddr(), "limit", n.cfg.MaxConns)
			go transport.Refuse(nc, &transport.Error{Code: transport.CodeBusy,
				Message: fmt.Sprintf("node %s has %d client connections open, its limit", n.cfg.ID, n.cfg.MaxConns)})
			continue
		}
		n.metrics.connsTotal.Inc()
		n.metrics.conns.Inc()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer func() { <-n.conns; n.metrics.conns.Dec() }()
			if err := transport.Serve(n.ctx, nc, h, n.cfg.Limits); err != nil {
				n.cfg.Logger.Debug("client connection ended", "remote", nc.RemoteAddr(), "error", err)
			}
		}()
	}
}

// watchLeadership starts and ends leader stints as raft reports them.
func (n *Node) watchLeadership() {
	defer n.wg.Done()
	ch := n.raft.LeaderCh()
	for {
		select {
		case <-n.ctx.Done():
			n.endStint()
			return
		case leader := <-ch:
			if h := n.cfg.hooks; h != nil && h.leaderChange != nil {
				h.leaderChange(leader)
			}
			n.endStint()
			if leader {
				n.beginStint()
			}
		}
	}
}

func (n *Node) beginStint() {
	s := &leaderStint{ready: make(chan struct{}), done: make(chan struct{})}
	s.ctx, s.stop = context.WithCancel(n.ctx)
	n.lmu.Lock()
	n.stint = s
	n.lmu.Unlock()
	n.wg.Add(1)
	go n.lead(s)
}

func (n *Node) endStint() {
	n.lmu.Lock()
	s := n.stint
	n.stint = nil
	n.lmu.Unlock()
	if s != nil {
		s.stop()
		close(s.done)
	}
}

// lead runs while the node leads. It first commits an entry of its own
// term (recording the node's client address), so that the state machine
// holds every entry of earlier terms before reads are served: reads wait
// for the stint to be ready, and the stint's term is that entry's. Then it
// enforces retention.
func (n *Node) lead(s *leaderStint) {
	defer n.wg.Done()
	for {
		f := n.raft.Apply(replica.EncodeMemberCmd(n.cfg.ID, n.clientAddr), n.cfg.ElectionTimeout*4)
		err := f.Error()
		if err == nil {
			var l raft.Log
			if err = n.view.GetLog(f.Index(), &l); err == nil {
				s.term = l.Term
				break
			}
		}
		if s.ctx.Err() != nil || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
			return
		}
		if !errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			n.cfg.Logger.Warn("leader's first entry", "error", err)
		}
		t := time.NewTimer(n.cfg.HeartbeatTimeout / 10)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	close(s.ready)
	n.cfg.Logger.Info("leading", "term", s.term)
	if n.cfg.RetentionBytes <= 0 && n.cfg.RetentionAge <= 0 {
		return
	}
	t := time.NewTicker(n.cfg.RetentionCheck)
	defer t.Stop()
	for {
		n.enforceRetention()
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// enforceRetention proposes a trim when the log exceeds the retention
// limits. Trims fall on ledger marks, so up to markEvery records more than
// the limits allow may stay.
func (n *Node) enforceRetention() {
	below := n.fsm.RetentionByBytes(uint64(max(n.cfg.RetentionBytes, 0)))
	if n.cfg.RetentionAge > 0 {
		cutoff := time.Now().Add(-n.cfg.RetentionAge)
		marks := n.fsm.MarksCopy()
		var l raft.Log
		// The last mark whose entry is older than the cutoff.
		lo, hi := 0, len(marks)
		for lo < hi {
			mid := (lo + hi) / 2
			if err := n.view.GetLog(marks[mid].Index, &l); err == nil && l.AppendedAt.Before(cutoff) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		if lo > 0 {
			below = max(below, marks[lo-1].Index)
		}
	}
	if below <= n.fsm.ReadView().Floor {
		return
	}
	n.cfg.Logger.Info("retention: trimming", "below", below)
	if err := n.raft.Apply(replica.EncodeTrimCmd(below), 0).Error(); err != nil {
		n.cfg.Logger.Warn("retention trim", "error", err)
	}
}

// requestSnapshot asks snapshotLoop for a snapshot, which deletes trimmed
// entries once durable.
func (n *Node) requestSnapshot() {
	select {
	case n.snapReq <- struct{}{}:
	default:
	}
}

func (n *Node) snapshotLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.snapReq:
		}
		err := n.raft.Snapshot().Error()
		if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && n.ctx.Err() == nil {
			n.cfg.Logger.Warn("snapshot after trim", "error", err)
		}
	}
}

// joinRequest describes this node for a Join.
func (n *Node) joinRequest(fresh, register bool) *transport.JoinRequest {
	return &transport.JoinRequest{NodeID: n.cfg.ID, RaftAddr: string(n.tr.LocalAddr()), ClientAddr: n.clientAddr, Fresh: fresh, Register: register}
}

// callJoin sends a Join to addr and returns the index of the change it
// made, 0 if none.
func (n *Node) callJoin(ctx context.Context, addr string, req *transport.JoinRequest) (uint64, error) {
	nc, err := n.dialClient(ctx, addr)
	if err != nil {
		return 0, err
	}
	conn, err := transport.NewConn(nc, nil)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var resp transport.JoinResponse
	err = conn.Call(ctx, transport.OpJoin, req, &resp)
	return resp.Index, err
}

// joinCluster asks the members at the client addresses via to add this
// node, following NotLeader answers, until one does or ctx ends. With no
// addresses it asks the bootstrap list's members for theirs (probe.go). A
// node with raft state is a member already; a new one joins as a new
// member (rejoin.go) and records the index of the entry that added it.
func (n *Node) joinCluster(ctx context.Context, via []string) error {
	if !n.joiningNow.Load() || n.joinedAt.Load() != 0 {
		return nil
	}
	backoff := 50 * time.Millisecond
	next := ""
	var last error
	for attempt := 0; ; attempt++ {
		if len(via) == 0 {
			via = n.probeClientAddrs()
		}
		var addr string
		switch {
		case next != "":
			addr, next = next, ""
		case len(via) > 0:
			addr = via[attempt%len(via)]
		}
		if addr != "" {
			idx, err := n.callJoin(ctx, addr, n.joinRequest(true, false))
			if err == nil {
				if err := n.marks.markJoining(idx); err != nil {
					return err
				}
				n.joinedAt.Store(idx)
				n.cfg.Logger.Info("joined the cluster as a new member; a voter once caught up", "via", addr, "index", idx)
				return nil
			}
			last = err
			var te *transport.Error
			if errors.As(err, &te) && (te.Code == transport.CodeBadRequest || te.Code == transport.CodePermissionDenied) {
				return fmt.Errorf("node: join via %s: %w", addr, err)
			}
			if errors.As(err, &te) && te.Code == transport.CodeNotLeader && te.LeaderAddr != "" &&
				te.LeaderAddr != addr && te.LeaderAddr != n.clientAddr {
				next = te.LeaderAddr // try the leader next, after the backoff
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("node: could not join the cluster through %v: %w (last error: %v)", via, ctx.Err(), last)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// probeClientAddrs asks the bootstrap list's other members for client
// addresses to join through, the leader's first.
func (n *Node) probeClientAddrs() []string {
	return joinAddrs(n.probes.probeAll(n.otherPeers(), probeRequest{ID: n.cfg.ID}, probeTimeout))
}

// ID returns the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// ClientAddr returns the client address the node advertises.
func (n *Node) ClientAddr() string { return n.clientAddr }

// RaftAddr returns the node's raft address.
func (n *Node) RaftAddr() string { return string(n.tr.LocalAddr()) }

// AdminAddr returns the address of the HTTP admin server, "" if none.
func (n *Node) AdminAddr() string {
	if n.adminLn == nil {
		return ""
	}
	return n.adminLn.Addr().String()
}

// AdminURL returns the base URL of the HTTP admin server: https when TLS
// is configured, "" if there is no admin server.
func (n *Node) AdminURL() string {
	switch {
	case n.adminLn == nil:
		return ""
	case n.tls != nil:
		return "https://" + n.AdminAddr()
	}
	return "http://" + n.AdminAddr()
}

// IsVoter reports whether the node votes: false while a new member
// catches up (see rejoin.go).
func (n *Node) IsVoter() bool { return n.gate.allowed.Load() }

// Voting is closed once the node votes: at once for a node that
// bootstrapped or had raft state, on promotion for a new member.
func (n *Node) Voting() <-chan struct{} { return n.voting }

// startVoting lets the node vote.
func (n *Node) startVoting() {
	n.gate.allowed.Store(true)
	close(n.voting)
}

// IsLeader reports whether the node leads and is ready to serve.
func (n *Node) IsLeader() bool {
	n.lmu.Lock()
	s := n.stint
	n.lmu.Unlock()
	if s == nil {
		return false
	}
	select {
	case <-s.ready:
		return n.raft.State() == raft.Leader && n.raft.CurrentTerm() == s.term
	default:
		return false
	}
}

// Raft returns the node's raft instance, for tests and tools.
func (n *Node) Raft() *raft.Raft { return n.raft }

// Close stops the node: it hands leadership over if it leads a cluster of
// several voters, stops serving clients, shuts raft down and closes the
// store, which syncs it. It is safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.close() })
	return n.closeErr
}

func (n *Node) close() error {
	var errs []error
	if n.raft != nil && n.raft.State() == raft.Leader && n.voters() > 1 {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			n.cfg.Logger.Warn("handing leadership over before shutdown", "error", err)
		}
	}
	if n.clientLn != nil {
		n.clientLn.Close()
	}
	if n.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		n.admin.Shutdown(ctx)
		cancel()
	}
	n.cancel()
	if n.raft != nil {
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, err)
		}
	}
	n.wg.Wait()
	if n.tr != nil {
		n.tr.Close()
	}
	if n.db != nil {
		if err := n.db.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	n.dirLock.Close()
	return errors.Join(errs...)
}

func (n *Node) voters() int {
	f := n.raft.GetConfiguration()
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
