package node

import (
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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
	tr := raft.NewNetworkTransport(layer, 1, 5*time.Second, io.Discard)
	defer tr.Close()
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
