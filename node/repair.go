package node

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/raftstore"
	"github.com/raftlog/raftlog/replica"
)

// Repairing the data dir of a stopped node whose log holds a damaged
// record ('node repair').
//
// The repair cuts the node's commit log back before the first damaged
// record (raftstore.Inspect, raftstore.CutLog): every group of the node's
// DB, raft's log and the archive alike, keeps what it held before that
// record was written, as if the node had stopped just then. The node then
// starts as a follower that lost the tail of its log, and the leader sends
// it what it lacks, entries or a snapshot with every retained record.
// Besides the log, the node's snapshots must fit what remains: a snapshot
// says that every retained record from its floor to its index is held, and
// raft's log must go on from it. So the repair keeps the newest snapshot
// that fits the cut log and removes the newer ones; when none fits, it
// starts without a snapshot if raft's log still begins at index 1, and
// otherwise empties the whole log, so that the leader sends the node
// everything.
//
// It never touches the stable state: the current term and the vote stay,
// so the node cannot vote twice in a term. With its log cut the node
// votes as a follower with a shorter log does, and cannot win an election
// against a node whose log is longer. That is safe only while the records
// it lost are held by a quorum of the other nodes; see the README's Repair
// section.

// IndexRange is a range of raft indexes, First to Last; Last is 0 when it
// holds none.
type IndexRange struct{ First, Last uint64 }

// String returns "First..Last", or "none".
func (r IndexRange) String() string {
	if r.Last == 0 {
		return "none"
	}
	return fmt.Sprintf("%d..%d", r.First, r.Last)
}

// from returns the part of r at and above i.
func (r IndexRange) from(i uint64) IndexRange {
	if r.Last == 0 || r.Last < i {
		return IndexRange{}
	}
	return IndexRange{max(r.First, i), r.Last}
}

// has reports whether r holds i.
func (r IndexRange) has(i uint64) bool { return r.Last != 0 && i >= r.First && i <= r.Last }

// Repair is a repair of a stopped node's data dir, worked out by
// PrepareRepair and carried out by Apply. It holds the data dir's lock
// until Close, so no node starts on the dir meanwhile. Its exported
// fields describe what was found and what Apply does; they are set by
// PrepareRepair and not changed after. It is not safe for concurrent use.
type Repair struct {
	// DataDir is the data dir.
	DataDir string
	// Damage is the first damaged record of the commit log; nil when none
	// is.
	Damage *commitlog.Damage
	// Damaged counts the damaged places the scan found.
	Damaged int
	// Harmless is set when every damaged record holds an entry the node
	// had deleted (trimmed, or replaced after a conflict): it reads none
	// of them, and nothing is cut.
	Harmless bool
	// Cut is the commit-log position Apply cuts at, -1 when it cuts
	// nothing; CutFile and CutOffset name the segment file and offset.
	Cut       int64
	CutFile   string
	CutOffset int64
	// EmptyLog is set when Apply removes every entry, because no snapshot
	// fits what a cut before the damage leaves: the leader then sends the
	// node every retained record.
	EmptyLog bool
	// Log is raft's log (the entries after the archive) before the
	// repair, and KeptLog after it.
	Log, KeptLog IndexRange
	// CutEntries counts the intact entries of raft's log that Apply
	// removes.
	CutEntries int
	// Archive is what the current archive holds before the repair (the
	// retained entries a received snapshot brought, below raft's log),
	// and KeptArchive what the archive of the snapshot the node keeps
	// holds after it.
	Archive, KeptArchive IndexRange
	// Snapshot is the newest snapshot's index and Floor its first
	// retained index; 0 when there is no snapshot.
	Snapshot, Floor uint64
	// KeptSnapshot is the index of the snapshot the node starts from
	// after the repair, 0 for none; RemovedSnapshots are the indexes of
	// the snapshots Apply removes, newest first.
	KeptSnapshot     uint64
	RemovedSnapshots []uint64
	// Term, VoteTerm and VotedFor are the raft state in the stable store,
	// which the repair keeps.
	Term, VoteTerm uint64
	VotedFor       string
	// Voters are the voters of the newest configuration the node knows,
	// ConfigIndex that configuration's index (0: none known).
	Voters      []string
	ConfigIndex uint64
	// Interrupted is set when an earlier repair of the dir did not finish;
	// Apply finishes it.
	Interrupted bool

	lock         io.Closer           // the data dir's lock; nil after Close
	snapDir      string              // the snapshot directory
	remove       []*replica.SnapFile // the snapshot files Apply removes
	emptyArchive bool                // Apply empties archive group A (no snapshot kept)
	storeDir     string              // the raftstore DB
	applied      bool                // Apply ran
}

