package catalog

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// MaxLogID is the largest log id: the raftstore groups of log L are 4L+1
// to 4L+3, and the transport group id math.MaxUint64 is the catalog's.
const MaxLogID = (math.MaxUint64 - 3) / 4

// Result is what applying a command returns (FSM.Apply's value): the
// record the command concerns, after the command, or the reason it was
// refused. A refused command changes nothing but the applied index.
type Result struct {
	// Kind is the command's kind (0 for bytes that did not decode).
	Kind Kind
	// Log is the log's record after a log command (for a log that is gone,
	// its last record); nil for node commands, SetClusterID and refusals.
	// The caller may modify it.
	Log *Log
	// Node is the node's record after a node command (for a forgotten
	// node, its last record); nil otherwise.
	Node *Node
	// Gone reports that the command removed the log or node.
	Gone bool
	// Err is why the command was refused, nil if it was applied. It wraps
	// one of the package's sentinel errors.
	Err error
}

// tx builds the next State from the current one, copying each map at its
// first change, so the current State stays untouched (readers may hold it).
// A change therefore costs a copy of the map it touches: O(logs) for a
// log command, which a catalog of up to some 100,000 logs affords at the
// rate of management commands. A tx is used by the applying goroutine
// only, which owns its fields.
type tx struct {
	// s is the State being built; not published until the command is
	// accepted.
	s *State
	// nodesCopied and logsCopied say whether s's maps are already copies
	// of the current State's (logsCopied covers byName too).
	nodesCopied, logsCopied bool
}

func (t *tx) putNode(n *Node) {
	if !t.nodesCopied {
		t.s.nodes, t.nodesCopied = maps.Clone(t.s.nodes), true
	}
	t.s.nodes[n.ID] = n
}

func (t *tx) delNode(id string) {
	if !t.nodesCopied {
		t.s.nodes, t.nodesCopied = maps.Clone(t.s.nodes), true
	}
	delete(t.s.nodes, id)
}

func (t *tx) copyLogs() {
	if !t.logsCopied {
		t.s.logs, t.s.byName, t.logsCopied = maps.Clone(t.s.logs), maps.Clone(t.s.byName), true
	}
}

// putLog stores l, whose name must be its id's (or new).
func (t *tx) putLog(l *Log) {
	t.copyLogs()
	t.s.logs[l.ID] = l
	t.s.byName[l.Name] = l.ID
}

func (t *tx) delLog(l *Log) {
	t.copyLogs()
	delete(t.s.logs, l.ID)
	delete(t.s.byName, l.Name)
}

// apply returns the state after applying c at index, and the result. It
// never modifies s.
func apply(s *State, index uint64, c Command) (*State, Result) {
	next := *s
	next.index = index
	t := &tx{s: &next}
	res := t.apply(c)
	res.Kind = c.Kind()
	if res.Err != nil {
		refused := *s
		refused.index = index
		return &refused, Result{Kind: c.Kind(), Err: res.Err}
	}
	return &next, res
}

func (t *tx) apply(c Command) Result {
	switch c := c.(type) {
	case *Start:
		return t.start(c)
	case *AddNode:
		return t.addNode(c)
	case *MarkLeaving:
		return t.setNodeState(c.ID, NodeLeaving)
	case *MarkActive:
		return t.setNodeState(c.ID, NodeActive)
	case *ForgetNode:
		return t.forgetNode(c)
	case *CreateLog:
		return t.createLog(c)
	case *LogStarted:
		return t.logStarted(c)
	case *BeginMove:
		return t.beginMove(c)
	case *FinishMove:
		return t.endMove(c.ID, c.Version, true)
	case *CancelMove:
		return t.endMove(c.ID, c.Version, false)
	case *SetPreferredLeader:
		return t.setPreferredLeader(c)
	case *UpdateSettings:
		return t.updateSettings(c)
	case *DeleteLog:
		return t.deleteLog(c)
	case *ReplicaDropped:
		return t.replicaDropped(c)
	case *LogDeleted:
		return t.logDeleted(c)
	case *SetClusterID:
		return t.setClusterID(c)
	}
	return Result{Err: fmt.Errorf("%w: command %T", ErrUnsupported, c)}
}

func refuse(err error) Result { return Result{Err: err} }

func (t *tx) logResult(l *Log) Result   { return Result{Log: l.clone()} }
func (t *tx) nodeResult(n *Node) Result { nc := *n; return Result{Node: &nc} }

