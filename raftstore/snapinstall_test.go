package raftstore_test

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestSnapshotInstallOverLongerLog is hashicorp/raft#697 as an embedder
// meets it: a follower whose log runs past the snapshot the leader sends
// it. The store is passed to raft as it is, the way a service used
// raft-boltdb, with raft's default handling of snapshot installs.
//
// The follower (b) gets the leader's (a) entries but the leader never
// hears back, as when a connection breaks after a request went out, so
// the leader keeps b's next index where it was. The third node (c) is cut
// off for a moment, so that a's last entries stay uncommitted, and a takes
// a snapshot and compacts past b's next index. When the links heal, a
// sends b its snapshot, below b's last entry. Raft v1.8.0 then empties a
// store that reports IsMonotonic() == true but keeps b's last index; once
// c leads and sends b entries after that index, b stores them after a hole
// and panics "log not found" applying the first missing entry. raftstore
// must keep b's entries after the snapshot, so that b catches up.
func TestSnapshotInstallOverLongerLog(t *testing.T) {
	c := newClusterWith(t, 3, clusterOptions{
		lossy: true,
		conf: func(conf *raft.Config) {
			conf.MaxAppendEntries = 1024        // a retry carries every entry b misses
			conf.SnapshotThreshold = 1 << 30    // snapshots only when the test asks
			conf.SnapshotInterval = time.Minute // (and raft checks rarely)
		},
	})
	c.bootstrap()
	c.apply(20)
	c.waitConverged()
	a := c.waitLeader(nil)
	var b, other *node
	for _, n := range c.nodes {
		switch {
		case n == a:
		case b == nil:
			b = n
		default:
			other = n
		}
	}

	// 1. b receives entries, a never learns it.
	next := lastIndex(t, b.store) + 1
	a.lossy.loseAnswers(b.addr, true)
	c.apply(150)
	c.waitFor("b to store the entries a thinks it lacks", func() bool {
		return lastIndex(t, b.store) == a.raft.LastIndex()
	})

	// 2. Entries a cannot commit without c; b stores them too.
	disconnect(a, other)
	committed := a.raft.LastIndex() // every entry so far is committed
	var pending []raft.ApplyFuture
	for i := range 10 {
		pending = append(pending, a.raft.Apply(fmt.Appendf(nil, "set pending=%d", i), clusterWait))
	}
	c.waitFor("b to store a's uncommitted entries", func() bool {
		return a.raft.LastIndex() >= committed+10 && lastIndex(t, b.store) == a.raft.LastIndex()
	})
	bLast := lastIndex(t, b.store)

	// 3. a snapshots what it committed and compacts past b's next index.
	c.snapshot(a)
	snap := snapshotIndex(a)
	if first := firstIndex(t, a.store); first >= next {
		t.Logf("a holds %d.., b's next index is %d", first, next)
	} else {
		t.Fatalf("a still holds %d (first %d): it would send b entries, not a snapshot", next-1, first)
	}
	if bLast <= snap {
		t.Fatalf("b's log ends at %d, not past a's snapshot %d: the test did not test", bLast, snap)
	}

	// 4. Heal: a sends b its snapshot, below b's last entry.
	a.lossy.loseAnswers(b.addr, false)
	connect(a, other)
	for _, f := range pending {
		if err := f.Error(); err != nil {
			t.Fatalf("an entry a proposed while c was cut off: %v", err)
		}
	}
	c.sent += len(pending)
	c.waitFor("b to install a's snapshot", func() bool { return snapshotIndex(b) >= snap })
	if last := lastIndex(t, b.store); last < bLast {
		t.Fatalf("b holds entries up to %d after the snapshot at %d, it held up to %d: entries past the snapshot were deleted", last, snap, bLast)
	}

	// 5. c leads and appends after b's last entry.
	for attempt := 1; ; attempt++ {
		err := a.raft.LeadershipTransferToServer(other.id, other.addr).Error()
		if err == nil || errors.Is(err, raft.ErrNotLeader) {
			break
		}
		if attempt == 3 {
			t.Fatalf("leadership transfer %s -> %s: %v", a.id, other.id, err)
		}
		t.Logf("leadership transfer %s -> %s: %v; trying again", a.id, other.id, err)
	}
	c.apply(50)
	c.waitConverged()
	for _, n := range c.nodes {
		if err := n.raft.Shutdown().Error(); err != nil {
			t.Fatalf("%s: shutdown: %v", n.id, err)
		}
	}
	c.checkLogsEqual()
	c.checkNoStoreErrors()
	t.Logf("b held %d..%d over a snapshot at %d: %s", next, bLast, snap, c.describe())
}

// snapshotIndex returns the index of n's newest snapshot.
func snapshotIndex(n *node) uint64 {
	i, _ := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
	return i
}

// disconnect cuts the links between x and y both ways.
func disconnect(x, y *node) {
	x.trans.Disconnect(y.addr)
	y.trans.Disconnect(x.addr)
}

// connect restores the links between x and y.
func connect(x, y *node) {
	x.trans.Connect(y.addr, y.trans)
	y.trans.Connect(x.addr, x.trans)
}

// errAnswerLost is what a lossyTransport returns for a lost answer.
var errAnswerLost = errors.New("test: the answer to AppendEntries was lost")

// lossyTransport is a node's transport that can lose the answers to the
// AppendEntries requests with entries it sends to chosen peers: the peer
// receives and stores the entries, the sender gets an error, as when a
// connection breaks after a request went out. It never pipelines, so that
// every request goes through AppendEntries. Raft's goroutines call it; the
// test sets what it loses.
type lossyTransport struct {
	*raft.InmemTransport

	mu   sync.Mutex
	lose map[raft.ServerAddress]bool // mu
}

func (l *lossyTransport) loseAnswers(peer raft.ServerAddress, lose bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lose == nil {
		l.lose = map[raft.ServerAddress]bool{}
	}
	l.lose[peer] = lose
}

func (l *lossyTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := l.InmemTransport.AppendEntries(id, target, args, resp)
	l.mu.Lock()
	lost := l.lose[target] && len(args.Entries) > 0
	l.mu.Unlock()
	if err == nil && lost {
		return errAnswerLost
	}
	return err
}

func (l *lossyTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}
