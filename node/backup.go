package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/backup"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// Backups (transport.OpBackup), served by the leader of the log the
// request names: the default log or a named log, whose replica is the same
// kind (package replica), so one code path serves both.
//
// A backup is the state machine's state as of one index and every retained
// command entry up to that index, in the format of package backup, with
// the log's name and settings (replicas, retention) as the catalog, or for
// the default log the node's configuration, has them. The
// index is that of a snapshot the leader takes for the backup, after a
// read index: it is at least the commit index when the request arrived, so
// the backup holds every append acknowledged before, and the snapshot's
// state is the one raft's FSM had at exactly that index. (A snapshot holds
// only the state, so taking one costs little; when nothing was applied
// since the newest one, the backup uses that.) The entries are read from
// the node's log as they are sent, like a snapshot stream to a follower.
//
// Appends go on while a backup streams: they land after its index. A trim
// may raise the floor meanwhile; the entries the backup still has to send
// stay on disk because the backup pins them: deleteBelow keeps every entry
// at or above the lowest pin (replica.LogView). The pin is taken, under the
// snapshot store's lock, at the lowest index the node holds, before the
// snapshot, so nothing the snapshot names can go between the two; once the
// snapshot is known it moves up to the snapshot's floor. When the backup
// ends, the deletions it held back are done. If the node stops leading
// mid-stream the backup goes on (its entries are committed); only a
// snapshot installed from a new leader, which replaces the node's
// archive, can take entries away, and the stream then fails rather than
// skip them.
//
// A client that stops taking the stream (a backup process stopped, or
// writing to a stalled pipe) must not keep trimmed entries on disk for
// ever, filling it: a backup that sends nothing for backupStallTimeout
// gives its pin up. Trims then go ahead, and the backup fails if it later
// misses an entry they deleted.

// backupChunk is the most bytes of the file one stream item carries.
const backupChunk = 1 << 20

// backupStallTimeout is how long a backup may send nothing before it
// gives up its pin.
const backupStallTimeout = time.Minute

// backup serves a Backup of the log req names.
func (n *Node) backup(ctx context.Context, req *transport.BackupRequest, st *transport.ServerStream) error {
	r, src, err := n.backupSource(req.Log)
	if err != nil {
		return err
	}
	return n.backupReplica(ctx, r, src, st)
}

// backupSource returns the replica of the log named by a request's log
// field, and how a backup describes the log.
func (n *Node) backupSource(field string) (*replica.Replica, backup.Source, error) {
	name := transport.LogName(field)
	if name == transport.DefaultLog {
		info := n.defaultLogInfo()
		return n.log, backup.Source{Name: name, Replicas: info.Replicas, RetentionBytes: info.RetentionBytes, RetentionAge: info.RetentionAge}, nil
	}
	if n.mux == nil {
		return nil, backup.Source{}, errNoNamedLogs()
	}
	l, err := n.lookupLog(name)
	if err != nil {
		return nil, backup.Source{}, err
	}
	h := n.host.hosted(l.ID)
	if h == nil {
		return nil, backup.Source{}, n.notHosted(l)
	}
	if err := h.r.CheckRestored(); err != nil {
		return nil, backup.Source{}, err
	}
	return h.r, backup.Source{Name: name, Replicas: uint32(l.Settings.Replicas),
		RetentionBytes: uint64(max(l.Settings.RetentionBytes, 0)), RetentionAge: l.Settings.RetentionAge}, nil
}

