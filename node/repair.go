package node

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/raftstore"
	"github.com/raftlog/raftlog/replica"
	"github.com/raftlog/raftlog/transport"
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
// The commit log is the node's, shared by the default log and every named
// log, so the cut reaches them all, and the repair plans each the same
// way (repairlog.go): each log's snapshots must fit what the cut leaves
// of its own groups. A named log is emptied group by group; the default
// log by cutting the whole commit log, which empties every named log too.
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
//
// The embedded LogRepair is the default log's part; Logs are the named
// logs'. The cut is the node's, one for every log.
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
	// When the default log is emptied (EmptyLog) the whole commit log is
	// cut, and with it every named log's entries.
	Cut       int64
	CutFile   string
	CutOffset int64
	// LogRepair is the default log's repair: its ranges, snapshots and
	// voters. Its EmptyLog, unlike a named log's, cuts the whole commit
	// log.
	LogRepair
	// Logs are the named logs the data dir holds, by increasing id.
	Logs []*LogRepair
	// Term, VoteTerm and VotedFor are the default log's raft state in the
	// stable store, which the repair keeps (as it keeps every log's).
	Term, VoteTerm uint64
	VotedFor       string
	// Interrupted is set when an earlier repair of the dir did not finish;
	// Apply finishes it.
	Interrupted bool

	lock     io.Closer // the data dir's lock; nil after Close
	storeDir string    // the raftstore DB
	applied  bool      // Apply ran
}

// ErrSingleVoter is the error of Apply on the only voter of a log it
// changes, the default log (a single-node cluster) or a named log with
// one replica, unless allowed: no other node holds what the repair
// removes. The error names the logs.
var ErrSingleVoter = errors.New("node: the node is the only voter of a log the repair changes")

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
	r := &Repair{DataDir: dataDir, lock: lock, Cut: -1, storeDir: storeDir}
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
	confs := map[uint64]*logConfig{}
	in, err := raftstore.Inspect(r.storeDir, nil, noteConfigs(confs))
	if err != nil {
		return err
	}
	if in.StableLost != nil {
		// A cut cannot bring back a term and a vote: the node would still
		// refuse to start, and started without them it could vote twice.
		return fmt.Errorf("node: repair: %w; repair cannot restore them: wipe the data dir and start the node with --join (see the README's Repair and Membership sections)", in.StableLost)
	}
	def, err := newLogRepair(in, 0, transport.DefaultLog, filepath.Join(r.DataDir, "snapshots"), confs[0])
	if err != nil {
		return err
	}
	r.LogRepair = *def
	r.Term = in.StableUint64(logGroups.Live, []byte("CurrentTerm"))
	r.VoteTerm = in.StableUint64(logGroups.Live, []byte("LastVoteTerm"))
	r.VotedFor = string(in.Stable(logGroups.Live, []byte("LastVoteCand")))
	if in.Log != nil {
		r.Damaged = in.Log.Damaged
	}
	r.Damage, r.Harmless, r.Cut = in.Damage, in.Harmless, in.Cut

	cutting := r.Cut >= 0 || r.Interrupted
	v := cutView{in: in}
	if r.LogRepair.plan(v, cutting) {
		// The default log is emptied by cutting the whole commit log:
		// every named log then keeps nothing either.
		if in.Log != nil && in.Log.End > in.Log.First {
			r.Cut, v.all = in.Log.First, true
		}
	}
	ids, err := namedLogs(r.DataDir, in)
	if err != nil {
		return err
	}
	for _, id := range ids {
		dir := filepath.Join(r.DataDir, "logs", strconv.FormatUint(id, 10))
		l, err := newLogRepair(in, id, readLogName(dir), filepath.Join(dir, "snapshots"), confs[id])
		if err != nil {
			return err
		}
		// A named log is emptied group by group: the cut stays where it
		// is for the others.
		l.emptyGroups = l.plan(v, cutting)
		r.Logs = append(r.Logs, l)
	}
	if r.Cut >= 0 {
		r.CutFile, r.CutOffset = in.Log.Locate(r.Cut)
	}
	return nil
}

