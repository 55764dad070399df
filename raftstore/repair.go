package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog"
)

// Finding and cutting a damaged record, with the DB closed.
//
// OpenDB reads only what recovery needs (the commit-log tail since the last
// checkpoint, and each group's first and last entry), and a read of a
// damaged record fails with an error naming its file and offset. Inspect
// reads every record to find the first damaged one and works out what
// cutting the commit log there leaves of each group; CutLog cuts it. A cut
// is physical: every record from the cut on goes, whatever its group, as if
// the DB had stopped just before writing it. A StoreLogs batch is all or
// nothing, so a cut inside a batch moves back to the batch's start.

// Inspection is what Inspect found in a DB's directory.
type Inspection struct {
	// Log is what the scan of the commit log found.
	Log *commitlog.ScanInfo
	// Damage is the first damaged commit-log record, nil when none is.
	// Log.Damaged counts them all.
	Damage *commitlog.Damage
	// Harmless is set when every damaged record holds nothing the DB
	// still reads: each lies below where recovery starts, and no index
	// slot of a group points at it, so its group had deleted it (trimmed,
	// or replaced after a conflict). Its segment goes once no group needs
	// it, and nothing needs cutting.
	Harmless bool
	// Cut is the commit-log position a repair cuts at: the first damaged
	// record, or the start of the StoreLogs batch it belongs to (so that
	// what remains holds no damage, harmless or not); -1 when there is
	// nothing to cut.
	Cut int64
	// Groups describes every group of the DB, in increasing order of id.
	Groups []GroupInspection
	// StableLost is the error OpenDB refuses the DB with when its stable
	// state is lost (wrapping ErrStableLost: neither stable file is valid
	// though the DB was used), naming each file and what is wrong with
	// it; nil otherwise. Stable and StableUint64 then return nothing, and
	// CutLog does not bring the state back.
	StableLost error

	stable stableState  // the durable stable state; set by Inspect, read-only after
	floors stableFloors // its floors (drop.go); likewise
}

// GroupInspection describes one group of an inspected DB.
type GroupInspection struct {
	// Group is the group's id.
	Group uint64
	// First and Last are the group's first and last index as its intact
	// records give them; 0 when it holds none.
	First, Last uint64
	// KeptFirst and KeptLast are its first and last index after a cut at
	// Inspection.Cut; First and Last when nothing is cut.
	KeptFirst, KeptLast uint64
	// CutEntries counts the group's intact entries at or past the cut;
	// CutFirst and CutLast are the lowest and highest of their indexes.
	CutEntries        int
	CutFirst, CutLast uint64
}

// Group returns the inspection of group g (zero indexes when the DB does
// not hold it).
func (in *Inspection) Group(g uint64) GroupInspection {
	for _, gi := range in.Groups {
		if gi.Group == g {
			return gi
		}
	}
	return GroupInspection{Group: g}
}

// Stable returns the durable stable value of key in group, nil when
// missing.
func (in *Inspection) Stable(group uint64, key []byte) []byte {
	return in.stable[group][string(key)]
}

