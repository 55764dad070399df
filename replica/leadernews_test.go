package replica

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/raftstore"
	"github.com/raftlog/raftlog/transport"
)

// trio is three replicas of one log over in-memory transports.
type trio struct {
	reps   []*Replica
	trans  []*raft.InmemTransport
	addrs  []raft.ServerAddress
	config Config // the timeouts they run with
}

// startTrio starts three replicas with heartbeat and election timeouts of
// timeout and waits until one leads.
func startTrio(t *testing.T, timeout time.Duration) *trio {
	t.Helper()
	tr := &trio{config: Config{HeartbeatTimeout: timeout, ElectionTimeout: timeout, LeaderLeaseTimeout: timeout / 2}}
	var conf raft.Configuration
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		dir := t.TempDir()
		db, err := raftstore.OpenDB(filepath.Join(dir, "store"), &raftstore.Options{Monotonic: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		cfg := tr.config
		cfg.NodeID, cfg.ClientAddr, cfg.DB, cfg.SnapshotDir = id, "127.0.0.1:1", db, filepath.Join(dir, "snapshots")
		cfg.RetentionCheck, cfg.Logger = time.Second, discardLogger()
		r, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(id))
		tr.reps, tr.trans, tr.addrs = append(tr.reps, r), append(tr.trans, trans), append(tr.addrs, addr)
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(id), Address: addr})
	}
	for i := range tr.trans {
		for j := range tr.trans {
			if i != j {
				tr.trans[i].Connect(tr.addrs[j], tr.trans[j])
			}
		}
	}
	for i, r := range tr.reps {
		if err := r.Start(tr.trans[i]); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Shutdown() })
	}
	if err := tr.reps[0].Bootstrap(conf); err != nil {
		t.Fatal(err)
	}
	if tr.leader(t) == nil {
		t.Fatal("no replica leads")
	}
	return tr
}

// leader waits up to 10 s for a replica that leads and is ready.
func (tr *trio) leader(t *testing.T) *Replica {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range tr.reps {
			if r.IsLeader() {
				return r
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// cut stops every message between replicas a and b.
func (tr *trio) cut(a, b int) {
	tr.trans[a].Disconnect(tr.addrs[b])
	tr.trans[b].Disconnect(tr.addrs[a])
}

// TestWaitForLeaderWakesAtTheNews: a request that reaches a follower
// which no longer hears from its leader waits for a leader (Leading); it
// is answered as soon as the follower hears from a new one, not at the
// wait's next poll. The follower is cut off from its leader, which then
// hands its leadership to the third replica; the poll is made an hour
// long, so only the news can end the wait before its limit (two
// heartbeat timeouts and an election timeout).
func TestWaitForLeaderWakesAtTheNews(t *testing.T) {
	defer func(d time.Duration) { awaitPoll = d }(awaitPoll)
	awaitPoll = time.Hour
	const timeout = time.Second
	tr := startTrio(t, timeout)
	old := tr.leader(t)
	var others []int
	for i, r := range tr.reps {
		if r != old {
			others = append(others, i)
		}
	}
	f, g := others[0], others[1]
	follower, next := tr.reps[f], tr.reps[g]
	tr.cut(f, slices.Index(tr.reps, old))
	deadline := time.Now().Add(10 * time.Second)
	for follower.liveLeader() {
		if time.Now().After(deadline) {
			t.Fatal("the follower cut off from its leader still hears from it")
		}
		time.Sleep(5 * time.Millisecond)
	}

	type result struct {
		s   *Stint
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		s, err := follower.Leading(context.Background())
		done <- result{s, err, time.Now()}
	}()
	if err := old.raft.LeadershipTransferToServer(raft.ServerID(next.cfg.NodeID), tr.addrs[g]).Error(); err != nil {
		t.Fatalf("leadership transfer to %s: %v", next.cfg.NodeID, err)
	}
	limit := 2*timeout + timeout
	select {
	case res := <-done:
		var te *transport.Error
		if !errors.As(res.err, &te) || te.Code != transport.CodeNotLeader || te.LeaderID != next.cfg.NodeID {
			t.Fatalf("the waiting request got %v, %v; want NotLeader naming the new leader %s", res.s, res.err, next.cfg.NodeID)
		}
		waited := res.at.Sub(start)
		if waited >= limit {
			t.Fatalf("the waiting request was answered after %v, at the wait's limit: the news of the new leader did not wake it", waited)
		}
		t.Logf("answered %v after the request, naming %s", waited.Round(time.Millisecond), te.LeaderID)
	case <-time.After(limit + 5*time.Second):
		t.Fatal("the waiting request was not answered")
	}
}
