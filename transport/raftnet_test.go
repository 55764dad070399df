//lint:file-ignore SA1019 the tests set raft's deprecated Leader field, which raft v1.8.0 still sets and reads

package transport

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/internal/testwait"
)

// tcpLayer is a raft.StreamLayer over plain TCP on loopback.
type tcpLayer struct{ net.Listener }

func (l tcpLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newTestTransport starts a RaftTransport on a loopback port, closed at
// the end of the test.
func newTestTransport(t testing.TB, cfg *RaftTransportConfig) *RaftTransport {
	t.Helper()
	return newTestTransportOn(t, listenLoopback(t), cfg)
}

func newTestTransportOn(t testing.TB, ln net.Listener, cfg *RaftTransportConfig) *RaftTransport {
	t.Helper()
	c := RaftTransportConfig{Timeout: 5 * time.Second, Logger: testLogger(t)}
	if cfg != nil {
		c = *cfg
		if c.Logger == nil {
			c.Logger = testLogger(t)
		}
	}
	tr, err := NewRaftTransport(tcpLayer{ln}, &c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// serveRPCs answers every RPC tr receives with answer, until the test
// ends.
func serveRPCs(t testing.TB, tr *RaftTransport, answer func(raft.RPC) (any, error)) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case rpc := <-tr.Consumer():
				resp, err := answer(rpc)
				rpc.Respond(resp, err)
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(done); wg.Wait() })
}

var testHeader = raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte("127.0.0.1:1")}

func TestRaftTransportStartStop(t *testing.T) {
	tr := newTestTransport(t, nil)
	if got, want := string(tr.LocalAddr()), tr.mux.stream.Addr().String(); got != want {
		t.Fatalf("LocalAddr %s, want %s", got, want)
	}
	testwait.Within(t, "Close", 5*time.Second, func() {
		if err := tr.Close(); err != nil {
			t.Error(err)
		}
		if err := tr.Close(); err != nil {
			t.Errorf("a second Close: %v", err)
		}
	})
	var resp raft.RequestVoteResponse
	if err := tr.RequestVote("x", tr.LocalAddr(), &raft.RequestVoteRequest{}, &resp); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Fatalf("RequestVote after Close: %v", err)
	}
}

func TestNewRaftTransportRefusesBadConfig(t *testing.T) {
	for _, c := range []RaftTransportConfig{
		{Timeout: -1}, {MaxPool: -1}, {MaxInFlight: -1}, {MaxFrameSize: 1000}, {MaxFrameSize: 2 << 30},
	} {
		ln := listenLoopback(t)
		_, err := NewRaftTransport(tcpLayer{ln}, &c)
		ln.Close()
		if !errors.Is(err, ErrInvalidRaftConfig) {
			t.Errorf("%+v: %v, want ErrInvalidRaftConfig", c, err)
		}
	}
}

// TestRaftTransportAppendEntries: a request with every field set arrives
// as sent, and the response comes back as given.
func TestRaftTransportAppendEntries(t *testing.T) {
	server, client := newTestTransport(t, nil), newTestTransport(t, nil)
	args := sampleRaftRequests()[0].(*raft.AppendEntriesRequest)
	want := &raft.AppendEntriesResponse{RPCHeader: testHeader, Term: 7, LastLog: 103, Success: true, NoRetryBackoff: true}
	serveRPCs(t, server, func(rpc raft.RPC) (any, error) {
		sameRequest(t, rpc.Command, args)
		return want, nil
	})
	for range 3 { // the second and third reuse the pooled connection
		var resp raft.AppendEntriesResponse
		if err := client.AppendEntries("n1", server.LocalAddr(), args, &resp); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&resp, want) {
			t.Fatalf("response %+v, want %+v", resp, want)
		}
	}
	if n := len(client.mux.pool[server.LocalAddr()]); n != 1 {
		t.Fatalf("%d pooled connections after three calls in a row, want 1", n)
	}
}

