package replica

import (
	"container/list"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The state machine keeps no records: they stay in the raft log, which is
// the commit log. What it keeps is small and replicated:
//
//   - floor: the first retained index. Trims raise it; reads below it fail
//     with Trimmed; entries below it are deleted once a snapshot covers it.
//   - a byte ledger: the encoded size (see streamRecordSize) of every
//     command entry applied (total), the size below the floor (floorCum),
//     and a mark every markEvery commands. Snapshot streams carry the
//     retained commands, and raft needs their exact size before sending
//     one, so the ledger makes that size known without reading the log;
//     marks also let the leader pick a trim index for byte and age
//     retention cheaply.
//   - void indexes: record entries that repeat (or run ahead of) a part of
//     an Append already stored; reads skip them, so a retried Append is
//     stored exactly once.
//   - client sessions: per client id, the indexes of its recent Appends,
//     to answer a retry with the original indexes, and the evicted
//     sessions, to refuse what cannot be checked (sessions.go).
//   - members: node id to client address, so followers can name the
//     leader's client address.
const (
	// markEvery is how many command entries lie between ledger marks.
	markEvery = 1024
	// MaxSessions bounds the client sessions kept; the least recently used
	// is forgotten first.
	MaxSessions = 8192
	// sessionWindow is how many recent Appends a session remembers. A
	// client must keep fewer Appends than this in flight.
	sessionWindow = 1024
	// sessionMaxIndexes bounds the record indexes a session remembers
	// (8 bytes each): 1,024 appends of 256 records. Past it the lowest
	// sequence numbers are forgotten early.
	sessionMaxIndexes = 1 << 18
)

// Mark records that the command entries below index add up to cum bytes.
type Mark struct{ Index, Cum uint64 }

// session is one client's duplicate-suppression state.
type session struct {
	id      string
	floor   uint64              // Appends below this sequence are forgotten
	reqs    map[uint64]*request // by sequence number
	order   []uint64            // sequence numbers of reqs, increasing
	indexes int                 // indexes held by reqs
	elem    *list.Element       // in fsm.lru; front is most recent
}

// request is what a session remembers of one Append.
type request struct {
	n       uint64   // records in the Append
	indexes []uint64 // raft indexes of the records stored so far, in order
}

// AppendResult is the FSM's answer to one record entry.
type AppendResult struct {
	Void bool // the entry repeats or runs ahead of its Append; not a record
	Dup  bool // the entry repeats a record already stored
	// Indexes is set when, after this entry, the Append is complete.
	Indexes []uint64
	Err     error
}

// FSM is the node's raft.BatchingFSM.
type FSM struct {
	view   *LogView
	logger hclog.Logger

	// OnTrim is called, from the FSM goroutine, when a trim raised the
	// floor. It must not block.
	OnTrim func(floor uint64)

	mu       sync.RWMutex // guards the state below
	floor    uint64
	floorCum uint64
	total    uint64
	cmds     uint64
	marks    []Mark
	voids    []uint64 // increasing; replaced, never shrunk in place
	sessions map[string]*session
	lru      list.List
	members  map[string]string
	// evicted sessions (sessions.go): by client id hash, and in the order
	// of eviction, with stale entries for sessions opened again.
	evicted    map[uint64]evictedSession
	evictOrder []evictedRef
	evictNext  uint64 // the pos of the next eviction

	// control is the log's control state machine (control.go); nil for a
	// log that carries none, whose snapshot's control state, if any, is
	// kept as controlBlob. Set before raft starts; guarded by mu.
	control     Control
	controlBlob []byte

	Applied atomic.Uint64 // highest index applied
	wakeMu  sync.Mutex
	wake    chan struct{} // closed and replaced when applied advances
}

// NewFSM returns an empty state machine over view.
func NewFSM(view *LogView, logger hclog.Logger) *FSM {
	f := &FSM{view: view, logger: logger, wake: make(chan struct{})}
	f.reset()
	return f
}

func (f *FSM) reset() {
	f.floor, f.floorCum, f.total, f.cmds = 1, 0, 0, 0
	f.marks, f.voids = nil, nil
	f.sessions = map[string]*session{}
	f.lru.Init()
	f.evicted, f.evictOrder, f.evictNext = map[uint64]evictedSession{}, nil, 0
	f.members = map[string]string{}
	f.controlBlob = nil
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch implements raft.BatchingFSM. A record entry's response is an
// *AppendResult; the results of a batch share one allocation.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	var (
		trimmed uint64
		results []AppendResult
	)
	f.mu.Lock()
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if f.cmds%markEvery == 0 {
			f.marks = append(f.marks, Mark{l.Index, f.total})
		}
		f.cmds++
		f.total += StreamRecordSize(len(l.Data))
		if isRecordCmd(l.Data) {
			if results == nil {
				results = make([]AppendResult, len(logs))
			}
			results[i] = f.applyRecordEntry(l)
			out[i] = &results[i]
			continue
		}
		out[i] = f.applyCommand(l, &trimmed)
	}
	f.mu.Unlock()
	if n := len(logs); n > 0 {
		f.advance(logs[n-1].Index)
	}
	if trimmed != 0 && f.OnTrim != nil {
		f.OnTrim(trimmed)
	}
	return out
}

