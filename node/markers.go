package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/replica"
)

// Marker files in the data dir record, durably, what a node knows of its
// own membership beyond raft's state:
//
//	joining        a new member, not yet a voter; holds the index of the entry
//	               that added it, 0 until known (rejoin.go)
//	rejoined       the index of the entry that added the node when it last
//	               joined as a new member; written when it is promoted and
//	               kept: the node's catalog records what the node lost once
//	               it has applied that entry (rejoin.go, reconcile)
//	bootstrapping  started with no raft state and a bootstrap list; has not yet
//	               learnt whether it founds a new cluster or rejoins one that
//	               ran without it (bootstrap.go)
//	removed        removed from the cluster; the node refuses to start
//	               (removed.go)
//	logs-born      written by versions of 2026-12-01 and 02 and ignored since:
//	               a node that lost its data learns which replicas it lost
//	               from the catalog (recordLost, rejoin.go)
//	restoring      a restore of a backup that has not finished; the node
//	               refuses to start (restore.go)
//	cluster-id     the id of the node's cluster, a copy of the catalog's,
//	               read at start (clusterid.go)
//
// A marker is written to a temporary file, synced, renamed into place, and
// the directory synced; removing one syncs the directory too.
const (
	joiningFile   = "joining"
	rejoinedFile  = "rejoined"
	bootstrapFile = "bootstrapping"
	removedFile   = "removed"
)

// markers reads and writes a data dir's marker files. Several goroutines
// write them (a join in progress and promoteLoop both record the joining
// state), so one mutex serializes the writes: each goes through the same
// temporary file name.
type markers struct {
	dir string     // immutable
	mu  sync.Mutex // serializes write and remove
}

// write replaces marker name with b, durably.
func (m *markers) write(name string, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return replica.WriteFileSync(filepath.Join(m.dir, name), b)
}

// remove deletes marker name, durably; a missing marker is not an error.
func (m *markers) remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	path := filepath.Join(m.dir, name)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("node: remove %s: %w", path, err)
	}
	if err := vfs.Default.SyncDir(m.dir); err != nil {
		return fmt.Errorf("node: remove %s: %w", path, err)
	}
	return nil
}

// read returns marker name's contents, and false when it does not exist.
func (m *markers) read(name string) (string, bool, error) {
	b, err := os.ReadFile(filepath.Join(m.dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("node: %w", err)
	}
	return string(b), true, nil
}

// has reports whether marker name exists.
func (m *markers) has(name string) (bool, error) {
	_, ok, err := m.read(name)
	return ok, err
}

// markJoining records that the node is a new member not yet promoted,
// added by the entry at index (0: not known yet).
func (m *markers) markJoining(index uint64) error { return m.writeIndex(joiningFile, index) }

// markRejoined records index, the index of the entry that added the node
// as a new member, once the node is promoted (the rejoined marker).
func (m *markers) markRejoined(index uint64) error { return m.writeIndex(rejoinedFile, index) }

// rejoinedIndex reads the rejoined marker: the index of the entry that
// added the node when it last joined as a new member, 0 when it never did
// (or did under a version that kept no such marker).
func (m *markers) rejoinedIndex() (uint64, error) {
	_, idx, err := m.readIndex(rejoinedFile)
	return idx, err
}

// joiningIndex reads the joining state: whether the node is joining, and
// the index of the entry that added it (0 if not known).
func (m *markers) joiningIndex() (bool, uint64, error) { return m.readIndex(joiningFile) }

// writeIndex replaces marker name with index, durably.
func (m *markers) writeIndex(name string, index uint64) error {
	return m.write(name, []byte(strconv.FormatUint(index, 10)+"\n"))
}

// readIndex reads marker name, an index: whether it exists, and the index.
func (m *markers) readIndex(name string) (bool, uint64, error) {
	s, ok, err := m.read(name)
	if !ok || err != nil {
		return false, 0, err
	}
	idx, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return false, 0, fmt.Errorf("node: %s: %w", filepath.Join(m.dir, name), err)
	}
	return true, idx, nil
}