// TestRaftTransportRPCs: RequestVote, RequestPreVote and TimeoutNow go
// through, and an error raft answers with reaches the caller.
func TestRaftTransportRPCs(t *testing.T) {
	server, client := newTestTransport(t, nil), newTestTransport(t, nil)
	serveRPCs(t, server, func(rpc raft.RPC) (any, error) {
		switch r := rpc.Command.(type) {
		case *raft.RequestVoteRequest:
			if r.Term == 13 {
				return nil, errors.New("no vote for you")
			}
			return &raft.RequestVoteResponse{RPCHeader: testHeader, Term: r.Term, Peers: []byte("p"), Granted: true}, nil
		case *raft.RequestPreVoteRequest:
			return &raft.RequestPreVoteResponse{RPCHeader: testHeader, Term: r.Term + 1, Granted: true}, nil
		case *raft.TimeoutNowRequest:
			return &raft.TimeoutNowResponse{RPCHeader: r.RPCHeader}, nil
		}
		return nil, fmt.Errorf("unexpected %T", rpc.Command)
	})
	addr := server.LocalAddr()
	var vote raft.RequestVoteResponse
	if err := client.RequestVote("s", addr, &raft.RequestVoteRequest{RPCHeader: testHeader, Term: 9, LastLogIndex: 4}, &vote); err != nil {
		t.Fatal(err)
	}
	if want := (raft.RequestVoteResponse{RPCHeader: testHeader, Term: 9, Peers: []byte("p"), Granted: true}); !reflect.DeepEqual(vote, want) {
		t.Fatalf("RequestVote: %+v, want %+v", vote, want)
	}
	var pre raft.RequestPreVoteResponse
	if err := client.RequestPreVote("s", addr, &raft.RequestPreVoteRequest{Term: 9}, &pre); err != nil || pre.Term != 10 || !pre.Granted {
		t.Fatalf("RequestPreVote: %+v, %v", pre, err)
	}
	var tn raft.TimeoutNowResponse
	if err := client.TimeoutNow("s", addr, &raft.TimeoutNowRequest{RPCHeader: testHeader}, &tn); err != nil || !reflect.DeepEqual(tn.RPCHeader, testHeader) {
		t.Fatalf("TimeoutNow: %+v, %v", tn, err)
	}
	if err := client.RequestVote("s", addr, &raft.RequestVoteRequest{Term: 13}, &vote); err == nil || err.Error() != "no vote for you" {
		t.Fatalf("an RPC raft answers with an error: %v", err)
	}
	// The connection survives an error answer.
	if err := client.RequestPreVote("s", addr, &raft.RequestPreVoteRequest{Term: 1}, &pre); err != nil {
		t.Fatal(err)
	}
}

func TestRaftTransportEncodeDecodePeer(t *testing.T) {
	tr := newTestTransport(t, nil)
	addr := raft.ServerAddress("10.0.0.1:7000")
	if got := tr.DecodePeer(tr.EncodePeer("id", addr)); got != addr {
		t.Fatalf("DecodePeer(EncodePeer(%s)) = %s", addr, got)
	}
}

