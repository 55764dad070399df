package node

// Restoring a backup into a named log of the running cluster
// (transport.OpRestoreLog, node restore --log), served by the log's
// leader. The client creates the log, then uploads the backup file to
// the log's leader in parts; the leader keeps the upload in the log's
// directory (restoreUploadFile), marks the log as being restored when the
// upload begins (replica.Replica.BeginRestore), and at the last part
// checks the whole file and hands it to raft as a snapshot
// (replica.Replica.RestoreBackup): the records keep their indexes and the
// client sessions come along, on every replica of the log.
//
// What a restore cut short leaves (replica/restore.go): a log marked as
// being restored, which refuses record operations until it is deleted,
// or, when the leader had installed the restore and a new leader was
// elected among replicas that had it, the whole backup. An upload lives
// only on the node that received it, in its current leadership: a part
// that comes after the node restarted or its leadership moved is refused,
// and the client uploads again from the start (BeginRestore keeps a
// marked, empty log's mark); a node removes an upload an earlier run left
// when it starts the log's replica. While a node holds an upload of a
// log, it does not hand the log's leadership to its preferred leader.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/backup"
	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
)

// restoreUploadFile is the name of an upload in the log's directory.
const restoreUploadFile = "restore.upload"

// restoreTimeout bounds raft's part of a restore: the snapshot's install
// on the leader and the commit of an entry after it, which needs a
// majority of the log's voters to have installed it.
const restoreTimeout = 5 * time.Minute

// restoreCatchUp bounds the wait, after a restore, for the log's members
// that do not hold it yet.
const restoreCatchUp = 30 * time.Second

// restoreUploads are the uploads of restores the node holds.
type restoreUploads struct {
	mu sync.Mutex
	m  map[uint64]*restoreUpload // by log id; guarded by mu
}

// restoreUpload is one upload. Its client's requests come one at a time;
// mu serialises them should they not.
type restoreUpload struct {
	mu    sync.Mutex
	stint *replica.Stint // the leadership it belongs to; immutable
	path  string         // immutable
	f     *os.File       // guarded by mu; nil once closed
	size  int64          // bytes written; guarded by mu
}

// get returns log id's upload, nil if none.
func (u *restoreUploads) get(id uint64) *restoreUpload {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.m[id]
}

// active reports whether the node holds an upload of log id.
func (u *restoreUploads) active(id uint64) bool { return u.get(id) != nil }

// put makes up log id's upload, returning the one it replaces.
func (u *restoreUploads) put(id uint64, up *restoreUpload) *restoreUpload {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[uint64]*restoreUpload{}
	}
	old := u.m[id]
	u.m[id] = up
	return old
}

// forget removes log id's upload up, if it is still the current one.
func (u *restoreUploads) forget(id uint64, up *restoreUpload) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m[id] == up {
		delete(u.m, id)
	}
}

// drop removes log id's upload up (if it is still the current one) and
// its file. up.mu must not be held.
func (u *restoreUploads) drop(id uint64, up *restoreUpload) {
	u.forget(id, up)
	up.close()
}

// close closes and removes the upload's file.
func (up *restoreUpload) close() {
	up.mu.Lock()
	defer up.mu.Unlock()
	up.closeLocked()
}

// closeLocked is close with up.mu held.
func (up *restoreUpload) closeLocked() {
	if up.f != nil {
		up.f.Close()
		up.f = nil
	}
	os.Remove(up.path)
}

