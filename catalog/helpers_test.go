package catalog

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// applier applies commands to an FSM at consecutive indexes.
type applier struct {
	t     testing.TB
	f     *FSM
	index uint64
}

func newApplier(t testing.TB) *applier { return &applier{t: t, f: New()} }

// try applies c and returns its result.
func (a *applier) try(c Command) Result {
	a.index++
	return a.f.ApplyCommand(a.index, c)
}

// ok applies c and fails the test if it is refused.
func (a *applier) ok(c Command) Result {
	a.t.Helper()
	r := a.try(c)
	if r.Err != nil {
		a.t.Fatalf("%v %+v: %v", c.Kind(), c, r.Err)
	}
	return r
}

// testClusterID is the cluster id of tests that need one: bytes 0x01 to
// 0x10.
var testClusterID = ClusterID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

// otherClusterID is another cluster's id.
var otherClusterID = ClusterID{0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00}

// nodes returns n nodes n1..nN with addresses.
func nodes(n int) []Node {
	out := make([]Node, n)
	for i := range out {
		id := fmt.Sprintf("n%d", i+1)
		out[i] = Node{ID: id, RaftAddr: "127.0.0.1:1" + id[1:], ClientAddr: "127.0.0.1:2" + id[1:]}
	}
	return out
}

// started returns an applier whose catalog has started with nodes n1..nN,
// the default log on the first min(3, N).
func started(t testing.TB, n int) *applier {
	a := newApplier(t)
	ns := nodes(n)
	var members []string
	for i := 0; i < min(3, n); i++ {
		members = append(members, ns[i].ID)
	}
	a.ok(&Start{Nodes: ns, Members: members, Settings: Settings{Replicas: len(members)}})
	return a
}

// withoutIndex returns the snapshot bytes of s as of index 0, to compare
// catalogs whatever their applied index.
func withoutIndex(s *State) string {
	c := *s
	c.index = 0
	return string(AppendSnapshot(nil, &c))
}

// withClusterID returns a copy of s with cluster id id.
func withClusterID(s *State, id ClusterID) *State {
	c := *s
	c.clusterID = id
	return &c
}

// checkInvariants fails the test if s breaks an invariant that a restore
// checks, or a log has other than its replica count of members.
func checkInvariants(t testing.TB, s *State) {
	t.Helper()
	if _, err := decodeSnapshot(AppendSnapshot(nil, s)); err != nil {
		t.Fatalf("catalog breaks an invariant: %v", err)
	}
	for _, l := range s.logs {
		if l.ID != DefaultID && len(l.Members) != l.Settings.Replicas {
			t.Fatalf("log %q has %d members for %d replicas", l.Name, len(l.Members), l.Settings.Replicas)
		}
	}
}

// rlog returns a raft command entry.
func rlog(index uint64, data []byte) *raft.Log {
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
}

// resultString formats a result with its records, not their addresses.
func resultString(r Result) string {
	s := fmt.Sprintf("%v gone=%v err=%v", r.Kind, r.Gone, r.Err)
	if r.Log != nil {
		s += fmt.Sprintf(" log=%+v", *r.Log)
	}
	if r.Node != nil {
		s += fmt.Sprintf(" node=%+v", *r.Node)
	}
	return s
}
