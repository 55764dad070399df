package catalog

import "fmt"

// Commands change the catalog. A node proposes the bytes of Encode to the
// catalog's raft group; every node applies them with FSM.Apply, which
// validates each against the state at that point, so a command decided on
// an older state is refused rather than misapplied.
//
// Encoding (wire format: it is in the catalog group's raft log forever):
//
//	command = version u8 (CommandVersion) | kind u8 | fields
//
// with the fields of each kind in the order of its struct, in the
// primitives of codec.go; a log command starts with uint id | uint version.
// Decode refuses a version or kind it does not know with ErrUnsupported,
// and bytes that do not decode with ErrMalformed.
//
// Upgrades: a node that does not know a kind refuses it at apply while a
// newer node applies it, so the catalogs would differ. A new kind or
// version may therefore be proposed only once every node of the cluster
// runs code that knows it: the proposer must check the cluster's version
// first (this package cannot).

// maxField is the longest string a command may carry, a bound on what a
// damaged length can make Decode allocate. The limits on names, ids and
// addresses are checked at apply, which refuses a command that breaks
// them with the error that says why.
const maxField = 1 << 16

// CommandVersion is the version of the command encoding this code writes
// and the only one it reads. Wire format.
const CommandVersion byte = 1

// Kind is a command's kind. Wire format: a kind's number is never reused.
type Kind uint8

// Command kinds.
const (
	KindStart              Kind = 1
	KindAddNode            Kind = 2
	KindMarkLeaving        Kind = 3
	KindMarkActive         Kind = 4
	KindForgetNode         Kind = 5
	KindCreateLog          Kind = 6
	KindLogStarted         Kind = 7
	KindBeginMove          Kind = 8
	KindFinishMove         Kind = 9
	KindCancelMove         Kind = 10
	KindSetPreferredLeader Kind = 11
	KindUpdateSettings     Kind = 12
	KindDeleteLog          Kind = 13
	KindReplicaDropped     Kind = 14
	KindLogDeleted         Kind = 15
	KindSetClusterID       Kind = 16
)

var kindNames = [...]string{
	KindStart:              "start",
	KindAddNode:            "add node",
	KindMarkLeaving:        "mark leaving",
	KindMarkActive:         "mark active",
	KindForgetNode:         "forget node",
	KindCreateLog:          "create log",
	KindLogStarted:         "log started",
	KindBeginMove:          "begin move",
	KindFinishMove:         "finish move",
	KindCancelMove:         "cancel move",
	KindSetPreferredLeader: "set preferred leader",
	KindUpdateSettings:     "update settings",
	KindDeleteLog:          "delete log",
	KindReplicaDropped:     "replica dropped",
	KindLogDeleted:         "log deleted",
	KindSetClusterID:       "set cluster id",
}

// String returns the kind's name, as errors show it.
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Command is one of this package's command types.
type Command interface {
	// Kind returns the command's kind.
	Kind() Kind
	encode(w *writer)
	decode(r *reader)
}

// Start starts the catalog: the nodes of the default log's committed
// configuration, all active, and the default log's members and settings.
// The catalog group's first leader proposes it once; a second Start is
// refused with ErrExists. The default log's Replicas must equal the count
// of Members (today's single log may have any count of members).
type Start struct {
	// Nodes are the cluster's nodes, which start active; their State is
	// neither encoded nor read.
	Nodes []Node
	// Members are the default log's members, nodes of Nodes; none when
	// the caller keeps the default log out of placement (its members are
	// then the cluster's voters, which the catalog does not track: package
	// node does so).
	Members []string
	// Settings are the default log's replicas and retention.
	Settings Settings
}

// AddNode adds an active node, or updates the addresses of a known node
// (keeping its state: a drained node that restarts stays leaving).
type AddNode struct {
	ID, RaftAddr, ClientAddr string
}

// MarkLeaving marks a node leaving: it takes no new replicas and the
// planner moves its replicas away.
type MarkLeaving struct{ ID string }

