package catalog

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// raftNode is one member of an in-memory catalog group.
type raftNode struct {
	id    raft.ServerID
	trans *raft.InmemTransport
	fsm   *FSM
	r     *raft.Raft
}

func newRaftNode(t *testing.T, id string) *raftNode {
	t.Helper()
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(id)
	// Generous timeouts: the machine may be loaded, and a leader change
	// only costs a retry.
	cfg.HeartbeatTimeout = 500 * time.Millisecond
	cfg.ElectionTimeout = 500 * time.Millisecond
	cfg.LeaderLeaseTimeout = 250 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.TrailingLogs = 0
	cfg.SnapshotThreshold = 1 << 30 // snapshots only when the test asks
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	_, trans := raft.NewInmemTransport(raft.ServerAddress(id))
	n := &raftNode{id: cfg.LocalID, trans: trans, fsm: New()}
	store := raft.NewInmemStore()
	r, err := raft.NewRaft(cfg, n.fsm, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	n.r = r
	t.Cleanup(func() { _ = r.Shutdown().Error() })
	return n
}

// waitFor waits, up to a generous deadline, until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// waitApplied waits until f has applied index.
func waitApplied(t *testing.T, f *FSM, index uint64) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		s, changed := f.Watch()
		if s.Index() >= index {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("applied index %d, waiting for %d", s.Index(), index)
		}
	}
}

// TestRaftGroup runs the catalog in a raft group: commands applied through
// the leader give every member the same catalog, and a member that joins
// after the log was compacted gets it by snapshot (Restore).
func TestRaftGroup(t *testing.T) {
	ns := []*raftNode{newRaftNode(t, "n1"), newRaftNode(t, "n2"), newRaftNode(t, "n3")}
	for _, a := range ns {
		for _, b := range ns {
			if a != b {
				a.trans.Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
	boot := raft.Configuration{Servers: []raft.Server{
		{ID: "n1", Address: "n1", Suffrage: raft.Voter},
		{ID: "n2", Address: "n2", Suffrage: raft.Voter},
	}}
	for _, n := range ns[:2] {
		if err := n.r.BootstrapCluster(boot).Error(); err != nil {
			t.Fatal(err)
		}
	}
	var leader *raftNode
	findLeader := func() {
		t.Helper()
		waitFor(t, "a leader", func() bool {
			for _, n := range ns {
				if n.r.State() == raft.Leader {
					leader = n
					return true
				}
			}
			return false
		})
	}
	findLeader()
	// propose applies c through the leader, again through the next one if
	// leadership moves meanwhile (a command applied twice is refused or
	// changes nothing the second time, or the members still agree, which
	// is what this test checks).
	propose := func(c Command) Result {
		t.Helper()
		for attempt := 0; ; attempt++ {
			f := leader.r.Apply(Encode(c), 5*time.Second)
			err := f.Error()
			if err == nil {
				return f.Response().(Result)
			}
			if attempt == 10 || !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) {
				t.Fatal(err)
			}
			findLeader()
		}
	}
	if r := propose(&Start{Nodes: nodes(3), Members: []string{"n1", "n2", "n3"}, Settings: Settings{Replicas: 3}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := propose(&DeleteLog{ID: DefaultID}); !errors.Is(r.Err, ErrReserved) {
		t.Fatalf("delete default through raft: %v", r.Err)
	}
	cmds := randomCommands(rand.New(rand.NewPCG(8, 8)), 150)
	for _, c := range cmds[:100] {
		propose(c)
	}
	// Every member compacts its log, so n3 can only catch up by snapshot.
	for _, n := range ns[:2] {
		if err := n.r.Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := leader.r.AddVoter("n3", "n3", 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds[100:] {
		propose(c)
	}
	last := leader.r.AppliedIndex()
	for _, n := range ns {
		waitApplied(t, n.fsm, last)
	}
	want := string(AppendSnapshot(nil, leader.fsm.State()))
	for _, n := range ns {
		if got := string(AppendSnapshot(nil, n.fsm.State())); got != want {
			t.Fatalf("%s holds another catalog than the leader", n.id)
		}
	}
	if ns[2].fsm.State().Index() != leader.fsm.State().Index() {
		t.Fatal("n3 not at the leader's index")
	}
	// n3 joined after the log was compacted: it has restored a snapshot.
	if st := ns[2].r.Stats(); st["last_snapshot_index"] == "0" {
		t.Fatalf("n3 took no snapshot: %v", fmt.Sprint(st["last_snapshot_index"]))
	}
}
