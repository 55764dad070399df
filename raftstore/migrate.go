package raftstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// StableKeys are the stable-store keys hashicorp/raft v1.8.0 writes; Migrate
// copies them.
var StableKeys = [][]byte{[]byte("CurrentTerm"), []byte("LastVoteTerm"), []byte("LastVoteCand")}

// ErrNotEmpty is returned by Migrate for a destination that holds state.
var ErrNotEmpty = errors.New("raftstore: migration destination is not empty")

// ErrMigrationIncomplete is returned by DB.Store (and so by Open) for a
// group that a Migrate began to fill and did not finish: it holds a prefix
// of the source's log and perhaps none of its terms and votes, and raft
// must not start on it. Remove the directory (or use another group) and
// migrate again.
var ErrMigrationIncomplete = errors.New("raftstore: a migration into this store did not finish")

// migratingKey is the stable key Migrate sets in the destination group
// before it copies anything and removes once everything is copied and
// durable. raft never writes a key that starts with a zero byte.
var migratingKey = []byte("\x00raftstore-migrating")

// migrateBatch and migrateBatchBytes bound one StoreLogs call of Migrate.
const (
	migrateBatch      = 1024
	migrateBatchBytes = 4 << 20
)

// MigrateOptions configure MigrateContext. Nil or zero options copy the
// entries and StableKeys, with no progress reports.
type MigrateOptions struct {
	// ExtraKeys are stable keys to copy besides StableKeys, for a service
	// that stores its own keys in raft's stable store.
	ExtraKeys [][]byte
	// Progress, when set, is called on Migrate's goroutine after every
	// batch of entries it stores (at most 1,024 entries or 4 MiB) and
	// once when everything is copied, with Done set. It must return
	// quickly: the copy waits for it.
	Progress func(MigrateProgress)
}

// MigrateProgress is how far a migration has got.
type MigrateProgress struct {
	// First and Last are the source's first and last index (0 when it
	// holds no entries): the range being copied.
	First, Last uint64
	// Copied is how many entries are stored in the destination so far,
	// and LastCopied the index of the last of them (0 before the first
	// batch).
	Copied, LastCopied uint64
	// Bytes is the size of the Data and Extensions of the entries copied.
	Bytes int64
	// Keys is how many stable keys were copied (set once Done).
	Keys int
	// Elapsed is the time since the migration began.
	Elapsed time.Duration
	// Done is set in the last report, once everything is copied and
	// durable.
	Done bool
}

// Migrate copies an existing raft log and stable state, for example a
// raft-boltdb store, into dst: MigrateContext without a deadline or
// progress reports, copying extraKeys besides StableKeys.
func Migrate(dst *Store, src raft.LogStore, srcStable raft.StableStore, extraKeys ...[]byte) error {
	return MigrateContext(context.Background(), dst, src, srcStable, &MigrateOptions{ExtraKeys: extraKeys})
}