// TestRaftTransportPipeline: many AppendEntries through a pipeline come
// back in order, each with its own response.
func TestRaftTransportPipeline(t *testing.T) {
	const inFlight, total = 8, 500
	server := newTestTransport(t, nil)
	client := newTestTransport(t, &RaftTransportConfig{Timeout: 5 * time.Second, MaxInFlight: inFlight})
	serveRPCs(t, server, func(rpc raft.RPC) (any, error) {
		r := rpc.Command.(*raft.AppendEntriesRequest)
		return &raft.AppendEntriesResponse{Term: r.Term, LastLog: r.Entries[len(r.Entries)-1].Index, Success: true}, nil
	})
	p, err := client.AppendEntriesPipeline("s", server.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	errc := make(chan error, 1)
	go func() {
		for i := range total {
			args := &raft.AppendEntriesRequest{RPCHeader: testHeader, Term: 3, PrevLogEntry: uint64(i),
				Entries: []*raft.Log{{Index: uint64(i + 1), Term: 3, Data: []byte(fmt.Sprint(i))}}}
			if _, err := p.AppendEntries(args, new(raft.AppendEntriesResponse)); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	testwait.Within(t, "consuming the pipeline", 30*time.Second, func() {
		for i := range total {
			f := <-p.Consumer()
			if err := f.Error(); err != nil {
				t.Errorf("future %d: %v", i, err)
				return
			}
			if got := f.Request().Entries[0].Index; got != uint64(i+1) {
				t.Errorf("future %d is for entry %d", i, got)
				return
			}
			if got := f.Response().LastLog; got != uint64(i+1) || !f.Response().Success {
				t.Errorf("future %d got response %+v", i, f.Response())
				return
			}
			if f.Start().IsZero() {
				t.Errorf("future %d has no start time", i)
			}
		}
	})
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestRaftTransportPipelineWindow: a pipeline sends MaxInFlight requests
// without an answer, and the next send waits for one.
func TestRaftTransportPipelineWindow(t *testing.T) {
	const inFlight = 4
	server := newTestTransport(t, nil)
	client := newTestTransport(t, &RaftTransportConfig{Timeout: 5 * time.Second, MaxInFlight: inFlight})
	p, err := client.AppendEntriesPipeline("s", server.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sent := make(chan int, inFlight+1)
	go func() {
		for i := range inFlight + 1 {
			if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1, PrevLogEntry: uint64(i)}, new(raft.AppendEntriesResponse)); err != nil {
				return
			}
			sent <- i
		}
	}()
	var held []raft.RPC
	testwait.Within(t, "the first requests", 10*time.Second, func() {
		for range inFlight {
			held = append(held, <-server.Consumer())
			<-sent
		}
	})
	// The window is full: the next send must wait. (Grace period for a
	// wrong send to show up.)
	select {
	case i := <-sent:
		t.Fatalf("send %d returned with %d requests unanswered", i, inFlight)
	case rpc := <-server.Consumer():
		t.Fatalf("the follower got request %d with %d unanswered", rpc.Command.(*raft.AppendEntriesRequest).PrevLogEntry, inFlight)
	case <-time.After(200 * time.Millisecond):
	}
	held[0].Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
	testwait.Within(t, "the send after an answer", 10*time.Second, func() {
		<-p.Consumer()
		if i := <-sent; i != inFlight {
			t.Errorf("send %d returned", i)
		}
		held = append(held, <-server.Consumer())
	})
	for _, rpc := range held[1:] {
		rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
	}
}

// TestRaftTransportPipelineFailureNoDeadlock drives a pipeline the way
// raft v1.8.0's replication does: a sender that sends whenever it can,
// and a consumer that stops for good at the first response with Success
// false. The follower then answers everything with Success false. The
// sender must get an error (not block), and Close must return. With
// hashicorp/raft's NetworkTransport at MaxRPCsInFlight 2 this hangs
// (grafana/pyroscope#5518).
func TestRaftTransportPipelineFailureNoDeadlock(t *testing.T) {
	for _, inFlight := range []int{2, 3, 8} {
		t.Run(fmt.Sprint(inFlight), func(t *testing.T) {
			server := newTestTransport(t, nil)
			client := newTestTransport(t, &RaftTransportConfig{Timeout: 5 * time.Second, MaxInFlight: inFlight})
			var n atomic.Int64
			serveRPCs(t, server, func(rpc raft.RPC) (any, error) {
				// The third request fails, as a follower whose store failed.
				return &raft.AppendEntriesResponse{Term: 1, Success: n.Add(1) < 3}, nil
			})
			p, err := client.AppendEntriesPipeline("s", server.LocalAddr())
			if err != nil {
				t.Fatal(err)
			}
			consumerDone := make(chan struct{})
			go func() { // raft's pipelineDecode
				defer close(consumerDone)
				for f := range p.Consumer() {
					if !f.Response().Success {
						return
					}
				}
			}()
			testwait.Within(t, "sending until the pipeline fails", 20*time.Second, func() {
				for i := 0; ; i++ { // raft's pipelineSend, triggered without pause
					_, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1, PrevLogEntry: uint64(i)}, new(raft.AppendEntriesResponse))
					if err != nil {
						return
					}
				}
			})
			testwait.Within(t, "the consumer", 10*time.Second, func() { <-consumerDone })
			testwait.Within(t, "Close", 10*time.Second, func() { p.Close() })
			if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, new(raft.AppendEntriesResponse)); err == nil {
				t.Fatal("a closed pipeline took a send")
			}
		})
	}
}

