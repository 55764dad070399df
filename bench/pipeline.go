package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The replication floor (-systems floor): what a replicated sync append
// costs in CPU and wake-ups with nothing but its I/O, in the same run as
// raftlog and NATS. Three processes of this binary (`bench
// pipeline-server`), a leader and two followers, do what raftlog's sync
// path must do, the way hashicorp/raft orders it, and nothing else: the
// leader reads a client's request of records, writes it to its file and
// fdatasyncs, then sends it to both followers, which each write and
// fdatasync it and answer; at the first answer (a majority of three) the
// leader answers the client. No raft state, no index, no checksums, no
// allocation per record: one connection per follower, one goroutine per
// connection, files zero-filled beforehand. The client sends one request
// at a time holding every append of its window, as raftlog's Client packs
// the appends waiting into one request.
//
// Its CPU per record is a floor for any Go server that stores on the
// leader before it replicates and acknowledges a record only once a
// majority has it on disk: what such a server spends beyond it is its
// own. Only workloads of one client use it (the leader serves one request
// at a time).

// pipelineServerCommand is the argument that makes this binary a server of
// the floor.
const pipelineServerCommand = "pipeline-server"

// pipelineRing is the size of each server's file (-ring). Records go
// around it, so a long cell overwrites its oldest records; the read-back
// checks those still there.
const pipelineRing = 256 << 20

// pipelineMaxRequest bounds a request's bytes.
const pipelineMaxRequest = 64 << 20

// A request, client to leader and leader to follower:
//
//	u32 record count, u32 record size, u64 first position, records
//
// (the client sends position 0; the leader assigns positions, from 1). An
// answer, follower to leader and leader to client: u64 first position.
const pipelineHeader = 16

// pipelineServerMain runs one server of the floor until its connections
// end; it exits the process on error.
func pipelineServerMain(args []string) {
	fs := flag.NewFlagSet(pipelineServerCommand, flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen `address`")
	file := fs.String("file", "", "the `path` of the file records go to")
	followers := fs.String("followers", "", "comma-separated follower `addresses` (the leader's flag)")
	ring := fs.Int64("ring", pipelineRing, "`bytes` of the file")
	fs.Parse(args)
	// The bench stops its servers with SIGTERM and takes any other end
	// for a failure; the floor keeps no state worth a clean stop.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-stop
		os.Exit(0)
	}()
	if err := servePipeline(*listen, *file, *followers, *ring); err != nil {
		fmt.Fprintln(os.Stderr, pipelineServerCommand+":", err)
		os.Exit(1)
	}
}

// pipelineFile is a server's zero-filled ring.
type pipelineFile struct {
	f    *os.File
	ring int64
}

