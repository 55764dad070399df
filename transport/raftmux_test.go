//lint:file-ignore SA1019 the tests set raft's deprecated Leader field, which raft v1.8.0 still sets and reads

package transport

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/internal/testwait"
)

// newTestMux starts a RaftMux on a loopback port, closed at the end of
// the test.
func newTestMux(t testing.TB, cfg *RaftTransportConfig) *RaftMux {
	t.Helper()
	c := RaftTransportConfig{Timeout: 5 * time.Second, Logger: testLogger(t)}
	if cfg != nil {
		c = *cfg
		if c.Logger == nil {
			c.Logger = testLogger(t)
		}
	}
	m, err := NewRaftMux(tcpLayer{listenLoopback(t)}, &c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func muxGroup(t testing.TB, m *RaftMux, id uint64) *RaftTransport {
	t.Helper()
	tr, err := m.Group(id)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestRaftMuxGroupsIsolated: each group's requests reach that group's
// Consumer or heartbeat handler alone, over connections the groups share,
// and each answer comes back to the group that asked.
func TestRaftMuxGroupsIsolated(t *testing.T) {
	server, client := newTestMux(t, nil), newTestMux(t, nil)
	ids := []uint64{0, 1, 7, math.MaxUint64}
	var beats [4]atomic.Int64
	for i, id := range ids {
		s := muxGroup(t, server, id)
		s.SetHeartbeatHandler(func(rpc raft.RPC) {
			beats[i].Add(1)
			rpc.Respond(&raft.AppendEntriesResponse{Term: id, Success: true}, nil)
		})
		serveRPCs(t, s, func(rpc raft.RPC) (any, error) {
			r := rpc.Command.(*raft.RequestVoteRequest)
			if r.Term != id {
				return nil, fmt.Errorf("group %d got a vote of term %d", id, r.Term)
			}
			return &raft.RequestVoteResponse{Term: id, Granted: true}, nil
		})
	}
	if got := server.Groups(); !reflect.DeepEqual(got, ids) {
		t.Fatalf("Groups: %v, want %v", got, ids)
	}
	var wg sync.WaitGroup
	for i, id := range ids {
		c := muxGroup(t, client, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				var resp raft.RequestVoteResponse
				if err := c.RequestVote("s", server.LocalAddr(), &raft.RequestVoteRequest{RPCHeader: testHeader, Term: id}, &resp); err != nil || resp.Term != id || !resp.Granted {
					t.Errorf("group %d: %+v, %v", id, resp, err)
					return
				}
				var hb raft.AppendEntriesResponse
				if err := c.AppendEntries("s", server.LocalAddr(), &raft.AppendEntriesRequest{RPCHeader: testHeader, Term: 3}, &hb); err != nil || hb.Term != id {
					t.Errorf("group %d heartbeat: %+v, %v", id, hb, err)
					return
				}
			}
			if n := beats[i].Load(); n != 50 {
				t.Errorf("group %d: %d heartbeats, want 50", id, n)
			}
		}()
	}
	testwait.Within(t, "the calls", 30*time.Second, wg.Wait)
	if s := client.Stats(); s.Sent != 400 || s.Dialled > 4*uint64(len(ids)) {
		t.Errorf("client stats %+v: want 400 sent over pooled connections", s)
	}
	if s := server.Stats(); s.Served != 400 || s.UnknownGroup != 0 {
		t.Errorf("server stats %+v: want 400 served, none for unknown groups", s)
	}
}

// TestRaftMuxGroupRegistry: a group is registered once at a time; its
// Close frees the id, and a closed mux takes no groups.
func TestRaftMuxGroupRegistry(t *testing.T) {
	m := newTestMux(t, nil)
	g := muxGroup(t, m, 3)
	if _, err := m.Group(3); !errors.Is(err, ErrRaftGroupExists) {
		t.Fatalf("a second group 3: %v", err)
	}
	if g.Group() != 3 || g.Mux() != m || g.LocalAddr() != m.LocalAddr() {
		t.Fatalf("group %d of %p at %s", g.Group(), g.Mux(), g.LocalAddr())
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if got := m.Groups(); len(got) != 0 {
		t.Fatalf("groups after Close: %v", got)
	}
	var resp raft.RequestVoteResponse
	if err := g.RequestVote("s", m.LocalAddr(), &raft.RequestVoteRequest{}, &resp); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Fatalf("a call of a closed group: %v", err)
	}
	g2 := muxGroup(t, m, 3)
	g.Close() // a second Close of the old transport leaves the new one
	if got := m.Groups(); !reflect.DeepEqual(got, []uint64{3}) {
		t.Fatalf("groups: %v", got)
	}
	m.Close()
	if _, err := m.Group(4); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Fatalf("a group of a closed mux: %v", err)
	}
	if err := g2.RequestVote("s", m.LocalAddr(), &raft.RequestVoteRequest{}, &resp); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Fatalf("a call after the mux closed: %v", err)
	}
}

