package catalog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// create places and creates a started log of replicas replicas.
func (a *applier) create(name string, replicas int, load Load) Log {
	a.t.Helper()
	members, err := Place(a.f.State(), replicas, load)
	if err != nil {
		a.t.Fatal(err)
	}
	l := a.ok(&CreateLog{Name: name, Settings: Settings{Replicas: replicas}, Members: members}).Log
	return *a.ok(&LogStarted{ID: l.ID}).Log
}

// spread returns the fewest and most replicas an active node holds.
func spread(s *State) (lo, hi int) {
	counts := replicaCounts(s)
	lo = -1
	for _, n := range s.ActiveNodes() {
		if lo < 0 || counts[n] < lo {
			lo = counts[n]
		}
		hi = max(hi, counts[n])
	}
	return lo, hi
}

// TestPlaceCapacity: at the same replication, 6 nodes hold twice the logs
// (the default log included) of 3 when every node holds a given count,
// every log on distinct nodes, the counts within one of even after every
// create, and preferred leaders within one of even.
func TestPlaceCapacity(t *testing.T) {
	const perNode = 30
	held := map[int]int{}
	for _, n := range []int{3, 6} {
		a := started(t, n)
		for {
			members, err := Place(a.f.State(), 3, nil)
			if err != nil {
				t.Fatal(err)
			}
			if counts := replicaCounts(a.f.State()); slices.ContainsFunc(members, func(m string) bool { return counts[m] >= perNode }) {
				break
			}
			l := a.create(fmt.Sprintf("l%d", len(a.f.State().Logs())), 3, nil)
			if err := distinct(l.Members); err != nil {
				t.Fatalf("%d nodes: log %q: %v", n, l.Name, err)
			}
			if lo, hi := spread(a.f.State()); hi-lo > 1 {
				t.Fatalf("%d nodes, %d logs: replicas per node from %d to %d", n, len(a.f.State().Logs()), lo, hi)
			}
		}
		held[n] = len(a.f.State().Logs())
		if lo, hi := spread(a.f.State()); lo != perNode || hi != perNode {
			t.Fatalf("%d nodes: full at replicas per node from %d to %d", n, lo, hi)
		}
		if lo, hi := leaderSpread(a.f.State()); hi-lo > 1 {
			t.Fatalf("%d nodes: preferred leaders per node from %d to %d", n, lo, hi)
		}
	}
	if held[6] != 2*held[3] {
		t.Fatalf("3 nodes hold %d logs, 6 nodes %d; want twice", held[3], held[6])
	}
}