// StableUint64 returns the durable stable integer of key in group (see
// Store.SetUint64), 0 when missing or not an integer.
func (in *Inspection) StableUint64(group uint64, key []byte) uint64 {
	v := in.Stable(group, key)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// Inspect reads the DB in dir, which must not be open, without changing
// it: every commit-log record (see commitlog.Scanner) and the stable state.
// It finds the first damaged record, whether it is harmless (see
// Inspection.Harmless), and what a cut before it would leave of each
// group, and whether the stable state is lost (Inspection.StableLost).
// each, when not nil, is called with every intact entry, in commit-log
// order, and its position; the entry's Data and Extensions are valid only
// during the call.
//
// A record that passes its checksum but does not decode is not damage a
// cut can repair (the bytes are as written: a newer format, or a bug):
// Inspect returns an error wrapping ErrCorrupt for it.
func Inspect(dir string, opts *Options, each func(group uint64, pos int64, l *raft.Log)) (*Inspection, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if _, err := o.FS.ReadDir(dir); err != nil {
		return nil, fmt.Errorf("raftstore: read %s: %w", dir, err)
	}
	in := &Inspection{Cut: -1}
	var found *[2]stableFinding
	if in.stable, in.floors, found, err = readStableOffline(o, dir); err != nil {
		return nil, err
	}
	// stableLost sets StableLost when no stable file is valid though the
	// DB was used, as OpenDB finds (stablelost.go).
	stableLost := func(logEnd int64, meta []byte) {
		if newest(found) == nil {
			if ev := usedEvidence(&o, dir, logEnd, meta); ev != "" {
				in.StableLost = stableLostError(dir, found, ev)
			}
		}
	}
	inc := incarnations{live: func(g uint64) bool { _, ok := in.stable[g]; return ok }, floors: in.floors}
	logDir := filepath.Join(dir, logDirName)
	if _, err := o.FS.ReadDir(logDir); errors.Is(err, os.ErrNotExist) {
		stableLost(0, nil)
		return in, nil // never opened: nothing to read
	}
	sc, err := commitlog.NewScanner(logDir, o.logOptions())
	if err != nil {
		return nil, corruptAs(fmt.Errorf("raftstore: %w", err))
	}
	defer sc.Close()
	replayFrom, states, err := decodeMeta(sc.Meta())
	if err != nil {
		return nil, err
	}
	live := states[:0:0]
	for _, st := range states {
		if inc.state(st) { // not of a dropped incarnation
			live = append(live, st)
			replayFrom = min(replayFrom, st.from)
		}
	}
	states = live

	p, err := inspectPass(sc, inc, each)
	if err != nil {
		return nil, err
	}
	in.Log = p.info
	stableLost(p.info.End, sc.Meta())
	// A damaged record is harmless when nothing reads it: recovery starts
	// past it, Open does not check it, and no index slot of the groups
	// the checkpoint describes points at it (slots below where recovery
	// starts are durable; groups created since hold only later records).
	start := max(replayFrom, p.info.First)
	var referenced map[int64]bool
	if len(p.damages) > 0 {
		referenced = indexReferences(o, dir, states, p.damages)
	}
	harmless := func(pos int64) bool {
		return referenced != nil && !referenced[pos] && pos < start && pos != sc.LastDurable()
	}
	switch {
	case len(p.damages) == 0:
		p.kept = p.now
	case allHarmless(p.damages, harmless):
		in.Damage, in.Harmless = p.info.Damage, true
		p.kept, p.cuts = p.now, nil
	default:
		// Cut at the first damage, harmless or not: the next OpenDB
		// replays every record before the cut.
		in.Damage, in.Cut = p.info.Damage, p.cut
	}

	groups := map[uint64]bool{}
	for g := range in.stable {
		groups[g] = true
	}
	for g := range p.now.spans {
		groups[g] = true
	}
	for g := range groups {
		gi := GroupInspection{Group: g}
		if s := p.now.spans[g]; s != nil {
			gi.First, gi.Last = s.first, s.last
		}
		if s := p.kept.spans[g]; s != nil {
			gi.KeptFirst, gi.KeptLast = s.first, s.last
		}
		if c := p.cuts[g]; c != nil {
			gi.CutEntries, gi.CutFirst, gi.CutLast = c.CutEntries, c.CutFirst, c.CutLast
		}
		in.Groups = append(in.Groups, gi)
	}
	sort.Slice(in.Groups, func(i, j int) bool { return in.Groups[i].Group < in.Groups[j].Group })
	return in, nil
}

// inspection is what inspectPass found; Inspect, its caller, owns it.
type inspection struct {
	info    *commitlog.ScanInfo
	now     *spanReplay // every intact record
	kept    *spanReplay // the records before cut; nil when no record is damaged
	cut     int64       // where a cut at the first damage goes; -1 if none
	cuts    map[uint64]*GroupInspection
	damages []int64 // positions of the damaged records, in order
}

// inspectPass replays every intact record of sc. The replay up to the
// first damaged record, without a StoreLogs batch it interrupts, is what a
// cut keeps; entries from the cut on are counted by group.
func inspectPass(sc *commitlog.Scanner, inc incarnations, each func(group uint64, pos int64, l *raft.Log)) (*inspection, error) {
	p := &inspection{now: newSpanReplay(), cut: -1, cuts: map[uint64]*GroupInspection{}}
	cutEntry := func(group, index uint64) {
		c := p.cuts[group]
		if c == nil {
			c = &GroupInspection{Group: group, CutFirst: index, CutLast: index}
			p.cuts[group] = c
		}
		c.CutEntries++
		c.CutFirst, c.CutLast = min(c.CutFirst, index), max(c.CutLast, index)
	}
	info, err := sc.Scan(func(rec commitlog.Record, damage error) error {
		if damage != nil {
			p.damages = append(p.damages, rec.Position)
			if p.kept == nil {
				p.cut = rec.Position
				if now := p.now; now.pendingFirst >= 0 {
					p.cut = now.pendingFirst
					for _, e := range now.pending {
						cutEntry(now.pendingGroup, e.index)
					}
				}
				p.kept = p.now.clone()
			}
			return nil
		}
		r, err := decodeRecord(rec.Payload)
		if err != nil {
			return fmt.Errorf("%w: commit-log record at %d passes its checksum but does not decode (%v): not damage a cut repairs", ErrCorrupt, rec.Position, err)
		}
		if !inc.record(r.group, rec.Position) {
			return nil // of a dropped group, which recovery passes over too
		}
		if r.kind == kindEntry {
			if p.kept != nil {
				cutEntry(r.group, r.log.Index)
			}
			if each != nil {
				each(r.group, rec.Position, &r.log)
			}
		}
		p.now.record(rec.Position, r)
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		return nil, corruptAs(fmt.Errorf("raftstore: %w", err))
	}
	p.info = info
	p.now.dropPending()
	return p, nil
}

// CutLog removes every commit-log record at and after position at from the
// DB in dir, which must not be open: at is an Inspection's Cut, or the
// first position of the log (Inspection.Log.First) to remove every entry
// of every group. Each group keeps what its records before at give it, as
// if the DB had stopped just before writing the record at at; the stable
// state is not touched. The cut is durable when CutLog returns (see
// commitlog.Cut), and the next OpenDB rebuilds every group's index from
// the whole retained commit log, once.
func CutLog(dir string, opts *Options, at int64) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	// No group state in the meta: recovery replays from the first record.
	if err := commitlog.Cut(filepath.Join(dir, logDirName), o.logOptions(), at, encodeMeta(0, nil)); err != nil {
		return corruptAs(fmt.Errorf("raftstore: %w", err))
	}
	return nil
}

// allHarmless reports whether harmless holds for every position.
func allHarmless(positions []int64, harmless func(int64) bool) bool {
	for _, p := range positions {
		if !harmless(p) {
			return false
		}
	}
	return true
}

// indexReferences reads the index slots of the groups the checkpoint
// describes (states) in the DB in dir, without changing them, and returns
// which of the positions some slot points at; nil when a slot cannot be
// read.
func indexReferences(o Options, dir string, states []groupState, positions []int64) map[int64]bool {
	want := map[int64]bool{}
	for _, p := range positions {
		want[p] = false
	}
	buf := make([]byte, indexFileSize)
	for _, st := range states {
		if st.last == 0 {
			continue
		}
		gdir := filepath.Join(dir, indexDirName, fmt.Sprintf("%020d", st.group))
		for base := fileBase(st.first); base <= st.last; base += indexSlotsPerFile {
			f, err := o.FS.OpenFile(filepath.Join(gdir, indexFileName(base)), os.O_RDONLY, 0)
			if err != nil {
				return nil
			}
			// A file holds up to indexFileSize bytes; slots past its end
			// are empty (index.go).
			size, err := f.Size()
			clear(buf)
			if err == nil {
				_, err = f.ReadAt(buf[:min(size, indexFileSize)], 0)
			}
			f.Close()
			if err != nil {
				return nil
			}
			for i := max(st.first, base); i <= min(st.last, base+indexSlotsPerFile-1); i++ {
				off := (i - base) * indexSlotSize
				pos := int64(binary.NativeEndian.Uint64(buf[off:])) - 1
				if _, ok := want[pos]; ok {
					want[pos] = true
				}
			}
		}
	}
	return want
}

// readStableOffline reads the durable stable state of the DB in dir
// without creating or changing its files, and what each file held.
func readStableOffline(o Options, dir string) (stableState, stableFloors, *[2]stableFinding, error) {
	var found [2]stableFinding
	for i := range found {
		path := stablePath(dir, i)
		f, err := o.FS.OpenFile(path, os.O_RDONLY, 0)
		if errors.Is(err, os.ErrNotExist) {
			found[i] = stableFinding{path: path, size: -1, bad: "missing"}
			continue
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("raftstore: open %s: %w", path, err)
		}
		found[i], err = readStable(f, path)
		f.Close()
		if err != nil {
			return nil, nil, nil, err
		}
	}
	best := newest(&found)
	if best == nil {
		return stableState{}, stableFloors{}, &found, nil
	}
	st, fl, err := decodeStable(best.payload)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %s: %v", errStableCorrupt, best.path, err)
	}
	return st, fl, &found, nil
}