func openPipelineFile(path string, ring int64) (*pipelineFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	zero := make([]byte, 1<<20)
	for off := int64(0); off < ring; off += int64(len(zero)) {
		if _, err := f.WriteAt(zero[:min(int64(len(zero)), ring-off)], off); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	return &pipelineFile{f: f, ring: ring}, nil
}

// store writes the records of a request (recs, each size bytes, the first
// at position first) and fdatasyncs.
func (p *pipelineFile) store(first uint64, size int, recs []byte) error {
	if p.ring%int64(size) != 0 {
		return fmt.Errorf("records of %d bytes do not divide the file's %d", size, p.ring)
	}
	off := int64((first-1)*uint64(size)) % p.ring
	for len(recs) > 0 {
		n := min(len(recs), int(p.ring-off))
		if _, err := p.f.WriteAt(recs[:n], off); err != nil {
			return err
		}
		recs, off = recs[n:], 0
	}
	return unix.Fdatasync(int(p.f.Fd()))
}

// requestReader reads the requests of one connection into one buffer.
type requestReader struct {
	r   *bufio.Reader
	buf []byte
}

func newRequestReader(c net.Conn) *requestReader {
	return &requestReader{r: bufio.NewReaderSize(c, 256<<10)}
}

// next reads the next request: its header's fields, its records, and the
// whole frame (header and records), valid until the next call.
func (rr *requestReader) next() (count, size uint32, first uint64, recs, frame []byte, err error) {
	var h [pipelineHeader]byte
	if _, err := io.ReadFull(rr.r, h[:]); err != nil {
		return 0, 0, 0, nil, nil, err
	}
	count, size, first = binary.LittleEndian.Uint32(h[0:]), binary.LittleEndian.Uint32(h[4:]), binary.LittleEndian.Uint64(h[8:])
	n := uint64(count) * uint64(size)
	if n == 0 || n > pipelineMaxRequest {
		return 0, 0, 0, nil, nil, fmt.Errorf("bad request: %d records of %d bytes", count, size)
	}
	if uint64(cap(rr.buf)) < pipelineHeader+n {
		rr.buf = make([]byte, pipelineHeader+n)
	}
	frame = rr.buf[:pipelineHeader+n]
	copy(frame, h[:])
	if _, err := io.ReadFull(rr.r, frame[pipelineHeader:]); err != nil {
		return 0, 0, 0, nil, nil, err
	}
	return count, size, first, frame[pipelineHeader:], frame, nil
}

// servePipeline runs a server listening on listen, storing into a file of
// ring bytes at path: a follower without followers, else the leader.
func servePipeline(listen, path, followers string, ring int64) error {
	file, err := openPipelineFile(path, ring)
	if err != nil {
		return err
	}
	var peers []net.Conn
	if followers != "" {
		for _, a := range strings.Split(followers, ",") {
			c, err := dialRetry(a, 30*time.Second)
			if err != nil {
				return err
			}
			peers = append(peers, c)
		}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	if len(peers) == 0 {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		return follow(c, file)
	}
	as := newAcks(len(peers))
	for _, p := range peers {
		go as.read(p)
	}
	var next uint64 = 1
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		if err := lead(c, file, peers, as, &next); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
}

// dialRetry dials addr until it answers or d has passed.
func dialRetry(addr string, d time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(d)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(10 * time.Millisecond) // waiting for another process to listen
	}
}

// follow stores each request the leader sends and answers it.
func follow(c net.Conn, file *pipelineFile) error {
	rr := newRequestReader(c)
	var ans [8]byte
	for {
		_, size, first, recs, _, err := rr.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := file.store(first, int(size), recs); err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(ans[:], first)
		if _, err := c.Write(ans[:]); err != nil {
			return err
		}
	}
}

// acks are the answers of the followers, and the first failure of their
// connections.
type acks struct {
	acked  chan uint64
	failed chan error
}

func newAcks(followers int) *acks {
	return &acks{acked: make(chan uint64, 64), failed: make(chan error, followers)}
}

// read passes on the answers of the follower at c until c fails.
func (a *acks) read(c net.Conn) {
	var ans [8]byte
	for {
		if _, err := io.ReadFull(c, ans[:]); err != nil {
			a.failed <- fmt.Errorf("follower %s: %w", c.RemoteAddr(), err)
			return
		}
		a.acked <- binary.LittleEndian.Uint64(ans[:])
	}
}

// await waits for a follower's answer to the request at first.
func (a *acks) await(first uint64) error {
	for {
		select {
		case got := <-a.acked:
			if got == first {
				return nil
			}
		case err := <-a.failed:
			return err
		}
	}
}

// lead serves one client: each request is stored here, then sent to the
// followers, and answered once one of them has it.
func lead(c net.Conn, file *pipelineFile, peers []net.Conn, as *acks, next *uint64) error {
	defer c.Close()
	rr := newRequestReader(c)
	var ans [8]byte
	for {
		count, size, _, recs, frame, err := rr.next()
		if err != nil {
			return err
		}
		first := *next
		*next += uint64(count)
		binary.LittleEndian.PutUint64(frame[8:], first)
		if err := file.store(first, int(size), recs); err != nil {
			return err
		}
		for _, p := range peers {
			if _, err := p.Write(frame); err != nil {
				return err
			}
		}
		if err := as.await(first); err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(ans[:], first)
		if _, err := c.Write(ans[:]); err != nil {
			return err
		}
	}
}

// pipelineCluster is the floor's three processes.
type pipelineCluster struct {
	procs  []*proc
	leader string // the leader's client address
	file   string // the leader's file
}

// startPipeline starts the floor's servers under dir.
func startPipeline(_ context.Context, e *clusterEnv, dir string) (*pipelineCluster, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	c := &pipelineCluster{leader: "127.0.0.1:" + strconv.Itoa(ports[0]), file: filepath.Join(dir, "leader.data")}
	var followers []string
	for i, name := range []string{"follower1", "follower2"} {
		addr := "127.0.0.1:" + strconv.Itoa(ports[i+1])
		followers = append(followers, addr)
		p, err := e.procs.start("floor "+name, e.self, []string{pipelineServerCommand, "-listen", addr, "-file", filepath.Join(dir, name+".data")},
			e.serverEnv(os.Environ()), filepath.Join(dir, name+".log"))
		if err != nil {
			return c, err
		}
		c.procs = append(c.procs, p)
	}
	p, err := e.procs.start("floor leader", e.self, []string{pipelineServerCommand, "-listen", c.leader, "-file", c.file, "-followers", strings.Join(followers, ",")},
		e.serverEnv(os.Environ()), filepath.Join(dir, "leader.log"))
	if err != nil {
		return c, err
	}
	c.procs = append([]*proc{p}, c.procs...)
	return c, nil
}

func (c *pipelineCluster) servers() []*proc { return c.procs }

func (c *pipelineCluster) leaderProfiler(context.Context) (profiler, error) {
	return nil, errors.New("the floor has no profiler")
}

func (c *pipelineCluster) dial(_ context.Context, clients, _ int) ([]loadClient, error) {
	if clients != 1 {
		return nil, fmt.Errorf("the floor serves one client, not %d", clients)
	}
	conn, err := dialRetry(c.leader, 60*time.Second) // the leader listens once its followers have zero-filled their files
	if err != nil {
		return nil, err
	}
	return []loadClient{&pipelineClient{c: conn}}, nil
}

// pipelineClient sends one request at a time holding its whole window.
type pipelineClient struct{ c net.Conn }

func (pc *pipelineClient) close() error { return pc.c.Close() }

func (pc *pipelineClient) run(ctx context.Context, stop <-chan struct{}, phase *atomic.Int32, window int, recs *records) *tally {
	t := &tally{}
	size := len(recs.template)
	st := recs.appenderStamps()
	buf := make([]byte, pipelineHeader+window*size)
	binary.LittleEndian.PutUint32(buf[0:], uint32(window))
	binary.LittleEndian.PutUint32(buf[4:], uint32(size))
	stamps := make([]uint64, window)
	var ans [8]byte
	stopOnce := sync.OnceFunc(func() { pc.c.SetDeadline(time.Now()) })
	go func() {
		select {
		case <-ctx.Done():
			stopOnce()
		case <-stop:
		}
	}()
	for !closed(stop) && ctx.Err() == nil {
		for i := range window {
			stamps[i] = st.fill(recs, buf[pipelineHeader+i*size:pipelineHeader+(i+1)*size])
		}
		t0 := time.Now()
		if _, err := pc.c.Write(buf); err != nil {
			t.fail(err)
			break
		}
		if _, err := io.ReadFull(pc.c, ans[:]); err != nil {
			t.fail(err)
			break
		}
		lat := time.Since(t0)
		first := binary.LittleEndian.Uint64(ans[:])
		for i, s := range stamps {
			t.add(phase, ack{first + uint64(i), s}, lat)
		}
	}
	return t
}

// verify reads back, from the leader's file, the acknowledged records its
// ring still holds (those of the last pipelineRing bytes).
func (c *pipelineCluster) verify(_ context.Context, acks []ack, recs *records) (readBack, error) {
	var rb readBack
	f, err := os.Open(c.file)
	if err != nil {
		return rb, err
	}
	defer f.Close()
	size := uint64(len(recs.template))
	var last uint64
	for _, a := range acks {
		last = max(last, a.pos)
	}
	keep := pipelineRing / size
	data := make([]byte, size)
	for _, a := range acks {
		if a.pos+keep <= last {
			continue
		}
		if _, err := f.ReadAt(data, int64((a.pos-1)*size%pipelineRing)); err != nil {
			return rb, err
		}
		rb.scanned++
		if err := recs.check(data, a.stamp); err != nil {
			return rb, fmt.Errorf("acknowledged record %d: %w", a.pos, err)
		}
		rb.acked++
	}
	return rb, nil
}
