package catalog

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// DefaultName is the name of the log with id DefaultID. It exists from the
// catalog's start (it is today's single log) and can be neither created
// nor deleted.
const DefaultName = "default"

// DefaultID is the id of the default log. Logs created later get ids from
// 1 up, never reused.
const DefaultID uint64 = 0

// Name limits.
const (
	// MaxNameLen is the longest log name, in bytes (names are ASCII).
	MaxNameLen = 64
	// MaxNodeIDLen is the longest node id, in bytes.
	MaxNodeIDLen = 256
	// MaxAddrLen is the longest node address, in bytes.
	MaxAddrLen = 256
)

// NodeState is the state of a node in the cluster.
type NodeState uint8

// Node states. They are wire format (commands and snapshots).
const (
	// NodeActive is a node that takes replicas.
	NodeActive NodeState = 1
	// NodeLeaving is a node being drained before its removal: it takes no
	// new replicas, and the rebalance planner moves each of its replicas
	// to another node.
	NodeLeaving NodeState = 2
)

// String returns "active" or "leaving".
func (s NodeState) String() string {
	switch s {
	case NodeActive:
		return "active"
	case NodeLeaving:
		return "leaving"
	}
	return fmt.Sprintf("NodeState(%d)", uint8(s))
}

// LogState is the state of a log.
type LogState uint8

// Log states. They are wire format (commands and snapshots).
const (
	// LogActive is a log that serves records.
	LogActive LogState = 1
	// LogDeleting is a log being deleted: its name stays taken, every host
	// shuts its raft group down and drops its data, then the log is gone.
	LogDeleting LogState = 2
)

// String returns "active" or "deleting".
func (s LogState) String() string {
	switch s {
	case LogActive:
		return "active"
	case LogDeleting:
		return "deleting"
	}
	return fmt.Sprintf("LogState(%d)", uint8(s))
}

// Node is a node of the cluster as the catalog knows it.
type Node struct {
	// ID is the node's raft server id, unique in the cluster.
	ID string
	// RaftAddr is the address of the node's raft listener.
	RaftAddr string
	// ClientAddr is the address of the node's client listener; empty
	// until the node has registered it (a node the catalog started with
	// may be known by its raft address only).
	ClientAddr string
	// State is NodeActive or NodeLeaving.
	State NodeState
}

// Settings are a log's settings, chosen at create.
type Settings struct {
	// Replicas is how many nodes hold the log: 1, 3 or 5. It does not
	// change after create.
	Replicas int
	// RetentionBytes, when above zero, is how many bytes of records the
	// log retains; older records are trimmed. Zero keeps every record.
	RetentionBytes int64
	// RetentionAge, when above zero, is how long the log retains a record.
	// Zero keeps every record.
	RetentionAge time.Duration
}

// Log is a log's record in the catalog.
//
// Replica moves. Members is always the log's replica count of distinct
// nodes. A move of one replica from node F to node T is three steps, each
// a command: BeginMove records T as Joining and F as Leaving (Members
// still holds F); the log's leader adds T to the raft group as a nonvoter,
// waits until it has caught up, promotes it, then removes F; FinishMove
// then replaces F by T in Members, at F's position, and clears the move.
// CancelMove abandons a move (T failed or left) and leaves Members as it
// was; the log's leader then removes T from the raft group if it was
// added. While a move is under way the log is hosted by its Members and
// Joining (Hosts), so F keeps its data until the move is finished and T
// holds it from the start: a move never leaves fewer than Replicas copies.
// A log has at most one move under way.
//
// Lost replicas. A member whose node lost its data (its data dir was
// wiped and it rejoined the cluster) is reported with ReplicaDropped
// while the log is active: it is then in Dropped, holds nothing, and must
// not vote in the log's raft group with its old membership. The log's
// leader demotes its old voter to a nonvoter (committed by the other
// voters, which hold every committed entry); then a rebuild, a move of
// the member to itself (BeginMove with From and To the member), has the
// node start an empty replica as a new member, which the leader promotes
// once it has caught up; FinishMove then takes the member out of
// Dropped. No other move is planned while a log has a lost replica.
type Log struct {
	// Name is the log's name, unique among the catalog's logs.
	Name string
	// ID is the log's id, never reused.
	ID uint64
	// Settings are the log's replicas and retention.
	Settings Settings
	// State is LogActive or LogDeleting.
	State LogState
	// Members is the desired replica set, node ids. The first is the
	// preferred leader: the node asked to take the log's leadership when
	// leaders are spread.
	Members []string
	// Initial is the set the log's raft group is bootstrapped with: the
	// members at create, until the group reports it has started
	// (LogStarted); nil after, so that a node added later never
	// bootstraps. A host bootstraps only if it is in Initial and has no
	// state of its own.
	Initial []string
	// Joining is the node a move is adding, "" when no move is under way.
	Joining string
	// Leaving is the member a move is replacing, "" when no move is under
	// way.
	Leaving string
	// Dropped is, for a deleting log, the hosts that have reported
	// dropping its data; for an active log, the members that lost their
	// replica and are being rebuilt (see Log). Sorted. Both are
	// ReplicaDropped's.
	Dropped []string
	// Version is raised by every change of the record; a command may name
	// the version it was decided on, and is refused if the record changed
	// since.
	Version uint64
}

