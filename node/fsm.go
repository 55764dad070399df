package node

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
	// maxSessions bounds the client sessions kept; the least recently used
	// is forgotten first.
	maxSessions = 8192
	// sessionWindow is how many recent Appends a session remembers. A
	// client must keep fewer Appends than this in flight.
	sessionWindow = 1024
	// sessionMaxIndexes bounds the record indexes a session remembers
	// (8 bytes each): 1,024 appends of 256 records. Past it the lowest
	// sequence numbers are forgotten early.
	sessionMaxIndexes = 1 << 18
)

// mark records that the command entries below index add up to cum bytes.
type mark struct{ index, cum uint64 }

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

// appendResult is the FSM's answer to one record entry.
type appendResult struct {
	void bool // the entry repeats or runs ahead of its Append; not a record
	dup  bool // the entry repeats a record already stored
	// indexes is set when, after this entry, the Append is complete.
	indexes []uint64
	err     error
}

// fsm is the node's raft.BatchingFSM.
type fsm struct {
	view   *logView
	logger hclog.Logger

	// onTrim is called, from the FSM goroutine, when a trim raised the
	// floor. It must not block.
	onTrim func(floor uint64)

	mu       sync.RWMutex // guards the state below
	floor    uint64
	floorCum uint64
	total    uint64
	cmds     uint64
	marks    []mark
	voids    []uint64 // increasing; replaced, never shrunk in place
	sessions map[string]*session
	lru      list.List
	members  map[string]string
	// evicted sessions (sessions.go): by client id hash, and in the order
	// of eviction, with stale entries for sessions opened again.
	evicted    map[uint64]evictedSession
	evictOrder []evictedRef
	evictNext  uint64 // the pos of the next eviction

	applied atomic.Uint64 // highest index applied
	wakeMu  sync.Mutex
	wake    chan struct{} // closed and replaced when applied advances
}

func newFSM(view *logView, logger hclog.Logger) *fsm {
	f := &fsm{view: view, logger: logger, wake: make(chan struct{})}
	f.reset()
	return f
}

func (f *fsm) reset() {
	f.floor, f.floorCum, f.total, f.cmds = 1, 0, 0, 0
	f.marks, f.voids = nil, nil
	f.sessions = map[string]*session{}
	f.lru.Init()
	f.evicted, f.evictOrder, f.evictNext = map[uint64]evictedSession{}, nil, 0
	f.members = map[string]string{}
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch implements raft.BatchingFSM.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	var trimmed uint64
	f.mu.Lock()
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if f.cmds%markEvery == 0 {
			f.marks = append(f.marks, mark{l.Index, f.total})
		}
		f.cmds++
		f.total += streamRecordSize(len(l.Data))
		out[i] = f.applyCommand(l, &trimmed)
	}
	f.mu.Unlock()
	if n := len(logs); n > 0 {
		f.advance(logs[n-1].Index)
	}
	if trimmed != 0 && f.onTrim != nil {
		f.onTrim(trimmed)
	}
	return out
}

