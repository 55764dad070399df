package raftstore

// A DB whose stable state is lost.
//
// Every group's raft state (CurrentTerm, LastVoteTerm, LastVoteCand) lives
// in the two stable files, stable.0 and stable.1, written alternately (see
// stable.go), so that a write torn by a crash leaves the other file valid.
// Neither being valid is therefore not what a crash leaves, with one
// exception: the very first write of a DB, which creates its first group,
// goes to stable.1 while stable.0 is still empty, and a crash during it
// leaves no valid file. But a group is created (DB.Store, and recovery for
// a group it finds) by a write of the stable state that completes before
// the group exists: before its index directory is made, before it can
// store an entry, and so before the checkpoint can list it. So when
// neither file is valid while the DB shows a group ever existed (the
// commit log was written, the checkpoint lists a group, or a group's index
// directory exists), the state was lost after it was written, by damage or
// by a deletion, and not by a crash. That holds whether or not raft ever
// called Set: a Store used only as raft's LogStore wrote its group's
// creation too. OpenDB then refuses the DB (ErrStableLost): raft would
// start with term 0 and no vote, and a node that forgets its vote can vote
// twice in a term. A DB that shows no group opens with an empty state: a
// new one, or one whose first write a crash tore.

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrStableLost is the error of OpenDB (and Open), and Inspection.StableLost,
// for a DB that was used but whose stable state is lost: neither stable.0
// nor stable.1 holds a valid state (each is missing, empty or damaged),
// while the commit log, the checkpoint or the index directories show that
// groups were created, each of which wrote the stable state first (a crash
// leaves one of the two files valid). The current term and vote of every
// group are gone, and raft started without them can vote twice in a term,
// so the DB is not opened. The error names each file and what is wrong with
// it, and what shows the DB was used; when a file is damaged (neither
// missing nor empty) it matches ErrCorrupt too.
//
// What to do: put back stable.0 and stable.1 as they were when the DB last
// ran (a copy taken while it ran may be older and hold an older vote, which
// is no safer); or remove the node from its raft clusters and start it
// afresh with an empty directory, as a new member (package node: wipe the
// data dir and start it with --join). When raft keeps its term and vote in
// another StableStore and this DB is only its LogStore,
// Options.UnsafeResetStableState opens the DB with an empty stable state.
var ErrStableLost = errors.New("raftstore: stable state lost")

// usedEvidence returns what shows that the DB in dir held a group, "" when
// nothing does: the end of its commit log (logEnd), the groups its
// checkpoint lists (meta, see encodeMeta) and its groups' index
// directories. A meta that does not decode shows nothing (recovery
// reports it).
func usedEvidence(o *Options, dir string, logEnd int64, meta []byte) string {
	var parts []string
	if logEnd > 0 {
		parts = append(parts, fmt.Sprintf("its commit log was written up to offset %d", logEnd))
	}
	if _, states, err := decodeMeta(meta); err == nil && len(states) > 0 {
		gs := make([]string, len(states))
		for i, st := range states {
			gs[i] = fmt.Sprintf("%d (no entries)", st.group)
			if st.last != 0 {
				gs[i] = fmt.Sprintf("%d (entries %d..%d)", st.group, st.first, st.last)
			}
		}
		parts = append(parts, "its checkpoint lists group "+listSome(gs))
	}
	if names, err := o.FS.ReadDir(filepath.Join(dir, indexDirName)); err == nil {
		var gs []string
		for _, name := range names {
			if g, err := strconv.ParseUint(name, 10, 64); err == nil && len(name) == 20 {
				gs = append(gs, strconv.FormatUint(g, 10))
			}
		}
		if len(gs) > 0 {
			parts = append(parts, "it holds the index directory of group "+listSome(gs))
		}
	}
	return strings.Join(parts, "; ")
}

// listSome joins up to 8 items, saying how many more there are.
func listSome(items []string) string {
	const most = 8
	if len(items) <= most {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:most], ", "), len(items)-most)
}

// stableLostError returns the ErrStableLost for the DB in dir, whose
// stable files hold no valid state (found) although evidence shows it was
// used.
func stableLostError(dir string, found *[2]stableFinding, evidence string) error {
	files := make([]string, len(found))
	damaged := false
	for i := range found {
		files[i] = fmt.Sprintf("%s: %s", found[i].path, found[i].bad)
		damaged = damaged || found[i].damaged()
	}
	err := fmt.Errorf("%w: %s holds no valid stable file (%s), yet it was used (%s): "+
		"the current term and vote of its raft groups are gone, and raft started without them can vote twice in a term. "+
		"Put both files back as they were when the DB last ran, or remove this node from its raft clusters and start it afresh "+
		"in an empty directory (a raftlog node: wipe its data dir and start it with --join); "+
		"if raft keeps its term and vote in another StableStore, Options.UnsafeResetStableState opens the DB with an empty stable state",
		ErrStableLost, dir, strings.Join(files, "; "), evidence)
	if damaged {
		return &corruptError{err}
	}
	return err
}

// checkStableLost is OpenDB's check of stable files that hold no valid
// state (found): nil for a DB that shows no group (new, or its first
// stable write torn by a crash), ErrStableLost for one that does, unless
// Options.UnsafeResetStableState is set, which logs it and goes on.
func (db *DB) checkStableLost(found *[2]stableFinding) error {
	evidence := usedEvidence(&db.opts, db.dir, db.log.End(), db.log.Meta())
	if evidence == "" {
		return nil
	}
	err := stableLostError(db.dir, found, evidence)
	if !db.opts.UnsafeResetStableState {
		return err
	}
	db.opts.Logger.Warn("opening with an empty stable state (Options.UnsafeResetStableState): every group's term and vote are lost",
		"dir", db.dir, "error", err)
	return nil
}