func (f *FSM) applyCommand(l *raft.Log, trimmed *uint64) any {
	if len(l.Data) == 0 {
		return fmt.Errorf("%w: empty entry at index %d", errBadCommand, l.Index)
	}
	switch l.Data[0] {
	case kindTrim:
		below, err := decodeTrimCmd(l.Data)
		if err != nil {
			return err
		}
		if f.trim(min(below, l.Index+1)) {
			*trimmed = f.floor
		}
		return f.floor
	case kindControl:
		return f.applyControl(l.Index, l.Data)
	case kindMember:
		id, addr, err := decodeMemberCmd(l.Data)
		if err != nil {
			return err
		}
		if addr == "" {
			delete(f.members, id)
		} else {
			f.members[id] = addr
		}
		return nil
	}
	return fmt.Errorf("%w: kind %d at index %d", errBadCommand, l.Data[0], l.Index)
}

// applyRecordEntry applies record entry l (isRecordCmd).
func (f *FSM) applyRecordEntry(l *raft.Log) AppendResult {
	c, err := decodeRecordCmd(l.Data)
	if err != nil {
		f.voids = append(f.voids, l.Index)
		return AppendResult{Void: true, Err: fmt.Errorf("index %d: %w", l.Index, err)}
	}
	return f.applyRecord(l.Index, c)
}

// applyRecord decides whether the record entry at index is stored.
func (f *FSM) applyRecord(index uint64, c recordCmd) AppendResult {
	if len(c.client) == 0 {
		return AppendResult{Indexes: []uint64{index}}
	}
	s := f.sessions[string(c.client)]
	switch {
	case s != nil:
		f.lru.MoveToFront(s.elem)
	case c.i != 0:
		f.voids = append(f.voids, index) // an earlier part is missing
		return AppendResult{Void: true}
	default:
		var err error
		if s, err = f.openSession(c); err != nil {
			f.voids = append(f.voids, index)
			return AppendResult{Void: true, Err: err}
		}
	}
	r := s.reqs[c.seq]
	if r == nil {
		if c.seq < s.floor {
			f.voids = append(f.voids, index)
			return AppendResult{Void: true, Err: sessionErr(string(c.client), c.seq,
				fmt.Sprintf("it is older than the session's window (the %d most recent appends of a client)", sessionWindow))}
		}
		if c.i != 0 {
			f.voids = append(f.voids, index) // an earlier part is missing
			return AppendResult{Void: true}
		}
		if c.after != 0 && c.after >= max(s.floor, c.base) && !s.complete(c.after) {
			// Stored now, it would come before an Append the client sent
			// earlier: void it, for the client to retry once that one
			// completed. (Below the floor or the client's session base,
			// the client has finished with it.)
			f.voids = append(f.voids, index)
			return AppendResult{Void: true, Err: outOfOrderErr(string(c.client), c.seq, c.after)}
		}
		r = &request{n: c.n}
		s.reqs[c.seq] = r
		i, _ := slices.BinarySearch(s.order, c.seq)
		s.order = slices.Insert(s.order, i, c.seq)
	}
	switch {
	case c.n != r.n || c.i > uint64(len(r.indexes)):
		f.voids = append(f.voids, index)
		return AppendResult{Void: true}
	case c.i < uint64(len(r.indexes)):
		f.voids = append(f.voids, index)
		res := AppendResult{Void: true, Dup: true}
		if uint64(len(r.indexes)) == r.n {
			res.Indexes = slices.Clone(r.indexes)
		}
		return res
	}
	r.indexes = append(r.indexes, index)
	s.indexes++
	res := AppendResult{}
	if uint64(len(r.indexes)) == r.n {
		res.Indexes = slices.Clone(r.indexes)
	}
	// Forget the lowest sequence numbers beyond the window. A client keeps
	// its appends in flight within a window of sessionWindow numbers, so
	// the lowest is one it has finished with, and the floor never passes
	// a number still in flight.
	for len(s.order) > 1 && (len(s.order) > sessionWindow || s.indexes > sessionMaxIndexes) {
		seq := s.order[0]
		s.order = s.order[1:]
		if old := s.reqs[seq]; old != nil {
			s.indexes -= len(old.indexes)
			delete(s.reqs, seq)
		}
		s.floor = max(s.floor, seq+1)
	}
	return res
}