// restoreLog serves a RestoreLog part on the log's leader.
func (n *Node) restoreLog(ctx context.Context, req *transport.RestoreLogRequest) (*transport.RestoreLogResponse, error) {
	if n.mux == nil {
		return nil, errNoNamedLogs()
	}
	l, err := n.lookupLog(req.Log)
	if err != nil {
		return nil, err
	}
	h := n.host.hosted(l.ID)
	if h == nil {
		return nil, n.notHosted(l)
	}
	r := h.r
	stint, err := r.Leading(ctx)
	if err != nil {
		return nil, err
	}
	up := n.uploads.get(l.ID)
	if req.Offset == 0 {
		if up, err = n.beginUpload(ctx, l, r, stint); err != nil {
			return nil, err
		}
	} else if up == nil || up.stint != stint {
		return nil, &transport.Error{Code: transport.CodeFailedPrecondition, Message: fmt.Sprintf(
			"node %s holds no upload into log %q (the node restarted, or its leadership of the log moved): upload the backup again from its first byte", n.cfg.ID, l.Name)}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.f == nil {
		return nil, &transport.Error{Code: transport.CodeFailedPrecondition, Message: fmt.Sprintf("the upload into log %q ended: upload the backup again from its first byte", l.Name)}
	}
	if req.Offset != uint64(up.size) {
		return nil, &transport.Error{Code: transport.CodeFailedPrecondition, Message: fmt.Sprintf(
			"node %s holds %d bytes of the upload into log %q, this part is for byte %d", n.cfg.ID, up.size, l.Name, req.Offset)}
	}
	if _, err := up.f.Write(req.Data); err != nil {
		n.uploads.forget(l.ID, up)
		up.closeLocked()
		return nil, fmt.Errorf("node: restore of log %q: write the upload: %w", l.Name, err)
	}
	up.size += int64(len(req.Data))
	resp := &transport.RestoreLogResponse{Received: uint64(up.size)}
	if !req.Done {
		return resp, nil
	}
	defer func() {
		n.uploads.forget(l.ID, up)
		up.closeLocked()
	}()
	hdr, index, err := n.restoreUpload(ctx, l, r, up)
	if err != nil {
		return nil, err
	}
	resp.BackupIndex, resp.Index = hdr.Index, index
	resp.Replicas = uint32(n.awaitRestored(ctx, l, index))
	n.cfg.Logger.Info("restored a backup into a log", "log", l.Name, "from_log", hdr.Log.Name, "backup_index", hdr.Index,
		"index", index, "replicas", resp.Replicas)
	return resp, nil
}

// beginUpload starts an upload into log l, after marking it as being
// restored (which refuses a log that holds records), replacing any
// upload the node held.
func (n *Node) beginUpload(ctx context.Context, l catalog.Log, r *replica.Replica, stint *replica.Stint) (*restoreUpload, error) {
	if err := r.BeginRestore(ctx, restoreTimeout); err != nil {
		if errors.Is(err, replica.ErrNotEmpty) {
			return nil, &transport.Error{Code: transport.CodeFailedPrecondition, Message: fmt.Sprintf(
				"log %q is not empty (%v): a backup is restored into a new log; if a restore into it was under way, it may have finished", l.Name, err)}
		}
		return nil, err
	}
	dir := n.logDir(l.ID)
	if err := vfs.Default.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	up := &restoreUpload{stint: stint, path: filepath.Join(dir, restoreUploadFile)}
	if old := n.uploads.put(l.ID, up); old != nil {
		old.close()
	}
	f, err := os.OpenFile(up.path, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		n.uploads.drop(l.ID, up)
		return nil, fmt.Errorf("node: restore of log %q: %w", l.Name, err)
	}
	up.f = f
	n.cfg.Logger.Info("a restore into a log begins", "log", l.Name, "id", l.ID)
	return up, nil
}

// restoreUpload checks the uploaded backup and restores it into log l,
// whose leader r is. up.mu is held.
func (n *Node) restoreUpload(ctx context.Context, l catalog.Log, r *replica.Replica, up *restoreUpload) (backup.Header, uint64, error) {
	bad := func(err error) error {
		return &transport.Error{Code: transport.CodeBadRequest, Message: fmt.Sprintf("the backup uploaded into log %q: %v", l.Name, err)}
	}
	if err := up.f.Sync(); err != nil {
		return backup.Header{}, 0, fmt.Errorf("node: restore of log %q: sync the upload: %w", l.Name, err)
	}
	// The whole file first, so that a damaged one is refused before raft
	// sees any of it, naming the cause and the byte.
	hdr, _, err := backup.Verify(io.NewSectionReader(up.f, 0, up.size))
	if err != nil {
		return backup.Header{}, 0, bad(err)
	}
	br, err := backup.NewReader(io.NewSectionReader(up.f, 0, up.size))
	if err != nil {
		return backup.Header{}, 0, bad(err)
	}
	state, recordBytes, _, err := replica.RestoredLogState(br.State(), hdr.Floor)
	if err != nil {
		if errors.Is(err, replica.ErrStateVersion) {
			return backup.Header{}, 0, bad(fmt.Errorf("%w: %v", backup.ErrUnsupportedVersion, err))
		}
		return backup.Header{}, 0, bad(fmt.Errorf("%w: %v", backup.ErrCorrupt, err))
	}
	next := func() (*raft.Log, error) {
		e, err := br.Next()
		if err != nil {
			return nil, err
		}
		return &raft.Log{Index: e.Index, Term: e.Term, Type: raft.LogCommand, Data: e.Data, AppendedAt: time.Unix(0, e.AppendedAt)}, nil
	}
	index, err := r.RestoreBackup(ctx, state, recordBytes, hdr.Index, next, restoreTimeout)
	if err != nil {
		return backup.Header{}, 0, err
	}
	return hdr, index, nil
}

// awaitRestored waits, for up to restoreCatchUp, until every member of
// log l that answers holds the log up to index, and returns how many do
// (the leader among them). A member that does not answer (it is down) is
// not waited for: it installs the restore from the leader when it
// returns.
func (n *Node) awaitRestored(ctx context.Context, l catalog.Log, index uint64) int {
	members := slices.DeleteFunc(l.Hosts(), func(id string) bool { return id == n.cfg.ID })
	have := 1
	deadline := time.Now().Add(restoreCatchUp)
	for len(members) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		s := n.catalog.State()
		members = slices.DeleteFunc(members, func(id string) bool {
			holds, answered := n.holdsUpTo(ctx, s, l, id, index)
			if holds {
				have++
			}
			return holds || !answered
		})
		if len(members) == 0 {
			break
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return have
}

// holdsUpTo asks node id whether its replica of log l holds the log up to
// index (DescribeLog, Local); answered is false when the node did not
// answer.
func (n *Node) holdsUpTo(ctx context.Context, s *catalog.State, l catalog.Log, id string, index uint64) (holds, answered bool) {
	nd, ok := s.Node(id)
	if !ok || nd.ClientAddr == "" {
		return false, false
	}
	ctx, cancel := context.WithTimeout(ctx, catchUpProbe)
	defer cancel()
	var d transport.DescribeLogResponse
	if err := n.callNode(ctx, nd.ClientAddr, transport.OpDescribeLog, &transport.DescribeLogRequest{Name: l.Name, Local: true}, &d); err != nil {
		var te *transport.Error
		return false, errors.As(err, &te) // a node that answers with an error runs
	}
	return d.LastIndex >= index, true
}
