package catalog

import (
	"cmp"
	"fmt"
	"slices"
)

// Decisions. The catalog leader decides where replicas go and which node
// leads each log with the pure functions of this file, and writes the
// decisions as commands, so that applying stays deterministic. Each
// function reads one State (and the load the nodes report), does no I/O,
// and returns the same answer for the same input: every order is by
// count, then bytes, then node id, then log id.
//
// A log's holders, for counting, are its members with a move's leaving
// node replaced by its joining node: where the log will be once its move
// is done. Deleting logs count until they are gone (their data is still
// on disk).

// Load is what the catalog does not hold but placement weighs: the bytes
// each node stores, by node id. A node not in it counts as 0 bytes. A nil
// Load is valid.
type Load map[string]uint64

// holders returns where l will be once its move, if any, is done.
func holders(l *Log) []string {
	h := slices.Clone(l.Members)
	if l.Moving() {
		h[slices.Index(h, l.Leaving)] = l.Joining
	}
	return h
}

// replicaCounts returns how many logs each node of s holds (see holders),
// with an entry, maybe 0, for every node.
func replicaCounts(s *State) map[string]int {
	counts := make(map[string]int, len(s.nodes))
	for id := range s.nodes {
		counts[id] = 0
	}
	for _, l := range s.logs {
		for _, h := range holders(l) {
			counts[h]++
		}
	}
	return counts
}

// lessLoaded orders node ids by replica count, then bytes, then id.
func lessLoaded(counts map[string]int, load Load) func(a, b string) int {
	return func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[a], counts[b]), cmp.Compare(load[a], load[b]), cmp.Compare(a, b))
	}
}

// Place chooses the members of a new log of replicas replicas: the active
// nodes holding the fewest replicas, then the fewest bytes, ties by id.
// The first member returned (the preferred leader) is the chosen node that
// is the preferred leader of the fewest active logs, ties in the order
// chosen. It fails with ErrInvalidSettings for a replica count other than
// 1, 3 or 5, and with ErrTooFewNodes, naming the shortfall, when the
// cluster has fewer active nodes than replicas.
func Place(s *State, replicas int, load Load) ([]string, error) {
	if err := ValidateSettings(Settings{Replicas: replicas}); err != nil {
		return nil, err
	}
	active := s.ActiveNodes()
	if len(active) < replicas {
		return nil, fmt.Errorf("%w: %d replicas need %d active nodes, the cluster has %d (%d short)",
			ErrTooFewNodes, replicas, replicas, len(active), replicas-len(active))
	}
	slices.SortFunc(active, lessLoaded(replicaCounts(s), load))
	chosen := active[:replicas]
	leads := leaderCounts(s)
	first := 0
	for i, n := range chosen {
		if leads[n] < leads[chosen[first]] {
			first = i
		}
	}
	members := append([]string{chosen[first]}, chosen[:first]...)
	return append(members, chosen[first+1:]...), nil
}

// leaderCounts returns how many active logs each node is the preferred
// leader of.
func leaderCounts(s *State) map[string]int {
	counts := map[string]int{}
	for _, l := range s.logs {
		if l.State == LogActive && len(l.Members) > 0 {
			counts[l.Members[0]]++
		}
	}
	return counts
}

// Move is a planned replica move: the log's replica on From goes to To.
type Move struct {
	// Log is the log's id.
	Log uint64
	// Name is the log's name, for messages.
	Name string
	// Version is the log's version the move was planned at.
	Version uint64
	// From is the member whose replica moves.
	From string
	// To is the node that takes it.
	To string
}

// Command returns the BeginMove that starts m, conditional on the log's
// version.
func (m Move) Command() *BeginMove {
	return &BeginMove{ID: m.Log, Version: m.Version, From: m.From, To: m.To}
}

// movable reports whether a move of l may be planned: active, started, no
// move under way, no lost replica to rebuild.
func movable(l *Log) bool {
	return l.State == LogActive && l.Initial == nil && !l.Moving() && len(l.Dropped) == 0
}