// Lookup returns the indexes of a complete Append, if the session
// remembers one.
func (f *FSM) Lookup(client string, seq uint64) ([]uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.sessions[client]
	if s == nil {
		return nil, false
	}
	r := s.reqs[seq]
	if r == nil || uint64(len(r.indexes)) != r.n {
		return nil, false
	}
	return slices.Clone(r.indexes), true
}

// trim raises the floor to below, updating the ledger; false when below
// does not raise it. Called with f.mu held.
func (f *FSM) trim(below uint64) bool {
	if below <= f.floor {
		return false
	}
	base := Mark{f.floor, f.floorCum}
	for _, m := range f.marks {
		if m.Index > below {
			break
		}
		if m.Index >= base.Index {
			base = m
		}
	}
	cum := base.Cum
	var l raft.Log
	for idx := base.Index; idx < below; idx++ {
		if err := f.view.GetLog(idx, &l); err != nil {
			// A log with a hole below the floor: not one this node's
			// snapshot installs leave (snapinstall.go). Its next install
			// replaces the ledger.
			f.logger.Error("trim: entry missing from the log; byte ledger is now approximate", "index", idx, "error", err)
			continue
		}
		if l.Type == raft.LogCommand {
			cum += StreamRecordSize(len(l.Data))
		}
	}
	f.floor, f.floorCum = below, cum
	i := sort.Search(len(f.marks), func(i int) bool { return f.marks[i].Index >= below })
	f.marks = slices.Clone(f.marks[i:])
	j := sort.Search(len(f.voids), func(i int) bool { return f.voids[i] >= below })
	f.voids = slices.Clone(f.voids[j:])
	return true
}

// advance records that every entry up to index has been applied.
func (f *FSM) advance(index uint64) {
	for {
		cur := f.Applied.Load()
		if index <= cur {
			return
		}
		if f.Applied.CompareAndSwap(cur, index) {
			break
		}
	}
	f.wakeMu.Lock()
	close(f.wake)
	f.wake = make(chan struct{})
	f.wakeMu.Unlock()
}

// AppliedCh returns the applied index and a channel closed when it next
// advances.
func (f *FSM) AppliedCh() (uint64, <-chan struct{}) {
	f.wakeMu.Lock()
	defer f.wakeMu.Unlock()
	return f.Applied.Load(), f.wake
}

// ReadView is what a reader needs of the state: the floor and the void
// indexes, consistent with each other.
type ReadView struct {
	Floor uint64
	voids []uint64
}

// Void reports whether index holds a void entry: not a record.
func (v ReadView) Void(index uint64) bool {
	_, ok := slices.BinarySearch(v.voids, index)
	return ok
}

// ReadView returns the first retained index and the void indexes, as of
// now, for a reader.
func (f *FSM) ReadView() ReadView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return ReadView{Floor: f.floor, voids: f.voids}
}

// Member returns the client address of node id.
func (f *FSM) Member(id string) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.members[id]
}

// MemberAddrs returns a copy of the member table.
func (f *FSM) MemberAddrs() map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m := make(map[string]string, len(f.members))
	for k, v := range f.members {
		m[k] = v
	}
	return m
}

// RetentionByBytes returns the trim index that keeps at most maxBytes of
// commands (0 when nothing needs trimming), on a mark, so that at most
// markEvery commands more than the limit stay.
func (f *FSM) RetentionByBytes(maxBytes uint64) uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if maxBytes == 0 || f.total-f.floorCum <= maxBytes {
		return 0
	}
	// The first mark after which at most maxBytes remain.
	i := sort.Search(len(f.marks), func(i int) bool { return f.total-f.marks[i].Cum <= maxBytes })
	if i == 0 || i == len(f.marks) {
		if i == len(f.marks) && len(f.marks) > 0 {
			return f.marks[len(f.marks)-1].Index
		}
		return 0
	}
	return f.marks[i].Index
}

// MarksCopy returns the ledger marks above the floor.
func (f *FSM) MarksCopy() []Mark {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.marks)
}

// Snapshot implements raft.FSM. The snapshot holds the state only; the
// snapshot store streams the retained log after it when raft sends one.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &fsmSnapshot{state: f.encodeLocked()}, nil
}

// Restore implements raft.FSM: it reads the state and leaves the records
// of the stream unread (they are in the log already).
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	hdr, err := readStreamHeader(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.decodeLocked(hdr.state); err != nil {
		return err
	}
	f.logger.Info("restored state", "floor", f.floor, "sessions", len(f.sessions), "members", len(f.members))
	return nil
}

// fsmSnapshot is a state captured by Snapshot.
type fsmSnapshot struct{ state []byte }

// Persist writes the stream header and state and an empty record section.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(appendStreamHeader(nil, s.state)); err != nil {
		sink.Cancel()
		return err
	}
	if _, err := sink.Write(appendStreamEnd(nil, 0)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() {}

// RecordBytes returns the retained records' size by the byte ledger.
func (f *FSM) RecordBytes() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.total - f.floorCum
}