// Needed reports whether Apply would change anything.
func (r *Repair) Needed() bool {
	if r.Cut >= 0 || r.Interrupted || len(r.remove) > 0 || r.emptyArchive {
		return true
	}
	return slices.ContainsFunc(r.Logs, func(l *LogRepair) bool { return l.Changes() })
}

// SingleVoter reports whether the newest configuration of the default log
// the node knows has one voter: a single-node cluster, where no other node
// holds what a repair removes.
func (r *Repair) SingleVoter() bool { return r.LogRepair.SingleVoter() }

// OnlyCopies returns the logs whose only voter is the node (the newest
// configuration of each the node knows has one voter) and of which Apply
// removes something: no other node holds it. The default log counts when
// anything is cut, since the cut is the node's.
func (r *Repair) OnlyCopies() []*LogRepair {
	var out []*LogRepair
	if r.SingleVoter() && (r.Cut >= 0 || len(r.remove) > 0 || r.emptyArchive) {
		out = append(out, &r.LogRepair)
	}
	for _, l := range r.Logs {
		if l.SingleVoter() && l.Changes() {
			out = append(out, l)
		}
	}
	return out
}

// LosesOnlyCopy reports whether Apply removes what no other node holds
// (OnlyCopies). Apply then needs allowLoss.
func (r *Repair) LosesOnlyCopy() bool { return len(r.OnlyCopies()) > 0 }

// logNames lists the logs ls, for messages.
func logNames(ls []*LogRepair) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = l.String()
		if l.ID == 0 {
			s[i] = "the default log"
		}
		if len(l.Voters) == 1 {
			s[i] += " (only voter " + l.Voters[0] + ")"
		}
	}
	return strings.Join(s, ", ")
}

// Apply carries out the repair, durably: it removes every log's snapshot
// files that do not fit the cut log, cuts the log, and empties the archive
// group A of each log that is to start without a snapshot and every group
// of each named log to be emptied. A crash in between leaves a data dir
// that PrepareRepair finds still in need of repair, and the same repair
// finishes it. When the node is the only voter of a log it changes it
// refuses with ErrSingleVoter, naming the logs, unless allowLoss is set.
// Apply runs once.
func (r *Repair) Apply(allowLoss bool) error {
	if r.lock == nil || r.applied {
		return errors.New("node: the repair was closed or already applied")
	}
	if !r.Needed() {
		return nil
	}
	if only := r.OnlyCopies(); len(only) > 0 && !allowLoss {
		return fmt.Errorf("%w: %s: nothing else holds what the repair would remove", ErrSingleVoter, logNames(only))
	}
	r.applied = true
	// The marker makes the node refuse to start until a repair finishes
	// (checkNoRepair), and the next PrepareRepair plan the rest.
	marks := &markers{dir: r.DataDir}
	if err := marks.write(repairingFile, []byte("a repair of this data dir has not finished: run 'node repair' again\n")); err != nil {
		return fmt.Errorf("node: repair: %w", err)
	}
	logs := append([]*LogRepair{&r.LogRepair}, r.Logs...)
	for _, l := range logs {
		if err := l.removeSnapshots(); err != nil {
			return err
		}
	}
	if r.Cut >= 0 {
		if err := raftstore.CutLog(r.storeDir, nil, r.Cut); err != nil {
			return fmt.Errorf("node: repair: %w", err)
		}
	}
	var empty []uint64 // the groups to empty
	for _, l := range logs {
		switch {
		case l.emptyGroups:
			empty = append(empty, l.groups.Live, l.groups.ArchiveA, l.groups.ArchiveB)
		case l.emptyArchive:
			empty = append(empty, l.groups.ArchiveA)
		}
	}
	if err := emptyGroups(r.storeDir, empty); err != nil {
		return err
	}
	if err := marks.remove(repairingFile); err != nil {
		return fmt.Errorf("node: repair: %w", err)
	}
	return nil
}

// removeSnapshots removes, durably, the snapshot files of l that Apply
// removes.
func (l *LogRepair) removeSnapshots() error {
	if len(l.remove) == 0 {
		return nil
	}
	for _, f := range l.remove {
		path := filepath.Join(l.snapDir, f.Meta.ID+replica.SnapSuffix)
		if err := vfs.Default.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("node: repair: remove snapshot %s: %w", path, err)
		}
	}
	if err := vfs.Default.SyncDir(l.snapDir); err != nil {
		return fmt.Errorf("node: repair: sync %s: %w", l.snapDir, err)
	}
	return nil
}

