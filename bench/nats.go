package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATS JetStream in the cluster comparison: three NATS server processes
// (this binary re-executed as `bench nats-server -c <config>`, which runs
// nats-server/v2 as a library the way the nats-server command does) with
// JetStream on, in one cluster, and a stream of 3 replicas on file
// storage; driven through nats.go's JetStream API.

// Names of the stream and its subject.
const (
	natsStream  = "BENCH"
	natsSubject = "bench"
)

// natsServerCommand is the argument that makes this binary a NATS server.
const natsServerCommand = "nats-server"

// natsServerMain runs a NATS server with the nats-server command's flags
// (-c <config file>, ...) until SIGINT or SIGTERM, as that command's main
// does.
func natsServerMain(args []string) {
	fs := flag.NewFlagSet(natsServerCommand, flag.ExitOnError)
	opts, err := server.ConfigureOptions(fs, args, server.PrintServerAndExit, fs.Usage, server.PrintTLSHelpAndDie)
	if err != nil {
		server.PrintAndDie(fmt.Sprintf("%s: %s", natsServerCommand, err))
	}
	s, err := server.NewServer(opts)
	if err != nil {
		server.PrintAndDie(fmt.Sprintf("%s: %s", natsServerCommand, err))
	}
	s.ConfigureLogger()
	if err := server.Run(s); err != nil {
		server.PrintAndDie(err.Error())
	}
	s.WaitForShutdown()
}

// natsServer is one NATS server process.
type natsServer struct {
	name                  string
	port, cluster, expose int // client, route and monitoring ports
	proc                  *proc
}

// url returns the server's client URL.
func (s *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// natsCluster is a running 3-server JetStream cluster with the stream. Its
// fields are set by startNATS and not changed after it returns.
type natsCluster struct {
	servers3 []*natsServer
	leader   *natsServer // leads the stream
}

// natsConfig is the configuration file of server s of the cluster: fsync
// on every write with syncAlways (sync_interval: always), else JetStream's
// default (a background sync every 2 minutes).
func natsConfig(s *natsServer, all []*natsServer, storeDir string, syncAlways bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\nlisten: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\n", s.name, s.port, s.expose)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n", storeDir)
	if syncAlways {
		fmt.Fprintf(&b, "  sync_interval: always\n")
	}
	fmt.Fprintf(&b, "}\ncluster {\n  name: bench\n  listen: \"127.0.0.1:%d\"\n  routes: [\n", s.cluster)
	for _, o := range all {
		fmt.Fprintf(&b, "    \"nats-route://127.0.0.1:%d\"\n", o.cluster)
	}
	fmt.Fprintf(&b, "  ]\n}\n")
	return b.String()
}

// startNATS starts three servers under dir, creates the stream and waits
// until it has a leader and both followers are current.
func startNATS(ctx context.Context, e *clusterEnv, dir string, syncAlways bool) (*natsCluster, error) {
	ports, err := freePorts(9)
	if err != nil {
		return nil, err
	}
	c := &natsCluster{}
	for i := range 3 {
		c.servers3 = append(c.servers3, &natsServer{name: fmt.Sprintf("s%d", i+1), port: ports[3*i], cluster: ports[3*i+1], expose: ports[3*i+2]})
	}
	for _, s := range c.servers3 {
		conf := filepath.Join(dir, s.name+".conf")
		if err := os.WriteFile(conf, []byte(natsConfig(s, c.servers3, filepath.Join(dir, s.name), syncAlways)), 0o644); err != nil {
			return c, err
		}
		if s.proc, err = e.procs.start("nats "+s.name, e.self, []string{natsServerCommand, "-c", conf}, e.serverEnv(os.Environ()), filepath.Join(dir, s.name+".log")); err != nil {
			return c, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, s := range c.servers3 {
		if err := c.waitHealthy(ctx, s); err != nil {
			return c, err
		}
	}
	if err := c.createStream(ctx); err != nil {
		return c, c.whyNot(err)
	}
	return c, nil
}

// waitHealthy polls s's /healthz until it answers 200.
func (c *natsCluster) waitHealthy(ctx context.Context, s *natsServer) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", s.expose)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := "no answer"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return c.whyNot(fmt.Errorf("nats %s not healthy: %s: %s", s.name, url, last))
		}
	}
}

// whyNot adds to err the exit of any server that is no longer running.
func (c *natsCluster) whyNot(err error) error {
	for _, s := range c.servers3 {
		if !s.proc.running() {
			return errors.Join(err, s.proc.exitError())
		}
	}
	return err
}