// ErrSingleVoter is the error of Apply on the only voter of its cluster
// unless allowed: no other node holds what the repair removes.
var ErrSingleVoter = errors.New("node: the node is its cluster's only voter")

// PrepareRepair inspects the data dir of a stopped node, without changing
// it, and works out its repair. It takes the data dir's lock and keeps it
// until Close: a dir a running node holds is refused with ErrDataDirInUse.
func PrepareRepair(dataDir string) (*Repair, error) {
	storeDir := filepath.Join(dataDir, "store")
	if fi, err := os.Stat(storeDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("node: %s holds no node's data (no %s)", dataDir, storeDir)
	}
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return nil, err
	}
	r := &Repair{DataDir: dataDir, lock: lock, Cut: -1, storeDir: storeDir, snapDir: filepath.Join(dataDir, "snapshots")}
	if err := r.prepare(); err != nil {
		lock.Close()
		return nil, err
	}
	return r, nil
}

func (r *Repair) prepare() error {
	var err error
	if _, r.Interrupted, err = (&markers{dir: r.DataDir}).read(repairingFile); err != nil {
		return err
	}
	var conf *raft.Configuration
	in, err := raftstore.Inspect(r.storeDir, nil, func(g uint64, _ int64, l *raft.Log) {
		if g == logGroups.Live && l.Type == raft.LogConfiguration && l.Index >= r.ConfigIndex {
			if c, ok := decodeConfiguration(l.Data); ok {
				conf, r.ConfigIndex = &c, l.Index
			}
		}
	})
	if err != nil {
		return err
	}
	snaps, err := r.snapshots()
	if err != nil {
		return err
	}
	for _, f := range snaps {
		if f.Meta.ConfigurationIndex > r.ConfigIndex || conf == nil {
			conf, r.ConfigIndex = &f.Meta.Configuration, f.Meta.ConfigurationIndex
		}
	}
	if conf != nil {
		for _, s := range conf.Servers {
			if s.Suffrage == raft.Voter {
				r.Voters = append(r.Voters, string(s.ID))
			}
		}
	}
	r.Term = in.StableUint64(logGroups.Live, []byte("CurrentTerm"))
	r.VoteTerm = in.StableUint64(logGroups.Live, []byte("LastVoteTerm"))
	r.VotedFor = string(in.Stable(logGroups.Live, []byte("LastVoteCand")))
	if in.Log != nil {
		r.Damaged = in.Log.Damaged
	}
	r.Damage, r.Harmless = in.Damage, in.Harmless

	live := in.Group(logGroups.Live)
	r.Log = IndexRange{live.First, live.Last}
	current := logGroups.ArchiveA
	if len(snaps) > 0 {
		current = snaps[0].Archive
		r.Snapshot, r.Floor = snaps[0].Meta.Index, snaps[0].Floor
	}
	a := in.Group(current)
	r.Archive = IndexRange{a.First, a.Last}
	kept := func(g uint64) IndexRange {
		gi := in.Group(g)
		return IndexRange{gi.KeptFirst, gi.KeptLast}
	}
	r.KeptLog, r.CutEntries, r.Cut = kept(logGroups.Live), live.CutEntries, in.Cut
	if r.Cut < 0 && !r.Interrupted {
		// Nothing to cut: the snapshots stay as the node left them.
		r.KeptArchive, r.KeptSnapshot = r.Archive, r.Snapshot
		return nil
	}

	// The newest snapshot that fits the log the cut leaves; else none,
	// if raft's log begins at 1; else an empty log.
	keep := -1
	for i, f := range snaps {
		if snapshotFits(f, r.KeptLog, kept(f.Archive)) {
			keep = i
			break
		}
	}
	switch {
	case keep >= 0:
		r.remove = snaps[:keep]
		r.KeptSnapshot, r.KeptArchive = snaps[keep].Meta.Index, kept(snaps[keep].Archive)
	case r.KeptLog.Last == 0 || r.KeptLog.First == 1:
		// Without a snapshot the node uses archive group A (and empties
		// B when it starts); raft replays its log from index 1.
		r.remove = snaps
		r.emptyArchive = kept(logGroups.ArchiveA).Last != 0
	default:
		r.remove, r.EmptyLog = snaps, true
		r.KeptLog, r.CutEntries = IndexRange{}, 0
		if r.Log.Last != 0 {
			r.CutEntries = int(r.Log.Last - r.Log.First + 1)
		}
		if in.Log != nil && in.Log.End > in.Log.First {
			r.Cut = in.Log.First
		}
	}
	for _, f := range r.remove {
		r.RemovedSnapshots = append(r.RemovedSnapshots, f.Meta.Index)
	}
	if r.Cut >= 0 {
		r.CutFile, r.CutOffset = in.Log.Locate(r.Cut)
	}
	return nil
}