// TestRaftTransportPipelineHigherTerm: a response with a newer term
// fails the pipeline too (raft stops consuming there).
func TestRaftTransportPipelineHigherTerm(t *testing.T) {
	server := newTestTransport(t, nil)
	client := newTestTransport(t, &RaftTransportConfig{Timeout: 5 * time.Second, MaxInFlight: 2})
	serveRPCs(t, server, func(rpc raft.RPC) (any, error) {
		return &raft.AppendEntriesResponse{Term: 5, Success: true}, nil
	})
	p, err := client.AppendEntriesPipeline("s", server.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	testwait.Within(t, "the pipeline to fail", 10*time.Second, func() {
		if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, new(raft.AppendEntriesResponse)); err != nil {
			t.Error(err)
			return
		}
		if f := <-p.Consumer(); f.Response().Term != 5 {
			t.Errorf("response %+v", f.Response())
		}
		for {
			if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, new(raft.AppendEntriesResponse)); err != nil {
				return
			}
		}
	})
}

// TestRaftTransportPipelineNotSupported: MaxInFlight 1 turns pipelining
// off the way raft expects.
func TestRaftTransportPipelineNotSupported(t *testing.T) {
	tr := newTestTransport(t, &RaftTransportConfig{MaxInFlight: 1})
	if _, err := tr.AppendEntriesPipeline("s", tr.LocalAddr()); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("got %v", err)
	}
}