// span is a group's range of indexes while Inspect replays its records;
// last is 0 when it holds none.
type span struct{ first, last uint64 }

// spanReplay replays records as recovery does (recover.go), keeping only
// each group's range: a batch counts once its last entry is read. It is
// owned by the inspectPass that replays.
type spanReplay struct {
	spans        map[uint64]*span
	pending      []indexPos // the entries of an unfinished batch
	pendingGroup uint64
	pendingFirst int64 // its first record's position; -1 when none
}

func newSpanReplay() *spanReplay {
	return &spanReplay{spans: map[uint64]*span{}, pendingFirst: -1}
}

// clone copies the ranges, without the unfinished batch.
func (r *spanReplay) clone() *spanReplay {
	c := newSpanReplay()
	for g, s := range r.spans {
		cs := *s
		c.spans[g] = &cs
	}
	return c
}

func (r *spanReplay) span(g uint64) *span {
	s := r.spans[g]
	if s == nil {
		s = &span{}
		r.spans[g] = s
	}
	return s
}

// dropPending forgets an unfinished batch: recovery removes it.
func (r *spanReplay) dropPending() {
	r.pending, r.pendingFirst = r.pending[:0], -1
}

// record replays the record at pos.
func (r *spanReplay) record(pos int64, rec record) {
	if r.pendingFirst >= 0 && (rec.kind != kindEntry || rec.group != r.pendingGroup) {
		r.dropPending() // interrupted: recovery would refuse; count it as never finished
	}
	switch rec.kind {
	case kindEntry:
		if r.pendingFirst < 0 {
			r.pendingFirst, r.pendingGroup = pos, rec.group
		}
		r.pending = append(r.pending, indexPos{rec.log.Index, pos})
		if rec.flags&flagBatchEnd == 0 {
			return
		}
		s := r.span(rec.group)
		for _, e := range r.pending {
			if s.last == 0 || e.index < s.first {
				s.first = e.index
			}
			s.last = e.index
		}
		r.dropPending()
	case kindDeleteRange:
		s := r.span(rec.group)
		s.first, s.last, _ = deletedRange(s.first, s.last, 0, rec.min, rec.max)
	}
}
