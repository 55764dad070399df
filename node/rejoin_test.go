package node

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/transport"
)

// A member that lost its data dir and rejoins under its old id refuses
// votes until it is a voter again by its own log: the leader removes the
// old server, adds the node as a nonvoter, and promotes it once it has
// caught up. Without this, its empty log could vote in a candidate that
// misses committed entries.
func TestWipedMemberDoesNotVoteUntilCaughtUp(t *testing.T) {
	c := faultCluster(t)
	leader := c.waitLeader()
	idx := appendN(t, dial(t, leader), "r", 10)
	victim := followerOf(c, leader)
	id, dir := victim.ID(), victim.cfg.DataDir
	c.stop(id)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	// Keep the leader's raft traffic from the node, so it joins but cannot
	// catch up; then ask it for a vote as a candidate with an empty log
	// would.
	post(t, leader, "/fault/partition?peers="+c.addrs[id][0])
	back := c.start(id, func(cfg *Config) { cfg.Join = []string{leader.ClientAddr()} })
	if back.IsVoter() {
		t.Fatal("a rejoined member votes before it has caught up")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The cluster runs with fault injection, whose stream layer starts
	// connections with a preamble: speak it.
	layer := newFaultLayer(&streamLayer{Listener: ln, dial: dialTCP}, ln.Addr().String())
	tr := newPeerTransport(t, back.cfg.RaftTransport, layer)
	var resp raft.RequestVoteResponse
	req := &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("candidate"), Addr: []byte(tr.LocalAddr())},
		Term:      back.raft.CurrentTerm() + 100, LastLogIndex: 0, LastLogTerm: 0,
	}
	if err := tr.RequestVote(raft.ServerID(id), raft.ServerAddress(back.RaftAddr()), req, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Granted {
		t.Fatal("a new member granted a vote before its promotion")
	}
	post(t, leader, "/fault/partition?peers=")
	c.waitVoter(back)
	if back.raft.LastIndex() < idx[len(idx)-1] {
		t.Fatalf("promoted at last index %d, before catching up to %d", back.raft.LastIndex(), idx[len(idx)-1])
	}
	if _, err := os.Stat(dir + "/" + joiningFile); !os.IsNotExist(err) {
		t.Fatalf("joining state kept after promotion: %v", err)
	}
	if v := leader.voters(); v != 3 {
		t.Fatalf("%d voters after the rejoin, want 3", v)
	}
	sameRecords(t, id+" after rejoin", readAll(t, back, true), readAll(t, leader, false))
}

// A new member that received a configuration naming its old self a voter
// does not campaign: with the leader cut off, it neither wins an election
// nor lets the other follower win with its vote.
func TestNewMemberDoesNotCampaign(t *testing.T) {
	c := faultCluster(t)
	leader := c.waitLeader()
	appendN(t, dial(t, leader), "r", 5)
	victim := followerOf(c, leader)
	id, dir := victim.ID(), victim.cfg.DataDir
	c.stop(id)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	// It learns which cluster it joins from a member's status but never
	// gets its join through, and the leader still replicates to its
	// address the log and the configuration that name its old self a
	// voter.
	ctx := make(chan struct{})
	var back *Node
	go func() {
		defer close(ctx)
		cfg := testConfig(t, c.dir, id)
		cfg.RaftAddr, cfg.ClientAddr, cfg.FaultInjection, cfg.AdminAddr = c.addrs[id][0], c.addrs[id][1], true, "127.0.0.1:0"
		cfg.Join = []string{"127.0.0.1:1"}
		back = startNoJoinWait(t, cfg)
	}()
	<-ctx
	defer back.Close()
	st := leader.Status()
	if err := back.learnJoinTarget(&st, leader.ClientAddr()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, id+" receives the configuration", func() bool {
		s, ok := back.selfSuffrage()
		return ok && s == raft.Voter
	})
	var others []string
	for _, n := range c.nodes {
		if n != leader {
			others = append(others, n.RaftAddr())
		}
	}
	others = append(others, back.RaftAddr())
	post(t, leader, "/fault/partition?peers="+strings.Join(others, ","))
	obs := make(chan raft.Observation, 64)
	back.raft.RegisterObserver(raft.NewObserver(obs, false, nil))
	window := time.NewTimer(6 * back.cfg.ElectionTimeout)
	defer window.Stop()
	for {
		select {
		case o := <-obs:
			if st, ok := o.Data.(raft.RaftState); ok && st == raft.Leader {
				t.Fatal("a new member won an election")
			}
			if lo, ok := o.Data.(raft.LeaderObservation); ok && lo.LeaderID != "" && string(lo.LeaderID) != leader.ID() {
				t.Fatalf("%s became leader with a new member's vote", lo.LeaderID)
			}
		case <-window.C:
			return
		}
	}
}

