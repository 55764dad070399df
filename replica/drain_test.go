package replica

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/raftstore"
)

// startSingle starts a replica of one voter over an in-memory transport,
// its Config changed by each of opts, and waits until it leads.
func startSingle(t *testing.T, opts ...func(*Config)) *Replica {
	t.Helper()
	dir := t.TempDir()
	db, err := raftstore.OpenDB(filepath.Join(dir, "store"), &raftstore.Options{Monotonic: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg := Config{
		NodeID: "n1", ClientAddr: "127.0.0.1:1", DB: db, SnapshotDir: filepath.Join(dir, "snapshots"),
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond,
		RetentionCheck: time.Second, Logger: discardLogger(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr, trans := raft.NewInmemTransport("n1")
	if err := r.Start(trans); err != nil {
		t.Fatal(err)
	}
	if err := r.Bootstrap(raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: addr}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !r.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("the replica did not lead within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

// TestShutdownAnswersEveryCommand: commands handed to raft while the
// replica shuts down all get an answer. raft (BatchApplyCh) never answers
// the commands still in its queue when it stops, and one handed over
// after its shutdown began lands there as often as not: their callers (an
// append's request, the leader's first entry) waited for ever, and held
// the node's stop (seen as a node test hanging in Close).
func TestShutdownAnswersEveryCommand(t *testing.T) {
	r := startSingle(t)
	const appliers = 8
	var (
		wg      sync.WaitGroup
		started = make(chan struct{}, appliers)
	)
	for range appliers {
		wg.Go(func() {
			for i := 0; ; i++ {
				if i == 10 {
					started <- struct{}{}
				}
				if err := r.Apply(EncodeMemberCmd("n1", "127.0.0.1:1"), EnqueueTimeout).Error(); err != nil {
					if !errors.Is(err, raft.ErrRaftShutdown) && !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrNotLeader) {
						t.Errorf("apply during shutdown: %v", err)
					}
					return
				}
			}
		})
	}
	for range appliers {
		<-started
	}
	if err := r.Shutdown(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("commands handed to raft during its shutdown never answered: their callers still wait 20s after it")
	}
}