// urls returns the client URLs of the servers, the stream leader's first.
func (c *natsCluster) urls() string {
	var us []string
	if c.leader != nil {
		us = append(us, c.leader.url())
	}
	for _, s := range c.servers3 {
		if s != c.leader {
			us = append(us, s.url())
		}
	}
	return strings.Join(us, ",")
}

// createStream creates the stream (retrying while the cluster elects its
// meta leader) and waits until it has a leader and current followers.
func (c *natsCluster) createStream(ctx context.Context) error {
	nc, err := nats.Connect(c.urls(), nats.Name("bench setup"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cfg := jetstream.StreamConfig{Name: natsStream, Subjects: []string{natsSubject}, Replicas: 3, Storage: jetstream.FileStorage}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		st, err := js.CreateStream(ctx, cfg)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = st.Info(ctx); err == nil {
				if err = c.placed(info); err == nil {
					return nil
				}
			}
		}
		last = err
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("stream %s not ready: %w", natsStream, last)
		}
	}
}

// placed sets c.leader from info, or says why the stream is not ready.
func (c *natsCluster) placed(info *jetstream.StreamInfo) error {
	ci := info.Cluster
	if ci == nil || ci.Leader == "" {
		return errors.New("no stream leader yet")
	}
	current := 0
	for _, p := range ci.Replicas {
		if p.Current {
			current++
		}
	}
	if current < 2 {
		return fmt.Errorf("%d of 2 followers current", current)
	}
	for _, s := range c.servers3 {
		if s.name == ci.Leader {
			c.leader = s
			return nil
		}
	}
	return fmt.Errorf("stream leader %q is none of the servers", ci.Leader)
}

// servers returns the server processes.
func (c *natsCluster) servers() []*proc {
	var ps []*proc
	for _, s := range c.servers3 {
		ps = append(ps, s.proc)
	}
	return ps
}

// leaderProfiler is not offered for NATS.
func (c *natsCluster) leaderProfiler(context.Context) (profiler, error) {
	return nil, errors.New("profiles are taken of raftlog only")
}

// dial connects clients connections, each with a JetStream context set up
// for window publishes in flight. Each connects to the stream leader's
// server first.
func (c *natsCluster) dial(ctx context.Context, clients, window int) ([]loadClient, error) {
	var out []loadClient
	for i := range clients {
		nc, err := nats.Connect(c.urls(), nats.DontRandomize(), nats.Name(fmt.Sprintf("bench %d", i+1)))
		if err != nil {
			closeClients(out)
			return nil, err
		}
		cl := &natsClient{nc: nc}
		opts := []jetstream.JetStreamOpt{
			jetstream.WithPublishAsyncMaxPending(window),
			jetstream.WithPublishAsyncTimeout(30 * time.Second),
			jetstream.WithPublishAsyncAckHandler(cl.acked),
			jetstream.WithPublishAsyncErrHandler(cl.failed),
		}
		if cl.js, err = jetstream.New(nc, opts...); err != nil {
			nc.Close()
			closeClients(out)
			return nil, err
		}
		out = append(out, cl)
	}
	return out, nil
}

// natsClient is one connection with its JetStream context.
type natsClient struct {
	nc *nats.Conn
	js jetstream.JetStream

	// Set by runAsync before its first publish, read by the ack handlers.
	phase *atomic.Int32
	slots map[*nats.Msg]*natsSlot // read-only while publishes are in flight
	free  chan *natsSlot          // slots not in flight

	mu sync.Mutex // guards t, which the ack handlers and runAsync share
	t  *tally
}

// natsSlot is one publish of the window: its message and when it went out.
type natsSlot struct {
	msg    *nats.Msg
	stamps *stamps
	stamp  uint64    // of the record in flight
	start  time.Time // when it was published
	failed bool      // its publish failed: it goes out no more
}

// run publishes with window messages in flight: synchronous Publish for a
// window of 1, as a NATS user with one message in flight would, else
// PublishAsync keeping window publishes in flight on the connection.
func (c *natsClient) run(ctx context.Context, stop <-chan struct{}, phase *atomic.Int32, window int, recs *records) *tally {
	if window > 1 {
		return c.runAsync(ctx, stop, phase, window, recs)
	}
	t := &tally{}
	st := recs.appenderStamps()
	buf := make([]byte, len(recs.template))
	for !closed(stop) {
		s := st.fill(recs, buf)
		t0 := time.Now()
		pa, err := c.js.Publish(ctx, natsSubject, buf)
		lat := time.Since(t0)
		if err != nil {
			t.fail(err)
			break
		}
		t.add(phase, ack{pa.Sequence, s}, lat)
	}
	return t
}

