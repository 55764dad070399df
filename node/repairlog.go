package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/raftstore"
	"github.com/raftlog/raftlog/replica"
)

// The repair of each log of a node (repair.go): the default log and every
// named log share the node's one commit log, so the cut reaches every
// one of them, and each log's snapshots must fit what the cut leaves of
// its own groups. One plan serves them all: the default log is log 0,
// with groups replica.GroupsOf(0) and its snapshots in DATA/snapshots; a
// named log L has groups replica.GroupsOf(L) and its snapshots in
// DATA/logs/L/snapshots.

// LogRepair is what a repair finds of one log of the node, and what Apply
// does to it. Its exported fields are set by PrepareRepair and not changed
// after.
type LogRepair struct {
	// ID is the log's id, 0 for the default log; Name is its name,
	// "default" for the default log, and "" when the data dir does not
	// record it (a replica started by an earlier version).
	ID   uint64
	Name string
	// EmptyLog is set when Apply removes every entry of the log, because no
	// snapshot fits what a cut before the damage leaves: its leader then
	// sends the node every retained record.
	EmptyLog bool
	// Log is raft's log (the entries after the archive) before the
	// repair, and KeptLog after it.
	Log, KeptLog IndexRange
	// CutEntries counts the intact entries of raft's log that Apply
	// removes.
	CutEntries int
	// Archive is what the current archive holds before the repair (the
	// retained entries a received snapshot brought, below raft's log),
	// and KeptArchive what the archive of the snapshot the log keeps
	// holds after it.
	Archive, KeptArchive IndexRange
	// Snapshot is the newest snapshot's index and Floor its first
	// retained index; 0 when there is no snapshot.
	Snapshot, Floor uint64
	// KeptSnapshot is the index of the snapshot the log starts from after
	// the repair, 0 for none; RemovedSnapshots are the indexes of the
	// snapshots Apply removes, newest first.
	KeptSnapshot     uint64
	RemovedSnapshots []uint64
	// Voters are the voters of the newest configuration of the log the
	// node knows, ConfigIndex that configuration's index (0: none known).
	Voters      []string
	ConfigIndex uint64

	groups       replica.Groups      // the log's raftstore groups
	snapDir      string              // its snapshot directory
	snaps        []*replica.SnapFile // its snapshots, newest first
	remove       []*replica.SnapFile // the snapshot files Apply removes
	emptyArchive bool                // Apply empties archive group A (no snapshot kept)
	emptyGroups  bool                // Apply empties every group of the log (a named log's EmptyLog)
	changes      bool                // Apply changes the log: cuts entries of a group, removes or empties
}

// logConfig is the newest configuration entry of a log's raft group seen
// by a scan.
type logConfig struct {
	conf  raft.Configuration
	index uint64
}

// noteConfigs returns the function for raftstore.Inspect that records, in
// confs by log id, the newest configuration entry of each log's raft log.
func noteConfigs(confs map[uint64]*logConfig) func(uint64, int64, *raft.Log) {
	return func(g uint64, _ int64, l *raft.Log) {
		if g%4 != 1 || l.Type != raft.LogConfiguration {
			return // not a log's live group (replica.GroupsOf), or not a configuration
		}
		id := g / 4
		if c := confs[id]; c != nil && l.Index < c.index {
			return
		}
		if c, ok := decodeConfiguration(l.Data); ok {
			confs[id] = &logConfig{conf: c, index: l.Index}
		}
	}
}