// startNoJoinWait starts a node with a join address but does not join
// (as Start would, forever, when no member answers).
func startNoJoinWait(t *testing.T, cfg Config) *Node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n, err := startNode(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return n
}

// Heartbeats go through the consumer channel, to raft's main goroutine,
// never to a fast-path handler on the transport's goroutine (see
// voteGate.SetHeartbeatHandler), whichever the raft transport.
func TestHeartbeatsReachTheMainLoop(t *testing.T) {
	for _, kind := range []RaftTransportKind{RaftTransportNative, RaftTransportHashicorp} {
		t.Run(string(kind), func(t *testing.T) { testHeartbeatsReachTheMainLoop(t, kind) })
	}
}

func testHeartbeatsReachTheMainLoop(t *testing.T, kind RaftTransportKind) {
	server, client := listenPeer(t, kind), listenPeer(t, kind)
	g := newVoteGate(server, true, "n1", nil)
	defer g.Close()
	fast := make(chan struct{}, 1)
	g.SetHeartbeatHandler(func(rpc raft.RPC) {
		fast <- struct{}{}
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	})
	done := make(chan error, 1)
	go func() {
		req := &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte(client.LocalAddr())},
			Term:      7,
		}
		done <- client.AppendEntries("n1", server.LocalAddr(), req, &raft.AppendEntriesResponse{})
	}()
	select {
	case rpc := <-g.Consumer():
		if hb, ok := rpc.Command.(*raft.AppendEntriesRequest); !ok || hb.Term != 7 || len(hb.Entries) != 0 {
			t.Fatalf("consumer got %#v, want the heartbeat", rpc.Command)
		}
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	case <-fast:
		t.Fatal("the heartbeat went to the fast-path handler")
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat never arrived")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// listenPeer returns a raft transport of the given kind listening on a
// port of 127.0.0.1; it is closed when the test ends.
func listenPeer(t *testing.T, kind RaftTransportKind) netTransport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return newPeerTransport(t, kind, &streamLayer{Listener: ln, dial: dialTCP})
}

// newPeerTransport returns a raft transport of the given kind over layer,
// to talk to nodes as a peer would; it is closed when the test ends.
func newPeerTransport(t *testing.T, kind RaftTransportKind, layer raft.StreamLayer) netTransport {
	t.Helper()
	var tr netTransport
	if kind == RaftTransportHashicorp {
		tr = raft.NewNetworkTransport(layer, 1, 5*time.Second, io.Discard)
	} else {
		var err error
		tr, err = transport.NewRaftTransport(layer, &transport.RaftTransportConfig{Timeout: 5 * time.Second, Logger: hclog.NewNullLogger()})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// Once the node's store has failed, its raft groups take no new term
// until they are shut down: hashicorp/raft panics when it cannot store
// one, and a node whose disk failed panicked so while it stopped, on a
// RequestVote of a newer term (cluster-test TestRandomized seed 76,
// disk-failure, with named logs: more groups, a longer stop). The gate
// answers votes itself, refuses AppendEntries and InstallSnapshot of a
// newer term and TimeoutNow, and sends no vote request; an AppendEntries
// of raft's own term still reaches raft.
func TestFailedStoreTakesNoNewTerm(t *testing.T) {
	server, client := listenPeer(t, RaftTransportNative), listenPeer(t, RaftTransportNative)
	g := newVoteGate(server, true, "n1", nil)
	defer g.Close()
	g.stopRaft()
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte(client.LocalAddr())}
	for _, tt := range []struct {
		what    string
		call    func() error
		reaches bool // the RPC reaches raft (the consumer)
	}{
		{"AppendEntries of a newer term", func() error {
			return client.AppendEntries("n1", server.LocalAddr(), &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 7}, &raft.AppendEntriesResponse{})
		}, false},
		{"RequestVote of a newer term", func() error {
			var resp raft.RequestVoteResponse
			if err := client.RequestVote("n1", server.LocalAddr(), &raft.RequestVoteRequest{RPCHeader: hdr, Term: 7}, &resp); err != nil {
				return err
			}
			if resp.Granted {
				t.Errorf("a vote granted after the store failed")
			}
			return nil
		}, false},
		{"TimeoutNow", func() error {
			return client.TimeoutNow("n1", server.LocalAddr(), &raft.TimeoutNowRequest{RPCHeader: hdr}, &raft.TimeoutNowResponse{})
		}, false},
		{"AppendEntries of raft's term", func() error {
			return client.AppendEntries("n1", server.LocalAddr(), &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 0}, &raft.AppendEntriesResponse{})
		}, true},
	} {
		done := make(chan error, 1)
		go func() { done <- tt.call() }()
		select {
		case rpc := <-g.Consumer():
			rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
			if !tt.reaches {
				t.Errorf("%s reached raft after the store failed", tt.what)
			}
			<-done
		case err := <-done:
			if tt.reaches {
				t.Errorf("%s answered by the gate (%v), not raft", tt.what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer", tt.what)
		}
	}
	if err := g.RequestPreVote("n2", raft.ServerAddress(client.LocalAddr()), &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: 7}, &raft.RequestPreVoteResponse{}); !errors.Is(err, errNotVoterYet) {
		t.Errorf("a pre-vote requested after the store failed: %v", err)
	}
}