// emptyGroups removes every entry of the groups gs of the DB in storeDir,
// durably; a group the DB does not hold is left alone.
func emptyGroups(storeDir string, gs []uint64) error {
	if len(gs) == 0 {
		return nil
	}
	db, err := raftstore.OpenDB(storeDir, nil)
	if err != nil {
		return fmt.Errorf("node: repair: %w", err)
	}
	held := db.Groups()
	for _, g := range gs {
		if !slices.Contains(held, g) {
			continue
		}
		s, err := db.Store(g)
		if err == nil {
			err = replica.EmptyStore(s)
		}
		if err != nil {
			db.Close()
			return fmt.Errorf("node: repair: empty group %d: %w", g, err)
		}
	}
	if err := db.Close(); err != nil {
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

// WriteReport writes what PrepareRepair found and what Apply does, for
// the default log and each named log it changes, with the conditions
// under which that is safe, for an operator to read.
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
	p("raft log: entries %s; archive: entries %s; %s", r.Log, r.Archive, r.snapshotText())
	for _, l := range r.Logs {
		p("%s: raft log: entries %s; archive: entries %s; %s; voters: %s", l, l.Log, l.Archive, l.snapshotText(), l.votersText())
	}
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
		if len(r.Logs) > 0 {
			p("    the cut removes every entry of the named logs too: their leaders send them again")
		}
	} else if r.Cut >= 0 {
		p("  - cuts the commit log at %s offset %d (position %d), as if the node had stopped before writing the damaged record", r.CutFile, r.CutOffset, r.Cut)
		p("    %s", r.cutLine())
	}
	for _, line := range r.planLines("the node") {
		p("  - %s", line)
	}
	for _, l := range r.Logs {
		if !l.Changes() {
			continue
		}
		p("  - %s:", l)
		if l.EmptyLog {
			p("    - removes every entry of the log (empties its groups): no snapshot fits what the cut leaves, so its leader must send the node everything")
		} else {
			p("    - %s", l.cutLine())
		}
		for _, line := range l.planLines("the log") {
			p("    - %s", line)
		}
	}
	p("  - keeps the current term and vote")
	p("Then the node catches up from the leader when it starts.")
	p("")
	p("Safe only while a quorum of the OTHER nodes holds every record this node loses: stop this node, check that")
	p("the others elect a leader and commit an append without it, and repair one node at a time, never a majority.")
	if r.cutsBelowSnapshot() {
		p("WARNING: the cut reaches below the newest snapshot (index %d): committed records are removed here.", r.Snapshot)
	}
	for _, l := range r.Logs {
		if l.Changes() && l.cutsBelowSnapshot() {
			p("WARNING: the cut reaches below the newest snapshot of %s (index %d): committed records are removed here.", l, l.Snapshot)
		}
	}
	if r.SingleVoter() {
		p("WARNING: this is a single-node cluster (the only voter is %s): nothing else holds what the repair removes.", r.Voters[0])
		p("The records after the cut are lost for good, and new appends take their indexes.")
	}
	for _, l := range r.Logs {
		if l.Changes() && l.SingleVoter() {
			p("WARNING: %s has one replica (its only voter is %s): nothing else holds what the repair removes of it;", l, l.Voters[0])
			p("its records after the cut are lost for good, and new appends take their indexes.")
		}
	}
}

// snapshotText describes the log's newest snapshot, for the report.
func (l *LogRepair) snapshotText() string {
	if l.Snapshot == 0 {
		return "no snapshot"
	}
	return fmt.Sprintf("newest snapshot at index %d (committed up to there; first retained index %d)", l.Snapshot, l.Floor)
}

// votersText lists the log's voters, for the report.
func (l *LogRepair) votersText() string {
	if len(l.Voters) == 0 {
		return "none known"
	}
	return fmt.Sprintf("%s (configuration at index %d)", strings.Join(l.Voters, ", "), l.ConfigIndex)
}

// joinUints formats a list of indexes.
func joinUints(xs []uint64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