// TestRaftTransportInstallSnapshot: the snapshot data streams after the
// request, raft reads it from rpc.Reader, and the response comes back.
func TestRaftTransportInstallSnapshot(t *testing.T) {
	server, client := newTestTransport(t, nil), newTestTransport(t, nil)
	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	want := sha256.Sum256(data)
	args := sampleRaftRequests()[len(sampleRaftRequests())-1].(*raft.InstallSnapshotRequest)
	args.Size = int64(len(data))
	var served atomic.Int64
	serveRPCs(t, server, func(rpc raft.RPC) (any, error) {
		h := sha256.New()
		n, err := io.Copy(h, rpc.Reader)
		if err != nil || n != args.Size || !bytes.Equal(h.Sum(nil), want[:]) {
			return nil, fmt.Errorf("read %d bytes (%v), want %d, same hash: %v", n, err, args.Size, bytes.Equal(h.Sum(nil), want[:]))
		}
		if !reflect.DeepEqual(rpc.Command, args) {
			return nil, fmt.Errorf("request %+v, want %+v", rpc.Command, args)
		}
		served.Add(1)
		return &raft.InstallSnapshotResponse{RPCHeader: testHeader, Term: 9, Success: true}, nil
	})
	var resp raft.InstallSnapshotResponse
	if err := client.InstallSnapshot("s", server.LocalAddr(), args, &resp, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if !resp.Success || resp.Term != 9 {
		t.Fatalf("response %+v", resp)
	}
	// Data shorter than the size announced fails the call, not the
	// follower: it sees the connection close before the end.
	short := *args
	short.Size = int64(len(data)) + 1
	if err := client.InstallSnapshot("s", server.LocalAddr(), &short, &resp, bytes.NewReader(data)); err == nil || !strings.Contains(err.Error(), "ended after") {
		t.Fatalf("short snapshot data: %v", err)
	}
	// The follower still answers.
	if err := client.InstallSnapshot("s", server.LocalAddr(), args, &resp, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if n := served.Load(); n != 2 {
		t.Fatalf("the follower served %d snapshots, want 2", n)
	}
}

// TestRaftTransportHeartbeatFastPath: with a heartbeat handler set,
// heartbeats go to it, and everything else to Consumer.
func TestRaftTransportHeartbeatFastPath(t *testing.T) {
	server, client := newTestTransport(t, nil), newTestTransport(t, nil)
	var beats atomic.Int64
	server.SetHeartbeatHandler(func(rpc raft.RPC) {
		beats.Add(1)
		rpc.Respond(&raft.AppendEntriesResponse{Term: 4, Success: true}, nil)
	})
	serveRPCs(t, server, func(rpc raft.RPC) (any, error) {
		return &raft.AppendEntriesResponse{Term: 4, LastLog: 1, Success: true}, nil
	})
	hb := &raft.AppendEntriesRequest{RPCHeader: testHeader, Term: 4}
	var resp raft.AppendEntriesResponse
	if err := client.AppendEntries("s", server.LocalAddr(), hb, &resp); err != nil || resp.LastLog != 0 || beats.Load() != 1 {
		t.Fatalf("heartbeat: %+v %v, %d beats", resp, err, beats.Load())
	}
	if err := client.AppendEntries("s", server.LocalAddr(), &raft.AppendEntriesRequest{RPCHeader: testHeader, Term: 4, LeaderCommitIndex: 1}, &resp); err != nil || resp.LastLog != 1 || beats.Load() != 1 {
		t.Fatalf("not a heartbeat: %+v %v, %d beats", resp, err, beats.Load())
	}
	server.SetHeartbeatHandler(nil)
	if err := client.AppendEntries("s", server.LocalAddr(), hb, &resp); err != nil || resp.LastLog != 1 || beats.Load() != 1 {
		t.Fatalf("heartbeat without a handler: %+v %v, %d beats", resp, err, beats.Load())
	}
}

// TestRaftTransportHeartbeatNotBehindAppend: while the follower sits on a
// large AppendEntries, a heartbeat from another goroutine still gets
// through: every RPC in progress has its own connection.
func TestRaftTransportHeartbeatNotBehindAppend(t *testing.T) {
	server, client := newTestTransport(t, nil), newTestTransport(t, nil)
	release := make(chan struct{})
	serveRPCs(t, server, func(rpc raft.RPC) (any, error) {
		if r := rpc.Command.(*raft.AppendEntriesRequest); len(r.Entries) > 0 {
			<-release
		}
		return &raft.AppendEntriesResponse{Term: 1, Success: true}, nil
	})
	big := benchAppendRequest(256, 16<<10)
	appended := make(chan error, 1)
	go func() {
		appended <- client.AppendEntries("s", server.LocalAddr(), big, new(raft.AppendEntriesResponse))
	}()
	// The follower's consumer is busy with the big request, so the
	// heartbeat needs the fast path here, as raft's would.
	server.SetHeartbeatHandler(func(rpc raft.RPC) { rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil) })
	testwait.Within(t, "a heartbeat during a large AppendEntries", 10*time.Second, func() {
		for range 3 {
			if err := client.AppendEntries("s", server.LocalAddr(), &raft.AppendEntriesRequest{RPCHeader: testHeader, Term: 1}, new(raft.AppendEntriesResponse)); err != nil {
				t.Error(err)
			}
		}
	})
	close(release)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
}

// TestRaftTransportCloseWhilePending: Close of either side makes every
// call in progress return: plain RPCs, pipelined sends, a snapshot.
func TestRaftTransportCloseWhilePending(t *testing.T) {
	for _, side := range []string{"caller", "answerer"} {
		t.Run(side, func(t *testing.T) {
			server := newTestTransport(t, nil)
			client := newTestTransport(t, &RaftTransportConfig{Timeout: time.Minute, MaxInFlight: 2})
			// An RPC, pipelined sends, a snapshot: held, never answered.
			arrived := map[string]chan struct{}{"vote": make(chan struct{}), "append": make(chan struct{}), "snapshot": make(chan struct{})}
			go func() {
				seen := map[string]bool{}
				for rpc := range server.Consumer() {
					k := "vote"
					switch rpc.Command.(type) {
					case *raft.AppendEntriesRequest:
						k = "append"
					case *raft.InstallSnapshotRequest:
						k = "snapshot"
					}
					if !seen[k] {
						seen[k] = true
						close(arrived[k])
					}
				}
			}()
			p, err := client.AppendEntriesPipeline("s", server.LocalAddr())
			if err != nil {
				t.Fatal(err)
			}
			var calls sync.WaitGroup
			calls.Add(3)
			go func() {
				defer calls.Done()
				client.RequestVote("s", server.LocalAddr(), &raft.RequestVoteRequest{Term: 1}, new(raft.RequestVoteResponse))
			}()
			go func() {
				defer calls.Done()
				for {
					if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, new(raft.AppendEntriesResponse)); err != nil {
						return
					}
				}
			}()
			go func() {
				defer calls.Done()
				client.InstallSnapshot("s", server.LocalAddr(), &raft.InstallSnapshotRequest{Size: 1 << 20}, new(raft.InstallSnapshotResponse), io.LimitReader(zeroReader{}, 1<<20))
			}()
			testwait.Within(t, "the RPCs to arrive", 10*time.Second, func() {
				for _, c := range arrived {
					<-c
				}
			})
			closing := client
			if side == "answerer" {
				closing = server
			}
			testwait.Within(t, "Close", 10*time.Second, func() { closing.Close() })
			testwait.Within(t, "the calls to return", 10*time.Second, calls.Wait)
			testwait.Within(t, "closing the pipeline", 10*time.Second, func() { p.Close() })
		})
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// rawDial opens a connection to tr and sends the preamble.
func rawDial(t *testing.T, tr *RaftTransport) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", string(tr.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(appendRaftPreamble(nil)); err != nil {
		t.Fatal(err)
	}
	return c
}

