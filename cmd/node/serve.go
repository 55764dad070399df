package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlog/raftlog/node"
)

const serveSummary = `
Runs one node of a raftlog cluster until SIGINT or SIGTERM, then hands
leadership over (if it leads), flushes and closes its store, and exits 0.
A second signal kills it at once. Logs go to stderr.

A new cluster starts in one of two ways:
  - every initial member gets the same --bootstrap list, or
  - one node bootstraps alone (--bootstrap with only itself) and the others
    start with --join <client address of a member>.
Once a node's data dir holds its raft state, --bootstrap and --join are
ignored: restart it with the same flags or without them. A node started
with neither waits until 'node join' adds it. A node started with --join
asks that member which cluster it joins (its cluster id) before it
admits any raft connection, and refuses those of other clusters.

A node with an empty data dir and a --bootstrap list naming other members
neither votes nor bootstraps until it has asked them: if one of them has
run the cluster (the node lost its data dir), it rejoins as a new member
and votes once it has caught up; if enough of them answer that none has,
it bootstraps; otherwise it waits. So a node restarted with its original
flags after a disk replacement is safe. --initial-cluster-state existing
never bootstraps. A node that bootstraps alone has no one to ask: after
it loses its data dir, start it with --join.

A node that cannot listen on --raft-addr, --client-addr or --admin-addr
(the port is in use) exits before it creates or writes anything in its
data dir.

A node removed from the cluster ('node remove') learns it, stops, and
refuses to start again; to add it back, wipe its data dir and start it
with --join.

Example, three nodes on one host:
  node serve --id n1 --data-dir d1 --client-addr 127.0.0.1:7000 --raft-addr 127.0.0.1:7001 \
      --bootstrap n1=127.0.0.1:7001,n2=127.0.0.1:7011,n3=127.0.0.1:7021
  (n2 and n3 alike, with ports 7010/7011 and 7020/7021)`

// serveOptions are the parsed flags of serve.
type serveOptions struct {
	cfg         node.Config // Logger not set; Settings are the flags that differ from their defaults
	level       hclog.Level
	logJSON     bool
	joinTimeout time.Duration
	fromEnv     []envUse // the flags taken from RAFTLOG_* variables
}

