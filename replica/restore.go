package replica

// Restoring a backup into a running log (node restore --log): the log's
// leader hands raft the backup as a snapshot (raft.Raft.Restore), which
// raft stores at an index past both the backup's and its own last one,
// and which its followers then install from the leader's snapshot stream,
// as a follower behind the floor does. A snapshot carries the retained
// records (snapshot.go, snapinstall.go), so every replica stores them at
// their original indexes in its archive group, and the state machine's
// state, client sessions included, becomes the backup's. The log's own
// few entries before the restore (its configuration, its leaders' first
// entries) lie below the snapshot: every replica drops them when it
// installs it, so they cannot clash with the records' indexes.
//
// A restore can be cut short: the client uploading the backup dies, the
// leader dies before or while it installs the snapshot, or before its
// followers have it. So before it begins, the leader commits a control
// command that marks the log as being restored (restoreMark); the state
// the snapshot brings has no mark, so a replica holds the mark until it
// has installed the restore, and the mark and the restored records never
// come apart. The node refuses the records operations of a marked log:
// a restore that did not finish on the log's majority is visible as such,
// and the operator deletes the log.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/transport"
)

// restoringState is the control state, and the control command, of a log
// marked as being restored. It is wire format (entries and snapshots).
const restoringState = "restoring"

// restoreMark is the control state machine of a named log: whether a
// restore into it has begun and not finished. Raft's FSM goroutine
// applies to it; set is read from any goroutine.
type restoreMark struct{ set atomic.Bool }

// ApplyControl implements Control: the only command marks the log.
func (m *restoreMark) ApplyControl(index uint64, data []byte) any {
	if string(data) != restoringState {
		return fmt.Errorf("%w: control command of %d bytes at index %d", errBadCommand, len(data), index)
	}
	m.set.Store(true)
	return nil
}

// ControlState implements Control: empty unless marked, so that the
// state keeps the format of logs without control state.
func (m *restoreMark) ControlState() []byte {
	if m.set.Load() {
		return []byte(restoringState)
	}
	return nil
}

// RestoreControl implements Control.
func (m *restoreMark) RestoreControl(state []byte) error {
	switch string(state) {
	case "":
		m.set.Store(false)
	case restoringState:
		m.set.Store(true)
	default:
		return fmt.Errorf("unknown control state of %d bytes", len(state))
	}
	return nil
}

// Restoring reports whether the log is marked as being restored: a
// restore into it began and this replica has not installed it.
func (r *Replica) Restoring() bool { return r.mark != nil && r.mark.set.Load() }

// ErrNotEmpty is returned by BeginRestore for a log that holds records.
var ErrNotEmpty = errors.New("replica: the log holds records")

// BeginRestore, on the leader of a named log that holds no record (none
// was ever appended: its floor is 1 and it reads empty), commits the mark
// of a restore into it. A log marked already is left so.
//
// An append may be on its way meanwhile: it checked the mark before the
// restore began, and its records are in raft's queue, not yet applied.
// Stored after the check of emptiness, they would be acknowledged, and
// then dropped by the restore, which replaces everything below it. So
// BeginRestore holds the appends back (restoreGate) from before its check
// until the mark is applied, and commits a barrier first, after which
// every append that got past the gate has been applied and is seen.
func (r *Replica) BeginRestore(ctx context.Context, timeout time.Duration) error {
	if r.mark == nil {
		return errors.New("replica: only a named log can be restored into")
	}
	r.restoreGate.Lock()
	defer r.restoreGate.Unlock()
	if _, err := r.Linearize(ctx); err != nil {
		return err
	}
	if r.Restoring() {
		return nil
	}
	if err := r.barrier(timeout); err != nil {
		return r.RaftError(err)
	}
	if floor := r.fsm.ReadView().Floor; floor > 1 {
		return fmt.Errorf("%w: its first retained index is %d", ErrNotEmpty, floor)
	}
	recs, _, err := r.readRecords(1, r.fsm.Applied.Load(), 1, 0)
	if err != nil {
		return err
	}
	if len(recs) > 0 {
		return fmt.Errorf("%w: one at index %d", ErrNotEmpty, recs[0].Index)
	}
	if beginRestoreChecked != nil {
		beginRestoreChecked()
	}
	f := r.Apply(EncodeControlCmd([]byte(restoringState)), timeout)
	if err := f.Error(); err != nil {
		return r.RaftError(err)
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return err
	}
	return nil
}

