package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/hashicorp/go-hclog"
)

// StateVersion is the newest version of the encoded state machine state.
// Version 1 lacks the evicted sessions at the end; this node reads it as a
// state without any. Version 3 adds the control state (control.go) after
// them; a state whose control state is empty is written as version 2, as
// before control commands, so that older nodes read it.
const StateVersion = 3

// knownStateVersion reports whether v is a state version this node reads.
func knownStateVersion(v byte) bool { return v >= 1 && v <= 3 }

// encodeLocked encodes the state: a version byte, then uvarints and
// length-prefixed strings in a fixed order. Members are sorted by id,
// sessions listed from least to most recently used, and evicted sessions
// from the oldest eviction on, so equal states encode equally. Called
// with f.mu held.
//
//	version 2: floor | floorCum | total | cmds | marks | voids | members | sessions | evicted
//	evicted:   uvarint count | count x (8-byte big-endian client id hash | uvarint max seq)
//	version 3: the same, then uvarint length | control state
func (f *FSM) encodeLocked() []byte {
	control := f.controlStateLocked()
	version := byte(2)
	if len(control) > 0 {
		version = 3
	}
	b := []byte{version}
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	s := func(v string) { u(uint64(len(v))); b = append(b, v...) }
	u(f.floor)
	u(f.floorCum)
	u(f.total)
	u(f.cmds)
	u(uint64(len(f.marks)))
	for _, m := range f.marks {
		u(m.Index)
		u(m.Cum)
	}
	u(uint64(len(f.voids)))
	for _, v := range f.voids {
		u(v)
	}
	ids := make([]string, 0, len(f.members))
	for id := range f.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	u(uint64(len(ids)))
	for _, id := range ids {
		s(id)
		s(f.members[id])
	}
	u(uint64(len(f.sessions)))
	for e := f.lru.Back(); e != nil; e = e.Prev() {
		ss := e.Value.(*session)
		s(ss.id)
		u(ss.floor)
		u(uint64(len(ss.order)))
		for _, seq := range ss.order {
			r := ss.reqs[seq]
			u(seq)
			u(r.n)
			u(uint64(len(r.indexes)))
			for _, idx := range r.indexes {
				u(idx)
			}
		}
	}
	live := f.liveEvicted()
	u(uint64(len(live)))
	for _, ref := range live {
		b = binary.BigEndian.AppendUint64(b, ref.hash)
		u(f.evicted[ref.hash].maxSeq)
	}
	if version >= 3 {
		s(string(control))
	}
	return b
}