// TestRaftMuxRemovedGroup: removing a group on the answering side answers
// the requests its raft holds with an error, and later ones too; removing
// it on the calling side fails its calls and pipelines in progress. The
// other group, on the same muxes, is served throughout.
func TestRaftMuxRemovedGroup(t *testing.T) {
	server := newTestMux(t, nil)
	client := newTestMux(t, &RaftTransportConfig{Timeout: time.Minute, MaxInFlight: 2})
	held, other := muxGroup(t, server, 1), muxGroup(t, server, 2)
	serveRPCs(t, other, func(rpc raft.RPC) (any, error) { return &raft.RequestVoteResponse{Granted: true}, nil })
	// Group 1's raft takes requests and never answers them.
	arrived := make(chan struct{}, 16)
	go func() {
		for range held.Consumer() {
			arrived <- struct{}{}
		}
	}()
	c1, c2 := muxGroup(t, client, 1), muxGroup(t, client, 2)
	otherWorks := func() {
		t.Helper()
		var resp raft.RequestVoteResponse
		if err := c2.RequestVote("s", server.LocalAddr(), &raft.RequestVoteRequest{}, &resp); err != nil || !resp.Granted {
			t.Fatalf("group 2: %+v, %v", resp, err)
		}
	}
	call := func() <-chan error {
		errc := make(chan error, 1)
		go func() {
			errc <- c1.RequestVote("s", server.LocalAddr(), &raft.RequestVoteRequest{}, new(raft.RequestVoteResponse))
		}()
		return errc
	}

	// The answering side.
	pending := call()
	testwait.Within(t, "the request to arrive", 10*time.Second, func() { <-arrived })
	otherWorks()
	held.Close()
	testwait.Within(t, "the held call to return", 10*time.Second, func() {
		if err := <-pending; err == nil || !strings.Contains(err.Error(), "group 1 was removed from this node") {
			t.Errorf("a call held by a removed group: %v", err)
		}
	})
	testwait.Within(t, "a later call", 10*time.Second, func() {
		if err := <-call(); err == nil || !strings.Contains(err.Error(), "group 1 is not on this node") {
			t.Errorf("a call to a removed group: %v", err)
		}
	})
	otherWorks()

	// The calling side: a call and a pipeline of group 1 in progress.
	held = muxGroup(t, server, 1)
	go func() {
		for range held.Consumer() {
			arrived <- struct{}{}
		}
	}()
	pending = call()
	p, err := c1.AppendEntriesPipeline("s", server.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 1}, new(raft.AppendEntriesResponse)); err != nil {
		t.Fatal(err)
	}
	testwait.Within(t, "the requests to arrive", 10*time.Second, func() { <-arrived; <-arrived })
	c1.Close()
	testwait.Within(t, "the calls of the closed group to return", 10*time.Second, func() {
		if err := <-pending; err == nil {
			t.Error("a call of a closed group succeeded")
		}
		if f := <-p.Consumer(); f.Error() == nil {
			t.Error("a pipelined request of a closed group succeeded")
		}
		p.Close()
	})
	otherWorks()
}