// MigrateContext copies an existing raft log and stable state, for example
// a raft-boltdb store, into dst, which must hold nothing: no entry and no
// stable key (ErrNotEmpty, and nothing is written). Entries go over in
// batches of up to 1,024 entries or 4 MiB, then the uint64 and string
// stable keys in StableKeys and opts.ExtraKeys that the source holds. Run
// it with the raft node stopped; once it returns nil, everything copied is
// durable (whatever dst's flush mode) and the node can start on dst. src
// is only read.
//
// ctx is checked between batches: when it is done, MigrateContext returns
// an error wrapping ctx.Err(). A migration that stops for that or any
// other reason leaves dst holding part of the source, and dst's group
// marked: DB.Store and Open refuse it with ErrMigrationIncomplete, so that
// raft never starts on a partial copy. Remove dst's directory and migrate
// again.
func MigrateContext(ctx context.Context, dst *Store, src raft.LogStore, srcStable raft.StableStore, opts *MigrateOptions) error {
	var o MigrateOptions
	if opts != nil {
		o = *opts
	}
	start := time.Now()
	if err := dst.checkEmpty(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("raftstore: migrate: %w", err)
	}
	first, err := src.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftstore: migrate: source first index: %w", err)
	}
	last, err := src.LastIndex()
	if err != nil {
		return fmt.Errorf("raftstore: migrate: source last index: %w", err)
	}
	if last == 0 {
		first = 0
	}
	if err := dst.db.setStable(dst.group, migratingKey, []byte(start.UTC().Format(time.RFC3339))); err != nil {
		return fmt.Errorf("raftstore: migrate: mark group %d: %w", dst.group, err)
	}
	p := MigrateProgress{First: first, Last: last}
	report := func() {
		if o.Progress != nil {
			p.Elapsed = time.Since(start)
			o.Progress(p)
		}
	}

	logs := make([]*raft.Log, 0, migrateBatch)
	size := 0
	for i := first; first != 0 && i <= last; i++ {
		l := new(raft.Log)
		if err := src.GetLog(i, l); err != nil {
			return fmt.Errorf("raftstore: migrate: read entry %d of %d..%d: %w", i, first, last, err)
		}
		logs = append(logs, l)
		size += len(l.Data) + len(l.Extensions)
		if len(logs) < migrateBatch && size < migrateBatchBytes && i != last {
			continue
		}
		if err := dst.StoreLogs(logs); err != nil {
			return fmt.Errorf("raftstore: migrate: store entries %d..%d: %w", logs[0].Index, i, err)
		}
		p.Copied += uint64(len(logs))
		p.LastCopied = i
		p.Bytes += int64(size)
		logs, size = logs[:0], 0
		report()
		if err := ctx.Err(); err != nil && i != last {
			return fmt.Errorf("raftstore: migrate: stopped after entry %d of %d..%d: %w", i, first, last, err)
		}
	}
	if srcStable != nil {
		n, err := copyStable(dst, srcStable, append(append([][]byte(nil), StableKeys...), o.ExtraKeys...))
		if err != nil {
			return err
		}
		p.Keys = n
	}
	// The entries must be durable before the mark goes: with AsyncFlush
	// they may not be yet.
	if err := dst.Sync(); err != nil {
		return fmt.Errorf("raftstore: migrate: sync: %w", err)
	}
	if err := dst.db.removeStable(dst.group, migratingKey); err != nil {
		return fmt.Errorf("raftstore: migrate: unmark group %d: %w", dst.group, err)
	}
	p.Done = true
	report()
	return nil
}

// copyStable copies the keys the source holds and returns how many.
func copyStable(dst *Store, src raft.StableStore, keys [][]byte) (int, error) {
	n := 0
	for _, key := range keys {
		v, err := src.Get(key)
		if err != nil && !isNotFound(err) {
			return n, fmt.Errorf("raftstore: migrate: read stable key %q: %w", key, err)
		}
		if len(v) > 0 {
			if err := dst.Set(key, v); err != nil {
				return n, fmt.Errorf("raftstore: migrate: write stable key %q: %w", key, err)
			}
			n++
			continue
		}
		// Some stores (raft.InmemStore) keep integers apart from bytes.
		u, err := src.GetUint64(key)
		if err != nil && !isNotFound(err) {
			return n, fmt.Errorf("raftstore: migrate: read stable key %q: %w", key, err)
		}
		if u != 0 {
			if err := dst.SetUint64(key, u); err != nil {
				return n, fmt.Errorf("raftstore: migrate: write stable key %q: %w", key, err)
			}
			n++
		}
	}
	return n, nil
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

// checkMigrated returns ErrMigrationIncomplete for a group a Migrate began
// to fill and did not finish.
func (db *DB) checkMigrated(group uint64) error {
	if v, ok := db.stable.get(group, migratingKey); ok {
		return fmt.Errorf("%w: group %d in %s (begun at %s): remove the directory and migrate again", ErrMigrationIncomplete, group, db.dir, v)
	}
	return nil
}

// isNotFound reports the missing-key error of raft's stable stores, which
// raft itself recognises by its text.
func isNotFound(err error) bool {
	return err.Error() == "not found" || errors.Is(err, raft.ErrLogNotFound)
}
