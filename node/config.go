package node

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlog/raftlog/transport"
)

// FlushMode says when a node's log writes are durable.
type FlushMode string

const (
	// FlushSync (the default) makes every entry durable before raft counts
	// it: an acknowledged append survives power loss on a majority.
	FlushSync FlushMode = "sync"
	// FlushAsync writes entries to the page cache and syncs them in the
	// background (every 500 ms, at least every 10 s). UNSAFE on power loss
	// or an operating-system crash, which can lose acknowledged appends on
	// every node at once; a crash of the node process loses nothing.
	FlushAsync FlushMode = "async"
)

// RaftTransportKind names the transport raft traffic between nodes uses.
// Every node of a cluster must use the same one: they do not speak to
// each other.
type RaftTransportKind string

const (
	// RaftTransportNative (the default) is raftlog's own raft transport
	// (transport.RaftTransport): hand-written codecs with no reflection
	// per entry, and optional pipelined replication (RaftMaxInFlight)
	// that cannot stall on a failed append.
	RaftTransportNative RaftTransportKind = "native"
	// RaftTransportHashicorp is hashicorp/raft's NetworkTransport, as
	// before the native one, without pipelining (its pipeline can stall
	// replication to a follower for good in raft v1.8.0).
	RaftTransportHashicorp RaftTransportKind = "hashicorp"
)

// maxNativeRecordSize is the largest Limits.MaxRecordSize the native raft
// transport carries: its largest frame (raftFrameSize) less room for an
// entry's other fields.
const maxNativeRecordSize = 1<<30 - 1<<20

// Peer is a member of the initial cluster.
type Peer struct {
	// ID is the member's node id.
	ID string
	// RaftAddr is the member's raft address, host:port.
	RaftAddr string
}

