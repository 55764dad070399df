package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/raftstore"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// groupCommitWait is the store's GroupCommitWait: how long, in multiples
// of the last fdatasync, the commit log waits for the StoreLogs calls it
// expects before it syncs. A node's raft groups store again only after a
// network round trip and the other nodes' fdatasyncs, several syncs
// later, so with the default quarter of a sync most of them missed the
// round. Measured with bench logs (3 processes, 1 KiB records, 64 in
// flight per log, two runs of each setting alternating, 2026-12-03): 8
// logs made 259 and 262 records per fdatasync against 115 and 117 with the
// default, at 44,830 and 49,537 records/s against 46,993 and 50,310;
// 64 logs 1,323 and 1,290 against 433 and 453, at 55,910 and 59,094
// records/s against 52,465 and 57,245. The flusher waits only when it
// expects more than one caller, so one log alone (a single StoreLogs at a
// time per node) never waits.
const groupCommitWait = 4

// logGroups are the raftstore groups of the node's log (replica.Groups).
var logGroups = replica.GroupsOf(0)

// Node is one running member of a raftlog cluster.
type Node struct {
	cfg Config
	db  *raftstore.DB
	// cache bounds the recent raft entries every log's replica keeps in
	// memory, together.
	cache *replica.CacheBudget
	// log is the node's replica of the log; view, fsm, snap, raft and prop
	// are its parts, set as it opens and starts, never changed after.
	log  *replica.Replica
	view *replica.LogView
	fsm  *replica.FSM
	snap *replica.SnapStore
	raft *raft.Raft
	prop *replica.Proposer
	tr   netTransport
	gate *voteGate
	// catalog is the catalog of named logs, the default log's control
	// state machine (catalog.go); mux, the raft listener's groups, nil
	// with hashicorp's raft transport; host, the named logs' replicas
	// running here (logs.go); fs, the store's file system.
	catalog *catalog.FSM
	mux     *transport.RaftMux
	host    logHost
	fs      vfs.FS
	// uploads are the restores into named logs this node receives
	// (restorelog.go).
	uploads restoreUploads

	// bound holds the listeners Start bound until what serves each takes
	// it (boundListeners).
	bound      *boundListeners
	clientLn   net.Listener
	clientAddr string // advertised
	adminLn    net.Listener
	admin      *http.Server

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  chan struct{} // one token per open client connection

	tls     *tlsConfigs // nil without TLS
	metrics *nodeMetrics
	space   *spaceGuard

	faults struct {
		layer *faultLayer
		fs    *faultFS
		// holdMoves keeps the planner from finishing moves (fault.go).
		holdMoves atomic.Bool
	}
	marks   *markers                  // the data dir's marker files
	probes  *probeLayer               // answers and sends probes (probe.go)
	raftRef atomic.Pointer[raft.Raft] // raft, once started, for probe answers

	// The cluster's id and the raft port's hellos (clusterid.go, hello.go).
	clusterIDs     clusterIDs
	foreignLogged  foreignLog
	raftAdvertised string // the raft address the node advertises; set before raft starts

	deciding   atomic.Bool   // no raft state yet: bootstrap or rejoin? (bootstrap.go)
	joiningNow atomic.Bool   // a new member, not yet promoted (rejoin.go)
	removed    atomic.Bool   // removed from the cluster (removed.go)
	voting     chan struct{} // closed once the node votes
	// replayed: since it started, the node has applied a commit index a
	// leader sent it in raft's current term, or led (health.go, /ready).
	replayed atomic.Bool
	// joinedAt is the index of the entry that added the node when it last
	// joined as a new member: the joining marker's while it joins (0 until
	// known), the rejoined marker's once promoted (0 if it never joined so).
	joinedAt atomic.Uint64
	failOnce sync.Once
	failed   chan struct{}
	failErr  error
	// peerLosses: lost raft connections, for the leader-gone watch
	// (peerloss.go, leadergone.go).
	peerLosses *peerLosses
	// refusedVotes wakes the leader-gone watch when a log's raft refused
	// a vote (refusedvote.go); buffered, one wake-up pending at most.
	refusedVotes chan struct{}

	closeOnce sync.Once
	closeErr  error
	dirLock   io.Closer // the data dir's lock (datadir.go); released last by close
}