func (t *tx) start(c *Start) Result {
	if t.s.started {
		return refuse(fmt.Errorf("%w: the catalog has already started", ErrExists))
	}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		if err := validateNode(n.ID, n.RaftAddr, n.ClientAddr); err != nil {
			return refuse(fmt.Errorf("start: %w", err))
		}
		if seen[n.ID] {
			return refuse(fmt.Errorf("%w: start: node %q listed twice", ErrInvalidNode, n.ID))
		}
		seen[n.ID] = true
	}
	if err := distinct(c.Members); err != nil {
		return refuse(fmt.Errorf("start: default log: %w", err))
	}
	for _, m := range c.Members {
		if !seen[m] {
			return refuse(fmt.Errorf("%w: start: default log member %q is not one of the nodes", ErrInvalidMembers, m))
		}
	}
	if c.Settings.Replicas != len(c.Members) {
		return refuse(fmt.Errorf("%w: start: default log replicas %d, but %d members", ErrInvalidSettings, c.Settings.Replicas, len(c.Members)))
	}
	if err := validateRetention(c.Settings); err != nil {
		return refuse(fmt.Errorf("start: default log: %w", err))
	}
	for _, n := range c.Nodes {
		t.putNode(&Node{ID: n.ID, RaftAddr: n.RaftAddr, ClientAddr: n.ClientAddr, State: NodeActive})
	}
	def := t.s.logs[DefaultID].clone()
	def.Members = slices.Clone(c.Members)
	def.Settings = c.Settings
	def.Version++
	t.putLog(def)
	t.s.started = true
	return t.logResult(def)
}

func (t *tx) addNode(c *AddNode) Result {
	if err := validateNode(c.ID, c.RaftAddr, c.ClientAddr); err != nil {
		return refuse(err)
	}
	n := &Node{ID: c.ID, RaftAddr: c.RaftAddr, ClientAddr: c.ClientAddr, State: NodeActive}
	if old, ok := t.s.nodes[c.ID]; ok {
		n.State = old.State
		if *old == *n {
			return t.nodeResult(old)
		}
	}
	t.putNode(n)
	return t.nodeResult(n)
}

func (t *tx) setNodeState(id string, st NodeState) Result {
	old, ok := t.s.nodes[id]
	if !ok {
		return refuse(fmt.Errorf("%w: node %q", ErrNotFound, id))
	}
	if old.State == st {
		return t.nodeResult(old)
	}
	n := *old
	n.State = st
	t.putNode(&n)
	return t.nodeResult(&n)
}

func (t *tx) forgetNode(c *ForgetNode) Result {
	old, ok := t.s.nodes[c.ID]
	if !ok {
		return refuse(fmt.Errorf("%w: node %q", ErrNotFound, c.ID))
	}
	var in []string
	for _, id := range t.s.logIDs() {
		if l := t.s.logs[id]; l.HostedBy(c.ID) || slices.Contains(l.Initial, c.ID) {
			in = append(in, fmt.Sprintf("%q", l.Name))
		}
	}
	if len(in) > 0 {
		if len(in) > 5 {
			in = append(in[:5], fmt.Sprintf("and %d more", len(in)-5))
		}
		return refuse(fmt.Errorf("%w: node %q holds replicas of logs %s", ErrInUse, c.ID, strings.Join(in, ", ")))
	}
	t.delNode(c.ID)
	r := t.nodeResult(old)
	r.Gone = true
	return r
}

func (t *tx) createLog(c *CreateLog) Result {
	if err := ValidateName(c.Name); err != nil {
		return refuse(err)
	}
	if id, ok := t.s.byName[c.Name]; ok {
		what := "a log"
		if t.s.logs[id].State == LogDeleting {
			what = "a log being deleted"
		}
		return refuse(fmt.Errorf("%w: log %q: the name is %s's (id %d)", ErrExists, c.Name, what, id))
	}
	if err := ValidateSettings(c.Settings); err != nil {
		return refuse(fmt.Errorf("log %q: %w", c.Name, err))
	}
	if err := t.s.checkMembers(c.Members, c.Settings.Replicas); err != nil {
		return refuse(fmt.Errorf("log %q: %w", c.Name, err))
	}
	if t.s.nextID > MaxLogID {
		return refuse(fmt.Errorf("%w: log %q: every log id up to %d is used", ErrConflict, c.Name, uint64(MaxLogID)))
	}
	l := &Log{
		Name:     c.Name,
		ID:       t.s.nextID,
		Settings: c.Settings,
		State:    LogActive,
		Members:  slices.Clone(c.Members),
		Initial:  slices.Clone(c.Members),
		Version:  1,
	}
	t.s.nextID++
	t.putLog(l)
	return t.logResult(l)
}

// checkMembers checks a new replica set: replicas distinct active nodes.
func (s *State) checkMembers(members []string, replicas int) error {
	if len(members) != replicas {
		return fmt.Errorf("%w: %d members for %d replicas", ErrInvalidMembers, len(members), replicas)
	}
	if err := distinct(members); err != nil {
		return err
	}
	for _, m := range members {
		if err := s.checkActive(m); err != nil {
			return err
		}
	}
	return nil
}