// Hosts returns the nodes that hold the log: its members and, during a
// move, the joining node, in that order (a rebuild's joining node is a
// member, listed once).
func (l *Log) Hosts() []string {
	h := slices.Clone(l.Members)
	if l.Joining != "" && l.Joining != l.Leaving {
		h = append(h, l.Joining)
	}
	return h
}

// HostedBy reports whether node holds the log (a member or a move's joining
// node).
func (l *Log) HostedBy(node string) bool {
	return l.Joining == node || slices.Contains(l.Members, node)
}

// Moving reports whether a move is under way.
func (l *Log) Moving() bool { return l.Joining != "" }

// Rebuilding reports whether a move under way is the rebuild of a lost
// replica on its own node (see Log).
func (l *Log) Rebuilding() bool { return l.Joining != "" && l.Joining == l.Leaving }

// Lost reports whether node is a member of the active log l whose replica
// was lost (in Dropped): it must not vote in the log's raft group until
// its rebuild is finished.
func (l *Log) Lost(node string) bool {
	_, found := slices.BinarySearch(l.Dropped, node)
	return l.State == LogActive && found
}

// PreferredLeader returns the first member, "" if the log has none (the
// default log before the catalog has started).
func (l *Log) PreferredLeader() string {
	if len(l.Members) == 0 {
		return ""
	}
	return l.Members[0]
}

// clone returns a deep copy of l.
func (l *Log) clone() *Log {
	c := *l
	c.Members = slices.Clone(l.Members)
	c.Initial = slices.Clone(l.Initial)
	c.Dropped = slices.Clone(l.Dropped)
	return &c
}

// ValidateName reports whether name is a valid log name: 1 to MaxNameLen
// characters of A-Z, a-z, 0-9, '_' and '-', starting with a letter or a
// digit. Names are case-sensitive. The error wraps ErrInvalidName and
// gives the reason. DefaultName is a valid name (of the default log).
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %q is %d bytes long, the most is %d", ErrInvalidName, truncate(name), len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if i == 0 && !alnum {
			return fmt.Errorf("%w: %q must start with a letter or a digit", ErrInvalidName, name)
		}
		if !alnum && c != '_' && c != '-' {
			return fmt.Errorf("%w: %q has %q at byte %d; only A-Z a-z 0-9 _ - are allowed", ErrInvalidName, name, c, i)
		}
	}
	return nil
}

// truncate shortens a long string for an error message.
func truncate(s string) string {
	if len(s) > MaxNameLen {
		return s[:MaxNameLen] + "..."
	}
	return s
}

// ValidateSettings reports whether s are valid settings for a new log:
// replicas 1, 3 or 5, retention bytes and age not negative. The error
// wraps ErrInvalidSettings.
func ValidateSettings(s Settings) error {
	switch {
	case s.Replicas != 1 && s.Replicas != 3 && s.Replicas != 5:
		return fmt.Errorf("%w: replicas %d, must be 1, 3 or 5", ErrInvalidSettings, s.Replicas)
	case s.RetentionBytes < 0:
		return fmt.Errorf("%w: retention bytes %d is negative", ErrInvalidSettings, s.RetentionBytes)
	case s.RetentionAge < 0:
		return fmt.Errorf("%w: retention age %v is negative", ErrInvalidSettings, s.RetentionAge)
	}
	return nil
}

// validateNodeID checks a node id.
func validateNodeID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty node id", ErrInvalidNode)
	case len(id) > MaxNodeIDLen:
		return fmt.Errorf("%w: node id of %d bytes, the most is %d", ErrInvalidNode, len(id), MaxNodeIDLen)
	}
	return nil
}

// validateNode checks a node's id and addresses. The client address may be
// empty (not registered yet).
func validateNode(id, raftAddr, clientAddr string) error {
	if err := validateNodeID(id); err != nil {
		return err
	}
	switch {
	case raftAddr == "":
		return fmt.Errorf("%w: node %q: empty raft address", ErrInvalidNode, id)
	case len(raftAddr) > MaxAddrLen || len(clientAddr) > MaxAddrLen:
		return fmt.Errorf("%w: node %q: address longer than %d bytes", ErrInvalidNode, id, MaxAddrLen)
	}
	return nil
}