// decodeLocked replaces the state by the one encoded in b. Called with
// f.mu held.
func (f *FSM) decodeLocked(b []byte) error {
	if len(b) == 0 || !knownStateVersion(b[0]) {
		return fmt.Errorf("replica: snapshot state version %v, want 1 to %d", b[:min(1, len(b))], StateVersion)
	}
	version := b[0]
	r := cmdReader{b: b[1:]}
	// count reads a length and checks it against the bytes left, so a
	// corrupt count cannot make us allocate much.
	count := func() int {
		n := r.uvarint()
		if n > uint64(len(r.b)) {
			r.err = errBadCommand
			return 0
		}
		return int(n)
	}
	f.reset()
	f.floor, f.floorCum, f.total, f.cmds = r.uvarint(), r.uvarint(), r.uvarint(), r.uvarint()
	for n := count(); n > 0 && r.err == nil; n-- {
		f.marks = append(f.marks, Mark{r.uvarint(), r.uvarint()})
	}
	for n := count(); n > 0 && r.err == nil; n-- {
		f.voids = append(f.voids, r.uvarint())
	}
	for n := count(); n > 0 && r.err == nil; n-- {
		id, addr := string(r.bytes()), string(r.bytes())
		f.members[id] = addr
	}
	for n := count(); n > 0 && r.err == nil; n-- {
		ss := &session{id: string(r.bytes()), floor: r.uvarint(), reqs: map[uint64]*request{}}
		for m := count(); m > 0 && r.err == nil; m-- {
			seq := r.uvarint()
			req := &request{n: r.uvarint()}
			for k := count(); k > 0 && r.err == nil; k-- {
				req.indexes = append(req.indexes, r.uvarint())
			}
			ss.reqs[seq] = req
			if k := len(ss.order); k > 0 && ss.order[k-1] >= seq {
				r.err = errBadCommand // sequence numbers must increase
			}
			ss.order = append(ss.order, seq)
			ss.indexes += len(req.indexes)
		}
		ss.elem = f.lru.PushFront(ss)
		f.sessions[ss.id] = ss
	}
	if version >= 2 {
		for n := count(); n > 0 && r.err == nil; n-- {
			if len(r.b) < 8 {
				r.err = errBadCommand
				break
			}
			hash := binary.BigEndian.Uint64(r.b)
			r.b = r.b[8:]
			maxSeq := r.uvarint()
			if _, dup := f.evicted[hash]; dup {
				r.err = errBadCommand
				break
			}
			f.rememberEvicted(hash, maxSeq)
		}
	}
	var control []byte
	if version >= 3 {
		control = append([]byte(nil), r.bytes()...)
	}
	if err := r.end(); err != nil {
		f.reset()
		return fmt.Errorf("replica: snapshot state does not decode: %w", err)
	}
	if err := f.restoreControlLocked(control); err != nil {
		f.reset()
		return fmt.Errorf("replica: snapshot state's control state: %w", err)
	}
	return nil
}

// ErrStateVersion reports a state machine state of a version this
// package does not read.
var ErrStateVersion = errors.New("replica: unknown state version")

// RestoredState reads a state machine state taken from a backup whose
// first retained index is floor, and returns the state a restored replica
// starts from: the same, with the members' client addresses forgotten. It
// also returns the retained records' size by the state's byte ledger and
// the number of client sessions. A state of an unknown version fails with
// ErrStateVersion; one that does not decode, or has another floor, with
// an error saying what is wrong.
func RestoredState(state []byte, floor uint64) ([]byte, uint64, int, error) {
	return restoredState(state, floor, false)
}

// restoredState is RestoredState, and with dropControl RestoredLogState.
func restoredState(state []byte, floor uint64, dropControl bool) ([]byte, uint64, int, error) {
	if len(state) > 0 && !knownStateVersion(state[0]) {
		return nil, 0, 0, fmt.Errorf("%w: the state machine's state has version %d; this version reads 1 to %d", ErrStateVersion, state[0], StateVersion)
	}
	f := NewFSM(nil, hclog.NewNullLogger())
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.decodeLocked(state); err != nil {
		return nil, 0, 0, fmt.Errorf("the state machine's state: %v", err)
	}
	if f.floor != floor {
		return nil, 0, 0, fmt.Errorf("the state has floor %d, the header %d", f.floor, floor)
	}
	f.members = map[string]string{}
	if dropControl {
		f.controlBlob = nil
	}
	return f.encodeLocked(), f.total - f.floorCum, len(f.sessions), nil
}

// State returns the state machine's state, encoded as its snapshots hold
// it.
func (f *FSM) State() []byte {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.encodeLocked()
}

// StateSummary is what an encoded state holds, in numbers.
type StateSummary struct {
	Floor       uint64            // the first retained index
	RecordBytes uint64            // the retained records' size by the byte ledger
	Sessions    int               // client sessions
	Members     map[string]string // node id to client address
	Control     []byte            // the control state as encoded (see Control), nil when none
}

// SummarizeState decodes an encoded state (FSM.State, SnapFile.State).
func SummarizeState(state []byte) (StateSummary, error) {
	f := NewFSM(nil, hclog.NewNullLogger())
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.decodeLocked(state); err != nil {
		return StateSummary{}, err
	}
	return StateSummary{Floor: f.floor, RecordBytes: f.total - f.floorCum, Sessions: len(f.sessions), Members: f.members, Control: f.controlBlob}, nil
}
