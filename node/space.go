package node

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/raftlog/raftlog/transport"
)

// spaceCheckEvery is how long a free-space reading is reused.
const spaceCheckEvery = 250 * time.Millisecond

// spaceGuard refuses appends while the data dir's file system has less
// free space than the reserve. The reserve leaves room for raft's own
// entries (elections, membership, trims), so a node with a full disk keeps
// a leader, keeps serving reads and loses nothing; appends resume by
// themselves once space is freed. Without the guard a full disk would
// surface as a failed StoreLogs, which makes raft's leader step down.
type spaceGuard struct {
	dir     string
	reserve int64
	free    func() (int64, error) // statfs by default; fault injection replaces it

	mu      sync.Mutex
	checked time.Time
	avail   int64
	err     error
}

func statfsFree(dir string) func() (int64, error) {
	return func() (int64, error) {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return 0, err
		}
		return int64(st.Bavail) * int64(st.Bsize), nil
	}
}

// check returns a transport error when appends must be refused.
func (g *spaceGuard) check(id string) error {
	if g.reserve <= 0 {
		return nil
	}
	g.mu.Lock()
	if time.Since(g.checked) >= spaceCheckEvery {
		g.avail, g.err = g.free()
		g.checked = time.Now()
	}
	avail, err := g.avail, g.err
	g.mu.Unlock()
	if err != nil {
		return nil // cannot tell; the store reports a real ENOSPC itself
	}
	if avail < g.reserve {
		return &transport.Error{Code: transport.CodeUnavailable, Message: fmt.Sprintf(
			"node %s: data dir %s has %d MiB free, below its reserve of %d MiB; appends are refused until space is freed (reads are served)",
			id, g.dir, avail>>20, g.reserve>>20)}
	}
	return nil
}

// invalidate makes the next check read the free space again.
func (g *spaceGuard) invalidate() {
	g.mu.Lock()
	g.checked = time.Time{}
	g.mu.Unlock()
}