// snapshots reads the snapshot files, newest first; one that does not
// read is an error, as it is for the node (package replica).
func (r *Repair) snapshots() ([]*replica.SnapFile, error) {
	if _, err := os.Stat(r.snapDir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	files, err := replica.ReadSnapFiles(vfs.Default, r.snapDir, logGroups)
	if err != nil {
		return nil, fmt.Errorf("%w: the repair handles a damaged log, not damaged snapshot files; wipe the data dir and start the node with --join", err)
	}
	return files, nil
}

// snapshotFits reports whether a node can start from snapshot f with raft's
// log live and f's archive group arch: once the snapshot store's recovery
// has deleted what f makes obsolete (snapStore.finish), every retained
// index from f's floor to its index is held, and raft's log is empty or
// goes on from f's index.
func snapshotFits(f *replica.SnapFile, live, arch IndexRange) bool {
	s, floor := f.Meta.Index, f.Floor
	if f.Received {
		live = live.from(s + 1)
	}
	if floor > 1 {
		below := min(floor-1, s)
		arch, live = arch.from(below+1), live.from(below+1)
	}
	for i := floor; i <= s; {
		switch {
		case arch.has(i):
			i = arch.Last + 1
		case live.has(i):
			i = live.Last + 1
		default:
			return false
		}
	}
	return live.Last == 0 || (live.First <= s+1 && live.Last >= s)
}

// decodeConfiguration decodes a configuration entry; raft's decoder panics
// on bytes it cannot read.
func decodeConfiguration(b []byte) (c raft.Configuration, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return raft.DecodeConfiguration(b), true
}

// Needed reports whether Apply would change anything.
func (r *Repair) Needed() bool {
	return r.Cut >= 0 || len(r.remove) > 0 || r.emptyArchive || r.Interrupted
}

// SingleVoter reports whether the newest configuration the node knows has
// one voter: a single-node cluster, where no other node holds what a
// repair removes.
func (r *Repair) SingleVoter() bool { return len(r.Voters) == 1 }

// LosesOnlyCopy reports whether Apply removes what no other node holds:
// the node is its cluster's only voter and the repair removes records or
// snapshots. Apply then needs allowLoss.
func (r *Repair) LosesOnlyCopy() bool {
	return r.SingleVoter() && (r.Cut >= 0 || len(r.remove) > 0 || r.emptyArchive)
}

// Apply carries out the repair, durably: it removes the snapshot files
// that do not fit the cut log, cuts the log, and empties archive group A
// when the node is to start without a snapshot. A crash in between leaves
// a data dir that PrepareRepair finds still in need of repair, and the
// same repair finishes it. On the only voter of a cluster it refuses with
// ErrSingleVoter unless allowLoss is set. Apply runs once.
func (r *Repair) Apply(allowLoss bool) error {
	if r.lock == nil || r.applied {
		return errors.New("node: the repair was closed or already applied")
	}
	if !r.Needed() {
		return nil
	}
	if r.LosesOnlyCopy() && !allowLoss {
		return fmt.Errorf("%w (%s): nothing else holds what the repair would remove", ErrSingleVoter, r.Voters[0])
	}
	r.applied = true
	// The marker makes the node refuse to start until a repair finishes
	// (checkNoRepair), and the next PrepareRepair plan the rest.
	marks := &markers{dir: r.DataDir}
	if err := marks.write(repairingFile, []byte("a repair of this data dir has not finished: run 'node repair' again\n")); err != nil {
		return fmt.Errorf("node: repair: %w", err)
	}
	if len(r.remove) > 0 {
		for _, f := range r.remove {
			path := filepath.Join(r.snapDir, f.Meta.ID+replica.SnapSuffix)
			if err := vfs.Default.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("node: repair: remove snapshot %s: %w", path, err)
			}
		}
		if err := vfs.Default.SyncDir(r.snapDir); err != nil {
			return fmt.Errorf("node: repair: sync %s: %w", r.snapDir, err)
		}
	}
	if r.Cut >= 0 {
		if err := raftstore.CutLog(r.storeDir, nil, r.Cut); err != nil {
			return fmt.Errorf("node: repair: %w", err)
		}
	}
	if r.emptyArchive {
		db, err := raftstore.OpenDB(r.storeDir, nil)
		if err != nil {
			return fmt.Errorf("node: repair: %w", err)
		}
		s, err := db.Store(logGroups.ArchiveA)
		if err == nil {
			err = replica.EmptyStore(s)
		}
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("node: repair: empty the archive: %w", err)
		}
	}
	if err := marks.remove(repairingFile); err != nil {
		return fmt.Errorf("node: repair: %w", err)
	}
	return nil
}