// TestRaftMuxBlockedGroup: a group whose raft does not read its Consumer
// holds up its own calls and nothing else: the other groups' calls to the
// same node, sent at the same time, are all answered.
func TestRaftMuxBlockedGroup(t *testing.T) {
	server, client := newTestMux(t, &RaftTransportConfig{Timeout: time.Minute}), newTestMux(t, &RaftTransportConfig{Timeout: time.Minute, MaxInFlight: 4})
	muxGroup(t, server, 1) // never read
	const others = 4
	for g := range uint64(others) {
		serveRPCs(t, muxGroup(t, server, g+2), func(rpc raft.RPC) (any, error) {
			r := rpc.Command.(*raft.AppendEntriesRequest)
			return &raft.AppendEntriesResponse{Term: r.Term, LastLog: g + 2, Success: true}, nil
		})
	}
	blocked := muxGroup(t, client, 1)
	var stuck sync.WaitGroup
	for range 8 {
		stuck.Add(1)
		go func() {
			defer stuck.Done()
			blocked.AppendEntries("s", server.LocalAddr(), benchAppendRequest(8, 1024), new(raft.AppendEntriesResponse))
		}()
	}
	bp, err := blocked.AppendEntriesPipeline("s", server.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := bp.AppendEntries(benchAppendRequest(8, 1024), new(raft.AppendEntriesResponse)); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Within(t, "the other groups' calls", 30*time.Second, func() {
		var wg sync.WaitGroup
		for g := range uint64(others) {
			c := muxGroup(t, client, g+2)
			wg.Add(2)
			go func() {
				defer wg.Done()
				for range 100 {
					var resp raft.AppendEntriesResponse
					if err := c.AppendEntries("s", server.LocalAddr(), benchAppendRequest(8, 1024), &resp); err != nil || resp.LastLog != g+2 {
						t.Errorf("group %d: %+v, %v", g+2, resp, err)
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				p, err := c.AppendEntriesPipeline("s", server.LocalAddr())
				if err != nil {
					t.Error(err)
					return
				}
				defer p.Close()
				for range 100 {
					if _, err := p.AppendEntries(benchAppendRequest(8, 1024), new(raft.AppendEntriesResponse)); err != nil {
						t.Error(err)
						return
					}
					if f := <-p.Consumer(); f.Error() != nil || f.Response().LastLog != g+2 {
						t.Errorf("group %d pipelined: %+v, %v", g+2, f.Response(), f.Error())
						return
					}
				}
			}()
		}
		wg.Wait()
	})
	select {
	case f := <-bp.Consumer():
		t.Fatalf("the blocked group's pipelined request was answered: %+v, %v", f.Response(), f.Error())
	default:
	}
	blocked.Close()
	testwait.Within(t, "the blocked group's calls to fail once it is closed", 10*time.Second, stuck.Wait)
	bp.Close()
}

// TestRaftMuxRequestNotTaken: a request whose group's raft does not take
// it within the answering side's Timeout gets an error, and the
// connection serves the next request.
func TestRaftMuxRequestNotTaken(t *testing.T) {
	server := newTestMux(t, &RaftTransportConfig{Timeout: 100 * time.Millisecond})
	stuck := muxGroup(t, server, 1) // never read, at first
	client := muxGroup(t, newTestMux(t, &RaftTransportConfig{Timeout: time.Minute, MaxPool: 1}), 1)
	testwait.Within(t, "the call", 30*time.Second, func() {
		err := client.RequestVote("s", server.LocalAddr(), &raft.RequestVoteRequest{}, new(raft.RequestVoteResponse))
		if err == nil || !strings.Contains(err.Error(), "raft group 1 did not take the request within 100ms") {
			t.Errorf("a call to a stuck group: %v", err)
		}
	})
	if n := server.Stats().NotTaken; n != 1 {
		t.Fatalf("NotTaken %d, want 1", n)
	}
	serveRPCs(t, stuck, func(rpc raft.RPC) (any, error) { return &raft.RequestVoteResponse{Granted: true}, nil })
	var resp raft.RequestVoteResponse
	if err := client.RequestVote("s", server.LocalAddr(), &raft.RequestVoteRequest{}, &resp); err != nil || !resp.Granted {
		t.Fatalf("once raft reads: %+v, %v", resp, err)
	}
	if s := client.Mux().Stats(); s.Dialled != 1 {
		t.Fatalf("%d connections dialled, want the first one reused", s.Dialled)
	}
}