// barrier commits a barrier and returns once the state machine has
// applied every entry before it; guarded as Apply is against a raft that
// shuts down with it in its queue.
func (r *Replica) barrier(timeout time.Duration) error {
	r.applyMu.RLock()
	if r.draining {
		r.applyMu.RUnlock()
		return raft.ErrRaftShutdown
	}
	f := r.raft.Barrier(timeout)
	r.applyMu.RUnlock()
	if !await(r, []raft.Future{f}) {
		return raft.ErrRaftShutdown
	}
	return f.Error()
}

// Test hooks: beginRestoreChecked runs in BeginRestore once it found the
// log empty, before it proposes the mark; appendHeldForRestore when an
// append waits for a restore to begin.
var beginRestoreChecked, appendHeldForRestore func()

// RestoreBackup, on the leader of a log marked by BeginRestore, restores
// a backup into it (see the top of this file): state is the state machine
// state to restore (RestoredLogState), recordBytes the records' size by
// its ledger, backupIndex the backup's index, and next returns the
// backup's entries in order, then io.EOF. It returns once raft has
// committed an entry after the restore, so a majority of the log's voters
// hold it, and the state machine has applied it; the index returned is
// the restore's, past backupIndex: appends go after it.
//
// Entries whose term is above the log's current term are stored with the
// current term: the restored snapshot has that term, and no entry below
// it may have a later one.
func (r *Replica) RestoreBackup(ctx context.Context, state []byte, recordBytes, backupIndex uint64, next func() (*raft.Log, error), timeout time.Duration) (uint64, error) {
	if !r.Restoring() {
		return 0, errors.New("replica: the log is not marked as being restored")
	}
	s, err := r.Leading(ctx)
	if err != nil {
		return 0, err
	}
	term := r.raft.CurrentTerm()
	if term != s.term {
		return 0, r.NotLeader()
	}
	size := int64(streamHeaderFixed+len(state)) + int64(recordBytes) + streamEndSize
	lastBefore := r.raft.LastIndex()
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeRestoreStream(pw, state, term, next))
	}()
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: backupIndex, Term: term, Size: size}
	err = r.raft.Restore(meta, pr, timeout)
	pr.CloseWithError(errors.New("replica: restore ended"))
	// Raft stores the restore at an index past both the backup's and its
	// own last one: a snapshot past them is the restore.
	p := r.snap.Latest.Load()
	restored := p != nil && p.Index > max(backupIndex, lastBefore) && p.Term == term
	if err != nil && !restored {
		// Nothing of it is durable: raft refused it, or failed before the
		// snapshot was.
		return 0, r.restoreError(err)
	}
	if !restored {
		return 0, fmt.Errorf("replica: after the restore, the newest snapshot is %v, not past index %d", p, max(backupIndex, lastBefore))
	}
	if err == nil {
		// The state brought no client addresses, and raft applies no
		// entry of the restore to the state machine: the leader records
		// its address again, which also moves the state machine's applied
		// index past the restore, as reads wait for.
		c := r.cfg
		err = r.raft.Apply(EncodeMemberCmd(c.NodeID, c.ClientAddr), timeout).Error()
	}
	if err != nil && !r.awaitCommit(ctx, p.Index, min(timeout, time.Minute)) {
		// The leader installed the restore and then failed to commit an
		// entry after it: typically it lost its lease while its followers
		// installed a large snapshot (they answer no heartbeat meanwhile).
		// The restore holds if the next leader has it (one that does not
		// cannot commit past it with this replica's log): awaitCommit
		// waited for a commit past it. Otherwise its outcome is unknown.
		return 0, &transport.Error{Code: transport.CodeTimeout, Message: fmt.Sprintf(
			"node %s installed the restore at index %d, but no entry after it committed (%v): it holds if the log's next leader has it; if the log refuses reads as being restored, delete it and restore again", r.cfg.NodeID, p.Index, err)}
	}
	r.cfg.Logger.Info("restored a backup", "backup_index", backupIndex, "index", p.Index, "term", p.Term)
	return p.Index, nil
}

