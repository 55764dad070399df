package node

import (
	"testing"

	"github.com/hashicorp/raft"
)

// TestSurvivorRank checks the survivors' turns after a leader's death:
// from the end of the configuration, whatever the ids, nonvoters and the
// dead leader left out, so that the first to call is the one whose
// hashicorp/raft candidate asks the others for their votes before it
// writes its own.
func TestSurvivorRank(t *testing.T) {
	conf := func(servers ...string) raft.Configuration {
		var c raft.Configuration
		for _, s := range servers {
			suffrage := raft.Voter
			if s[0] == '-' {
				suffrage, s = raft.Nonvoter, s[1:]
			}
			c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(s), Address: raft.ServerAddress(s + ":1"), Suffrage: suffrage})
		}
		return c
	}
	for _, c := range []struct {
		conf   raft.Configuration
		leader raft.ServerID
		self   string
		rank   int
		voters int
		ok     bool
	}{
		{conf("n1", "n2", "n3"), "n1", "n3", 0, 3, true},
		{conf("n1", "n2", "n3"), "n1", "n2", 1, 3, true},
		{conf("n1", "n2", "n3"), "n3", "n2", 0, 3, true},
		{conf("n1", "n2", "n3"), "n3", "n1", 1, 3, true},
		{conf("n3", "n1", "n2"), "n2", "n1", 0, 3, true}, // the configuration's order, not the ids'
		{conf("n3", "n1", "n2"), "n2", "n3", 1, 3, true},
		{conf("a", "b", "-x", "c", "d", "e"), "c", "e", 0, 5, true},
		{conf("a", "b", "-x", "c", "d", "e"), "c", "a", 3, 5, true},
		{conf("a", "b", "-x", "c", "d", "e"), "c", "x", 0, 0, false}, // a nonvoter has no turn
		{conf("a", "b", "c"), "a", "z", 0, 0, false},                 // nor does a node outside
	} {
		rank, voters, ok := survivorRank(c.conf, c.self, c.leader)
		if ok != c.ok || ok && (rank != c.rank || voters != c.voters) {
			t.Errorf("survivorRank(%v, %s, leader %s) = %d, %d, %v; want %d, %d, %v",
				c.conf.Servers, c.self, c.leader, rank, voters, ok, c.rank, c.voters, c.ok)
		}
	}
}