// runAsync keeps window PublishAsync calls in flight: a slot goes out again
// as soon as its ack arrives (acked, on the connection's ack goroutine).
func (c *natsClient) runAsync(ctx context.Context, stop <-chan struct{}, phase *atomic.Int32, window int, recs *records) *tally {
	c.t, c.phase = &tally{}, phase
	c.slots = make(map[*nats.Msg]*natsSlot, window)
	c.free = make(chan *natsSlot, window)
	for range window {
		sl := &natsSlot{msg: &nats.Msg{Subject: natsSubject, Data: make([]byte, len(recs.template))}, stamps: recs.appenderStamps()}
		c.slots[sl.msg] = sl
		c.free <- sl
	}
	live := window // slots that have not failed
loop:
	for live > 0 {
		var sl *natsSlot
		select {
		case <-stop:
			break loop
		case <-ctx.Done():
			break loop
		case sl = <-c.free:
		}
		if sl.failed {
			live--
			continue
		}
		sl.stamp = sl.stamps.fill(recs, sl.msg.Data)
		sl.start = time.Now()
		if _, err := c.js.PublishMsgAsync(sl.msg); err != nil {
			c.mu.Lock()
			c.t.fail(err)
			c.mu.Unlock()
			live--
		}
	}
	// Wait for the publishes in flight: each ends in acked or failed
	// (WithPublishAsyncTimeout bounds them), which puts its slot back, so
	// all live slots are back in free once none is in flight.
	for range live {
		<-c.free
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// acked is the JetStream ack handler: it records the ack of m and frees
// its slot.
func (c *natsClient) acked(_ jetstream.JetStream, m *nats.Msg, pa *jetstream.PubAck) {
	sl := c.slots[m]
	lat := time.Since(sl.start)
	c.mu.Lock()
	c.t.add(c.phase, ack{pa.Sequence, sl.stamp}, lat)
	c.mu.Unlock()
	c.free <- sl
}

// failed is the JetStream error handler of asynchronous publishes.
func (c *natsClient) failed(_ jetstream.JetStream, m *nats.Msg, err error) {
	sl := c.slots[m]
	c.mu.Lock()
	c.t.fail(err)
	c.mu.Unlock()
	sl.failed = true
	c.free <- sl
}

// close closes the connection.
func (c *natsClient) close() error {
	c.nc.Close()
	return nil
}

// verify reads the stream back from its first message through the last
// acknowledged sequence with a pull consumer, and checks that every
// acknowledged record is at its sequence with the data that was
// published.
func (c *natsCluster) verify(ctx context.Context, acks []ack, recs *records) (readBack, error) {
	m, err := newMatcher(acks, recs)
	if err != nil || len(acks) == 0 {
		return readBack{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	nc, err := nats.Connect(c.urls(), nats.Name("bench read-back"))
	if err != nil {
		return readBack{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return readBack{}, err
	}
	// A pull consumer of its own, one replica in memory, acks off: it
	// only reads. Its first fetches may find no responders until the
	// consumer's leader is in place.
	cons, err := js.CreateConsumer(ctx, natsStream, jetstream.ConsumerConfig{
		AckPolicy: jetstream.AckNonePolicy, Replicas: 1, MemoryStorage: true, InactiveThreshold: time.Minute,
	})
	if err != nil {
		return readBack{}, err
	}
	for seq := uint64(0); seq < m.last(); {
		n := 0
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err == nil {
			for msg := range batch.Messages() {
				n++
				md, err := msg.Metadata()
				if err != nil {
					return m.rb, err
				}
				seq = md.Sequence.Stream
				if err := m.see(seq, msg.Data()); err != nil {
					return m.rb, err
				}
			}
			err = batch.Error()
		}
		if n == 0 && errors.Is(err, nats.ErrNoResponders) && sleepCtx(ctx, 50*time.Millisecond) == nil {
			continue
		}
		if err != nil {
			return m.rb, fmt.Errorf("reading back after sequence %d: %w", seq, err)
		}
		if n == 0 {
			break
		}
	}
	return m.result()
}

// natsServerVersion is the version of nats-server/v2 this binary links.
func natsServerVersion() string { return server.VERSION }

// natsClientVersion is the version of nats.go this binary links.
func natsClientVersion() string { return nats.Version }