// parseServe parses the flags of serve.
func parseServe(e *env, args []string) (*serveOptions, error) {
	o := &serveOptions{level: hclog.Info, joinTimeout: time.Minute}
	c := &o.cfg
	c.RaftAddr, c.ClientAddr, c.Flush = "127.0.0.1:7001", "127.0.0.1:7000", node.FlushSync
	var maxRecord int64
	fs := newFlagSet(e, "serve", "", serveSummary)
	fs.StringVar(&c.ID, "id", "", "the node's `id`, unique in the cluster (required)")
	fs.StringVar(&c.DataDir, "data-dir", "", "the `directory` of the node's log, raft state and snapshots (required)")
	fs.Var(addrValue{&c.RaftAddr}, "raft-addr", "the `host:port` raft listens on; port 0 picks one")
	fs.StringVar(&c.RaftAdvertise, "raft-advertise", "", "the raft `host:port` other nodes dial, when it differs from --raft-addr")
	fs.StringVar((*string)(&c.RaftTransport), "raft-transport", string(node.RaftTransportNative), "the raft transport between nodes: `native` (raftlog's own, pipelined) or hashicorp (hashicorp/raft's NetworkTransport);\nevery node of a cluster must use the same")
	fs.IntVar(&c.RaftMaxInFlight, "raft-max-in-flight", 1, "how many AppendEntries the native raft transport keeps in flight to each follower (`count`);\n1 does not pipeline; raise it where the network round trip, not the disk, bounds replication")
	fs.Var(addrValue{&c.ClientAddr}, "client-addr", "the `host:port` clients connect to; port 0 picks one")
	fs.StringVar(&c.ClientAdvertise, "client-advertise", "", "the client `host:port` given to clients, when it differs from --client-addr")
	fs.StringVar(&c.AdminAddr, "admin-addr", "", "the `host:port` of the HTTP /status, /health and /ready endpoints; empty: none")
	fs.Var(peersValue{&c.Bootstrap}, "bootstrap", "the initial members of a new cluster, this node included: `id=host:port,...` (raft addresses)")
	fs.StringVar((*string)(&c.InitialClusterState), "initial-cluster-state", string(node.ClusterNew), "with an empty data dir and a --bootstrap list: `new` bootstraps once the other members answer that none ran a cluster\n(and rejoins if one did); existing never bootstraps, only rejoins")
	fs.Var(addrsValue{&c.Join}, "join", "client addresses of members of a running cluster to join through: `host:port,...`")
	fs.DurationVar(&o.joinTimeout, "join-timeout", o.joinTimeout, "how long a new node keeps trying to join before it gives up (a `duration`); 0: until interrupted")
	fs.Var(flushValue{&c.Flush}, "flush", "flush `mode`: sync makes appends durable on a majority before they are acknowledged;\nasync syncs in the background: UNSAFE on power loss, which can lose acknowledged appends")
	fs.Var(sizeValue{&c.RetentionBytes}, "retention-bytes", "trim the oldest records once the log exceeds this `size` (10GiB, 500MiB); 0: no limit")
	fs.Var(durationValue{&c.RetentionAge}, "retention-age", "trim records older than this `duration` (36h, 7d); 0: no limit")
	fs.Var(sizeValue{&maxRecord}, "max-record-size", "the largest record `size` an append may carry; 0: the default, 1MiB")
	fs.IntVar(&c.MaxConns, "max-conns", 0, "the most client `connections` at once; 0: the default, 1024")
	var maxFrame int64
	fs.Var(sizeValue{&maxFrame}, "max-frame-size", "the largest client protocol frame `size`; 0: the default")
	fs.IntVar(&c.Limits.MaxInFlight, "max-in-flight", 0, "the most `requests` in flight on one client connection; 0: the default, 128")
	fs.DurationVar(&c.Limits.IdleTimeout, "idle-timeout", 0, "close a client connection idle for this `duration`; 0: the default, 5m")
	fs.DurationVar(&c.Limits.FrameTimeout, "frame-timeout", 0, "close a client connection whose frame takes longer than this `duration` to arrive; 0: the default, 30s")
	fs.DurationVar(&c.Limits.WriteTimeout, "write-timeout", 0, "close a client connection that does not read a reply for this `duration`; 0: the default, 30s")
	fs.DurationVar(&c.HeartbeatTimeout, "heartbeat-timeout", node.DefaultHeartbeatTimeout,
		"how long a follower waits without hearing from the leader before it calls an election (a `duration`);\n"+
			"lower fails over faster, but on a busy host elects new leaders nobody asked for")
	fs.DurationVar(&c.ElectionTimeout, "election-timeout", node.DefaultElectionTimeout,
		"how long a candidate waits for votes before it tries again (a `duration`); at least --heartbeat-timeout")
	fs.DurationVar(&c.LeaderLeaseTimeout, "leader-lease-timeout", node.DefaultLeaderLeaseTimeout,
		"how long a leader keeps leading without hearing from a quorum (a `duration`); at most --heartbeat-timeout")
	fs.IntVar(&c.BatchesInFlight, "batches-in-flight", 1, "how many batches of appends the leader keeps in raft at once (a `count`); above 1 the leader stores\nthe next batch while followers store the one before: for nodes with disks of their own and a long round trip")
	fs.DurationVar(&c.BatchLinger, "batch-linger", 0, "the longest an append waits, while a batch of appends is in raft, to be proposed with the next batch (a `duration`);\n0: the default, 2ms; negative: propose every append at once")
	var tlsConf node.TLSConfig
	fs.StringVar(&tlsConf.CertFile, "tls-cert", "", "the node's certificate PEM `file`: turns on TLS for clients and mutual TLS between nodes")
	fs.StringVar(&tlsConf.KeyFile, "tls-key", "", "the private key PEM `file` of --tls-cert")
	fs.StringVar(&tlsConf.CAFile, "tls-ca", "", "the CA certificates PEM `file` that sign nodes' (and with --tls-client-auth, clients') certificates")
	fs.BoolVar(&tlsConf.ClientAuth, "tls-client-auth", false, "require clients to present a certificate signed by --tls-ca (mutual TLS)")
	fs.Var(namesValue{&tlsConf.Admins}, "tls-admins", "the client `names,...` (certificate common names) that may join other nodes, remove, transfer leadership and trim;\nwith TLS, no other client may")
	fs.Var(sizeValue{&c.MinFreeBytes}, "min-free", "refuse appends (and keep serving reads) while the data dir's file system has less free `space`; default two segments (128MiB)")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve Go runtime profiles (CPU, heap, goroutines, traces) under /debug/pprof/ on --admin-addr,\nprotected like /status; e.g. go tool pprof -top http://<admin-addr>/debug/pprof/profile?seconds=10")
	fs.BoolVar(&c.FaultInjection, "fault-injection", false, "TESTS ONLY: serve /fault/partition, /fault/disk and /fault/nospace on --admin-addr")
	if !node.FaultInjectionAvailable() {
		fs.hidden["fault-injection"] = true // refused below
	}
	fs.Var(levelValue{&o.level}, "log-level", "log `level`: trace, debug, info, warn, error or off")
	fs.BoolVar(&o.logJSON, "log-json", false, "log JSON lines")
	fs.allFromEnv()
	rest, err := fs.parse(args)
	if err != nil {
		return nil, err
	}
	if err := noArgs(rest); err != nil {
		return nil, err
	}
	// What the operator set; the values derived below are not settings.
	c.Settings, o.fromEnv = fs.changed(), fs.fromVar
	switch {
	case c.ID == "":
		return nil, usagef("no node id: give --id or set %s", envName("id"))
	case c.DataDir == "":
		return nil, usagef("no data dir: give --data-dir or set %s", envName("data-dir"))
	case len(c.Bootstrap) > 0 && len(c.Join) > 0:
		return nil, usagef("give --bootstrap or --join, not both")
	case c.MaxConns < 0:
		return nil, usagef("--max-conns %d is negative", c.MaxConns)
	case o.joinTimeout < 0:
		return nil, usagef("--join-timeout %v is negative", o.joinTimeout)
	case c.RaftTransport != node.RaftTransportNative && c.RaftTransport != node.RaftTransportHashicorp:
		return nil, usagef("--raft-transport %q: want native or hashicorp", c.RaftTransport)
	case c.BatchesInFlight < 1:
		return nil, usagef("--batches-in-flight %d: want at least 1", c.BatchesInFlight)
	case c.RaftMaxInFlight < 1:
		return nil, usagef("--raft-max-in-flight %d: want at least 1", c.RaftMaxInFlight)
	case c.RaftMaxInFlight > 1 && c.RaftTransport != node.RaftTransportNative:
		return nil, usagef("--raft-max-in-flight %d needs --raft-transport native", c.RaftMaxInFlight)
	case c.InitialClusterState != node.ClusterNew && c.InitialClusterState != node.ClusterExisting:
		return nil, usagef("--initial-cluster-state %q: want new or existing", c.InitialClusterState)
	}
	if len(c.Bootstrap) > 0 && !hasPeer(c.Bootstrap, c.ID) {
		return nil, usagef("--bootstrap does not list this node (%s)", c.ID)
	}
	if err := checkAdvertised("raft", c.RaftAddr, c.RaftAdvertise); err != nil {
		return nil, err
	}
	if err := checkAdvertised("client", c.ClientAddr, c.ClientAdvertise); err != nil {
		return nil, err
	}
	if tlsConf.CertFile != "" || tlsConf.KeyFile != "" || tlsConf.CAFile != "" || tlsConf.ClientAuth || len(tlsConf.Admins) > 0 {
		if tlsConf.CertFile == "" || tlsConf.KeyFile == "" || tlsConf.CAFile == "" {
			return nil, usagef("TLS needs --tls-cert, --tls-key and --tls-ca (and --tls-client-auth and --tls-admins need TLS: without it there are no identities, and every client may run every operation)")
		}
		c.TLS = &tlsConf
	}
	switch {
	case c.FaultInjection && !node.FaultInjectionAvailable():
		return nil, usagef("--fault-injection (or %s): %v", envName("fault-injection"), node.ErrNoFaultInjection)
	case c.FaultInjection && c.AdminAddr == "":
		return nil, usagef("--fault-injection needs --admin-addr")
	case c.Pprof && c.AdminAddr == "":
		return nil, usagef("--pprof needs --admin-addr, the port it serves profiles on")
	}
	if !fs.given("leader-lease-timeout") {
		c.LeaderLeaseTimeout = min(c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if !fs.given("election-timeout") {
		c.ElectionTimeout = max(c.ElectionTimeout, c.HeartbeatTimeout)
	}
	if err := c.CheckRaftTimeouts(); err != nil {
		return nil, usagef("--heartbeat-timeout %v, --election-timeout %v, --leader-lease-timeout %v: %v",
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout, err)
	}
	c.Limits.MaxRecordSize = int(min(maxRecord, 1<<40))
	c.Limits.MaxFrameSize = int(min(maxFrame, 1<<40))
	switch {
	case c.Limits.MaxInFlight < 0:
		return nil, usagef("--max-in-flight %d is negative", c.Limits.MaxInFlight)
	case c.Limits.IdleTimeout < 0, c.Limits.FrameTimeout < 0, c.Limits.WriteTimeout < 0:
		return nil, usagef("timeouts must not be negative")
	}
	if _, err := c.Limits.WithDefaults(); err != nil {
		return nil, usagef("--max-record-size %s, --max-frame-size %s: %v", formatSize(maxRecord), formatSize(maxFrame), err)
	}
	return o, nil
}

// hasPeer reports whether peers lists id.
func hasPeer(peers []node.Peer, id string) bool {
	for _, p := range peers {
		if p.ID == id {
			return true
		}
	}
	return false
}

// checkAdvertised checks that the listen address addr can be given to
// others, or that an advertised address replaces it.
func checkAdvertised(what, addr, advertise string) error {
	if advertise != "" {
		if err := checkHostPort(advertise); err != nil {
			return usagef("--%s-advertise: %v", what, err)
		}
		return nil
	}
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return usagef("--%s-addr %s listens on every interface: give --%s-advertise, the address others dial", what, addr, what)
	}
	return nil
}

// cmdServe is "node serve".
func cmdServe(ctx context.Context, e *env, args []string) error {
	o, err := parseServe(e, args)
	if err != nil {
		return err
	}
	o.cfg.Logger = hclog.New(&hclog.LoggerOptions{
		Name:       "raftlog",
		Level:      o.level,
		Output:     e.stderr,
		JSONFormat: o.logJSON,
	})
	b := node.Build()
	o.cfg.Logger.Info("raftlog node", "version", b.Version, "commit", b.Commit, "modified", b.Modified, "go", b.GoVersion, "platform", b.Platform)
	for _, u := range o.fromEnv {
		o.cfg.Logger.Info("setting from the environment", "variable", u.variable, "flag", "--"+u.flag, "value", u.value)
	}
	return serve(ctx, o.cfg, o.joinTimeout)
}

// holdsStore reports whether the data dir dir holds a node's store: a
// node restarted on it is not new, whatever its flags.
func holdsStore(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "store"))
	return err == nil
}

