package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/raftlog/raftlog/raftstore"
)

// logStore is what the benchmark needs of a store: the two interfaces
// hashicorp/raft calls, and Close.
type logStore interface {
	raft.LogStore
	raft.StableStore
	Close() error
}

// storeKind is one contender: how to open it in a directory of its own.
type storeKind struct {
	// key selects the store in -stores.
	key string
	// name labels its rows in the tables.
	name string
	// open opens (or creates) the store in dir, which exists.
	open func(dir string) (logStore, error)
	// openGroups opens the stores of raft groups 1 to n under dir, which
	// exists, for workload 7: one shared DB for raftstore, n stores in
	// directories of their own for the others.
	openGroups func(dir string, n int) (*groupSet, error)
}

// walKey is the store every ratio is taken against.
const walKey = "raft-wal"

// allStores lists the contenders in the order of the tables.
var allStores = []storeKind{
	{
		key:  "raftstore",
		name: "raftstore (sync)",
		open: func(dir string) (logStore, error) {
			return raftstore.Open(dir, &raftstore.Options{Flush: raftstore.SyncFlush})
		},
		openGroups: openRaftstoreGroups(raftstore.SyncFlush),
	},
	{
		key:  "raftstore-async",
		name: "raftstore async (UNSAFE)",
		open: func(dir string) (logStore, error) {
			return raftstore.Open(dir, &raftstore.Options{Flush: raftstore.AsyncFlush})
		},
		openGroups: openRaftstoreGroups(raftstore.AsyncFlush),
	},
	{
		key:        walKey,
		name:       "raft-wal",
		open:       openWAL,
		openGroups: openWALGroups,
	},
	{
		key:        boltKey,
		name:       "raft-boltdb v2",
		open:       openBolt,
		openGroups: openBoltGroups,
	},
}

// boltKey is raft-boltdb's key.
const boltKey = "raft-boltdb"

// openBolt opens raft-boltdb v2 with its defaults (fsync on every commit).
func openBolt(dir string) (logStore, error) {
	return raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
}

// openWAL opens raft-wal with its defaults. The default meta store is
// created here only to be able to close it: WAL.Close leaves it open, and
// its bbolt file lock would make a reopen in the same process wait forever.
func openWAL(dir string) (logStore, error) { return openCountedWAL(dir, nil) }

// openCountedWAL is openWAL that, if c is not nil, counts the WAL's fsyncs
// in c: it gives raft-wal its default segment filer and meta store, each
// wrapped to count (walFsyncs).
func openCountedWAL(dir string, c *walFsyncs) (logStore, error) {
	meta := &metadb.BoltMetaDB{}
	var w *wal.WAL
	var err error
	if c == nil {
		w, err = wal.Open(dir, wal.WithMetaStore(meta))
	} else {
		w, err = wal.Open(dir, wal.WithMetaStore(&countingMeta{MetaStore: meta, c: c}),
			wal.WithSegmentFiler(segment.NewFiler(dir, &countingVFS{VFS: walfs.New(), c: c})))
	}
	if err != nil {
		meta.Close()
		return nil, err
	}
	return &walStore{WAL: w, meta: meta}, nil
}

// walStore is a raft-wal WAL whose Close also closes its meta store.
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
}

// Close closes the WAL and then its meta store.
func (w *walStore) Close() error {
	return errors.Join(w.WAL.Close(), w.meta.Close())
}

// selectStores returns the stores named in the comma-separated list, in
// the order of allStores; "all" or "" selects every store.
func selectStores(list string) ([]storeKind, error) {
	if list == "" || list == "all" {
		return allStores, nil
	}
	want := map[string]bool{}
	for _, k := range strings.Split(list, ",") {
		k = strings.TrimSpace(k)
		found := false
		for _, s := range allStores {
			found = found || s.key == k
		}
		if !found {
			return nil, fmt.Errorf("unknown store %q (have %s)", k, storeKeys())
		}
		want[k] = true
	}
	var out []storeKind
	for _, s := range allStores {
		if want[s.key] {
			out = append(out, s)
		}
	}
	return out, nil
}

// storeKeys lists the keys -stores accepts.
func storeKeys() string {
	var keys []string
	for _, s := range allStores {
		keys = append(keys, s.key)
	}
	return strings.Join(keys, ", ")
}

// rotate returns stores starting at index by, so that each round runs the
// stores in a different order and no store always goes first.
func rotate(stores []storeKind, by int) []storeKind {
	n := len(stores)
	out := make([]storeKind, 0, n)
	for i := range n {
		out = append(out, stores[(by+i)%n])
	}
	return out
}