// awaitCommit waits, for up to timeout, until this replica has applied
// an entry past index, and reports whether it did.
func (r *Replica) awaitCommit(ctx context.Context, index uint64, timeout time.Duration) bool {
	limit := time.NewTimer(timeout)
	defer limit.Stop()
	for {
		applied, wake := r.fsm.AppliedCh()
		if applied > index && r.raft.CommitIndex() > index && !r.Restoring() {
			return true
		}
		select {
		case <-wake:
		case <-time.After(50 * time.Millisecond):
		case <-limit.C:
			return false
		case <-ctx.Done():
			return false
		case <-r.ctx.Done():
			return false
		}
	}
}

// restoreError turns an error of raft.Restore into the one a client sees:
// raft's refusals as RaftError gives them (NotLeader, or Unavailable, which
// the client retries, uploading again: a leader whose transfer of the
// leadership is under way refuses a restore before it does anything), any
// other failure as the restore's.
func (r *Replica) restoreError(err error) error {
	for _, refusal := range []error{raft.ErrNotLeader, raft.ErrLeadershipLost, raft.ErrRaftShutdown, raft.ErrEnqueueTimeout, raft.ErrLeadershipTransferInProgress} {
		if errors.Is(err, refusal) {
			return r.RaftError(err)
		}
	}
	return fmt.Errorf("replica: restore: %w", err)
}

// writeRestoreStream writes the snapshot stream of a restore to w: the
// state, then the entries next returns, their terms at most term.
func writeRestoreStream(w io.Writer, state []byte, term uint64, next func() (*raft.Log, error)) error {
	if _, err := w.Write(appendStreamHeaderFlags(nil, state, flagRecords)); err != nil {
		return err
	}
	var (
		buf     []byte
		records uint64
	)
	for {
		l, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if l.Type != raft.LogCommand {
			continue
		}
		if l.Term > term {
			c := *l
			c.Term = term
			l = &c
		}
		buf = appendStreamRecord(buf[:0], l)
		if _, err := w.Write(buf); err != nil {
			return err
		}
		records++
	}
	_, err := w.Write(appendStreamEnd(nil, records))
	return err
}

// RestoredLogState reads the state machine state of a backup whose first
// retained index is floor: as RestoredState, the members' client addresses
// forgotten, and its control state too. A restore into a running named log
// uses it (a default log's backup carries the catalog, which a named log
// does not; and a log's mark of a restore must not come back with it), and
// so does the restore of a new cluster's default log (the catalog lists
// the old cluster's nodes, and named logs whose records are in their own
// backups). It returns the state, the records' size by its ledger and the
// number of client sessions.
func RestoredLogState(state []byte, floor uint64) ([]byte, uint64, int, error) {
	return restoredState(state, floor, true)
}

// restoreRefusal is the error of a record operation on a log marked as
// being restored.
func restoreRefusal(name string) *transport.Error {
	return &transport.Error{Code: transport.CodeFailedPrecondition, Message: fmt.Sprintf(
		"log %q is being restored, or holds a restore that did not finish: wait for it, or delete the log and restore again", name)}
}

// CheckRestored returns a FailedPrecondition error while the log is
// marked as being restored (Restoring), nil otherwise.
func (r *Replica) CheckRestored() error {
	if r.Restoring() {
		return restoreRefusal(r.cfg.Name)
	}
	return nil
}