// serve starts a node with cfg and runs it until ctx ends, then closes it.
// joinTimeout, when positive, bounds the join of a new node.
func serve(ctx context.Context, cfg node.Config, joinTimeout time.Duration) error {
	log := cfg.Logger
	switch {
	case len(cfg.Join) > 0:
		log.Info("starting; a new node joins the cluster through", "addrs", cfg.Join, "timeout", joinTimeout)
	case len(cfg.Bootstrap) == 0 && !holdsStore(cfg.DataDir):
		log.Info("starting without --bootstrap or --join: a new node waits for 'node join' to add it")
	}
	sctx := ctx
	if joinTimeout > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, joinTimeout)
		defer cancel()
	}
	if cfg.TLS == nil {
		log.Info("TLS is off: every client that reaches the client port may run every operation, join, remove, transfer and trim included")
	}
	n, err := node.Start(sctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted while starting: %w", err)
		}
		return err
	}
	log.Info("serving", "id", n.ID(), "client", n.ClientAddr(), "raft", n.RaftAddr(), "admin", n.AdminURL(), "flush", cfg.Flush, "raft_transport", cfg.RaftTransport, "data_dir", cfg.DataDir)
	select {
	case <-ctx.Done():
	case <-n.Done():
		// The node stopped by itself after a storage failure (and closes
		// itself); Close waits for that.
		n.Close()
		return fmt.Errorf("the node stopped after a storage failure: %w", n.Err())
	}
	log.Info("shutting down: handing leadership over if leading, flushing and closing the store (a second signal kills the process)")
	start := time.Now()
	if err := n.Close(); err != nil {
		return fmt.Errorf("closing the node: %w", err)
	}
	log.Info("stopped", "took", time.Since(start).Round(time.Millisecond))
	return nil
}