// newLogRepair reads what the repair needs of log id, whose snapshots are
// in snapDir: its snapshots, its newest configuration (conf, from its
// live group, or its snapshots' metadata) and the ranges its groups hold.
func newLogRepair(in *raftstore.Inspection, id uint64, name, snapDir string, conf *logConfig) (*LogRepair, error) {
	l := &LogRepair{ID: id, Name: name, groups: replica.GroupsOf(id), snapDir: snapDir}
	var err error
	if l.snaps, err = readSnapshots(snapDir, l.groups); err != nil {
		return nil, err
	}
	var c *raft.Configuration
	if conf != nil {
		c, l.ConfigIndex = &conf.conf, conf.index
	}
	for _, f := range l.snaps {
		if f.Meta.ConfigurationIndex > l.ConfigIndex || c == nil {
			c, l.ConfigIndex = &f.Meta.Configuration, f.Meta.ConfigurationIndex
		}
	}
	if c != nil {
		for _, s := range c.Servers {
			if s.Suffrage == raft.Voter {
				l.Voters = append(l.Voters, string(s.ID))
			}
		}
	}
	live := in.Group(l.groups.Live)
	l.Log = IndexRange{live.First, live.Last}
	current := l.groups.ArchiveA
	if len(l.snaps) > 0 {
		current = l.snaps[0].Archive
		l.Snapshot, l.Floor = l.snaps[0].Meta.Index, l.snaps[0].Floor
	}
	a := in.Group(current)
	l.Archive = IndexRange{a.First, a.Last}
	return l, nil
}

// readSnapshots reads the snapshot files in dir of a log with groups gs,
// newest first; one that does not read is an error, as it is for the node
// (package replica).
func readSnapshots(dir string, gs replica.Groups) ([]*replica.SnapFile, error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	files, err := replica.ReadSnapFiles(vfs.Default, dir, gs)
	if err != nil {
		return nil, fmt.Errorf("%w: the repair handles a damaged log, not damaged snapshot files; wipe the data dir and start the node with --join", err)
	}
	return files, nil
}

// cutView is what a cut leaves of each group of an inspected DB: what the
// inspection worked out for its cut, or nothing at all when the repair
// cuts the whole commit log (the default log's EmptyLog).
type cutView struct {
	in  *raftstore.Inspection
	all bool // the cut removes every record
}

// kept returns what the cut leaves of group g.
func (v cutView) kept(g uint64) IndexRange {
	if v.all {
		return IndexRange{}
	}
	gi := v.in.Group(g)
	return IndexRange{gi.KeptFirst, gi.KeptLast}
}

// cutEntries counts the intact entries of group g that the cut removes.
func (v cutView) cutEntries(g uint64) int {
	gi := v.in.Group(g)
	if v.all {
		return count(IndexRange{gi.First, gi.Last})
	}
	return gi.CutEntries
}

// count returns the number of indexes r holds.
func count(r IndexRange) int {
	if r.Last == 0 {
		return 0
	}
	return int(r.Last - r.First + 1)
}

