package catalog

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// Log ids of the base catalog.
const (
	idA    = 1 // "a": 3 replicas on n1 n2 n3, started
	idSolo = 2 // "solo": 1 replica on n4, not started
	idGone = 3 // "gone": 3 replicas on n2 n3 n4, deleting
	idMv   = 4 // "mv": 3 replicas on n1 n2 n3, moving n3 to n5
)

// base returns a catalog with nodes n1..n5 active and n6 leaving, the
// default log on n1 n2 n3, and the logs above.
func base(t testing.TB) *applier {
	a := started(t, 6)
	a.ok(&MarkLeaving{ID: "n6"})
	a.ok(&CreateLog{Name: "a", Settings: Settings{Replicas: 3}, Members: []string{"n1", "n2", "n3"}})
	a.ok(&LogStarted{ID: idA})
	a.ok(&CreateLog{Name: "solo", Settings: Settings{Replicas: 1}, Members: []string{"n4"}})
	a.ok(&CreateLog{Name: "gone", Settings: Settings{Replicas: 3}, Members: []string{"n2", "n3", "n4"}})
	a.ok(&LogStarted{ID: idGone})
	a.ok(&DeleteLog{ID: idGone})
	a.ok(&CreateLog{Name: "mv", Settings: Settings{Replicas: 3}, Members: []string{"n1", "n2", "n3"}})
	a.ok(&LogStarted{ID: idMv})
	a.ok(&BeginMove{ID: idMv, From: "n3", To: "n5"})
	return a
}

func logOf(t *testing.T, s *State, id uint64) Log {
	t.Helper()
	l, ok := s.LogByID(id)
	if !ok {
		t.Fatalf("no log id %d", id)
	}
	return l
}

func nodeOf(t *testing.T, s *State, id string) Node {
	t.Helper()
	n, ok := s.Node(id)
	if !ok {
		t.Fatalf("no node %q", id)
	}
	return n
}

