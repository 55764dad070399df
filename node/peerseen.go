package node

import (
	"time"

	"github.com/hashicorp/raft"
)

// A leader hands a log's leadership to the log's preferred leader only
// when that node answers and its log is nearly complete (balanceLeaders).
// hashicorp/raft refuses appends while a leadership transfer runs, and a
// transfer to a node whose process is gone runs until raft gives up, an
// election timeout later: a log whose preferred leader was down stopped
// taking appends for 0.7 s of every 3.7 s (each failed transfer waits
// transferRetry), and a failover that a node's death caused was followed
// by such a stop. The gate sees every AppendEntries raft sends,
// heartbeats included, and keeps when each peer last answered and its
// last log index.

// peerSeen is what a peer last answered to an AppendEntries.
type peerSeen struct {
	at      time.Time
	lastLog uint64 // the peer's last log index, as it answered
}

// AppendEntries implements raft.Transport, keeping what the peer answered.
func (g *voteGate) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := g.netTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		g.seenMu.Lock()
		g.seen[id] = peerSeen{at: time.Now(), lastLog: resp.LastLog}
		g.seenMu.Unlock()
	}
	return err
}

// caughtUp reports whether peer id answered an AppendEntries within the
// last within, with a log at most lag entries behind last.
func (g *voteGate) caughtUp(id raft.ServerID, last uint64, within time.Duration, lag uint64) bool {
	g.seenMu.Lock()
	s, ok := g.seen[id]
	g.seenMu.Unlock()
	return ok && time.Since(s.at) < within && s.lastLog+lag >= last
}