func (f *fsm) applyCommand(l *raft.Log, trimmed *uint64) any {
	if len(l.Data) == 0 {
		return fmt.Errorf("%w: empty entry at index %d", errBadCommand, l.Index)
	}
	switch l.Data[0] {
	case kindRecord, kindRecordBase, kindRecordAfter:
		c, err := decodeRecordCmd(l.Data)
		if err != nil {
			f.voids = append(f.voids, l.Index)
			return appendResult{void: true, err: fmt.Errorf("index %d: %w", l.Index, err)}
		}
		return f.applyRecord(l.Index, c)
	case kindTrim:
		below, err := decodeTrimCmd(l.Data)
		if err != nil {
			return err
		}
		if f.trim(min(below, l.Index+1)) {
			*trimmed = f.floor
		}
		return f.floor
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

// applyRecord decides whether the record entry at index is stored.
func (f *fsm) applyRecord(index uint64, c recordCmd) appendResult {
	if c.client == "" {
		return appendResult{indexes: []uint64{index}}
	}
	s := f.sessions[c.client]
	switch {
	case s != nil:
		f.lru.MoveToFront(s.elem)
	case c.i != 0:
		f.voids = append(f.voids, index) // an earlier part is missing
		return appendResult{void: true}
	default:
		var err error
		if s, err = f.openSession(c); err != nil {
			f.voids = append(f.voids, index)
			return appendResult{void: true, err: err}
		}
	}
	r := s.reqs[c.seq]
	if r == nil {
		if c.seq < s.floor {
			f.voids = append(f.voids, index)
			return appendResult{void: true, err: sessionErr(c.client, c.seq,
				fmt.Sprintf("it is older than the session's window (the %d most recent appends of a client)", sessionWindow))}
		}
		if c.i != 0 {
			f.voids = append(f.voids, index) // an earlier part is missing
			return appendResult{void: true}
		}
		if c.after != 0 && c.after >= max(s.floor, c.base) && !s.complete(c.after) {
			// Stored now, it would come before an Append the client sent
			// earlier: void it, for the client to retry once that one
			// completed. (Below the floor or the client's session base,
			// the client has finished with it.)
			f.voids = append(f.voids, index)
			return appendResult{void: true, err: outOfOrderErr(c.client, c.seq, c.after)}
		}
		r = &request{n: c.n}
		s.reqs[c.seq] = r
		i, _ := slices.BinarySearch(s.order, c.seq)
		s.order = slices.Insert(s.order, i, c.seq)
	}
	switch {
	case c.n != r.n || c.i > uint64(len(r.indexes)):
		f.voids = append(f.voids, index)
		return appendResult{void: true}
	case c.i < uint64(len(r.indexes)):
		f.voids = append(f.voids, index)
		res := appendResult{void: true, dup: true}
		if uint64(len(r.indexes)) == r.n {
			res.indexes = slices.Clone(r.indexes)
		}
		return res
	}
	r.indexes = append(r.indexes, index)
	s.indexes++
	res := appendResult{}
	if uint64(len(r.indexes)) == r.n {
		res.indexes = slices.Clone(r.indexes)
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

// lookup returns the indexes of a complete Append, if the session
// remembers one.
func (f *fsm) lookup(client string, seq uint64) ([]uint64, bool) {
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
func (f *fsm) trim(below uint64) bool {
	if below <= f.floor {
		return false
	}
	base := mark{f.floor, f.floorCum}
	for _, m := range f.marks {
		if m.index > below {
			break
		}
		if m.index >= base.index {
			base = m
		}
	}
	cum := base.cum
	var l raft.Log
	for idx := base.index; idx < below; idx++ {
		if err := f.view.getLog(idx, &l); err != nil {
			// A log with a hole below the floor: not one this node's
			// snapshot installs leave (snapinstall.go). Its next install
			// replaces the ledger.
			f.logger.Error("trim: entry missing from the log; byte ledger is now approximate", "index", idx, "error", err)
			continue
		}
		if l.Type == raft.LogCommand {
			cum += streamRecordSize(len(l.Data))
		}
	}
	f.floor, f.floorCum = below, cum
	i := sort.Search(len(f.marks), func(i int) bool { return f.marks[i].index >= below })
	f.marks = slices.Clone(f.marks[i:])
	j := sort.Search(len(f.voids), func(i int) bool { return f.voids[i] >= below })
	f.voids = slices.Clone(f.voids[j:])
	return true
}

// advance records that every entry up to index has been applied.
func (f *fsm) advance(index uint64) {
	for {
		cur := f.applied.Load()
		if index <= cur {
			return
		}
		if f.applied.CompareAndSwap(cur, index) {
			break
		}
	}
	f.wakeMu.Lock()
	close(f.wake)
	f.wake = make(chan struct{})
	f.wakeMu.Unlock()
}

// appliedCh returns the applied index and a channel closed when it next
// advances.
func (f *fsm) appliedCh() (uint64, <-chan struct{}) {
	f.wakeMu.Lock()
	defer f.wakeMu.Unlock()
	return f.applied.Load(), f.wake
}

// readView is what a reader needs of the state: the floor and the void
// indexes, consistent with each other.
type readView struct {
	floor uint64
	voids []uint64
}

func (v readView) void(index uint64) bool {
	_, ok := slices.BinarySearch(v.voids, index)
	return ok
}

func (f *fsm) readView() readView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return readView{floor: f.floor, voids: f.voids}
}

// member returns the client address of node id.
func (f *fsm) member(id string) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.members[id]
}

// memberAddrs returns a copy of the member table.
func (f *fsm) memberAddrs() map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m := make(map[string]string, len(f.members))
	for k, v := range f.members {
		m[k] = v
	}
	return m
}

// retentionByBytes returns the trim index that keeps at most maxBytes of
// commands (0 when nothing needs trimming), on a mark, so that at most
// markEvery commands more than the limit stay.
func (f *fsm) retentionByBytes(maxBytes uint64) uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if maxBytes == 0 || f.total-f.floorCum <= maxBytes {
		return 0
	}
	// The first mark after which at most maxBytes remain.
	i := sort.Search(len(f.marks), func(i int) bool { return f.total-f.marks[i].cum <= maxBytes })
	if i == 0 || i == len(f.marks) {
		if i == len(f.marks) && len(f.marks) > 0 {
			return f.marks[len(f.marks)-1].index
		}
		return 0
	}
	return f.marks[i].index
}

// marksCopy returns the ledger marks above the floor.
func (f *fsm) marksCopy() []mark {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.marks)
}

// Snapshot implements raft.FSM. The snapshot holds the state only; the
// snapshot store streams the retained log after it when raft sends one.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &fsmSnapshot{state: f.encodeLocked()}, nil
}

// Restore implements raft.FSM: it reads the state and leaves the records
// of the stream unread (they are in the log already).
func (f *fsm) Restore(rc io.ReadCloser) error {
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
