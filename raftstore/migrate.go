package raftstore

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// StableKeys are the stable-store keys hashicorp/raft v1.8.0 writes; Migrate
// copies them.
var StableKeys = [][]byte{[]byte("CurrentTerm"), []byte("LastVoteTerm"), []byte("LastVoteCand")}

// ErrNotEmpty is returned by Migrate for a destination that holds state.
var ErrNotEmpty = errors.New("raftstore: migration destination is not empty")

// Migrate copies an existing raft log and stable state, for example a
// raft-boltdb store, into dst, which must hold nothing: no entry and no
// stable key (ErrNotEmpty, and nothing is written). Entries go over in
// batches of 1024 and the uint64 and string stable keys in StableKeys (plus
// extraKeys) are copied when present. Run it with the raft node stopped;
// once it returns nil, point the node at dst. src is only read. A
// migration that failed half way leaves dst not empty: remove its
// directory and migrate again.
func Migrate(dst *Store, src raft.LogStore, srcStable raft.StableStore, extraKeys ...[]byte) error {
	if err := dst.checkEmpty(); err != nil {
		return err
	}
	first, err := src.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftstore: migrate: source first index: %w", err)
	}
	last, err := src.LastIndex()
	if err != nil {
		return fmt.Errorf("raftstore: migrate: source last index: %w", err)
	}
	const batch = 1024
	logs := make([]*raft.Log, 0, batch)
	for i := first; first != 0 && i <= last; i++ {
		l := new(raft.Log)
		if err := src.GetLog(i, l); err != nil {
			return fmt.Errorf("raftstore: migrate: read entry %d of %d..%d: %w", i, first, last, err)
		}
		logs = append(logs, l)
		if len(logs) == batch || i == last {
			if err := dst.StoreLogs(logs); err != nil {
				return fmt.Errorf("raftstore: migrate: store entries up to %d: %w", i, err)
			}
			logs = logs[:0]
		}
	}
	if srcStable == nil {
		return nil
	}
	for _, key := range append(append([][]byte(nil), StableKeys...), extraKeys...) {
		v, err := srcStable.Get(key)
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("raftstore: migrate: read stable key %q: %w", key, err)
		}
		if len(v) > 0 {
			if err := dst.Set(key, v); err != nil {
				return fmt.Errorf("raftstore: migrate: write stable key %q: %w", key, err)
			}
			continue
		}
		// Some stores (raft.InmemStore) keep integers apart from bytes.
		n, err := srcStable.GetUint64(key)
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("raftstore: migrate: read stable key %q: %w", key, err)
		}
		if n != 0 {
			if err := dst.SetUint64(key, n); err != nil {
				return fmt.Errorf("raftstore: migrate: write stable key %q: %w", key, err)
			}
		}
	}
	return nil
}

// checkEmpty returns ErrNotEmpty, naming what it holds, unless the store
// holds no entry and no stable key. A destination's stable keys must not
// be overwritten: a CurrentTerm from the source smaller than the one there
// would move the term backwards.
func (s *Store) checkEmpty() error {
	first, err := s.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftstore: migrate into group %d: %w", s.group, err)
	}
	last, err := s.LastIndex()
	if err != nil {
		return fmt.Errorf("raftstore: migrate into group %d: %w", s.group, err)
	}
	if last != 0 {
		return fmt.Errorf("%w: group %d in %s holds entries %d..%d", ErrNotEmpty, s.group, s.db.dir, first, last)
	}
	if keys := s.db.stable.keys(s.group); len(keys) > 0 {
		return fmt.Errorf("%w: group %d in %s holds the stable keys %q", ErrNotEmpty, s.group, s.db.dir, keys)
	}
	return nil
}

// isNotFound reports the missing-key error of raft's stable stores, which
// raft itself recognises by its text.
func isNotFound(err error) bool {
	return err.Error() == "not found" || errors.Is(err, raft.ErrLogNotFound)
}
