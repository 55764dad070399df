package node

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog/vfs"
)

// Fault injection, for cluster tests only (Config.FaultInjection): the
// raft transport runs over faultLayer, which can cut this node off from
// chosen peers, and the store over faultFS, which can start failing every
// write and sync as a dying disk does. The admin server then serves
//
//	POST /fault/partition?peers=host:port,...  refuse raft traffic with these raft addresses; empty heals
//	POST /fault/disk                           fail every later write and sync with EIO
//	POST /fault/nospace?on=1|0                 the disk is full (new files and preallocation fail
//	                                           with ENOSPC, free space reads 0), or no longer
//	POST /fault/hold-moves?on=1|0              while this node plans (it leads the default log),
//	                                           it does not record a replica move or rebuild
//	                                           finished (catalog.FinishMove), or again does
//
// A partition is symmetric only if it is set on both sides; the tests set
// it on every node.
//
// A release binary cannot turn it on: Config.FaultInjection is refused
// (ErrNoFaultInjection) unless the binary was built with the build tag
// faultinject or is a test binary (FaultInjectionAvailable). The tag is
// opt-in, so that a binary built the normal way is safe; node's own tests
// run in test binaries and need no tag; cluster-test builds cmd/node with
// it. The code stays compiled in every build, unreachable in a release.

// ErrNoFaultInjection is the error of Config.FaultInjection in a binary
// that may not inject faults.
var ErrNoFaultInjection = errors.New("node: fault injection is for tests only, and this binary is built without it (build tag faultinject)")

// FaultInjectionAvailable reports whether Config.FaultInjection may be
// set: in a binary built with the build tag faultinject, and in test
// binaries (go test). A binary built the normal way (go build, go install)
// refuses it: Start returns ErrNoFaultInjection.
func FaultInjectionAvailable() bool { return faultInjectionBuilt || testing.Testing() }

// faultPreamble starts every raft connection faultLayer dials, followed by
// the dialer's raft address and a newline, so the accepting side knows
// whom it talks to.
const faultPreamble = "RLFAULT1 "

// faultLayer is a raft.StreamLayer over TCP that can refuse peers.
type faultLayer struct {
	ln   net.Listener
	dial func(address string, timeout time.Duration) (net.Conn, error)
	self string // this node's advertised raft address

	mu      sync.Mutex
	blocked map[string]bool
	conns   map[net.Conn]string // open connections by peer raft address
}

func newFaultLayer(s *streamLayer, self string) *faultLayer {
	return &faultLayer{ln: s.Listener, dial: s.dial, self: self, blocked: map[string]bool{}, conns: map[net.Conn]string{}}
}

// errPartitioned is the error of a dial to a blocked peer.
var errPartitioned = errors.New("node: partitioned from peer (fault injection)")

// Dial implements raft.StreamLayer.
func (f *faultLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	peer := string(address)
	if f.isBlocked(peer) {
		return nil, errPartitioned
	}
	c, err := f.dial(peer, timeout)
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c, faultPreamble+f.self+"\n"); err != nil {
		c.Close()
		return nil, err
	}
	return f.track(c, peer)
}

// Accept implements net.Listener.
func (f *faultLayer) Accept() (net.Conn, error) {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return nil, err
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		c.SetReadDeadline(time.Time{})
		peer, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), faultPreamble)
		if err != nil || !ok {
			c.Close()
			continue
		}
		tc, err := f.track(&bufferedConn{Conn: c, r: br}, peer)
		if err != nil {
			continue
		}
		return tc, nil
	}
}

func (f *faultLayer) track(c net.Conn, peer string) (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.blocked[peer] {
		c.Close()
		return nil, errPartitioned
	}
	tc := &trackedConn{Conn: c, f: f}
	f.conns[tc] = peer
	return tc, nil
}

func (f *faultLayer) isBlocked(peer string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blocked[peer]
}

// partition replaces the set of blocked peers and closes their
// connections.
func (f *faultLayer) partition(peers []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blocked = map[string]bool{}
	for _, p := range peers {
		f.blocked[p] = true
	}
	for c, peer := range f.conns {
		if f.blocked[peer] {
			c.(*trackedConn).Conn.Close()
			delete(f.conns, c)
		}
	}
}

// Close implements net.Listener.
func (f *faultLayer) Close() error { return f.ln.Close() }

// Addr implements net.Listener: the advertised address, as streamLayer's.
func (f *faultLayer) Addr() net.Addr { return tcpAddrString(f.self) }

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

