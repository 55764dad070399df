package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/transport"
)

// reelectHooks hold up a node's leadership watcher and filter the
// AppendEntries it sends (testHooks).
type reelectHooks struct {
	hold    atomic.Bool   // leaderChange blocks while set
	held    chan bool     // the value leaderChange holds, when it starts holding
	release chan struct{} // closed to let leaderChange go on
	once    sync.Once
	// drop decides which AppendEntries requests to a peer are lost; nil
	// loses none.
	drop atomic.Pointer[func(peer raft.ServerID, req *raft.AppendEntriesRequest) bool]
}

func newReelectHooks() *reelectHooks {
	return &reelectHooks{held: make(chan bool, 1), release: make(chan struct{})}
}

func (h *reelectHooks) leaderChange(leader bool) {
	if !h.hold.Load() {
		return
	}
	select {
	case h.held <- leader:
	default:
	}
	<-h.release
}

func (h *reelectHooks) let() { h.once.Do(func() { close(h.release) }) }

func (h *reelectHooks) setDrop(f func(peer raft.ServerID, req *raft.AppendEntriesRequest) bool) {
	if f == nil {
		h.drop.Store(nil)
		return
	}
	h.drop.Store(&f)
}

func (h *reelectHooks) testHooks() *testHooks {
	return &testHooks{
		leaderChange: h.leaderChange,
		transport:    func(tr raft.Transport) raft.Transport { return &lossyTransport{Transport: tr, h: h} },
	}
}

// lossyTransport loses the AppendEntries requests its hooks say to, and
// never pipelines, so that every request passes through AppendEntries.
type lossyTransport struct {
	raft.Transport
	h *reelectHooks
}

var errLost = errors.New("request lost (test)")

func (t *lossyTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if f := t.h.drop.Load(); f != nil && (*f)(id, args) {
		return errLost
	}
	return t.Transport.AppendEntries(id, target, args, resp)
}

func (t *lossyTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (t *lossyTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

func (t *lossyTransport) Close() error { return t.Transport.(raft.WithClose).Close() }

// A leader that loses leadership and wins it back before its leadership
// watcher sees the change must not serve a linearizable read from its old
// stint: in its new term its commit index can lag behind a record another
// leader committed and acknowledged meanwhile, until an entry of the new
// term commits.
//
// The schedule: L leads and its watcher is held up. L hands leadership to
// M. M commits record B with L's acknowledgement, and L never hears that B
// committed (M's later requests to L are lost; heartbeats, which carry no
// commit index, pass). M hands leadership back to L, whose requests with
// entries are lost, so its new term's first entry does not commit but its
// heartbeats confirm its leadership. A read of B on L must then return B or
// fail, not report nothing at B's index.
func TestReadAfterQuickReelectionIsNotStale(t *testing.T) {
	hooks := map[string]*reelectHooks{}
	c := newTestCluster(t, 3, func(cfg *Config) {
		h := newReelectHooks()
		hooks[cfg.ID] = h
		cfg.hooks = h.testHooks()
	})
	for _, h := range hooks {
		t.Cleanup(h.let) // before the cluster closes: a held watcher blocks Close
	}
	l := c.waitLeader()
	appendN(t, dial(t, l), "a", 5)
	var m, other *Node
	for _, n := range c.nodes {
		switch {
		case n == l:
		case m == nil:
			m = n
		default:
			other = n
		}
	}
	hl, hm := hooks[l.ID()], hooks[m.ID()]

	// L hands leadership to M; its watcher holds the news.
	hl.hold.Store(true)
	if err := l.raft.LeadershipTransferToServer(raft.ServerID(m.ID()), raft.ServerAddress(m.RaftAddr())).Error(); err != nil {
		t.Fatalf("transfer to %s: %v", m.ID(), err)
	}
	select {
	case v := <-hl.held:
		if v {
			t.Fatal("the held watcher saw L gain leadership, not lose it")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("L's watcher did not hear that L lost leadership")
	}
	waitFor(t, "M leads", m.IsLeader)
	lastBefore := m.raft.LastIndex()
	waitCaughtUp(t, l, lastBefore)
	waitCaughtUp(t, other, lastBefore)

	// M commits B with L's acknowledgement; L never learns B committed.
	hm.setDrop(func(peer raft.ServerID, req *raft.AppendEntriesRequest) bool {
		switch string(peer) {
		case l.ID():
			return req.LeaderCommitIndex > lastBefore
		case other.ID():
			return len(req.Entries) > 0
		}
		return false
	})
	resp, err := call[transport.AppendResponse](t, dial(t, m), transport.OpAppend, &transport.AppendRequest{Records: [][]byte{[]byte("B")}})
	if err != nil {
		t.Fatal(err)
	}
	idxB := resp.Indexes[0]
	if l.raft.LastIndex() < idxB || l.raft.CommitIndex() >= idxB {
		t.Fatalf("L holds up to %d and knows %d committed; the test needs it to hold B (%d) but not know it committed",
			l.raft.LastIndex(), l.raft.CommitIndex(), idxB)
	}

	// M hands leadership back; L's new term's first entry cannot commit.
	hl.setDrop(func(_ raft.ServerID, req *raft.AppendEntriesRequest) bool { return len(req.Entries) > 0 })
	if err := m.raft.LeadershipTransferToServer(raft.ServerID(l.ID()), raft.ServerAddress(l.RaftAddr())).Error(); err != nil {
		t.Fatalf("transfer back to %s: %v", l.ID(), err)
	}
	waitFor(t, "L leads again", func() bool { return l.raft.State() == raft.Leader })
	hm.setDrop(nil)
	if ci := l.raft.CommitIndex(); ci >= idxB {
		t.Fatalf("L's commit index %d reached B (%d): the test did not test", ci, idxB)
	}

	// The read, in the window.
	lc := dial(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	var rr transport.ReadResponse
	err = lc.Call(ctx, transport.OpRead, &transport.ReadRequest{From: idxB}, &rr)
	cancel()
	if err == nil && (len(rr.Records) == 0 || rr.Records[0].Index != idxB || string(rr.Records[0].Data) != "B") {
		t.Fatalf("stale read: B was acknowledged at index %d, and a linearizable read of L from there returned %d records (next %d)",
			idxB, len(rr.Records), rr.Next)
	}
	t.Logf("the read in the window: %d records, error %v", len(rr.Records), err)

	// Once the watcher catches up and the new term's entries commit, the
	// read returns B.
	hl.let()
	hl.setDrop(nil)
	waitFor(t, "L is ready in its new term", l.IsLeader)
	got, err := call[transport.ReadResponse](t, dial(t, l), transport.OpRead, &transport.ReadRequest{From: idxB})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Records) == 0 || got.Records[0].Index != idxB || string(got.Records[0].Data) != "B" {
		t.Fatalf("after the re-election settled, a read from %d returned %v", idxB, fmt.Sprint(got.Records))
	}
}