// testHooks let this package's tests hold up or wrap parts of a node; nil
// outside tests.
type testHooks struct {
	// leaderChange, when set, is called by watchLeadership with each value
	// of raft's LeaderCh before it acts on it.
	leaderChange func(leader bool)
	// transport, when set, wraps the node's raft transport; logTransport
	// that of named log id.
	transport    func(raft.Transport) raft.Transport
	logTransport func(id uint64, t raft.Transport) raft.Transport
	// backupStall, when set, replaces backupStallTimeout (backup.go).
	backupStall time.Duration
	// joinChecked, when set, is called by the leader's join handler with
	// each request that adds a node, once it has checked the node's
	// status and before it adds it (joinid.go).
	joinChecked func(*transport.JoinRequest)
	// holdClusterID, when set and true, keeps the default log's leader
	// from setting the cluster's id, as a leader of a version before the
	// id (clusterid.go).
	holdClusterID *atomic.Bool
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
	// The ports first: a node that cannot listen (a port in use) fails
	// before it creates or writes anything in its data dir, which would
	// leave a new dir that restore refuses as not empty.
	bound, err := bindListeners(c)
	if err != nil {
		// The likeliest reason a port is taken: the node runs already.
		if inUse := dataDirInUse(c.DataDir); inUse != nil {
			return nil, fmt.Errorf("%w (%v)", inUse, err)
		}
		return nil, err
	}
	// The data dir and every directory under it are made durable as they
	// are created: a power loss soon after the first start must not undo
	// them and leave a node that bootstraps a new cluster.
	if err := vfs.Default.MkdirAll(c.DataDir, 0o755); err != nil {
		bound.close()
		return nil, fmt.Errorf("node: create data dir: %w", err)
	}
	// MkdirAll syncs only the parents of what it creates; a data dir made
	// by hand just before the first start is made durable here.
	if abs, err := filepath.Abs(c.DataDir); err == nil {
		if err := vfs.Default.SyncDir(filepath.Dir(abs)); err != nil {
			bound.close()
			return nil, fmt.Errorf("node: sync the data dir's parent: %w", err)
		}
	}
	lock, err := lockDataDir(c.DataDir)
	if err != nil {
		bound.close()
		return nil, err
	}
	n := &Node{cfg: c, conns: make(chan struct{}, c.MaxConns), failed: make(chan struct{}), voting: make(chan struct{}), dirLock: lock,
		peerLosses: newPeerLosses(), refusedVotes: make(chan struct{}, 1), bound: bound}
	n.marks = &markers{dir: c.DataDir}
	if err := checkNoRepair(c.DataDir); err != nil {
		bound.close()
		lock.Close()
		return nil, err
	}
	if err := n.checkNotRemoved(); err != nil {
		bound.close()
		lock.Close()
		return nil, err
	}
	if err := n.checkRestoreDone(); err != nil {
		bound.close()
		lock.Close()
		return nil, err
	}
	if err := n.loadClusterID(); err != nil {
		bound.close()
		lock.Close()
		return nil, err
	}
	// A node to join through Join admits no raft connection before it
	// has asked a join target which cluster it joins (joinid.go);
	// startRaft takes this back once it knows the node joins no more.
	n.setJoinWaiting(len(c.Join) > 0)
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
	opts := &raftstore.Options{
		Flush: flush, SegmentSize: c.SegmentSize, GroupCommitWait: groupCommitWait,
		Metrics: n.metrics, NoGoMetrics: true, Monotonic: true,
	}
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
	n.cache = replica.NewCacheBudget(replica.DefaultCacheBytes)
	if _, err := raftBridge(); err != nil {
		return fmt.Errorf("node: metrics: %w", err)
	}
	// The client address is known before raft starts: probes tell it,
	// and each leader's first entry records it.
	if err := n.openClientListener(); err != nil {
		return err
	}
	n.catalog = catalog.New()
	n.fs = opts.FS
	rc := n.replicaConfig(0, "", filepath.Join(c.DataDir, "snapshots"))
	rc.Control = catalogControl{n.catalog}
	rc.RetentionBytes, rc.RetentionAge = c.RetentionBytes, c.RetentionAge
	if h := c.hooks; h != nil {
		rc.LeaderChange = h.leaderChange
	}
	if n.log, err = replica.Open(rc); err != nil {
		return err
	}
	n.view, n.fsm, n.snap = n.log.View(), n.log.FSM(), n.log.Snapshots()
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
	go n.registerLoop()
	go n.reconcileLoop()
	go n.planLoop()
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
	tr, err := n.raftTransport()
	if err != nil {
		return err
	}
	n.tr = tr
	if err := n.checkRaftLog(); err != nil {
		return err
	}
	existing, err := n.log.HasState()
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
	if !joining {
		if added, err = n.marks.rejoinedIndex(); err != nil {
			return err
		}
	}
	n.joiningNow.Store(joining)
	n.deciding.Store(deciding)
	n.joinedAt.Store(added)
	// A new member that joins through a join target (Join, or the
	// bootstrap list's members: a rejoin decideLoop chose) learns from it
	// which cluster it joins before it admits raft connections.
	n.setJoinWaiting(joining && added == 0 && (len(c.Join) > 0 || len(c.Bootstrap) > 1))
	n.gate = newVoteGate(tr, false, c.ID, n.wakeOnRefusedVote)
	if !joining && !deciding {
		n.startVoting()
	}
	var trans raft.Transport = n.gate
	if h := c.hooks; h != nil && h.transport != nil {
		trans = h.transport(trans)
	}
	if err := n.log.Start(trans); err != nil {
		n.gate.Close()
		return fmt.Errorf("node: %w", err)
	}
	n.raft, n.prop = n.log.Raft(), n.log.Proposer()
	n.gate.raft.Store(n.raft)
	n.raftRef.Store(n.raft)
	if bootstrapAtOnce {
		conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(c.ID), Address: tr.LocalAddr()}}}
		if err := n.log.Bootstrap(conf); err != nil {
			return fmt.Errorf("node: %w", err)
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
	ln := n.bound.take(&n.bound.raft)
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
	n.raftAdvertised = advertise
	n.probes = newProbeLayer(stream, n.probeAnswer, &helloState{own: n.hello, admit: n.admitPeer, refused: n.refusedHello})
	// The raft transports see the peers' connections through
	// peerLossLayer, which tells the leader-gone watch of lost ones.
	raftStream := &peerLossLayer{StreamLayer: n.probes, lost: n.peerLosses.report}
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
			Stream: raftStream, MaxPool: 4, MaxRPCsInFlight: 1, Timeout: raftIOTimeout, Logger: logger,
		}), nil
	}
	// The native transport pipelines safely (transport/raftpipe.go), but
	// by default it does not pipeline (see Config.RaftMaxInFlight).
	// One mux serves the default log (group 0) and the named logs (their
	// ids) over the one listener.
	mux, err := transport.NewRaftMux(raftStream, &transport.RaftTransportConfig{
		Timeout: raftIOTimeout, MaxPool: 4, MaxInFlight: c.RaftMaxInFlight, MaxFrameSize: raftFrameSize(c.Limits), Logger: logger,
	})
	if err != nil {
		n.probes.Close()
		return nil, fmt.Errorf("node: raft transport: %w", err)
	}
	tr, err := mux.Group(0)
	if err != nil {
		mux.Close()
		return nil, fmt.Errorf("node: raft transport: %w", err)
	}
	n.mux = mux
	return tr, nil
}