// MarkActive makes a leaving node active again.
type MarkActive struct{ ID string }

// ForgetNode removes a node from the catalog. It is refused with ErrInUse
// while the node hosts any log, deleting ones included.
type ForgetNode struct{ ID string }

// CreateLog creates a log with the next log id, in state active, with
// Members also its initial members. The proposer chooses the members
// (Place). Refused when the name is invalid or taken (ErrExists, also for
// DefaultName and a name still being deleted), the settings are invalid,
// or Members is not Settings.Replicas distinct active nodes.
type CreateLog struct {
	Name     string
	Settings Settings
	Members  []string
}

// LogStarted clears a log's initial members: its raft group has started
// (the log's leader proposes it once it leads). Refused if already clear.
type LogStarted struct{ ID, Version uint64 }

// BeginMove starts the move of the replica on From to To (see Log). From
// must be a member, To an active node that does not host the log; the log
// must be active with no move under way and no lost replica but maybe
// From's. From equal to To is the rebuild of From's lost replica (in
// Dropped) on its own node.
type BeginMove struct {
	ID, Version uint64
	From, To    string
}

// FinishMove finishes a log's move: To replaces From in Members, and
// neither is in Dropped any more. The catalog's leader proposes it once To
// is a voter and From is out of the raft configuration (for a rebuild:
// once the member is a voter again). A deleting log's move is neither finished nor cancelled
// (ErrDeleting): every host, the joining node included, drops its data.
type FinishMove struct{ ID, Version uint64 }

// CancelMove abandons a log's move, leaving Members as they were.
type CancelMove struct{ ID, Version uint64 }

// SetPreferredLeader puts Node, a member, first in a log's Members.
type SetPreferredLeader struct {
	ID, Version uint64
	Node        string
}

// UpdateSettings sets a log's retention. Settings.Replicas must be the
// log's (or 0, meaning unchanged): the replica count does not change.
type UpdateSettings struct {
	ID, Version uint64
	Settings    Settings
}

// DeleteLog puts a log in state deleting. Refused for the default log
// (ErrReserved) and for a log already deleting (ErrDeleting).
type DeleteLog struct{ ID, Version uint64 }

// ReplicaDropped records that Node, a host of a deleting log, has shut its
// raft group down and dropped its data. When every host has, the log is
// gone (Result.Gone) and its name free.
//
// On an active log it records that Node, a member, lost its replica (its
// data dir was wiped): Node joins Dropped, and its replica is rebuilt (see
// Log). Refused while Node is the joining node of a move (ErrConflict):
// the move is cancelled first.
type ReplicaDropped struct {
	ID, Version uint64
	Node        string
}

// LogDeleted removes a deleting log whatever its hosts reported: the
// catalog leader's decision when a host will never report (it was lost).
type LogDeleted struct{ ID, Version uint64 }

// SetClusterID gives the catalog its cluster id (see ClusterID). A
// catalog without an id takes ID; one that has ID already is left as it
// is and the command succeeds, so that a catalog leader may propose its
// cluster's id at every term it leads, for nodes that missed it; one with
// another id refuses it (ErrExists, naming both ids) and keeps its own. The
// zero id is refused (ErrInvalidClusterID). It applies whether or not the
// catalog has started, and changes no log (no log's Version).
//
// Encoding: the 16 bytes of ID. A node of an earlier release does not
// know the kind and refuses it while newer nodes apply it, so their
// catalogs would differ, and it cannot read the snapshot of a catalog
// with an id (version 2, see snapshot.go): propose it only once every
// node of the cluster runs a release that knows it.
type SetClusterID struct{ ID ClusterID }

// Kind implements Command.
func (*Start) Kind() Kind { return KindStart }

// Kind implements Command.
func (*AddNode) Kind() Kind { return KindAddNode }

