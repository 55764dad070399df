package node

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/commitlog/vfs"
)

// The data dir's guard and its damage.
//
// A running node holds an exclusive lock on the file LOCK in its data dir
// (flock, released when the process exits, however it exits), and so does
// 'node repair' while it inspects and repairs the dir: neither runs on a
// dir the other, or a second node, uses. (The commit log's own lock,
// store/log/LOCK, guards the log alone, and only while it is open.)
//
// A damaged durable record (a record below the commit log's durable
// watermark that fails its checksum, which no crash explains) stops the
// node from starting when it lies where the node reads at start: the
// commit-log tail recovery replays, the first and last entry of each
// group, and raft's entries after the newest snapshot. The error names the
// file and offset and wraps ErrDamaged. Damage elsewhere is found when the
// record is read (a read fails, naming the file and offset) or by
// 'node repair', which reads every record.

// lockName is the name of the data dir's lock file.
const lockName = "LOCK"

// ErrDataDirInUse is the error of Start, and of PrepareRepair, on a data
// dir that another node (or repair) holds.
var ErrDataDirInUse = errors.New("node: the data dir is in use")

// ErrDamaged is the error of Start on a data dir whose log holds a
// damaged durable record; it also wraps the error naming the record's
// file and offset (commitlog.ErrCorrupt).
var ErrDamaged = errors.New("node: the data dir holds a damaged record")

// lockDataDir takes the data dir's lock.
func lockDataDir(dir string) (io.Closer, error) {
	l, err := vfs.Default.Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrDataDirInUse, dir, err)
	}
	return l, nil
}

// damaged wraps err, an error reading the store of the data dir dir, in
// ErrDamaged with what to do about it, when it reports a damaged record;
// other errors are returned as they are.
func damaged(dir string, err error) error {
	if err == nil || !errors.Is(err, commitlog.ErrCorrupt) {
		return err
	}
	return fmt.Errorf("%w: %w; the node cannot start. 'node repair --data-dir %s' cuts its log back before the damage, "+
		"after which it catches up from the leader; read the README's Repair section first: that is safe only while the other nodes hold the records",
		ErrDamaged, err, dir)
}

// damagedReplica is damaged for a named log's replica, which cannot start
// while the node and its other logs run on: err is wrapped in ErrDamaged
// when it reports a damaged record; other errors are returned as they are.
func damagedReplica(dir string, err error) error {
	if err == nil || !errors.Is(err, commitlog.ErrCorrupt) {
		return err
	}
	return fmt.Errorf("%w: %w; the log's replica cannot start on this node, and the log runs on its other replicas. "+
		"Stop the node and run 'node repair --data-dir %s', which cuts its log back before the damage, after which it catches up from the leaders; "+
		"read the README's Repair section first: that is safe only while the other nodes hold the records",
		ErrDamaged, err, dir)
}

// checkRaftLog reads what raft.NewRaft reads of its log when it starts
// (replica.Replica.CheckLog), so that a damaged or missing entry stops the
// start with an error naming it rather than a panic in raft.
func (n *Node) checkRaftLog() error {
	if err := n.log.CheckLog(); err != nil {
		return damaged(n.cfg.DataDir, fmt.Errorf("node: %w", err))
	}
	return nil
}