// checkActive checks that id is an active node.
func (s *State) checkActive(id string) error {
	n, ok := s.nodes[id]
	switch {
	case !ok:
		return fmt.Errorf("%w: node %q is not in the catalog", ErrInvalidMembers, id)
	case n.State != NodeActive:
		return fmt.Errorf("%w: node %q is %v", ErrInvalidMembers, id, n.State)
	}
	return nil
}

// distinct fails if a node is listed twice.
func distinct(members []string) error {
	seen := make(map[string]bool, len(members))
	for _, m := range members {
		if seen[m] {
			return fmt.Errorf("%w: node %q listed twice", ErrInvalidMembers, m)
		}
		seen[m] = true
	}
	return nil
}

func validateRetention(s Settings) error {
	r := s
	r.Replicas = 1
	return ValidateSettings(r)
}

// logFor returns the log a log command names, checking the version the
// command was decided at (0: any).
func (t *tx) logFor(k Kind, id, version uint64) (*Log, error) {
	l, ok := t.s.logs[id]
	if !ok {
		return nil, fmt.Errorf("%w: %v: log id %d", ErrNotFound, k, id)
	}
	if version != 0 && version != l.Version {
		return nil, fmt.Errorf("%w: %v: log %q (id %d) is at version %d, the command was decided at %d", ErrConflict, k, l.Name, id, l.Version, version)
	}
	return l, nil
}

// activeLogFor is logFor for commands refused on a deleting log.
func (t *tx) activeLogFor(k Kind, id, version uint64) (*Log, error) {
	l, err := t.logFor(k, id, version)
	if err == nil && l.State == LogDeleting {
		err = fmt.Errorf("%w: %v: log %q (id %d)", ErrDeleting, k, l.Name, id)
	}
	return l, err
}

// changed stores a changed copy of a log record with its version raised.
func (t *tx) changed(l *Log) Result {
	l.Version++
	t.putLog(l)
	return t.logResult(l)
}

func (t *tx) logStarted(c *LogStarted) Result {
	l, err := t.logFor(KindLogStarted, c.ID, c.Version)
	if err != nil {
		return refuse(err)
	}
	if l.Initial == nil {
		return t.logResult(l)
	}
	n := l.clone()
	n.Initial = nil
	return t.changed(n)
}

func (t *tx) beginMove(c *BeginMove) Result {
	l, err := t.activeLogFor(KindBeginMove, c.ID, c.Version)
	if err != nil {
		return refuse(err)
	}
	switch {
	case l.Moving():
		return refuse(fmt.Errorf("%w: begin move: log %q is already moving %q to %q", ErrConflict, l.Name, l.Leaving, l.Joining))
	case l.Initial != nil:
		return refuse(fmt.Errorf("%w: begin move: log %q has not started", ErrConflict, l.Name))
	case !slices.Contains(l.Members, c.From):
		return refuse(fmt.Errorf("%w: begin move: %q is not a member of log %q", ErrInvalidMembers, c.From, l.Name))
	case c.From == c.To && !l.Lost(c.From):
		return refuse(fmt.Errorf("%w: begin move: %q's replica of log %q is not lost: there is nothing to rebuild", ErrInvalidMembers, c.From, l.Name))
	case c.From != c.To && slices.Contains(l.Members, c.To):
		return refuse(fmt.Errorf("%w: begin move: %q is already a member of log %q", ErrInvalidMembers, c.To, l.Name))
	case c.From != c.To && slices.ContainsFunc(l.Dropped, func(d string) bool { return d != c.From }):
		return refuse(fmt.Errorf("%w: begin move: log %q has lost replicas %v to rebuild first", ErrConflict, l.Name, l.Dropped))
	}
	if err := t.s.checkActive(c.To); err != nil {
		return refuse(fmt.Errorf("begin move: log %q: %w", l.Name, err))
	}
	n := l.clone()
	n.Joining, n.Leaving = c.To, c.From
	return t.changed(n)
}

// endMove finishes (finish) or cancels a log's move.
func (t *tx) endMove(id, version uint64, finish bool) Result {
	k := KindCancelMove
	if finish {
		k = KindFinishMove
	}
	l, err := t.activeLogFor(k, id, version)
	if err != nil {
		return refuse(err)
	}
	if !l.Moving() {
		return refuse(fmt.Errorf("%w: %v: log %q has no move under way", ErrConflict, k, l.Name))
	}
	n := l.clone()
	if finish {
		n.Members[slices.Index(n.Members, n.Leaving)] = n.Joining
		// A rebuilt replica is no longer lost; a lost one moved away is
		// no longer a member.
		n.Dropped = slices.DeleteFunc(n.Dropped, func(d string) bool { return d == n.Joining || d == n.Leaving })
		if len(n.Dropped) == 0 {
			n.Dropped = nil
		}
	}
	n.Joining, n.Leaving = "", ""
	return t.changed(n)
}