// Kind implements Command.
func (*MarkLeaving) Kind() Kind { return KindMarkLeaving }

// Kind implements Command.
func (*MarkActive) Kind() Kind { return KindMarkActive }

// Kind implements Command.
func (*ForgetNode) Kind() Kind { return KindForgetNode }

// Kind implements Command.
func (*CreateLog) Kind() Kind { return KindCreateLog }

// Kind implements Command.
func (*LogStarted) Kind() Kind { return KindLogStarted }

// Kind implements Command.
func (*BeginMove) Kind() Kind { return KindBeginMove }

// Kind implements Command.
func (*FinishMove) Kind() Kind { return KindFinishMove }

// Kind implements Command.
func (*CancelMove) Kind() Kind { return KindCancelMove }

// Kind implements Command.
func (*SetPreferredLeader) Kind() Kind { return KindSetPreferredLeader }

// Kind implements Command.
func (*UpdateSettings) Kind() Kind { return KindUpdateSettings }

// Kind implements Command.
func (*DeleteLog) Kind() Kind { return KindDeleteLog }

// Kind implements Command.
func (*ReplicaDropped) Kind() Kind { return KindReplicaDropped }

// Kind implements Command.
func (*LogDeleted) Kind() Kind { return KindLogDeleted }

// Kind implements Command.
func (*SetClusterID) Kind() Kind { return KindSetClusterID }

// newCommand returns a zero command of kind k, nil for an unknown kind.
func newCommand(k Kind) Command {
	switch k {
	case KindStart:
		return new(Start)
	case KindAddNode:
		return new(AddNode)
	case KindMarkLeaving:
		return new(MarkLeaving)
	case KindMarkActive:
		return new(MarkActive)
	case KindForgetNode:
		return new(ForgetNode)
	case KindCreateLog:
		return new(CreateLog)
	case KindLogStarted:
		return new(LogStarted)
	case KindBeginMove:
		return new(BeginMove)
	case KindFinishMove:
		return new(FinishMove)
	case KindCancelMove:
		return new(CancelMove)
	case KindSetPreferredLeader:
		return new(SetPreferredLeader)
	case KindUpdateSettings:
		return new(UpdateSettings)
	case KindDeleteLog:
		return new(DeleteLog)
	case KindReplicaDropped:
		return new(ReplicaDropped)
	case KindLogDeleted:
		return new(LogDeleted)
	case KindSetClusterID:
		return new(SetClusterID)
	}
	return nil
}

// Encode returns the encoding of c.
func Encode(c Command) []byte {
	w := &writer{b: []byte{CommandVersion, byte(c.Kind())}}
	c.encode(w)
	return w.b
}

// Decode decodes a command that Encode wrote. Every byte must be used.
func Decode(b []byte) (Command, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: command of %d bytes", ErrMalformed, len(b))
	}
	if b[0] != CommandVersion {
		return nil, fmt.Errorf("%w: command version %d, this node reads version %d", ErrUnsupported, b[0], CommandVersion)
	}
	c := newCommand(Kind(b[1]))
	if c == nil {
		return nil, fmt.Errorf("%w: command kind %d", ErrUnsupported, b[1])
	}
	r := &reader{b: b, off: 2}
	c.decode(r)
	r.end()
	if r.err != nil {
		return nil, fmt.Errorf("%v command: %w", c.Kind(), r.err)
	}
	return c, nil
}

func (c *Start) encode(w *writer) {
	w.uint(uint64(len(c.Nodes)))
	for _, n := range c.Nodes {
		w.string(n.ID)
		w.string(n.RaftAddr)
		w.string(n.ClientAddr)
	}
	w.strings(c.Members)
	w.settings(c.Settings)
}

func (c *Start) decode(r *reader) {
	n := r.count(3)
	for i := 0; i < n && r.err == nil; i++ {
		c.Nodes = append(c.Nodes, Node{ID: r.string(maxField), RaftAddr: r.string(maxField), ClientAddr: r.string(maxField)})
	}
	c.Members = r.strings(maxField)
	c.Settings = r.settings()
}