// requestFrame encodes a request frame for group.
func requestFrame(t *testing.T, k raftKind, group uint64, args any) []byte {
	t.Helper()
	b := appendRaftHeader(nil, k, group)
	b, err := appendRequest(b, k, args)
	if err != nil {
		t.Fatal(err)
	}
	if err := finishRaftFrame(b, 0, 0, maxRaftFrameSize); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRaftTransportPeerDisconnectsMidFrame: a caller that sends half a
// request and goes away hands nothing to raft; a follower that answers
// half a response and goes away fails the call.
func TestRaftTransportPeerDisconnectsMidFrame(t *testing.T) {
	t.Run("caller", func(t *testing.T) {
		server := newTestTransport(t, nil)
		frame := requestFrame(t, raftAppendEntries, 0, benchAppendRequest(4, 100))
		c := rawDial(t, server)
		if _, err := c.Write(frame[:len(frame)/2]); err != nil {
			t.Fatal(err)
		}
		c.Close()
		// A whole request on another connection is served, and is the
		// only one raft sees.
		c2 := rawDial(t, server)
		if _, err := c2.Write(requestFrame(t, raftRequestVote, 0, &raft.RequestVoteRequest{Term: 77})); err != nil {
			t.Fatal(err)
		}
		testwait.Within(t, "the whole request", 10*time.Second, func() {
			rpc := <-server.Consumer()
			if r, ok := rpc.Command.(*raft.RequestVoteRequest); !ok || r.Term != 77 {
				t.Errorf("raft got %#v", rpc.Command)
			}
			rpc.Respond(&raft.RequestVoteResponse{}, nil)
		})
		testwait.Within(t, "Close", 10*time.Second, func() { server.Close() })
	})
	t.Run("follower", func(t *testing.T) {
		ln := listenLoopback(t)
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			buf := make([]byte, 4096)
			c.Read(buf) // the preamble and request
			resp := appendRaftHeader(nil, raftRequestVote|raftResponseBit, 0)
			resp = appendResponse(resp, raftRequestVote, &raft.RequestVoteResponse{Granted: true}, nil)
			finishRaftFrame(resp, 0, 0, maxRaftFrameSize)
			c.Write(resp[:len(resp)-2])
		}()
		client := newTestTransport(t, nil)
		testwait.Within(t, "the call", 10*time.Second, func() {
			err := client.RequestVote("s", raft.ServerAddress(ln.Addr().String()), &raft.RequestVoteRequest{Term: 1}, new(raft.RequestVoteResponse))
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("got %v, want io.ErrUnexpectedEOF", err)
			}
		})
	})
}