// boundListeners are the node's listeners, which Start binds before it
// touches the data dir. What serves each takes it; close closes the
// others.
type boundListeners struct {
	mu                  sync.Mutex
	raft, client, admin net.Listener // guarded by mu; nil once taken
}

// bindListeners listens on the raft, client and (when set) admin
// addresses of c.
func bindListeners(c Config) (*boundListeners, error) {
	b := &boundListeners{}
	var err error
	if b.raft, err = net.Listen("tcp", c.RaftAddr); err != nil {
		return nil, fmt.Errorf("node: raft transport on %s: %w", c.RaftAddr, err)
	}
	if b.client, err = net.Listen("tcp", c.ClientAddr); err != nil {
		b.close()
		return nil, fmt.Errorf("node: client listener: %w", err)
	}
	if c.AdminAddr != "" {
		if b.admin, err = net.Listen("tcp", c.AdminAddr); err != nil {
			b.close()
			return nil, fmt.Errorf("node: admin listener: %w", err)
		}
	}
	return b, nil
}

// dataDirInUse returns ErrDataDirInUse when another process holds the
// lock of the data dir dir, and nil otherwise. It creates nothing: a dir
// without a lock file is not in use.
func dataDirInUse(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, lockName)); err != nil {
		return nil
	}
	l, err := lockDataDir(dir)
	if err != nil {
		return err
	}
	l.Close()
	return nil
}

// take returns the listener *ln and leaves nil in its place.
func (b *boundListeners) take(ln *net.Listener) net.Listener {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := *ln
	*ln = nil
	return l
}

// close closes the listeners not taken.
func (b *boundListeners) close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ln := range []*net.Listener{&b.raft, &b.client, &b.admin} {
		if *ln != nil {
			(*ln).Close()
			*ln = nil
		}
	}
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
	ln := n.bound.take(&n.bound.client)
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
		n.adminLn = n.bound.take(&n.bound.admin)
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

// joinRequest describes this node for a Join.
func (n *Node) joinRequest(fresh, register bool) *transport.JoinRequest {
	return &transport.JoinRequest{NodeID: n.cfg.ID, RaftAddr: string(n.tr.LocalAddr()), ClientAddr: n.clientAddr, Fresh: fresh, Register: register}
}