// State is one version of the catalog. A State is immutable: Apply builds
// a new one for each command, so a State obtained from FSM.State can be
// read from any goroutine, for as long as wanted, without locks. Its
// accessors return copies that the caller may modify. Its fields are
// written only while the applying goroutine builds it (apply.go,
// snapshot.go), before it is published, and never after.
type State struct {
	// index is the raft index of the last command applied.
	index uint64
	// started is set by the Start command.
	started bool
	// clusterID is the cluster's id, zero until set by SetClusterID.
	clusterID ClusterID
	// nextID is the id the next created log gets.
	nextID uint64
	// nodes maps a node id to its record. Never modified once the State
	// is published; records are never modified either.
	nodes map[string]*Node
	// logs maps a log id to its record, as nodes.
	logs map[uint64]*Log
	// byName maps a log name to its id, as nodes.
	byName map[string]uint64
}

// initialState returns the catalog before any command: not started, the
// default log with no members, next id 1. It is the same on every node,
// which applying the same commands needs.
func initialState() *State {
	def := &Log{Name: DefaultName, ID: DefaultID, State: LogActive, Version: 1}
	return &State{
		nextID: DefaultID + 1,
		nodes:  map[string]*Node{},
		logs:   map[uint64]*Log{DefaultID: def},
		byName: map[string]uint64{DefaultName: DefaultID},
	}
}

// Index returns the raft index of the last command applied to the
// catalog, 0 before the first.
func (s *State) Index() uint64 { return s.index }

// Started reports whether the catalog has applied its Start command.
func (s *State) Started() bool { return s.started }

// ClusterID returns the cluster's id, the zero id until the catalog has
// been given one. Once set, it never changes.
func (s *State) ClusterID() ClusterID { return s.clusterID }

// NextID returns the id the next created log will get.
func (s *State) NextID() uint64 { return s.nextID }

// Log returns the log named name.
func (s *State) Log(name string) (Log, bool) {
	id, ok := s.byName[name]
	if !ok {
		return Log{}, false
	}
	return *s.logs[id].clone(), true
}

// LogByID returns the log with id id.
func (s *State) LogByID(id uint64) (Log, bool) {
	l, ok := s.logs[id]
	if !ok {
		return Log{}, false
	}
	return *l.clone(), true
}

// LogsByName returns every log, deleting ones included, sorted by name
// (byte order), as a listing shows them.
func (s *State) LogsByName() []Log {
	out := s.Logs()
	slices.SortFunc(out, func(a, b Log) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Logs returns every log, deleting ones included, sorted by id.
func (s *State) Logs() []Log {
	out := make([]Log, 0, len(s.logs))
	for _, id := range s.logIDs() {
		out = append(out, *s.logs[id].clone())
	}
	return out
}

// LogsOf returns the logs node hosts (a member or a move's joining node),
// deleting ones included, sorted by id. The node's reconciler runs a raft
// group for each.
func (s *State) LogsOf(node string) []Log {
	var out []Log
	for _, id := range s.logIDs() {
		if l := s.logs[id]; l.HostedBy(node) {
			out = append(out, *l.clone())
		}
	}
	return out
}

// Node returns the node with id id.
func (s *State) Node(id string) (Node, bool) {
	n, ok := s.nodes[id]
	if !ok {
		return Node{}, false
	}
	return *n, true
}

// Nodes returns every node, sorted by id.
func (s *State) Nodes() []Node {
	out := make([]Node, 0, len(s.nodes))
	for _, id := range s.nodeIDs() {
		out = append(out, *s.nodes[id])
	}
	return out
}

// ActiveNodes returns the ids of the active nodes, sorted.
func (s *State) ActiveNodes() []string {
	var out []string
	for _, id := range s.nodeIDs() {
		if s.nodes[id].State == NodeActive {
			out = append(out, id)
		}
	}
	return out
}

// logIDs returns the log ids in increasing order.
func (s *State) logIDs() []uint64 {
	ids := make([]uint64, 0, len(s.logs))
	for id := range s.logs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// nodeIDs returns the node ids in increasing order.
func (s *State) nodeIDs() []string {
	ids := make([]string, 0, len(s.nodes))
	for id := range s.nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// active reports whether id is an active node.
func (s *State) active(id string) bool {
	n, ok := s.nodes[id]
	return ok && n.State == NodeActive
}