func (c *AddNode) encode(w *writer) {
	w.string(c.ID)
	w.string(c.RaftAddr)
	w.string(c.ClientAddr)
}

func (c *AddNode) decode(r *reader) {
	c.ID, c.RaftAddr, c.ClientAddr = r.string(maxField), r.string(maxField), r.string(maxField)
}

func (c *MarkLeaving) encode(w *writer) { w.string(c.ID) }
func (c *MarkLeaving) decode(r *reader) { c.ID = r.string(maxField) }
func (c *MarkActive) encode(w *writer)  { w.string(c.ID) }
func (c *MarkActive) decode(r *reader)  { c.ID = r.string(maxField) }
func (c *ForgetNode) encode(w *writer)  { w.string(c.ID) }
func (c *ForgetNode) decode(r *reader)  { c.ID = r.string(maxField) }

func (c *CreateLog) encode(w *writer) {
	w.string(c.Name)
	w.settings(c.Settings)
	w.strings(c.Members)
}

func (c *CreateLog) decode(r *reader) {
	c.Name = r.string(maxField)
	c.Settings = r.settings()
	c.Members = r.strings(maxField)
}

// encodeRef and decodeRef write and read the id and version that start a log command.
func encodeRef(w *writer, id, version uint64) {
	w.uint(id)
	w.uint(version)
}

func decodeRef(r *reader) (id, version uint64) { return r.uint(), r.uint() }

func (c *LogStarted) encode(w *writer) { encodeRef(w, c.ID, c.Version) }
func (c *LogStarted) decode(r *reader) { c.ID, c.Version = decodeRef(r) }
func (c *FinishMove) encode(w *writer) { encodeRef(w, c.ID, c.Version) }
func (c *FinishMove) decode(r *reader) { c.ID, c.Version = decodeRef(r) }
func (c *CancelMove) encode(w *writer) { encodeRef(w, c.ID, c.Version) }
func (c *CancelMove) decode(r *reader) { c.ID, c.Version = decodeRef(r) }
func (c *DeleteLog) encode(w *writer)  { encodeRef(w, c.ID, c.Version) }
func (c *DeleteLog) decode(r *reader)  { c.ID, c.Version = decodeRef(r) }
func (c *LogDeleted) encode(w *writer) { encodeRef(w, c.ID, c.Version) }
func (c *LogDeleted) decode(r *reader) { c.ID, c.Version = decodeRef(r) }

func (c *BeginMove) encode(w *writer) {
	encodeRef(w, c.ID, c.Version)
	w.string(c.From)
	w.string(c.To)
}

func (c *BeginMove) decode(r *reader) {
	c.ID, c.Version = decodeRef(r)
	c.From, c.To = r.string(maxField), r.string(maxField)
}

func (c *SetPreferredLeader) encode(w *writer) {
	encodeRef(w, c.ID, c.Version)
	w.string(c.Node)
}

func (c *SetPreferredLeader) decode(r *reader) {
	c.ID, c.Version = decodeRef(r)
	c.Node = r.string(maxField)
}

func (c *UpdateSettings) encode(w *writer) {
	encodeRef(w, c.ID, c.Version)
	w.settings(c.Settings)
}

func (c *UpdateSettings) decode(r *reader) {
	c.ID, c.Version = decodeRef(r)
	c.Settings = r.settings()
}

func (c *ReplicaDropped) encode(w *writer) {
	encodeRef(w, c.ID, c.Version)
	w.string(c.Node)
}

func (c *ReplicaDropped) decode(r *reader) {
	c.ID, c.Version = decodeRef(r)
	c.Node = r.string(maxField)
}

func (c *SetClusterID) encode(w *writer) { w.clusterID(c.ID) }
func (c *SetClusterID) decode(r *reader) { c.ID = r.clusterID() }