// callJoin sends a Join to addr and returns the index of the change it
// made, 0 if none.
func (n *Node) callJoin(ctx context.Context, addr string, req *transport.JoinRequest) (uint64, error) {
	var resp transport.JoinResponse
	err := n.callNode(ctx, addr, transport.OpJoin, req, &resp)
	return resp.Index, err
}

// callNode sends one request to the node whose client address is addr,
// over a connection of its own, with the node's certificate under TLS.
func (n *Node) callNode(ctx context.Context, addr string, op transport.Op, req, resp any) error {
	nc, err := n.dialClient(ctx, addr)
	if err != nil {
		return err
	}
	conn, err := transport.NewConn(nc, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Call(ctx, op, req, resp)
}

// joinCluster asks the members at the client addresses via to add this
// node, following NotLeader answers, until one does or ctx ends. With no
// addresses it asks the bootstrap list's members for theirs (probe.go). A
// node with raft state is a member already; a new one joins as a new
// member (rejoin.go), asking each member's status first for the id of
// the cluster it joins (joinid.go), and records the id and the index of
// the entry that added it. It fails at once (ErrForeignCluster) when the
// node belongs to another cluster than a member's.
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
			idx, err := n.joinVia(ctx, addr)
			if err == nil {
				if err := n.keepJoinedClusterID(); err != nil {
					return fmt.Errorf("node: keeping the id of the cluster joined: %w", err)
				}
				if err := n.marks.markJoining(idx); err != nil {
					return err
				}
				n.joinedAt.Store(idx)
				n.cfg.Logger.Info("joined the cluster as a new member; a voter once caught up", "via", addr, "index", idx)
				return nil
			}
			last = err
			var te *transport.Error
			if errors.Is(err, ErrForeignCluster) || errors.As(err, &te) && (te.Code == transport.CodeBadRequest || te.Code == transport.CodePermissionDenied) {
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
func (n *Node) IsLeader() bool { return n.log.IsLeader() }

// Raft returns the node's raft instance, for tests and tools.
func (n *Node) Raft() *raft.Raft { return n.raft }

// Close stops the node: it hands leadership over if it leads a cluster of
// several voters, stops serving clients, shuts raft down and closes the
// store, which syncs it. It is safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.close() })
	return n.closeErr
}

// close stops the node: it hands the leadership of every log it leads to
// another member (all at once, each bounded by raft's election timeout),
// stops serving clients, closes the raft transport, then shuts the
// replicas down (all at once) and closes the store. The transport goes
// before the replicas: a raft call in flight to a peer that does not
// answer (a paused process) holds its raft's shutdown until the call
// times out (raftIOTimeout); closed, it fails at once.
func (n *Node) close() error {
	var errs []error
	n.handOverLeadership()
	if n.clientLn != nil {
		n.clientLn.Close()
	}
	if n.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		n.admin.Shutdown(ctx)
		cancel()
	}
	n.cancel()
	if n.mux != nil {
		n.mux.Close()
	}
	if n.tr != nil {
		n.tr.Close()
	}
	errs = append(errs, n.stopLogs()...)
	if n.log != nil {
		if err := n.log.Shutdown(); err != nil {
			errs = append(errs, err)
		}
	}
	n.bound.close() // those that start did not get to
	n.wg.Wait()
	if n.db != nil {
		if err := n.db.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	n.dirLock.Close()
	return errors.Join(errs...)
}

func (n *Node) voters() int { return n.log.Voters() }

// handOverLeadership hands the leadership of each log the node leads, the
// default log's and named logs', to another voter, all at once, so that
// a node stopped on purpose costs its logs no election timeout. It then
// waits, up to a heartbeat timeout, until each log's raft follows the
// successor: by then the successor has asked the other voters for their
// votes, so they do not take the raft port's closing for a death and call
// an election over it (handover.go).
func (n *Node) handOverLeadership() {
	var wg sync.WaitGroup
	transfer := func(name string, r *replica.Replica) {
		if rf := r.Raft(); rf != nil && rf.State() == raft.Leader && r.Voters() > 1 {
			wg.Go(func() {
				if err := rf.LeadershipTransfer().Error(); err != nil {
					n.cfg.Logger.Warn("handing leadership over before shutdown", "log", name, "error", err)
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), rf.ReloadableConfig().HeartbeatTimeout)
				defer cancel()
				if !r.AwaitSuccessor(ctx) {
					n.cfg.Logger.Warn("handed leadership over before shutdown, but heard from no successor", "log", name)
				}
			})
		}
	}
	if n.log != nil {
		transfer(transport.DefaultLog, n.log)
	}
	for _, h := range n.host.all() {
		transfer(h.name, h.r)
	}
	wg.Wait()
}