// backupReplica streams a backup of the log r is the replica of (see the
// top of this file).
func (n *Node) backupReplica(ctx context.Context, r *replica.Replica, src backup.Source, st *transport.ServerStream) error {
	start := time.Now()
	if _, err := r.Linearize(ctx); err != nil {
		return err
	}
	if err := r.CheckRestored(); err != nil {
		return err
	}
	snap, view := r.Snapshots(), r.View()
	applied := r.FSM().Applied.Load()
	pin := snap.Hold()
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { snap.Release(pin) }) }
	defer release()
	f, err := n.backupPoint(r, applied)
	if err != nil {
		return err
	}
	pin.Raise(f.Floor)
	chunk := backupChunk
	if lim, err := n.cfg.Limits.WithDefaults(); err == nil {
		chunk = min(chunk, lim.MaxFrameSize/2)
	}
	stall := backupStallTimeout
	if h := n.cfg.hooks; h != nil && h.backupStall > 0 {
		stall = h.backupStall
	}
	var stalled atomic.Bool
	watchdog := time.AfterFunc(stall, func() {
		stalled.Store(true)
		n.cfg.Logger.Warn("a backup sent nothing for a while: giving up its hold on trimmed entries; it fails if it then misses one",
			"log", src.Name, "index", f.Meta.Index, "stalled", stall)
		release()
	})
	defer watchdog.Stop()
	out := &backupItems{st: st, buf: make([]byte, 0, chunk), sent: func() {
		if !stalled.Load() {
			watchdog.Reset(stall)
		}
	}}
	hdr := backup.Header{Index: f.Meta.Index, Term: f.Meta.Term, Floor: f.Floor, Created: start, Log: src}
	w, err := backup.NewWriter(out, hdr, f.State)
	if err != nil {
		return err
	}
	var (
		l      raft.Log
		ledger uint64 // the entries' size as the state's byte ledger counts it
	)
	for idx := f.Floor; idx <= f.Meta.Index; idx++ {
		if err := view.GetLog(idx, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				return &transport.Error{Code: transport.CodeUnavailable, Message: fmt.Sprintf(
					"backup of log %q at index %d: entry %d is no longer on node %s (a snapshot from a new leader replaced its log, or it was deleted after a trim); take the backup again", src.Name, f.Meta.Index, idx, n.cfg.ID)}
			}
			return fmt.Errorf("node: backup of log %q: read index %d: %w", src.Name, idx, err)
		}
		if l.Type != raft.LogCommand {
			continue
		}
		ledger += replica.StreamRecordSize(len(l.Data))
		if err := w.Add(backup.Entry{Index: idx, Term: l.Term, AppendedAt: l.AppendedAt.UnixNano(), Data: l.Data}); err != nil {
			return err
		}
	}
	if ledger != f.RecordBytes {
		// The restored cluster could not send snapshots with such a state:
		// their size comes from the ledger.
		return fmt.Errorf("node: backup of log %q: the entries in [%d, %d] come to %d bytes, the state's ledger says %d", src.Name, f.Floor, f.Meta.Index, ledger, f.RecordBytes)
	}
	s, err := w.Close()
	if err != nil {
		return err
	}
	if err := out.flush(); err != nil {
		return err
	}
	n.cfg.Logger.Info("backup sent", "log", src.Name, "index", hdr.Index, "term", hdr.Term, "floor", hdr.Floor,
		"entries", s.Entries, "bytes", s.Size, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// backupPoint takes a snapshot of replica r for a backup and returns the
// newest one, which covers at least index applied.
func (n *Node) backupPoint(r *replica.Replica, applied uint64) (*replica.SnapFile, error) {
	if err := r.Raft().Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return nil, r.RaftError(err)
	}
	files, err := r.Snapshots().Files()
	if err != nil {
		return nil, err
	}
	if len(files) == 0 || files[0].Meta.Index < applied {
		return nil, &transport.Error{Code: transport.CodeUnavailable, Message: fmt.Sprintf(
			"node %s has no snapshot at or past index %d to back up; try again", n.cfg.ID, applied)}
	}
	return files[0], nil
}

// backupItems cuts the bytes written to it into stream items. It belongs
// to the goroutine serving the backup.
type backupItems struct {
	st   *transport.ServerStream
	buf  []byte // the next item; its capacity is the item size
	sent func() // called after each item is sent
}

// Write implements io.Writer.
func (w *backupItems) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// flush sends what is buffered, if anything. Send encodes the item before
// it returns, so the buffer is reused.
func (w *backupItems) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.st.Send(&transport.BackupItem{Data: w.buf})
	w.buf = w.buf[:0]
	if err == nil {
		w.sent()
	}
	return err
}