func TestPlaceOrder(t *testing.T) {
	a := started(t, 6)
	a.ok(&MarkLeaving{ID: "n5"})
	s := a.f.State()
	tests := []struct {
		name     string
		replicas int
		load     Load
		want     []string
	}{
		// n1..n3 hold the default log: the others come first, by id.
		{"by count then id", 3, nil, []string{"n4", "n6", "n1"}},
		{"by count then bytes", 3, Load{"n4": 10, "n1": 5, "n2": 1}, []string{"n6", "n4", "n3"}},
		{"count before bytes", 1, Load{"n4": 1 << 40, "n6": 1 << 41}, []string{"n4"}},
		{"five", 5, nil, []string{"n4", "n6", "n1", "n2", "n3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(s, tc.replicas, tc.load)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Place: %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestPlaceRefuses(t *testing.T) {
	a := started(t, 5)
	a.ok(&MarkLeaving{ID: "n5"})
	if _, err := Place(a.f.State(), 5, nil); !errors.Is(err, ErrTooFewNodes) || !strings.Contains(err.Error(), "1 short") {
		t.Fatalf("5 replicas on 4 active nodes: %v", err)
	}
	if _, err := Place(a.f.State(), 2, nil); !errors.Is(err, ErrInvalidSettings) {
		t.Fatalf("2 replicas: %v", err)
	}
	if _, err := Place(New().State(), 1, nil); !errors.Is(err, ErrTooFewNodes) {
		t.Fatalf("before start: %v", err)
	}
}

// runPlans applies plans until Plan returns none: each move begun, then
// finished. It checks, after every command, that every log keeps its
// replica count of distinct members, and that a balance move is planned
// alone. It returns the count of moves.
func runPlans(t *testing.T, a *applier, load Load) int {
	t.Helper()
	moves := 0
	for round := 0; ; round++ {
		if round > 1000 {
			t.Fatal("plans do not converge")
		}
		plan := Plan(a.f.State(), load)
		if len(plan) == 0 {
			return moves
		}
		for _, m := range plan {
			if !a.f.State().active(m.To) {
				t.Fatalf("move %+v to a node that is not active", m)
			}
			a.ok(m.Command())
			checkInvariants(t, a.f.State())
		}
		if more := Plan(a.f.State(), load); len(more) > 0 {
			t.Fatalf("planned %v while %v are under way", more, plan)
		}
		for _, m := range plan {
			a.ok(&FinishMove{ID: m.Log})
			checkInvariants(t, a.f.State())
			moves++
		}
	}
}

// TestPlanBalanceAfterJoin: 3 nodes hold 30 logs; 3 more join; the plans
// move one replica at a time to an even spread, with no move wasted.
func TestPlanBalanceAfterJoin(t *testing.T) {
	a := started(t, 3)
	for i := range 29 {
		a.create(fmt.Sprintf("l%d", i), 3, nil)
	}
	for _, n := range nodes(6)[3:] {
		a.ok(&AddNode{ID: n.ID, RaftAddr: n.RaftAddr, ClientAddr: n.ClientAddr})
	}
	moves := runPlans(t, a, nil)
	if lo, hi := spread(a.f.State()); lo != 15 || hi != 15 {
		t.Fatalf("replicas per node from %d to %d, want 15", lo, hi)
	}
	// 3 nodes go from 30 to 15 replicas: 45 moves at the least.
	if moves != 45 {
		t.Fatalf("%d moves, want 45", moves)
	}
}

// TestPlanDrain: a node marked leaving has each of its replicas moved to
// another node, and can then be forgotten.
func TestPlanDrain(t *testing.T) {
	a := started(t, 6)
	for i := range 20 {
		a.create(fmt.Sprintf("l%d", i), 3, nil)
	}
	a.ok(&MarkLeaving{ID: "n2"})
	held := len(a.f.State().LogsOf("n2"))
	plan := Plan(a.f.State(), nil)
	if len(plan) != held {
		t.Fatalf("plan of %d moves for the %d logs of n2", len(plan), held)
	}
	for _, m := range plan {
		if m.From != "n2" {
			t.Fatalf("move %+v not from n2", m)
		}
	}
	// Every log of n2 is on n1 and n3 too (placement alternates between
	// n1-n3 and n4-n6): the drain spreads them over n4, n5 and n6, counting
	// the moves it has planned.
	to := map[string]int{}
	for _, m := range plan {
		to[m.To]++
	}
	if len(to) != 3 || max(to["n4"], to["n5"], to["n6"])-min(to["n4"], to["n5"], to["n6"]) > 1 {
		t.Fatalf("drain targets %v", to)
	}
	runPlans(t, a, nil)
	if got := a.f.State().LogsOf("n2"); len(got) != 0 {
		t.Fatalf("n2 still hosts %d logs", len(got))
	}
	if lo, hi := spread(a.f.State()); hi-lo > 1 {
		t.Fatalf("replicas per node from %d to %d", lo, hi)
	}
	a.ok(&ForgetNode{ID: "n2"})
}

// TestPlanConverges: random clusters, logs and leaving nodes; plans end
// with leaving nodes drained where the active nodes can take their
// replicas, and the active nodes within one of even.
func TestPlanConverges(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		a := started(t, 3+rng.IntN(6))
		load := Load{}
		for i := range 5 + rng.IntN(40) {
			reps := []int{1, 3, 3, 5}[rng.IntN(4)]
			if reps > len(a.f.State().ActiveNodes()) {
				continue
			}
			a.create(fmt.Sprintf("l%d", i), reps, load)
			for _, n := range a.f.State().Nodes() {
				load[n.ID] = uint64(rng.IntN(1000))
			}
		}
		ns := a.f.State().Nodes()
		for range rng.IntN(3) {
			a.ok(&MarkLeaving{ID: ns[rng.IntN(len(ns))].ID})
		}
		for range rng.IntN(3) {
			a.ok(&AddNode{ID: fmt.Sprintf("m%d", rng.IntN(100)), RaftAddr: "r"})
		}
		runPlans(t, a, load)
		s := a.f.State()
		active := len(s.ActiveNodes())
		for _, l := range s.Logs() {
			for _, m := range l.Members {
				if !s.active(m) && l.Settings.Replicas < active {
					t.Fatalf("seed %d: log %q keeps a replica on leaving node %q with %d active nodes", seed, l.Name, m, active)
				}
			}
		}
		if lo, hi := spread(s); hi-lo > 1 {
			t.Fatalf("seed %d: replicas per node from %d to %d", seed, lo, hi)
		}
	}
}

// TestPlanSkips: a log that is not started, deleting or moving is not
// moved.
func TestPlanSkips(t *testing.T) {
	a := base(t)
	a.ok(&MarkLeaving{ID: "n4"})
	for _, m := range Plan(a.f.State(), nil) {
		if m.Log == idSolo || m.Log == idGone || m.Log == idMv {
			t.Fatalf("planned %+v", m)
		}
	}
}

// leaderSpread returns the fewest and most logs that active nodes are the
// preferred leader of.
func leaderSpread(s *State) (lo, hi int) {
	leads := leaderCounts(s)
	lo = -1
	for _, n := range s.ActiveNodes() {
		if lo < 0 || leads[n] < lo {
			lo = leads[n]
		}
		hi = max(hi, leads[n])
	}
	return lo, hi
}

// TestAssignLeaders: every log created with n1 first is spread, by
// preferred-leader changes to members, within one of even; a second
// assignment changes nothing.
func TestAssignLeaders(t *testing.T) {
	a := started(t, 6)
	for i := range 60 {
		members := []string{"n1", fmt.Sprintf("n%d", 2+i%5), fmt.Sprintf("n%d", 2+(i+1)%5)}
		a.ok(&CreateLog{Name: fmt.Sprintf("l%d", i), Settings: Settings{Replicas: 3}, Members: members})
	}
	if _, hi := leaderSpread(a.f.State()); hi < 60 {
		t.Fatalf("setup: n1 leads %d logs", hi)
	}
	changes := AssignLeaders(a.f.State())
	if again := AssignLeaders(a.f.State()); fmt.Sprint(again) != fmt.Sprint(changes) {
		t.Fatal("AssignLeaders is not deterministic")
	}
	for _, c := range changes {
		a.ok(c.Command())
	}
	if lo, hi := leaderSpread(a.f.State()); hi-lo > 1 {
		t.Fatalf("leaders per node from %d to %d: %v", lo, hi, leaderCounts(a.f.State()))
	}
	if again := AssignLeaders(a.f.State()); len(again) != 0 {
		t.Fatalf("a second assignment changes %v", again)
	}
}

// TestAssignLeadersEligible: leadership never goes to a leaving node or
// to the node a move is replacing.
func TestAssignLeadersEligible(t *testing.T) {
	a := base(t)
	a.ok(&MarkLeaving{ID: "n1"})
	for _, c := range AssignLeaders(a.f.State()) {
		a.ok(c.Command())
	}
	s := a.f.State()
	for _, l := range s.Logs() {
		if l.State != LogActive || l.ID == idSolo {
			continue
		}
		if p := l.PreferredLeader(); p == "n1" || p == l.Leaving {
			t.Fatalf("log %q led by %q (leaving %q)", l.Name, p, l.Leaving)
		}
	}
}

// TestAssignLeadersOptimal: on small random catalogs, the most leaders
// any node gets is the least any assignment can give.
func TestAssignLeadersOptimal(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		a := started(t, 3+rng.IntN(4))
		var logs []Log
		for i := range 2 + rng.IntN(6) {
			reps := []int{1, 3}[rng.IntN(2)]
			ns := a.f.State().ActiveNodes()
			rng.Shuffle(len(ns), func(i, j int) { ns[i], ns[j] = ns[j], ns[i] })
			l := a.ok(&CreateLog{Name: fmt.Sprintf("l%d", i), Settings: Settings{Replicas: reps}, Members: ns[:reps]}).Log
			logs = append(logs, *l)
		}
		logs = append(logs, logOf(t, a.f.State(), DefaultID))
		for _, c := range AssignLeaders(a.f.State()) {
			a.ok(c.Command())
		}
		_, got := leaderSpread(a.f.State())
		if best := bestMaxLeaders(logs, a.f.State().ActiveNodes()); got != best {
			t.Fatalf("seed %d: a node leads %d logs, the best is %d", seed, got, best)
		}
	}
}

// bestMaxLeaders tries every assignment of a leader to each log.
func bestMaxLeaders(logs []Log, nodes []string) int {
	count := map[string]int{}
	best := len(logs) + 1
	var try func(i int)
	try = func(i int) {
		if i == len(logs) {
			hi := 0
			for _, n := range nodes {
				hi = max(hi, count[n])
			}
			best = min(best, hi)
			return
		}
		for _, m := range logs[i].Members {
			count[m]++
			try(i + 1)
			count[m]--
		}
	}
	try(0)
	return best
}

// TestStaleMoves: a move to a node marked leaving since it began is
// listed, and once cancelled the next plan moves the replica elsewhere.
func TestStaleMoves(t *testing.T) {
	a := base(t)
	if got := StaleMoves(a.f.State()); len(got) != 0 {
		t.Fatalf("stale moves %v", got)
	}
	a.ok(&MarkLeaving{ID: "n5"}) // the target of log mv's move
	stale := StaleMoves(a.f.State())
	if len(stale) != 1 || stale[0].Log != idMv || stale[0].To != "n5" || stale[0].From != "n3" {
		t.Fatalf("stale moves %+v", stale)
	}
	a.ok(stale[0].Cancel())
	a.ok(&MarkLeaving{ID: "n3"})
	var found bool
	for _, m := range Plan(a.f.State(), nil) {
		if m.Log == idMv {
			found = m.From == "n3" && m.To != "n5"
		}
	}
	if !found {
		t.Fatalf("no move of mv's replica off n3 in %+v", Plan(a.f.State(), nil))
	}
}

func TestLogsByName(t *testing.T) {
	var names []string
	for _, l := range base(t).f.State().LogsByName() {
		names = append(names, l.Name)
	}
	if want := []string{"a", DefaultName, "gone", "mv", "solo"}; !slices.Equal(names, want) {
		t.Fatalf("names %v, want %v", names, want)
	}
}