func TestApply(t *testing.T) {
	long := strings.Repeat("x", MaxNameLen+1)
	tests := []struct {
		name  string
		fresh bool // apply to a new catalog rather than the base one
		pre   []Command
		cmd   Command
		err   error  // nil: accepted
		says  string // a refusal's message holds this
		// check looks at the catalog before (s0) and after (s) an accepted
		// command, and at its result.
		check func(t *testing.T, s0, s *State, r Result)
	}{
		// Start.
		{name: "start", fresh: true, cmd: &Start{Nodes: nodes(3), Members: []string{"n2", "n1", "n3"}, Settings: Settings{Replicas: 3, RetentionBytes: 10}},
			check: func(t *testing.T, _, s *State, r Result) {
				d := logOf(t, s, DefaultID)
				if !s.Started() || !slices.Equal(d.Members, []string{"n2", "n1", "n3"}) || d.Settings.RetentionBytes != 10 || d.Initial != nil {
					t.Fatalf("default log %+v, started %v", d, s.Started())
				}
				if len(s.ActiveNodes()) != 3 || r.Log == nil || r.Log.Name != DefaultName {
					t.Fatalf("nodes %v, result %+v", s.Nodes(), r)
				}
			}},
		{name: "start twice", cmd: &Start{Nodes: nodes(3), Members: []string{"n1"}, Settings: Settings{Replicas: 1}}, err: ErrExists},
		{name: "start without members", fresh: true, cmd: &Start{Nodes: nodes(3), Settings: Settings{Replicas: 0}}},
		{name: "start without members, replicas", fresh: true, cmd: &Start{Nodes: nodes(3), Settings: Settings{Replicas: 3}}, err: ErrInvalidSettings},
		{name: "start member not a node", fresh: true, cmd: &Start{Nodes: nodes(2), Members: []string{"n1", "n9"}, Settings: Settings{Replicas: 2}}, err: ErrInvalidMembers},
		{name: "start member twice", fresh: true, cmd: &Start{Nodes: nodes(2), Members: []string{"n1", "n1"}, Settings: Settings{Replicas: 2}}, err: ErrInvalidMembers},
		{name: "start node twice", fresh: true, cmd: &Start{Nodes: append(nodes(2), nodes(1)...), Members: []string{"n1"}, Settings: Settings{Replicas: 1}}, err: ErrInvalidNode},
		{name: "start node without raft address", fresh: true, cmd: &Start{Nodes: []Node{{ID: "n1"}}, Members: []string{"n1"}, Settings: Settings{Replicas: 1}}, err: ErrInvalidNode},
		{name: "start replicas not members", fresh: true, cmd: &Start{Nodes: nodes(3), Members: []string{"n1", "n2", "n3"}, Settings: Settings{Replicas: 1}}, err: ErrInvalidSettings},
		{name: "start negative retention", fresh: true, cmd: &Start{Nodes: nodes(1), Members: []string{"n1"}, Settings: Settings{Replicas: 1, RetentionAge: -1}}, err: ErrInvalidSettings},
		{name: "start keeps earlier nodes", fresh: true, pre: []Command{&AddNode{ID: "n9", RaftAddr: "x"}},
			cmd: &Start{Nodes: nodes(1), Members: []string{"n1"}, Settings: Settings{Replicas: 1}},
			check: func(t *testing.T, _, s *State, _ Result) {
				if len(s.Nodes()) != 2 {
					t.Fatalf("nodes %v", s.Nodes())
				}
			}},

		// AddNode.
		{name: "add node", cmd: &AddNode{ID: "n7", RaftAddr: "r7", ClientAddr: "c7"},
			check: func(t *testing.T, _, s *State, r Result) {
				if n := nodeOf(t, s, "n7"); n != (Node{ID: "n7", RaftAddr: "r7", ClientAddr: "c7", State: NodeActive}) || *r.Node != n {
					t.Fatalf("node %+v, result %+v", n, r.Node)
				}
			}},
		{name: "add node updates addresses, keeps leaving", cmd: &AddNode{ID: "n6", RaftAddr: "r6", ClientAddr: "c6"},
			check: func(t *testing.T, _, s *State, _ Result) {
				if n := nodeOf(t, s, "n6"); n.RaftAddr != "r6" || n.ClientAddr != "c6" || n.State != NodeLeaving {
					t.Fatalf("node %+v", n)
				}
			}},
		{name: "add node again unchanged", cmd: &AddNode{ID: "n1", RaftAddr: nodes(1)[0].RaftAddr, ClientAddr: nodes(1)[0].ClientAddr},
			check: func(t *testing.T, s0, s *State, _ Result) {
				if withoutIndex(s0) != withoutIndex(s) {
					t.Fatal("catalog changed")
				}
			}},
		{name: "add node empty id", cmd: &AddNode{RaftAddr: "r"}, err: ErrInvalidNode},
		{name: "add node long id", cmd: &AddNode{ID: strings.Repeat("n", MaxNodeIDLen+1), RaftAddr: "r"}, err: ErrInvalidNode},
		{name: "add node without raft address", cmd: &AddNode{ID: "n7", ClientAddr: "c"}, err: ErrInvalidNode},
		{name: "add node long address", cmd: &AddNode{ID: "n7", RaftAddr: "r", ClientAddr: strings.Repeat("c", MaxAddrLen+1)}, err: ErrInvalidNode},

		// MarkLeaving, MarkActive.
		{name: "mark leaving", cmd: &MarkLeaving{ID: "n5"},
			check: func(t *testing.T, _, s *State, r Result) {
				if nodeOf(t, s, "n5").State != NodeLeaving || r.Node.State != NodeLeaving {
					t.Fatal("n5 not leaving")
				}
			}},
		{name: "mark leaving again", cmd: &MarkLeaving{ID: "n6"}},
		{name: "mark leaving unknown", cmd: &MarkLeaving{ID: "n9"}, err: ErrNotFound},
		{name: "mark active", cmd: &MarkActive{ID: "n6"},
			check: func(t *testing.T, _, s *State, _ Result) {
				if nodeOf(t, s, "n6").State != NodeActive {
					t.Fatal("n6 not active")
				}
			}},
		{name: "mark active unknown", cmd: &MarkActive{ID: "n9"}, err: ErrNotFound},

		// ForgetNode.
		{name: "forget node", cmd: &ForgetNode{ID: "n6"},
			check: func(t *testing.T, _, s *State, r Result) {
				if _, ok := s.Node("n6"); ok || !r.Gone || r.Node.ID != "n6" {
					t.Fatalf("n6 still there or result %+v", r)
				}
			}},
		{name: "forget member", cmd: &ForgetNode{ID: "n1"}, err: ErrInUse},
		{name: "forget joining node", cmd: &ForgetNode{ID: "n5"}, err: ErrInUse},
		{name: "forget member of a deleting log", pre: []Command{&DeleteLog{ID: idSolo}}, cmd: &ForgetNode{ID: "n4"}, err: ErrInUse},
		{name: "forget unknown", cmd: &ForgetNode{ID: "n9"}, err: ErrNotFound},

		// CreateLog.
		{name: "create", cmd: &CreateLog{Name: "x_1-Y", Settings: Settings{Replicas: 3, RetentionBytes: 5, RetentionAge: time.Hour}, Members: []string{"n5", "n1", "n4"}},
			check: func(t *testing.T, s0, s *State, r Result) {
				l, ok := s.Log("x_1-Y")
				if !ok || l.ID != s0.NextID() || s.NextID() != s0.NextID()+1 || l.State != LogActive || l.Version != 1 {
					t.Fatalf("log %+v, next id %d", l, s.NextID())
				}
				if !slices.Equal(l.Members, []string{"n5", "n1", "n4"}) || !slices.Equal(l.Initial, l.Members) || l.PreferredLeader() != "n5" {
					t.Fatalf("members %v, initial %v", l.Members, l.Initial)
				}
				if r.Log.ID != l.ID {
					t.Fatalf("result %+v", r.Log)
				}
			}},
		{name: "create one replica", cmd: &CreateLog{Name: "one", Settings: Settings{Replicas: 1}, Members: []string{"n2"}}},
		{name: "create five replicas", cmd: &CreateLog{Name: "five", Settings: Settings{Replicas: 5}, Members: []string{"n1", "n2", "n3", "n4", "n5"}}},
		{name: "create taken name", cmd: &CreateLog{Name: "a", Settings: Settings{Replicas: 1}, Members: []string{"n2"}}, err: ErrExists},
		{name: "create default", cmd: &CreateLog{Name: DefaultName, Settings: Settings{Replicas: 1}, Members: []string{"n2"}}, err: ErrExists},
		{name: "create name being deleted", cmd: &CreateLog{Name: "gone", Settings: Settings{Replicas: 1}, Members: []string{"n2"}}, err: ErrExists},
		{name: "create names are case-sensitive", cmd: &CreateLog{Name: "A", Settings: Settings{Replicas: 1}, Members: []string{"n2"}}},
		{name: "create empty name", cmd: &CreateLog{Settings: Settings{Replicas: 1}, Members: []string{"n2"}}, err: ErrInvalidName},
		{name: "create long name", cmd: &CreateLog{Name: long, Settings: Settings{Replicas: 1}, Members: []string{"n2"}}, err: ErrInvalidName},
		{name: "create name with a space", cmd: &CreateLog{Name: "a b", Settings: Settings{Replicas: 1}, Members: []string{"n2"}}, err: ErrInvalidName},
		{name: "create name starting with _", cmd: &CreateLog{Name: "_a", Settings: Settings{Replicas: 1}, Members: []string{"n2"}}, err: ErrInvalidName},
		{name: "create two replicas", cmd: &CreateLog{Name: "x", Settings: Settings{Replicas: 2}, Members: []string{"n1", "n2"}}, err: ErrInvalidSettings},
		{name: "create negative retention bytes", cmd: &CreateLog{Name: "x", Settings: Settings{Replicas: 1, RetentionBytes: -1}, Members: []string{"n1"}}, err: ErrInvalidSettings},
		{name: "create negative retention age", cmd: &CreateLog{Name: "x", Settings: Settings{Replicas: 1, RetentionAge: -time.Second}, Members: []string{"n1"}}, err: ErrInvalidSettings},
		{name: "create too few members", cmd: &CreateLog{Name: "x", Settings: Settings{Replicas: 3}, Members: []string{"n1", "n2"}}, err: ErrInvalidMembers},
		{name: "create member twice", cmd: &CreateLog{Name: "x", Settings: Settings{Replicas: 3}, Members: []string{"n1", "n2", "n1"}}, err: ErrInvalidMembers},
		{name: "create on a leaving node", cmd: &CreateLog{Name: "x", Settings: Settings{Replicas: 3}, Members: []string{"n1", "n2", "n6"}}, err: ErrInvalidMembers},
		{name: "create on an unknown node", cmd: &CreateLog{Name: "x", Settings: Settings{Replicas: 1}, Members: []string{"n9"}}, err: ErrInvalidMembers},
		{name: "create before start", fresh: true, cmd: &CreateLog{Name: "x", Settings: Settings{Replicas: 1}, Members: []string{"n1"}}, err: ErrInvalidMembers},

		// LogStarted.
		{name: "log started", cmd: &LogStarted{ID: idSolo, Version: 1},
			check: func(t *testing.T, s0, s *State, r Result) {
				if l := logOf(t, s, idSolo); l.Initial != nil || l.Version != 2 || r.Log.Initial != nil {
					t.Fatalf("log %+v", l)
				}
			}},
		{name: "log started again", cmd: &LogStarted{ID: idA},
			check: func(t *testing.T, s0, s *State, _ Result) {
				if withoutIndex(s0) != withoutIndex(s) {
					t.Fatal("catalog changed")
				}
			}},
		{name: "log started stale version", cmd: &LogStarted{ID: idSolo, Version: 7}, err: ErrConflict},
		{name: "log started unknown", cmd: &LogStarted{ID: 99}, err: ErrNotFound},

		// BeginMove.
		{name: "begin move", cmd: &BeginMove{ID: idA, Version: 2, From: "n3", To: "n5"},
			check: func(t *testing.T, _, s *State, _ Result) {
				l := logOf(t, s, idA)
				if l.Joining != "n5" || l.Leaving != "n3" || !slices.Equal(l.Hosts(), []string{"n1", "n2", "n3", "n5"}) || l.Version != 3 {
					t.Fatalf("log %+v", l)
				}
				if got := s.LogsOf("n5"); len(got) != 2 || got[0].ID != idA || got[1].ID != idMv {
					t.Fatalf("logs of n5: %v", got)
				}
			}},
		{name: "begin move while moving", cmd: &BeginMove{ID: idMv, From: "n1", To: "n4"}, err: ErrConflict},
		{name: "begin move not started", cmd: &BeginMove{ID: idSolo, From: "n4", To: "n5"}, err: ErrConflict},
		{name: "begin move deleting", cmd: &BeginMove{ID: idGone, From: "n4", To: "n5"}, err: ErrDeleting},
		{name: "begin move from a non-member", cmd: &BeginMove{ID: idA, From: "n4", To: "n5"}, err: ErrInvalidMembers},
		{name: "begin move to a member", cmd: &BeginMove{ID: idA, From: "n3", To: "n2"}, err: ErrInvalidMembers},
		{name: "begin move to a leaving node", cmd: &BeginMove{ID: idA, From: "n3", To: "n6"}, err: ErrInvalidMembers},
		{name: "begin move to an unknown node", cmd: &BeginMove{ID: idA, From: "n3", To: "n9"}, err: ErrInvalidMembers},
		{name: "begin move stale version", cmd: &BeginMove{ID: idA, Version: 1, From: "n3", To: "n5"}, err: ErrConflict},
		{name: "begin move unknown log", cmd: &BeginMove{ID: 99, From: "n3", To: "n5"}, err: ErrNotFound},

		// FinishMove, CancelMove.
		{name: "finish move", cmd: &FinishMove{ID: idMv},
			check: func(t *testing.T, _, s *State, _ Result) {
				l := logOf(t, s, idMv)
				if !slices.Equal(l.Members, []string{"n1", "n2", "n5"}) || l.Moving() || l.Leaving != "" {
					t.Fatalf("log %+v", l)
				}
				for _, l := range s.LogsOf("n3") {
					if l.ID == idMv {
						t.Fatalf("n3 still hosts the moved log: %+v", l)
					}
				}
			}},
		{name: "finish move keeps the preferred leader's place", pre: []Command{&CancelMove{ID: idMv}, &BeginMove{ID: idMv, From: "n1", To: "n4"}}, cmd: &FinishMove{ID: idMv},
			check: func(t *testing.T, _, s *State, _ Result) {
				if l := logOf(t, s, idMv); !slices.Equal(l.Members, []string{"n4", "n2", "n3"}) {
					t.Fatalf("members %v", l.Members)
				}
			}},
		{name: "finish move without a move", cmd: &FinishMove{ID: idA}, err: ErrConflict},
		{name: "finish move of a deleting log", pre: []Command{&DeleteLog{ID: idMv}}, cmd: &FinishMove{ID: idMv}, err: ErrDeleting},
		{name: "finish move stale version", cmd: &FinishMove{ID: idMv, Version: 1}, err: ErrConflict},
		{name: "cancel move", cmd: &CancelMove{ID: idMv},
			check: func(t *testing.T, s0, s *State, _ Result) {
				l := logOf(t, s, idMv)
				if !slices.Equal(l.Members, []string{"n1", "n2", "n3"}) || l.Moving() || len(s.LogsOf("n5")) != 0 {
					t.Fatalf("log %+v", l)
				}
			}},
		{name: "cancel move without a move", cmd: &CancelMove{ID: idA}, err: ErrConflict},
		{name: "cancel move unknown log", cmd: &CancelMove{ID: 99}, err: ErrNotFound},

		// SetPreferredLeader.
		{name: "set preferred leader", cmd: &SetPreferredLeader{ID: idA, Node: "n3"},
			check: func(t *testing.T, _, s *State, _ Result) {
				if l := logOf(t, s, idA); !slices.Equal(l.Members, []string{"n3", "n1", "n2"}) || l.Version != 3 {
					t.Fatalf("log %+v", l)
				}
			}},
		{name: "set preferred leader already first", cmd: &SetPreferredLeader{ID: idA, Node: "n1"},
			check: func(t *testing.T, s0, s *State, _ Result) {
				if withoutIndex(s0) != withoutIndex(s) {
					t.Fatal("catalog changed")
				}
			}},
		{name: "set preferred leader not a member", cmd: &SetPreferredLeader{ID: idA, Node: "n5"}, err: ErrInvalidMembers},
		{name: "set preferred leader deleting", cmd: &SetPreferredLeader{ID: idGone, Node: "n3"}, err: ErrDeleting},

		// UpdateSettings.
		{name: "update settings", cmd: &UpdateSettings{ID: idA, Settings: Settings{RetentionBytes: 1000, RetentionAge: time.Hour}},
			check: func(t *testing.T, _, s *State, _ Result) {
				if l := logOf(t, s, idA); l.Settings != (Settings{Replicas: 3, RetentionBytes: 1000, RetentionAge: time.Hour}) || l.Version != 3 {
					t.Fatalf("log %+v", l)
				}
			}},
		{name: "update settings of the default log", cmd: &UpdateSettings{ID: DefaultID, Settings: Settings{Replicas: 3, RetentionAge: time.Minute}}},
		{name: "update settings unchanged", cmd: &UpdateSettings{ID: idA, Settings: Settings{Replicas: 3}},
			check: func(t *testing.T, s0, s *State, _ Result) {
				if withoutIndex(s0) != withoutIndex(s) {
					t.Fatal("catalog changed")
				}
			}},
		{name: "update settings replicas", cmd: &UpdateSettings{ID: idA, Settings: Settings{Replicas: 5}}, err: ErrInvalidSettings},
		{name: "update settings negative", cmd: &UpdateSettings{ID: idA, Settings: Settings{RetentionBytes: -5}}, err: ErrInvalidSettings},
		{name: "update settings deleting", cmd: &UpdateSettings{ID: idGone, Settings: Settings{RetentionBytes: 5}}, err: ErrDeleting},
		{name: "update settings unknown", cmd: &UpdateSettings{ID: 99}, err: ErrNotFound},

		// DeleteLog.
		{name: "delete", cmd: &DeleteLog{ID: idA, Version: 2},
			check: func(t *testing.T, _, s *State, _ Result) {
				if l, _ := s.Log("a"); l.State != LogDeleting || l.Version != 3 {
					t.Fatalf("log %+v", l)
				}
			}},
		{name: "delete default", cmd: &DeleteLog{ID: DefaultID}, err: ErrReserved},
		{name: "delete deleting", cmd: &DeleteLog{ID: idGone}, err: ErrDeleting},
		{name: "delete unknown", cmd: &DeleteLog{ID: 99}, err: ErrNotFound},
		{name: "delete stale version", cmd: &DeleteLog{ID: idA, Version: 1}, err: ErrConflict},

		// ReplicaDropped.
		{name: "replica dropped", cmd: &ReplicaDropped{ID: idGone, Node: "n3"},
			check: func(t *testing.T, _, s *State, r Result) {
				if l := logOf(t, s, idGone); !slices.Equal(l.Dropped, []string{"n3"}) || r.Gone {
					t.Fatalf("log %+v, result %+v", l, r)
				}
			}},
		{name: "replica dropped again", pre: []Command{&ReplicaDropped{ID: idGone, Node: "n3"}}, cmd: &ReplicaDropped{ID: idGone, Node: "n3"},
			check: func(t *testing.T, s0, s *State, _ Result) {
				if withoutIndex(s0) != withoutIndex(s) {
					t.Fatal("catalog changed")
				}
			}},
		{name: "replica dropped by every host", pre: []Command{&ReplicaDropped{ID: idGone, Node: "n4"}, &ReplicaDropped{ID: idGone, Node: "n2"}},
			cmd: &ReplicaDropped{ID: idGone, Node: "n3"},
			check: func(t *testing.T, _, s *State, r Result) {
				if _, ok := s.Log("gone"); ok || !r.Gone || r.Log.ID != idGone {
					t.Fatalf("log still there, result %+v", r)
				}
				if _, ok := s.LogByID(idGone); ok {
					t.Fatal("log id still there")
				}
			}},
		{name: "replica dropped of an active log: lost", cmd: &ReplicaDropped{ID: idA, Node: "n2"},
			check: func(t *testing.T, s0, s *State, _ Result) {
				l := logOf(t, s, idA)
				if !l.Lost("n2") || l.Lost("n1") || l.Version != logOf(t, s0, idA).Version+1 || !slices.Equal(l.Members, []string{"n1", "n2", "n3"}) {
					t.Fatalf("log %+v", l)
				}
				if moves := Plan(s, nil); slices.ContainsFunc(moves, func(m Move) bool { return m.Log == idA }) {
					t.Fatalf("planned a move of a log with a lost replica: %+v", moves)
				}
			}},
		{name: "replica dropped of an active log by a non-member", cmd: &ReplicaDropped{ID: idA, Node: "n4"}, err: ErrInvalidMembers},
		{name: "replica dropped by a move's joining node", cmd: &ReplicaDropped{ID: idMv, Node: "n5"}, err: ErrConflict},
		{name: "move refused while a replica is lost", pre: []Command{&ReplicaDropped{ID: idA, Node: "n2"}},
			cmd: &BeginMove{ID: idA, From: "n3", To: "n4"}, err: ErrConflict},
		{name: "a lost replica moves away", pre: []Command{&ReplicaDropped{ID: idA, Node: "n3"}}, cmd: &BeginMove{ID: idA, From: "n3", To: "n4"},
			check: func(t *testing.T, _, s *State, _ Result) {
				if l := logOf(t, s, idA); l.Joining != "n4" || !l.Lost("n3") {
					t.Fatalf("log %+v", l)
				}
			}},
		{name: "a lost replica on a leaving node is drained", pre: []Command{&ReplicaDropped{ID: idA, Node: "n3"}, &MarkLeaving{ID: "n3"}},
			cmd: &MarkActive{ID: "n5"},
			check: func(t *testing.T, _, s *State, _ Result) {
				if !slices.ContainsFunc(Plan(s, nil), func(m Move) bool { return m.Log == idA && m.From == "n3" }) {
					t.Fatalf("no drain of the lost replica on leaving n3: %+v", Plan(s, nil))
				}
			}},
		{name: "rebuild of a replica not lost", cmd: &BeginMove{ID: idA, From: "n2", To: "n2"}, err: ErrInvalidMembers},
		{name: "rebuild begins", pre: []Command{&ReplicaDropped{ID: idA, Node: "n2"}}, cmd: &BeginMove{ID: idA, From: "n2", To: "n2"},
			check: func(t *testing.T, _, s *State, _ Result) {
				l := logOf(t, s, idA)
				if !l.Rebuilding() || !l.Lost("n2") || !slices.Equal(l.Hosts(), []string{"n1", "n2", "n3"}) {
					t.Fatalf("log %+v, hosts %v", l, l.Hosts())
				}
			}},
		{name: "rebuild finished", pre: []Command{&ReplicaDropped{ID: idA, Node: "n2"}, &BeginMove{ID: idA, From: "n2", To: "n2"}},
			cmd: &FinishMove{ID: idA},
			check: func(t *testing.T, _, s *State, _ Result) {
				l := logOf(t, s, idA)
				if l.Moving() || l.Lost("n2") || l.Dropped != nil || !slices.Equal(l.Members, []string{"n1", "n2", "n3"}) {
					t.Fatalf("log %+v", l)
				}
			}},
		{name: "rebuild cancelled", pre: []Command{&ReplicaDropped{ID: idA, Node: "n2"}, &BeginMove{ID: idA, From: "n2", To: "n2"}},
			cmd: &CancelMove{ID: idA},
			check: func(t *testing.T, _, s *State, _ Result) {
				if l := logOf(t, s, idA); l.Moving() || !l.Lost("n2") {
					t.Fatalf("log %+v", l)
				}
			}},
		{name: "a lost replica moved away", pre: []Command{&ReplicaDropped{ID: idMv, Node: "n3"}}, cmd: &FinishMove{ID: idMv},
			check: func(t *testing.T, _, s *State, _ Result) {
				if l := logOf(t, s, idMv); l.Dropped != nil || l.HostedBy("n3") {
					t.Fatalf("log %+v", l)
				}
			}},
		{name: "delete forgets lost replicas", pre: []Command{&ReplicaDropped{ID: idA, Node: "n2"}}, cmd: &DeleteLog{ID: idA},
			check: func(t *testing.T, _, s *State, _ Result) {
				if l := logOf(t, s, idA); l.Dropped != nil {
					t.Fatalf("log %+v", l)
				}
			}},
		{name: "replica dropped by a non-host", cmd: &ReplicaDropped{ID: idGone, Node: "n1"}, err: ErrInvalidMembers},

		// LogDeleted.
		{name: "log deleted", cmd: &LogDeleted{ID: idGone},
			check: func(t *testing.T, _, s *State, r Result) {
				if _, ok := s.Log("gone"); ok || !r.Gone {
					t.Fatalf("log still there, result %+v", r)
				}
			}},
		{name: "log deleted frees the name", pre: []Command{&LogDeleted{ID: idGone}},
			cmd: &CreateLog{Name: "gone", Settings: Settings{Replicas: 1}, Members: []string{"n1"}},
			check: func(t *testing.T, s0, s *State, _ Result) {
				if l, _ := s.Log("gone"); l.ID != s0.NextID() || l.ID == idGone {
					t.Fatalf("log %+v", l)
				}
			}},
		{name: "log deleted active", cmd: &LogDeleted{ID: idA}, err: ErrConflict},
		{name: "log deleted unknown", cmd: &LogDeleted{ID: 99}, err: ErrNotFound},

		// SetClusterID.
		{name: "set cluster id before start", fresh: true, cmd: &SetClusterID{ID: testClusterID},
			check: func(t *testing.T, s0, s *State, r Result) {
				if s.ClusterID() != testClusterID || s.Started() || r.Log != nil || r.Node != nil || r.Gone {
					t.Fatalf("cluster id %v, started %v, result %+v", s.ClusterID(), s.Started(), r)
				}
				if withoutIndex(s0) != withoutIndex(withClusterID(s, ClusterID{})) {
					t.Fatal("the catalog changed beyond its cluster id")
				}
			}},
		{name: "set cluster id", cmd: &SetClusterID{ID: testClusterID},
			check: func(t *testing.T, s0, s *State, _ Result) {
				if s0.ClusterID() != (ClusterID{}) || s.ClusterID() != testClusterID {
					t.Fatalf("cluster id %v, then %v", s0.ClusterID(), s.ClusterID())
				}
				if withoutIndex(s0) != withoutIndex(withClusterID(s, ClusterID{})) {
					t.Fatal("the catalog changed beyond its cluster id (a log's version?)")
				}
			}},
		{name: "set cluster id again", pre: []Command{&SetClusterID{ID: testClusterID}}, cmd: &SetClusterID{ID: testClusterID},
			check: func(t *testing.T, s0, s *State, _ Result) {
				if withoutIndex(s0) != withoutIndex(s) || s.ClusterID() != testClusterID {
					t.Fatalf("catalog changed, cluster id %v", s.ClusterID())
				}
			}},
		{name: "set another cluster id", pre: []Command{&SetClusterID{ID: testClusterID}}, cmd: &SetClusterID{ID: otherClusterID},
			err: ErrExists, says: testClusterID.String() + ", the command gives " + otherClusterID.String()},
		{name: "set another cluster id before start", fresh: true, pre: []Command{&SetClusterID{ID: otherClusterID}}, cmd: &SetClusterID{ID: testClusterID},
			err: ErrExists},
		{name: "set the zero cluster id", fresh: true, cmd: &SetClusterID{}, err: ErrInvalidClusterID, says: "zero id"},
		{name: "set the zero cluster id over one", pre: []Command{&SetClusterID{ID: testClusterID}}, cmd: &SetClusterID{}, err: ErrInvalidClusterID},
		{name: "start keeps the cluster id", fresh: true, pre: []Command{&SetClusterID{ID: testClusterID}},
			cmd: &Start{Nodes: nodes(1), Members: []string{"n1"}, Settings: Settings{Replicas: 1}},
			check: func(t *testing.T, _, s *State, _ Result) {
				if s.ClusterID() != testClusterID || !s.Started() {
					t.Fatalf("cluster id %v, started %v", s.ClusterID(), s.Started())
				}
			}},
		{name: "create keeps the cluster id", pre: []Command{&SetClusterID{ID: testClusterID}},
			cmd: &CreateLog{Name: "x", Settings: Settings{Replicas: 1}, Members: []string{"n1"}},
			check: func(t *testing.T, _, s *State, _ Result) {
				if s.ClusterID() != testClusterID {
					t.Fatalf("cluster id %v", s.ClusterID())
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t)
			if !tc.fresh {
				a = base(t)
			}
			for _, c := range tc.pre {
				a.ok(c)
			}
			s0 := a.f.State()
			r := a.try(tc.cmd)
			s := a.f.State()
			if s.Index() != a.index {
				t.Fatalf("applied index %d, want %d", s.Index(), a.index)
			}
			if r.Kind != tc.cmd.Kind() {
				t.Fatalf("result kind %v, want %v", r.Kind, tc.cmd.Kind())
			}
			if tc.err != nil {
				if !errors.Is(r.Err, tc.err) || !strings.Contains(r.Err.Error(), tc.says) {
					t.Fatalf("error %v, want %v saying %q", r.Err, tc.err, tc.says)
				}
				if withoutIndex(s0) != withoutIndex(s) || r.Log != nil || r.Node != nil {
					t.Fatalf("a refused command changed the catalog or returned a record: %+v", r)
				}
				t.Logf("refused: %v", r.Err)
				return
			}
			if r.Err != nil {
				t.Fatalf("refused: %v", r.Err)
			}
			checkInvariants(t, s)
			if tc.check != nil {
				tc.check(t, s0, s, r)
			}
		})
	}
}