type trackedConn struct {
	net.Conn
	f    *faultLayer
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.f.mu.Lock()
		delete(c.f.conns, c)
		c.f.mu.Unlock()
	})
	return c.Conn.Close()
}

// faultFS wraps the operating system's file system; once failed, every
// write and sync returns EIO.
type faultFS struct {
	vfs.FS
	failed  atomic.Bool
	noSpace atomic.Bool // new files and preallocation fail with ENOSPC; free space reads 0
	// stall, when set (by tests only), holds every sync until the channel
	// is closed; stalled counts the syncs it holds.
	stall   atomic.Pointer[chan struct{}]
	stalled atomic.Int32
	// dirsFail, when set (by tests only), fails every directory sync with
	// EIO and nothing else.
	dirsFail atomic.Bool
	// failIn, when set (by tests only), fails every write and sync of a
	// file in that directory with EIO, as a bad region of a disk does.
	failIn atomic.Pointer[string]
}

// wait holds a sync while the file system is stalled.
func (fs *faultFS) wait() {
	if ch := fs.stall.Load(); ch != nil {
		fs.stalled.Add(1)
		<-*ch
		fs.stalled.Add(-1)
	}
}

func (fs *faultFS) fail() { fs.failed.Store(true) }

func (fs *faultFS) err(op, name string) error {
	if fs.failed.Load() {
		return &os.PathError{Op: op, Path: name, Err: syscall.EIO}
	}
	if dir := fs.failIn.Load(); dir != nil && filepath.Dir(name) == *dir {
		return &os.PathError{Op: op, Path: name, Err: syscall.EIO}
	}
	return nil
}

func (fs *faultFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if flag&os.O_CREATE != 0 && fs.noSpace.Load() {
		if _, err := os.Stat(name); err != nil {
			return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOSPC}
		}
	}
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, fs: fs}, nil
}

func (fs *faultFS) SyncDir(dir string) error {
	if err := fs.err("syncdir", dir); err != nil {
		return err
	}
	if fs.dirsFail.Load() {
		return &os.PathError{Op: "syncdir", Path: dir, Err: syscall.EIO}
	}
	return fs.FS.SyncDir(dir)
}

type faultFile struct {
	vfs.File
	fs *faultFS
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.err("write", f.Name()); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Allocate(size int64) error {
	if f.fs.noSpace.Load() {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.Allocate(size)
}

func (f *faultFile) Sync() error {
	f.fs.wait()
	if err := f.fs.err("sync", f.Name()); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) Map(size int) (vfs.Mapping, error) {
	m, err := f.File.Map(size)
	if err != nil {
		return nil, err
	}
	return &faultMapping{Mapping: m, f: f}, nil
}

type faultMapping struct {
	vfs.Mapping
	f *faultFile
}

func (m *faultMapping) Sync(off, n int) error {
	m.f.fs.wait()
	if err := m.f.fs.err("msync", m.f.Name()); err != nil {
		return err
	}
	return m.Mapping.Sync(off, n)
}

// faultHandlers adds the fault-injection endpoints to mux.
func (n *Node) faultHandlers(mux *certMux) {
	mux.HandleFunc("POST /fault/partition", func(w http.ResponseWriter, r *http.Request) {
		var peers []string
		for _, p := range strings.Split(r.URL.Query().Get("peers"), ",") {
			if p = strings.TrimSpace(p); p != "" {
				peers = append(peers, p)
			}
		}
		n.faults.layer.partition(peers)
		n.cfg.Logger.Warn("fault injection: partitioned", "from", peers)
		fmt.Fprintf(w, "blocked %d peers\n", len(peers))
	})
	mux.HandleFunc("POST /fault/nospace", func(w http.ResponseWriter, r *http.Request) {
		on := r.URL.Query().Get("on") != "0"
		n.faults.fs.noSpace.Store(on)
		n.space.invalidate()
		n.cfg.Logger.Warn("fault injection: disk full", "on", on)
		fmt.Fprintf(w, "no space: %v\n", on)
	})
	mux.HandleFunc("POST /fault/hold-moves", func(w http.ResponseWriter, r *http.Request) {
		on := r.URL.Query().Get("on") != "0"
		n.faults.holdMoves.Store(on)
		n.cfg.Logger.Warn("fault injection: the planner holds moves before their finish", "on", on)
		fmt.Fprintf(w, "hold moves: %v\n", on)
	})
	mux.HandleFunc("POST /fault/disk", func(w http.ResponseWriter, r *http.Request) {
		n.faults.fs.fail()
		n.cfg.Logger.Warn("fault injection: the disk now fails every write and sync")
		fmt.Fprintln(w, "disk failed")
	})
}