// The gate keeps the last vote request raft refused in the term the
// candidate asked for, and wakes the leader-gone watch
// (refusedvote.go); a vote granted, or refused to a candidate of an older
// term, is not kept. The candidate gets raft's answer either way.
func TestGateKeepsRefusedVote(t *testing.T) {
	server, client := listenPeer(t, RaftTransportNative), listenPeer(t, RaftTransportNative)
	woken := make(chan struct{}, 10)
	g := newVoteGate(server, true, "n1", func() { woken <- struct{}{} })
	defer g.Close()
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte(client.LocalAddr())}
	for _, tt := range []struct {
		what    string
		answer  raft.RequestVoteResponse
		kept    bool
		reqTerm uint64
	}{
		{"granted", raft.RequestVoteResponse{Term: 7, Granted: true}, false, 7},
		{"refused to a candidate of an older term", raft.RequestVoteResponse{Term: 9, Granted: false}, false, 8},
		{"refused in the candidate's term", raft.RequestVoteResponse{Term: 10, Granted: false}, true, 10},
	} {
		g.refused.Store(nil)
		done := make(chan error, 1)
		var resp raft.RequestVoteResponse
		go func() {
			req := &raft.RequestVoteRequest{RPCHeader: hdr, Term: tt.reqTerm, LastLogIndex: 41, LastLogTerm: 3, LeadershipTransfer: true}
			done <- client.RequestVote("n1", server.LocalAddr(), req, &resp)
		}()
		select {
		case rpc := <-g.Consumer():
			rpc.Respond(&tt.answer, nil)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the vote request never reached raft", tt.what)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", tt.what, err)
		}
		if resp.Granted != tt.answer.Granted || resp.Term != tt.answer.Term {
			t.Errorf("%s: the candidate got %+v, want raft's answer %+v", tt.what, resp, tt.answer)
		}
		if !tt.kept {
			// The gate keeps a refusal before it hands the answer on.
			if v := g.refused.Load(); v != nil {
				t.Errorf("%s: kept %+v", tt.what, v)
			}
			continue
		}
		select {
		case <-woken:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the watch was not woken", tt.what)
		}
		v := g.refused.Load()
		if v == nil || v.term != 10 || v.lastIndex != 41 || v.lastTerm != 3 || v.candidate != string(client.LocalAddr()) {
			t.Errorf("%s: kept %+v, want term 10, last entry 41 of term 3 from %s", tt.what, v, client.LocalAddr())
		}
	}
}

// A candidate refused by one survivor cannot win in a group of 3 or 4
// voters once the leader is gone, and can in one of 5 or more.
func TestCannotWinWithout(t *testing.T) {
	for voters, want := range map[int]bool{3: true, 4: true, 5: false, 6: false, 7: false} {
		if got := cannotWinWithout(voters); got != want {
			t.Errorf("cannotWinWithout(%d) = %v, want %v", voters, got, want)
		}
	}
}