// Plan returns the replica moves that bring s towards an even spread:
//
//   - Drain: for each movable log (active, started, no move under way,
//     no lost replica but maybe the one drained) with a member on a
//     leaving node, one move of that replica to the
//     active node, not holding the log, with the fewest replicas, then
//     bytes, then lowest id, counting the moves planned before it. A log
//     with no such node keeps its replica until one joins.
//   - Balance: when there is nothing to drain and no move is under way
//     anywhere, at most one move from a most loaded active node to a least
//     loaded one whose counts differ by 2 or more, of the lowest-id
//     movable log the first holds and the second does not.
//
// So a drain starts at once for every log of the leaving node (one move
// per log: the caller may begin them at its own pace), and balancing goes
// one replica at a time, each move taken when the previous one is done.
// Applying every plan until Plan returns nothing leaves the active nodes'
// replica counts within one of each other (when every log is movable: a
// log not started or being deleted stays where it is), and every log
// keeps its replica count of members throughout (a move adds before it
// removes).
func Plan(s *State, load Load) []Move {
	counts := replicaCounts(s)
	active := s.ActiveNodes()
	var moves []Move
	anyMoving := false
	for _, id := range s.logIDs() {
		l := s.logs[id]
		anyMoving = anyMoving || l.Moving()
		if l.State != LogActive || l.Initial != nil || l.Moving() {
			continue
		}
		from := ""
		for _, m := range l.Members {
			if !s.active(m) {
				from = m
				break
			}
		}
		// A lost replica is rebuilt before another moves, unless it is the
		// one to drain.
		if from == "" || len(l.Dropped) > 1 || len(l.Dropped) == 1 && l.Dropped[0] != from {
			continue
		}
		to := ""
		for _, n := range active {
			if !slices.Contains(l.Members, n) && (to == "" || lessLoaded(counts, load)(n, to) < 0) {
				to = n
			}
		}
		if to == "" {
			continue
		}
		counts[from]--
		counts[to]++
		moves = append(moves, Move{Log: id, Name: l.Name, Version: l.Version, From: from, To: to})
	}
	if len(moves) > 0 || anyMoving {
		return moves
	}
	if m, ok := balanceMove(s, counts, active, load); ok {
		moves = append(moves, m)
	}
	return moves
}

// balanceMove finds one move from a more loaded active node to a less
// loaded one whose counts differ by 2 or more.
func balanceMove(s *State, counts map[string]int, active []string, load Load) (Move, bool) {
	byLoad := slices.Clone(active)
	slices.SortFunc(byLoad, lessLoaded(counts, load))
	ids := s.logIDs()
	// From the most loaded down, to the least loaded up.
	for i := len(byLoad) - 1; i >= 0; i-- {
		from := byLoad[i]
		for _, to := range byLoad {
			if counts[from]-counts[to] < 2 {
				break
			}
			for _, id := range ids {
				l := s.logs[id]
				if movable(l) && slices.Contains(l.Members, from) && !slices.Contains(l.Members, to) {
					return Move{Log: id, Name: l.Name, Version: l.Version, From: from, To: to}, true
				}
			}
		}
	}
	return Move{}, false
}

// StaleMoves returns the moves under way whose joining node is no longer
// an active node (marked leaving since the move began), in log id order:
// the catalog leader cancels them (Move.Cancel), and a later Plan moves
// the replica elsewhere.
func StaleMoves(s *State) []Move {
	var out []Move
	for _, id := range s.logIDs() {
		l := s.logs[id]
		if l.State == LogActive && l.Moving() && !s.active(l.Joining) {
			out = append(out, Move{Log: id, Name: l.Name, Version: l.Version, From: l.Leaving, To: l.Joining})
		}
	}
	return out
}

// Cancel returns the CancelMove that abandons m once begun, conditional
// on the log's version.
func (m Move) Cancel() *CancelMove { return &CancelMove{ID: m.Log, Version: m.Version} }