// ParsePeers parses "id=host:port,id=host:port" (raft addresses).
func ParsePeers(s string) ([]Peer, error) {
	var peers []Peer
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		if !ok || id == "" {
			return nil, fmt.Errorf("peer %q: want id=host:port", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("peer %q: %v", part, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("peer id %q given twice", id)
		}
		seen[id] = true
		peers = append(peers, Peer{ID: id, RaftAddr: addr})
	}
	if len(peers) == 0 {
		return nil, errors.New("no peers given")
	}
	return peers, nil
}

// Config configures a node. ID, DataDir, RaftAddr and ClientAddr are
// required; so is one of Bootstrap and Join on a node's first start.
type Config struct {
	// ID is the node's raft server id, unique in the cluster.
	ID string
	// DataDir holds the node's log, stable state and snapshots.
	DataDir string
	// RaftAddr is the address raft listens on; port 0 picks one.
	RaftAddr string
	// RaftAdvertise is the raft address other nodes dial, when it differs
	// from RaftAddr (for example RaftAddr 0.0.0.0:7000).
	RaftAdvertise string
	// ClientAddr is the address the client protocol listens on; port 0
	// picks one.
	ClientAddr string
	// ClientAdvertise is the client address given to clients, when it
	// differs from ClientAddr.
	ClientAdvertise string
	// AdminAddr is the HTTP address of /status, /health and /ready; empty
	// disables it.
	AdminAddr string

	// Bootstrap lists the members of a new cluster, this node included.
	// It is used only when the data dir holds no raft state; every initial
	// member must be given the same list.
	Bootstrap []Peer
	// Join is the client address of a member of a running cluster to join
	// through, used when the data dir holds no raft state.
	Join []string
	// InitialClusterState says how a node whose data dir holds no raft
	// state starts with a Bootstrap list of several members: ClusterNew
	// (the default) bootstraps a new cluster once the other members answer
	// that none of them ran one, and rejoins the cluster as a new member
	// if one did; ClusterExisting only rejoins (see bootstrap.go).
	InitialClusterState ClusterState

	// Flush is FlushSync (default) or FlushAsync.
	Flush FlushMode
	// RetentionBytes, when positive, trims the oldest records once the
	// retained log exceeds it.
	RetentionBytes int64
	// RetentionAge, when positive, trims records older than it.
	RetentionAge time.Duration
	// RetentionCheck is how often the leader checks retention; default 10 s.
	RetentionCheck time.Duration
	// SegmentSize is the commit-log segment size; default 64 MiB.
	SegmentSize int64
	// MinFreeBytes is the free space the data dir's file system must keep:
	// below it the node is below its reserve, and while it leads, or while
	// a quorum of voters is below theirs, the leader refuses appends
	// (NoSpace) and keeps serving reads and trims, until space is freed
	// (space.go). Default two segments (128 MiB); negative disables the
	// check.
	MinFreeBytes int64

	// RaftTransport is the transport of raft traffic: RaftTransportNative
	// (the default) or RaftTransportHashicorp. Every node of a cluster
	// must use the same one.
	RaftTransport RaftTransportKind
	// RaftMaxInFlight is how many AppendEntries the native raft transport
	// keeps in flight to each follower; default 1, no pipelining. Raft
	// followers store each AppendEntries with its own sync, so on a fast
	// network pipelining turns one large append into several small ones:
	// with 3 nodes on loopback it raised nothing, and lowered throughput
	// on a heavily loaded host (README, "Raft transport"). Raise it where
	// the network round trip, not the disk, bounds replication. The
	// hashicorp transport never pipelines.
	RaftMaxInFlight int

	// TLS, when set, secures raft traffic (mutual TLS) and the client
	// protocol (TLS, or mutual TLS with TLS.ClientAuth).
	TLS *TLSConfig

	// Limits bound what clients may ask; zero fields mean the transport
	// defaults.
	Limits transport.Limits
	// MaxConns bounds client connections; default 1024.
	MaxConns int

	// HeartbeatTimeout is how long a follower waits without hearing from
	// the leader before it starts an election (randomised between it and
	// twice it); the leader sends heartbeats ten times as often. Default
	// DefaultHeartbeatTimeout. It is the main term of the failover time:
	// lower it for faster failover, at the risk of elections nobody asked
	// for when a busy host delays a heartbeat (see DefaultHeartbeatTimeout).
	HeartbeatTimeout time.Duration
	// ElectionTimeout is how long a candidate waits for votes before it
	// tries again (randomised likewise); at least HeartbeatTimeout. Default
	// DefaultElectionTimeout.
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout is how long a leader keeps leading without
	// hearing from a quorum; then it steps down. At most HeartbeatTimeout.
	// Default DefaultLeaderLeaseTimeout, or HeartbeatTimeout if that is
	// lower.
	LeaderLeaseTimeout time.Duration
	// BatchLinger bounds how long an append waits to be proposed to raft
	// with others. The leader keeps BatchesInFlight batches of appends in
	// raft at most: an append that arrives while none is in flight is
	// proposed at once; otherwise it waits until a batch commits (or, with
	// BatchesInFlight above 1, the leader has stored the last one), or
	// for at most BatchLinger, and goes with every append that arrived
	// meanwhile, so that one fdatasync on each node stores them all.
	// Default 2 ms; negative proposes every append at once.
	BatchLinger time.Duration
	// BatchesInFlight is how many batches of appends the leader keeps in
	// raft at once; default 1. Above 1, the next batch goes as soon as the
	// leader has stored the one before, so that the leader stores it while
	// the followers store that one. That pays where each node has a disk of
	// its own and the network round trip is long; with three nodes and
	// the client on two cores it cost more CPU per record and lowered
	// throughput (README, "Batches in flight").
	BatchesInFlight int
	// SnapshotThreshold is how many entries since the last snapshot make
	// raft take one; default 16384. Snapshots are small: the log is not
	// copied.
	SnapshotThreshold uint64

	// FaultInjection, for cluster tests only, lets the admin server cut the
	// node off from peers and fail its disk (see fault.go). Only a test
	// binary or one built with the build tag faultinject may set it
	// (FaultInjectionAvailable); elsewhere Start returns
	// ErrNoFaultInjection.
	FaultInjection bool

	// Pprof serves Go's runtime profiles (CPU, heap, goroutines, execution
	// traces) under /debug/pprof/ on the admin address (pprof.go), behind
	// the same protection as /status: with TLS client authentication, only
	// to clients with a certificate signed by the CA. Off by default: a
	// profile exposes function names and stacks, and taking one costs the
	// node CPU. It needs AdminAddr.
	Pprof bool

	// Logger receives the node's and raft's logs; default hclog to stderr
	// at info level.
	Logger hclog.Logger

	// Settings are what Status reports as the node's settings that differ
	// from their defaults (StatusDetails.Settings), in the operator's
	// terms: cmd/node gives its flags that were set to other values than
	// their defaults. The node reports them sorted by name and does not
	// otherwise read them. Optional.
	Settings []transport.Setting

	// hooks are for this package's tests only.
	hooks *testHooks
}

func (c *Config) withDefaults() (Config, error) {
	o := *c
	switch {
	case o.ID == "":
		return o, errors.New("node: no node id")
	case len(o.ID) > transport.MaxIDLength:
		return o, fmt.Errorf("node: node id longer than %d bytes", transport.MaxIDLength)
	case o.DataDir == "":
		return o, errors.New("node: no data dir")
	case o.RaftAddr == "":
		return o, errors.New("node: no raft address")
	case o.ClientAddr == "":
		return o, errors.New("node: no client address")
	case len(o.Bootstrap) > 0 && len(o.Join) > 0:
		return o, errors.New("node: give either bootstrap peers or a join address, not both")
	case o.RetentionBytes < 0 || o.RetentionAge < 0:
		return o, errors.New("node: negative retention")
	case o.FaultInjection && !FaultInjectionAvailable():
		return o, ErrNoFaultInjection
	case o.Pprof && o.AdminAddr == "":
		return o, errors.New("node: Pprof needs an admin address (AdminAddr) to serve profiles on")
	}
	if len(o.Bootstrap) > 0 {
		self := false
		for _, p := range o.Bootstrap {
			self = self || p.ID == o.ID
		}
		if !self {
			return o, fmt.Errorf("node: bootstrap peers do not include this node (%s)", o.ID)
		}
	}
	switch o.InitialClusterState {
	case "":
		o.InitialClusterState = ClusterNew
	case ClusterNew:
	case ClusterExisting:
		if len(o.Bootstrap) < 2 && len(o.Join) == 0 {
			return o, errors.New("node: initial cluster state existing needs the members' raft addresses (a bootstrap list naming others) or a join address")
		}
	default:
		return o, fmt.Errorf("node: initial cluster state %q: want new or existing", o.InitialClusterState)
	}
	switch o.RaftTransport {
	case "":
		o.RaftTransport = RaftTransportNative
	case RaftTransportNative, RaftTransportHashicorp:
	default:
		return o, fmt.Errorf("node: raft transport %q: want native or hashicorp", o.RaftTransport)
	}
	switch o.Flush {
	case "":
		o.Flush = FlushSync
	case FlushSync, FlushAsync:
	default:
		return o, fmt.Errorf("node: flush mode %q: want sync or async", o.Flush)
	}
	switch {
	case o.RaftMaxInFlight < 0:
		return o, fmt.Errorf("node: raft max in flight %d is negative", o.RaftMaxInFlight)
	case o.RaftMaxInFlight > 1 && o.RaftTransport != RaftTransportNative:
		return o, fmt.Errorf("node: raft max in flight %d needs the native raft transport: the hashicorp one does not pipeline safely", o.RaftMaxInFlight)
	case o.RaftMaxInFlight == 0:
		o.RaftMaxInFlight = 1
	}
	limits, err := o.Limits.WithDefaults()
	if err != nil {
		return o, fmt.Errorf("node: %w", err)
	}
	if o.RaftTransport == RaftTransportNative && limits.MaxRecordSize > maxNativeRecordSize {
		return o, fmt.Errorf("node: records of up to %d bytes do not fit the native raft transport's frames; the most is %d", limits.MaxRecordSize, maxNativeRecordSize)
	}
	if o.MinFreeBytes == 0 {
		seg := o.SegmentSize
		if seg <= 0 {
			seg = 64 << 20
		}
		o.MinFreeBytes = 2 * seg
	}
	if o.RetentionCheck <= 0 {
		o.RetentionCheck = 10 * time.Second
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 1024
	}
	if err := o.raftTimeouts(); err != nil {
		return o, err
	}
	if o.BatchLinger == 0 {
		o.BatchLinger = 2 * time.Millisecond
	}
	switch {
	case o.BatchesInFlight < 0:
		return o, fmt.Errorf("node: batches in flight %d is negative", o.BatchesInFlight)
	case o.BatchesInFlight == 0:
		o.BatchesInFlight = 1
	}
	if o.SnapshotThreshold == 0 {
		o.SnapshotThreshold = 16384
	}
	if o.Logger == nil {
		o.Logger = hclog.New(&hclog.LoggerOptions{Name: "node", Level: hclog.Info})
	}
	o.Logger = o.Logger.With("node", o.ID)
	o.Settings = slices.Clone(o.Settings)
	slices.SortStableFunc(o.Settings, func(a, b transport.Setting) int { return strings.Compare(a.Name, b.Name) })
	return o, nil
}