// TestRaftTransportRefusesOtherProtocols: a connection that does not open
// with this protocol's preamble is closed unserved; one of another
// version gets this side's preamble back, and a caller that gets a
// preamble back reports the version.
func TestRaftTransportRefusesOtherProtocols(t *testing.T) {
	server := newTestTransport(t, nil)
	for _, first := range [][]byte{
		{0, 0x85, 0xa4, 'T', 'e', 'r', 'm'}, // NetworkTransport: rpc type 0 and a msgpack map
		[]byte("GET / HTTP/1.1\r\n\r\n"),
	} {
		c, err := net.Dial("tcp", string(server.LocalAddr()))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(first)
		if n, err := c.Read(make([]byte, 16)); err != io.EOF {
			t.Errorf("%q: read %d bytes, %v; want the connection closed", first, n, err)
		}
		c.Close()
	}
	c, err := net.Dial("tcp", string(server.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	other := appendRaftPreamble(nil)
	other[len(other)-1] = RaftVersion + 1
	c.Write(other)
	back, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(back, appendRaftPreamble(nil)) {
		t.Fatalf("another version got %x back (%v), want this side's preamble", back, err)
	}

	// The caller's side: a peer that speaks version 9.
	ln := listenLoopback(t)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Read(make([]byte, 4096))
		p := appendRaftPreamble(nil)
		p[len(p)-1] = 9
		c.Write(p)
	}()
	client := newTestTransport(t, nil)
	err = client.TimeoutNow("s", raft.ServerAddress(ln.Addr().String()), &raft.TimeoutNowRequest{}, new(raft.TimeoutNowResponse))
	if !errors.Is(err, ErrRaftPeerVersion) || !strings.Contains(err.Error(), "version 9") {
		t.Fatalf("a peer of version 9: %v", err)
	}
}

// TestRaftTransportUnknownGroup: a request for a raft group this node
// does not have gets an error answer, and raft never sees it.
func TestRaftTransportUnknownGroup(t *testing.T) {
	server := newTestTransport(t, nil)
	c := rawDial(t, server)
	if _, err := c.Write(requestFrame(t, raftRequestVote, 5, &raft.RequestVoteRequest{Term: 1})); err != nil {
		t.Fatal(err)
	}
	f, err := readRaftFrame(bufio.NewReader(c), maxRaftFrameSize, nil)
	if err != nil || f.kind != raftRequestVote|raftResponseBit || f.group != 5 {
		t.Fatalf("got a %v for group %d, %v; want a RequestVote response for group 5", f.kind, f.group, err)
	}
	msg, err := decodeResponse(raftRequestVote, f.body, new(raft.RequestVoteResponse))
	if err != nil || !strings.Contains(msg, "no such raft group: group 5 is not on this node") {
		t.Fatalf("got %q, %v", msg, err)
	}
	select {
	case rpc := <-server.Consumer():
		t.Fatalf("raft got %#v", rpc.Command)
	default:
	}
}

// TestRaftTransportFrameLimits: an AppendEntries too large for a frame is
// sent with the leading entries that fit, and raft learns which from the
// request; an entry alone too large is an error; a frame above the
// answerer's limit closes the connection unserved.
func TestRaftTransportFrameLimits(t *testing.T) {
	const limit = 256 << 10
	server := newTestTransport(t, &RaftTransportConfig{Timeout: 5 * time.Second, MaxFrameSize: limit})
	client := newTestTransport(t, &RaftTransportConfig{Timeout: 5 * time.Second, MaxFrameSize: limit, MaxInFlight: 2})
	serveRPCs(t, server, func(rpc raft.RPC) (any, error) {
		r := rpc.Command.(*raft.AppendEntriesRequest)
		return &raft.AppendEntriesResponse{Term: r.Term, LastLog: r.Entries[len(r.Entries)-1].Index, Success: true}, nil
	})
	args := benchAppendRequest(100, 10<<10) // about 1 MiB
	var resp raft.AppendEntriesResponse
	if err := client.AppendEntries("s", server.LocalAddr(), args, &resp); err != nil {
		t.Fatal(err)
	}
	if n := len(args.Entries); n == 0 || n >= 100 || resp.LastLog != args.Entries[n-1].Index {
		t.Fatalf("sent %d entries, follower's last %d", n, resp.LastLog)
	}
	t.Logf("an AppendEntries of 100 entries of 10 KiB went out with %d in a frame of %d", len(args.Entries), limit)
	p, err := client.AppendEntriesPipeline("s", server.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	args = benchAppendRequest(100, 10<<10)
	if _, err := p.AppendEntries(args, new(raft.AppendEntriesResponse)); err != nil {
		t.Fatal(err)
	}
	if f := <-p.Consumer(); f.Error() != nil || f.Response().LastLog != args.Entries[len(args.Entries)-1].Index || len(args.Entries) >= 100 {
		t.Fatalf("pipelined: %v, %+v, %d entries", f.Error(), f.Response(), len(args.Entries))
	}
	huge := benchAppendRequest(1, limit)
	if err := client.AppendEntries("s", server.LocalAddr(), huge, &resp); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("an entry larger than a frame: %v", err)
	}
	// The answerer's side: a frame announcing more than its limit.
	c := rawDial(t, server)
	c.Write(frameBytes(limit+1, raftAppendEntries, 0, 0, nil))
	if n, err := c.Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("after an oversized frame: read %d, %v; want the connection closed", n, err)
	}
}