// plan works out what Apply does to the log when the repair cuts (cutting:
// there is a cut, or an earlier repair to finish) and v is what the cut
// leaves: it keeps the newest snapshot that fits v and removes the newer
// ones; when none fits it starts without a snapshot if raft's log still
// begins at index 1, and otherwise it empties the whole log, so that the
// leader sends the node everything. It reports the last case, in which
// the caller decides how the log is emptied (EmptyLog is set).
func (l *LogRepair) plan(v cutView, cutting bool) (empty bool) {
	l.KeptLog, l.CutEntries = v.kept(l.groups.Live), v.cutEntries(l.groups.Live)
	defer func() {
		l.changes = len(l.remove) > 0 || l.emptyArchive || l.EmptyLog
		for _, g := range []uint64{l.groups.Live, l.groups.ArchiveA, l.groups.ArchiveB} {
			l.changes = l.changes || v.cutEntries(g) > 0
		}
	}()
	if !cutting {
		// Nothing to cut: the snapshots stay as the node left them.
		l.KeptArchive, l.KeptSnapshot = l.Archive, l.Snapshot
		return false
	}
	keep := -1
	for i, f := range l.snaps {
		if snapshotFits(f, l.KeptLog, v.kept(f.Archive)) {
			keep = i
			break
		}
	}
	switch {
	case keep >= 0:
		l.remove = l.snaps[:keep]
		l.KeptSnapshot, l.KeptArchive = l.snaps[keep].Meta.Index, v.kept(l.snaps[keep].Archive)
	case l.KeptLog.Last == 0 || l.KeptLog.First == 1:
		// Without a snapshot the node uses archive group A (and empties
		// B when it starts); raft replays its log from index 1.
		l.remove = l.snaps
		l.emptyArchive = v.kept(l.groups.ArchiveA).Last != 0
	default:
		l.remove, l.EmptyLog, empty = l.snaps, true, true
		l.KeptLog, l.CutEntries = IndexRange{}, count(l.Log)
	}
	for _, f := range l.remove {
		l.RemovedSnapshots = append(l.RemovedSnapshots, f.Meta.Index)
	}
	return empty
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

// Changes reports whether Apply changes the log: cuts entries of any of
// its groups, removes snapshots, or empties groups.
func (l *LogRepair) Changes() bool { return l.changes }

// SingleVoter reports whether the newest configuration of the log the
// node knows has one voter: no other node holds what a repair removes of
// it.
func (l *LogRepair) SingleVoter() bool { return len(l.Voters) == 1 }

// String names the log: "default", or `log "orders" (id 3)`, or "log id
// 3" when its name is not known.
func (l *LogRepair) String() string {
	switch {
	case l.ID == 0:
		return "default"
	case l.Name == "":
		return fmt.Sprintf("log id %d", l.ID)
	}
	return fmt.Sprintf("log %q (id %d)", l.Name, l.ID)
}

// logNameFile is the file in a named log's directory (DATA/logs/<id>)
// that records the log's name, for the tools that read a stopped node's
// data dir ('node repair'): the name is the catalog's, which lives in the
// default log's state.
const logNameFile = "name"

// namedLogs returns the ids of the named logs the data dir holds, in
// increasing order: those with a directory under DATA/logs and those with
// a group in the DB (a log being dropped may have only one of the two).
func namedLogs(dataDir string, in *raftstore.Inspection) ([]uint64, error) {
	var groups []uint64
	for _, gi := range in.Groups {
		groups = append(groups, gi.Group)
	}
	ids := storedLogs(groups)
	entries, err := os.ReadDir(filepath.Join(dataDir, "logs"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("node: %w", err)
	}
	for _, e := range entries {
		id, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil || !e.IsDir() || id == 0 || id > replica.MaxLogID || slices.Contains(ids, id) {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// readLogName returns the name recorded in the log directory dir, "" when
// none is.
func readLogName(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, logNameFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// recordLogName records name in the log directory dir (logNameFile),
// durably, unless it is there already.
func recordLogName(dir, name string) error {
	if readLogName(dir) == name {
		return nil
	}
	return replica.WriteFileSync(filepath.Join(dir, logNameFile), []byte(name+"\n"))
}

// cutLine describes, for the report, what the cut leaves of the log.
func (l *LogRepair) cutLine() string {
	return fmt.Sprintf("raft log: entries %s become %s (%d intact entries removed); archive: %s", l.Log, l.KeptLog, l.CutEntries, l.KeptArchive)
}

// planLines describes, for the report, what Apply does to log l's
// snapshots and archive and what it starts from; subject is what starts
// ("the node", or "the log").
func (l *LogRepair) planLines(subject string) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if len(l.RemovedSnapshots) > 0 {
		add("removes the snapshots at indexes %s, which the remaining log does not support", joinUints(l.RemovedSnapshots))
	}
	switch {
	case l.KeptSnapshot != 0:
		add("%s starts from its snapshot at index %d and raft's log up to %d", subject, l.KeptSnapshot, l.KeptLog.Last)
	case l.EmptyLog || l.KeptLog.Last == 0:
		add("%s starts with no snapshot and an empty log", subject)
	default:
		add("%s starts with no snapshot and replays raft's log from index 1 (up to %d)", subject, l.KeptLog.Last)
	}
	if l.emptyArchive {
		add("empties the archive of the removed snapshots")
	}
	return out
}

// cutsBelowSnapshot reports whether the repair removes entries at or
// below the log's newest snapshot: committed records.
func (l *LogRepair) cutsBelowSnapshot() bool {
	return l.KeptLog.Last < l.Snapshot || (l.EmptyLog && l.Snapshot != 0)
}