func (t *tx) setPreferredLeader(c *SetPreferredLeader) Result {
	l, err := t.activeLogFor(KindSetPreferredLeader, c.ID, c.Version)
	if err != nil {
		return refuse(err)
	}
	i := slices.Index(l.Members, c.Node)
	switch {
	case i < 0:
		return refuse(fmt.Errorf("%w: set preferred leader: %q is not a member of log %q", ErrInvalidMembers, c.Node, l.Name))
	case i == 0:
		return t.logResult(l)
	}
	n := l.clone()
	n.Members = append([]string{c.Node}, slices.Delete(n.Members, i, i+1)...)
	return t.changed(n)
}

func (t *tx) updateSettings(c *UpdateSettings) Result {
	l, err := t.activeLogFor(KindUpdateSettings, c.ID, c.Version)
	if err != nil {
		return refuse(err)
	}
	s := c.Settings
	if s.Replicas == 0 {
		s.Replicas = l.Settings.Replicas
	}
	if s.Replicas != l.Settings.Replicas {
		return refuse(fmt.Errorf("%w: log %q: replicas cannot change (%d to %d)", ErrInvalidSettings, l.Name, l.Settings.Replicas, s.Replicas))
	}
	if err := validateRetention(s); err != nil {
		return refuse(fmt.Errorf("log %q: %w", l.Name, err))
	}
	if s == l.Settings {
		return t.logResult(l)
	}
	n := l.clone()
	n.Settings = s
	return t.changed(n)
}

func (t *tx) deleteLog(c *DeleteLog) Result {
	if c.ID == DefaultID {
		return refuse(fmt.Errorf("%w: log %q cannot be deleted", ErrReserved, DefaultName))
	}
	l, err := t.activeLogFor(KindDeleteLog, c.ID, c.Version)
	if err != nil {
		return refuse(err)
	}
	n := l.clone()
	n.State = LogDeleting
	n.Dropped = nil // lost replicas (a rebuild's may hold data by now) report again
	return t.changed(n)
}

func (t *tx) replicaDropped(c *ReplicaDropped) Result {
	l, err := t.logFor(KindReplicaDropped, c.ID, c.Version)
	if err != nil {
		return refuse(err)
	}
	switch {
	case l.State == LogActive && c.Node == l.Joining:
		return refuse(fmt.Errorf("%w: replica dropped: %q is joining log %q: cancel the move first", ErrConflict, c.Node, l.Name))
	case l.State == LogActive && !slices.Contains(l.Members, c.Node):
		return refuse(fmt.Errorf("%w: replica dropped: %q is not a member of log %q", ErrInvalidMembers, c.Node, l.Name))
	case !l.HostedBy(c.Node):
		return refuse(fmt.Errorf("%w: replica dropped: %q does not host log %q", ErrInvalidMembers, c.Node, l.Name))
	}
	i, found := slices.BinarySearch(l.Dropped, c.Node)
	if found {
		return t.logResult(l)
	}
	n := l.clone()
	n.Dropped = slices.Insert(n.Dropped, i, c.Node)
	if l.State == LogActive {
		return t.changed(n) // a lost replica (see Log)
	}
	for _, h := range n.Hosts() {
		if _, ok := slices.BinarySearch(n.Dropped, h); !ok {
			return t.changed(n)
		}
	}
	n.Version++
	t.delLog(n)
	return Result{Log: n, Gone: true}
}

func (t *tx) logDeleted(c *LogDeleted) Result {
	l, err := t.logFor(KindLogDeleted, c.ID, c.Version)
	if err != nil {
		return refuse(err)
	}
	if l.State != LogDeleting {
		return refuse(fmt.Errorf("%w: log deleted: log %q is %v", ErrConflict, l.Name, l.State))
	}
	n := l.clone()
	n.Version++
	t.delLog(n)
	return Result{Log: n, Gone: true}
}

func (t *tx) setClusterID(c *SetClusterID) Result {
	have := t.s.clusterID
	switch {
	case c.ID.IsZero():
		return refuse(fmt.Errorf("%w: set cluster id: the zero id, which is no cluster's", ErrInvalidClusterID))
	case have == c.ID:
		return Result{}
	case !have.IsZero():
		return refuse(fmt.Errorf("%w: set cluster id: the catalog has cluster id %v, the command gives %v", ErrExists, have, c.ID))
	}
	t.s.clusterID = c.ID
	return Result{}
}