// TestRaftTransportStalePooledConn: after the follower restarts, the
// connections pooled to its old self are dead; the next RPC succeeds on
// a fresh one instead of failing.
func TestRaftTransportStalePooledConn(t *testing.T) {
	ln := listenLoopback(t)
	addr := ln.Addr().String()
	server := newTestTransportOn(t, ln, nil)
	answer := func(rpc raft.RPC) (any, error) { return &raft.RequestVoteResponse{Granted: true}, nil }
	serveRPCs(t, server, answer)
	client := newTestTransport(t, nil)
	var resp raft.RequestVoteResponse
	if err := client.RequestVote("s", raft.ServerAddress(addr), &raft.RequestVoteRequest{}, &resp); err != nil {
		t.Fatal(err)
	}
	server.Close()
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	serveRPCs(t, newTestTransportOn(t, ln2, nil), answer)
	if err := client.RequestVote("s", raft.ServerAddress(addr), &raft.RequestVoteRequest{}, &resp); err != nil || !resp.Granted {
		t.Fatalf("after the follower restarted: %+v, %v", resp, err)
	}
}

// TestRaftTransportLargeEntries sends AppendEntries whose entries' data
// is written from where raft has it (at least asideMin bytes, over TCP)
// next to entries copied into the frame, directly and pipelined, and
// checks that the follower decodes every entry as it was sent, and that
// a frame limit still counts the data written aside.
func TestRaftTransportLargeEntries(t *testing.T) {
	const limit = 256 << 10
	server := newTestTransport(t, &RaftTransportConfig{Timeout: 5 * time.Second, MaxFrameSize: limit})
	client := newTestTransport(t, &RaftTransportConfig{Timeout: 5 * time.Second, MaxFrameSize: limit, MaxInFlight: 2})
	got := make(chan *raft.AppendEntriesRequest, 1)
	serveRPCs(t, server, func(rpc raft.RPC) (any, error) {
		r := rpc.Command.(*raft.AppendEntriesRequest)
		got <- r
		return &raft.AppendEntriesResponse{Term: r.Term, LastLog: r.Entries[len(r.Entries)-1].Index, Success: true}, nil
	})
	at := time.Unix(1_700_000_000, 5)
	request := func() *raft.AppendEntriesRequest {
		r := &raft.AppendEntriesRequest{RPCHeader: testHeader, Term: 4, Leader: []byte("l"), PrevLogEntry: 9, PrevLogTerm: 4, LeaderCommitIndex: 8}
		for i, size := range []int{asideMin, 10, asideMin - 1, 0, 100 << 10, asideMin + 1, 3, 40 << 10} {
			e := &raft.Log{Index: 10 + uint64(i), Term: 4, Type: raft.LogCommand, AppendedAt: at}
			if size > 0 {
				e.Data = payloadOf(i, size)
			}
			if i%3 == 0 {
				e.Extensions = []byte("ext")
			}
			r.Entries = append(r.Entries, e)
		}
		return r
	}
	args := request()
	var resp raft.AppendEntriesResponse
	if err := client.AppendEntries("s", server.LocalAddr(), args, &resp); err != nil {
		t.Fatal(err)
	}
	sameRequest(t, <-got, args)
	for _, c := range client.mux.pool[server.LocalAddr()] {
		if c.aside == nil {
			t.Fatal("a TCP connection without the data-aside writer: the test checks nothing")
		}
	}
	// A frame limit cuts the entries where the data aside makes the frame
	// too long: the data of the first five entries is 110,601 bytes, of
	// the first six 114,698, past a limit of 112 KiB (114,688).
	small := newTestTransport(t, &RaftTransportConfig{Timeout: 5 * time.Second, MaxFrameSize: 112 << 10})
	args = request()
	if err := small.AppendEntries("s", server.LocalAddr(), args, &resp); err != nil {
		t.Fatal(err)
	}
	if len(args.Entries) != 5 {
		t.Fatalf("a frame limit of 112 KiB kept %d entries, want 5", len(args.Entries))
	}
	sameRequest(t, <-got, args)
	p, err := client.AppendEntriesPipeline("s", server.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 3 {
		args := request()
		if _, err := p.AppendEntries(args, new(raft.AppendEntriesResponse)); err != nil {
			t.Fatal(err)
		}
		sameRequest(t, <-got, args)
		if f := <-p.Consumer(); f.Error() != nil {
			t.Fatal(f.Error())
		}
	}
}

// payloadOf returns n bytes that differ from one i to the next.
func payloadOf(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*7 + j)
	}
	return b
}