// repairingFile is the marker file that exists while a repair runs.
const repairingFile = "repairing"

// ErrRepairUnfinished is the error of Start on a data dir whose repair
// did not finish.
var ErrRepairUnfinished = errors.New("node: a repair of the data dir did not finish")

// checkNoRepair refuses a data dir whose repair did not finish.
func checkNoRepair(dir string) error {
	if _, ok, err := (&markers{dir: dir}).read(repairingFile); err != nil || !ok {
		return err
	}
	return fmt.Errorf("%w: run 'node repair --data-dir %s' again to finish it", ErrRepairUnfinished, dir)
}

// Close releases the data dir's lock.
func (r *Repair) Close() error {
	if r.lock == nil {
		return nil
	}
	err := r.lock.Close()
	r.lock = nil
	return err
}

// WriteReport writes what PrepareRepair found and what Apply does, with
// the conditions under which that is safe, for an operator to read.
func (r *Repair) WriteReport(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("data dir: %s", r.DataDir)
	state := fmt.Sprintf("raft state: current term %d", r.Term)
	if r.VotedFor != "" {
		state += fmt.Sprintf(", voted for %s in term %d", r.VotedFor, r.VoteTerm)
	}
	p("%s (kept by the repair)", state)
	if len(r.Voters) > 0 {
		p("voters in the newest configuration it knows (index %d): %s", r.ConfigIndex, strings.Join(r.Voters, ", "))
	}
	snap := "no snapshot"
	if r.Snapshot != 0 {
		snap = fmt.Sprintf("newest snapshot at index %d (committed up to there; first retained index %d)", r.Snapshot, r.Floor)
	}
	p("raft log: entries %s; archive: entries %s; %s", r.Log, r.Archive, snap)
	if r.Interrupted {
		p("an earlier repair of this data dir did not finish; this one finishes it")
	}
	switch {
	case r.Damage == nil:
		p("no damaged record")
	default:
		p("damaged record: %s at offset %d (commit-log position %d): %v", r.Damage.Path, r.Damage.Offset, r.Damage.Position, r.Damage.Err)
		if r.Damaged > 1 {
			p("  and %d more damaged places after it", r.Damaged-1)
		}
		if r.Harmless {
			p("  it holds an entry the node had already deleted (trimmed or replaced): the node never reads it, and its segment goes when nothing else needs it")
		}
	}
	if !r.Needed() {
		p("nothing to repair")
		return
	}
	p("")
	p("the repair:")
	if r.EmptyLog {
		p("  - removes every entry of the log (commit log cut at %s offset %d): no snapshot fits what a cut before the damage leaves, so the leader must send the node everything", r.CutFile, r.CutOffset)
	} else if r.Cut >= 0 {
		p("  - cuts the commit log at %s offset %d (position %d), as if the node had stopped before writing the damaged record", r.CutFile, r.CutOffset, r.Cut)
		p("    raft log: entries %s become %s (%d intact entries removed); archive: %s", r.Log, r.KeptLog, r.CutEntries, r.KeptArchive)
	}
	if len(r.RemovedSnapshots) > 0 {
		p("  - removes the snapshots at indexes %s, which the remaining log does not support", joinUints(r.RemovedSnapshots))
	}
	switch {
	case r.KeptSnapshot != 0:
		p("  - the node starts from its snapshot at index %d and raft's log up to %d", r.KeptSnapshot, r.KeptLog.Last)
	case r.EmptyLog || r.KeptLog.Last == 0:
		p("  - the node starts with no snapshot and an empty log")
	default:
		p("  - the node starts with no snapshot and replays raft's log from index 1 (up to %d)", r.KeptLog.Last)
	}
	if r.emptyArchive {
		p("  - empties the archive of the removed snapshots")
	}
	p("  - keeps the current term and vote")
	p("Then the node catches up from the leader when it starts.")
	p("")
	p("Safe only while a quorum of the OTHER nodes holds every record this node loses: stop this node, check that")
	p("the others elect a leader and commit an append without it, and repair one node at a time, never a majority.")
	if r.KeptLog.Last < r.Snapshot || (r.EmptyLog && r.Snapshot != 0) {
		p("WARNING: the cut reaches below the newest snapshot (index %d): committed records are removed here.", r.Snapshot)
	}
	if r.SingleVoter() {
		p("WARNING: this is a single-node cluster (the only voter is %s): nothing else holds what the repair removes.", r.Voters[0])
		p("The records after the cut are lost for good, and new appends take their indexes.")
	}
}

// joinUints formats a list of indexes.
func joinUints(xs []uint64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
