package catalog

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// FSM is the catalog's state machine: the raft.FSM of the catalog group.
//
// Concurrency: raft calls Apply, Snapshot and Restore from one goroutine
// (its FSM goroutine), never at once; FSMSnapshot.Persist runs on another
// goroutine, concurrently with later Applies, and reads the immutable
// State it was taken from. Readers call State or Watch from any goroutine:
// each publish replaces an atomic pointer to an immutable State, so a
// reader never blocks Apply and never sees half a command.
type FSM struct {
	// state is the current State. Stored by the FSM goroutine only (Apply,
	// Restore), under mu; loaded by anyone.
	state atomic.Pointer[State]
	// mu guards changed, and orders a store of state with the close of
	// changed, so that Watch returns a state and the channel of the next.
	mu sync.Mutex
	// changed is closed when a State newer than the current one is
	// published; guarded by mu.
	changed chan struct{}
}

// New returns a catalog in its initial state: not started, the default
// log with no members, no nodes. Every node starts from this same state,
// so that applying the same commands gives the same catalog.
func New() *FSM {
	f := &FSM{changed: make(chan struct{})}
	f.state.Store(initialState())
	return f
}

// State returns the current catalog. It is immutable: it stays the same
// while later commands apply.
func (f *FSM) State() *State { return f.state.Load() }

// Watch returns the current catalog and a channel closed once a later one
// has been published, for a reconciler's loop:
//
//	for {
//		s, changed := f.Watch()
//		reconcile(s)
//		select { case <-changed: case <-done: return }
//	}
func (f *FSM) Watch() (*State, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state.Load(), f.changed
}

// publish makes s the current State and wakes the watchers.
func (f *FSM) publish(s *State) {
	f.mu.Lock()
	f.state.Store(s)
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// Apply implements raft.FSM. It decodes the entry's command and applies
// it; it returns a Result (not a pointer), whose Err says why the command
// was refused, also when its bytes do not decode. A refused command
// changes nothing but the applied index. Raft calls Apply only for
// command entries.
func (f *FSM) Apply(l *raft.Log) any {
	s := f.state.Load()
	c, err := Decode(l.Data)
	if err != nil {
		next := *s
		next.index = l.Index
		f.publish(&next)
		return Result{Err: err}
	}
	next, res := apply(s, l.Index, c)
	f.publish(next)
	return res
}

// ApplyCommand applies c at index as Apply would apply an entry holding
// its encoding. It is for tests and tools that build a catalog without
// raft.
func (f *FSM) ApplyCommand(index uint64, c Command) Result {
	return f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: Encode(c)}).(Result)
}

// Snapshot implements raft.FSM: the current State, written out by Persist.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{s: f.state.Load()}, nil
}

// Restore implements raft.FSM: it replaces the catalog with the one in rc,
// written by a snapshot's Persist. A snapshot that is damaged, truncated,
// of an unknown version, or whose catalog breaks an invariant is refused
// with an error and the catalog is left as it was.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := ReadSnapshot(rc)
	if err != nil {
		return err
	}
	f.publish(s)
	return nil
}

// fsmSnapshot is a snapshot of one immutable State.
type fsmSnapshot struct{ s *State }

// Persist implements raft.FSMSnapshot.
func (p *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(AppendSnapshot(nil, p.s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (p *fsmSnapshot) Release() {}
