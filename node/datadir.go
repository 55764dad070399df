package node

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/replica"
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

// checkRaftLog reads what raft.NewRaft reads of its log when it starts (the
// last entry, and every entry after the newest snapshot), so that a
// damaged or missing entry stops the start with an error naming it rather
// than a panic in raft.
func (n *Node) checkRaftLog() error {
	var from uint64 = 1
	if p := n.snap.Latest.Load(); p != nil {
		from = p.Index + 1
	}
	_, last := replica.Bounds(n.view.Live)
	if last == 0 {
		return nil
	}
	store := failStopStore{Store: n.view.Live, n: n}
	var l raft.Log
	check := func(i uint64) error {
		if err := store.GetLog(i, &l); err != nil {
			return damaged(n.cfg.DataDir, fmt.Errorf("node: raft's log, entry %d: %w", i, err))
		}
		return nil
	}
	if last < from {
		return check(last)
	}
	for i := from; i <= last; i++ {
		if err := check(i); err != nil {
			return err
		}
	}
	return nil
}