// LeaderChange is a planned change of a log's preferred leader.
type LeaderChange struct {
	// Log is the log's id.
	Log uint64
	// Name is the log's name, for messages.
	Name string
	// Version is the log's version the change was planned at.
	Version uint64
	// Node is the member that becomes the preferred leader.
	Node string
}

// Command returns the SetPreferredLeader that makes c, conditional on the
// log's version.
func (c LeaderChange) Command() *SetPreferredLeader {
	return &SetPreferredLeader{ID: c.Log, Version: c.Version, Node: c.Node}
}

// AssignLeaders returns the preferred-leader changes that spread the
// leadership of the active logs evenly over the active nodes. A log may be
// led by a member that is an active node and not the leaving node of a
// move; a log with none is left out.
//
// It starts from the current preferred leaders (a log whose preferred
// leader may not lead takes its eligible member leading the fewest logs so
// far, in log id order), then, while some node u leads at least two more
// logs than a node v that a chain of logs connects to it (u leads a log
// that w could lead, w leads one that v could lead...), shifts leadership
// one step along the shortest such chain, which lowers u's count by one
// and raises v's by one. It ends when no such chain is left: no set of
// leader changes could then lower the most loaded node's count. Changes
// come in log id order, only for logs whose preferred leader changes.
func AssignLeaders(s *State) []LeaderChange {
	leader := map[uint64]string{}
	eligible := map[uint64][]string{}
	count := map[string]int{}
	for _, id := range s.ActiveNodes() {
		count[id] = 0
	}
	ids := s.logIDs()
	for _, id := range ids {
		l := s.logs[id]
		if l.State != LogActive {
			continue
		}
		var el []string
		for _, m := range l.Members {
			if s.active(m) && m != l.Leaving && !l.Lost(m) {
				el = append(el, m)
			}
		}
		if len(el) == 0 {
			continue
		}
		eligible[id] = el
		best := el[0]
		if best != l.Members[0] {
			for _, m := range el[1:] {
				if count[m] < count[best] || count[m] == count[best] && m < best {
					best = m
				}
			}
		}
		leader[id] = best
		count[best]++
	}
	// led lists, per node, the logs it leads, in id order.
	led := func(n string) []uint64 {
		var out []uint64
		for _, id := range ids {
			if leader[id] == n {
				out = append(out, id)
			}
		}
		return out
	}
	for shiftOne(s.ActiveNodes(), count, eligible, led, leader) {
	}
	var out []LeaderChange
	for _, id := range ids {
		l := s.logs[id]
		if n, ok := leader[id]; ok && n != l.Members[0] {
			out = append(out, LeaderChange{Log: id, Name: l.Name, Version: l.Version, Node: n})
		}
	}
	return out
}

// shiftOne finds the shortest chain of logs from a node u to a node v
// leading at least two fewer logs, trying u from the most loaded down,
// and moves leadership along it. It reports whether it found one.
func shiftOne(nodes []string, count map[string]int, eligible map[uint64][]string, led func(string) []uint64, leader map[uint64]string) bool {
	order := slices.Clone(nodes)
	slices.SortStableFunc(order, func(a, b string) int { return cmp.Compare(count[b], count[a]) })
	type step struct {
		from string
		log  uint64
	}
	for _, u := range order {
		prev := map[string]step{u: {}}
		queue := []string{u}
		for len(queue) > 0 {
			x := queue[0]
			queue = queue[1:]
			for _, id := range led(x) {
				for _, y := range eligible[id] {
					if _, seen := prev[y]; seen {
						continue
					}
					prev[y] = step{from: x, log: id}
					if count[y] <= count[u]-2 {
						for n := y; n != u; n = prev[n].from {
							leader[prev[n].log] = n
						}
						count[u]--
						count[y]++
						return true
					}
					queue = append(queue, y)
				}
			}
		}
	}
	return false
}
