package node

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/backup"
	"github.com/raftlog/raftlog/catalog"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/raftstore"
	"github.com/raftlog/raftlog/replica"
)

// Restoring a backup (package backup) into the data dir of a node of a new
// cluster, as etcdutl snapshot restore does: run Restore with the same
// backup and the same member list on every member, each with its own id
// and data dir, then start them.
//
// The records keep their indexes: reads by index, and the indexes clients
// hold, mean the same in the new cluster. So the data dir Restore writes
// is the one a node has after it installed a snapshot from a leader
// (package replica): the backup's entries in the first archive group, from
// its floor to its index, no-ops standing in for raft's own entries; a
// snapshot file at the backup's index and term holding the backup's state;
// and an empty raft log. The snapshot's configuration is the new member
// list, every member a voter, so the new cluster's identity is its own
// member list, not the old one's; the state keeps the client sessions (a
// client that retries an append stored before the backup's index gets its
// original indexes) and forgets the old members' client addresses, which
// each new member records again once it runs. Raft's current term is set
// to the backup's term: the first election is then in a later term, and
// entries the new cluster appends never carry a term below the ones before
// them, which raft's vote rule relies on.
//
// The new cluster has its own cluster id from the restore, the same on
// every member of one restore and never the old cluster's (restoreid.go):
// Restore writes it into the data dir's cluster-id file, so that a
// restored node refuses the old cluster's nodes by id from its first start,
// also one that still runs at an address the new member list reuses.
//
// A data dir with a snapshot holds raft state, so a restored node neither
// probes its peers nor bootstraps (bootstrap.go): it starts as a voter of
// the configuration Restore wrote, and a leader is elected once a majority
// of the members run. A member started with an empty data dir and the same
// --bootstrap list instead finds that the others ran a cluster, joins as a
// new member and gets the records in a snapshot stream, as a node that lost
// its data dir does; so restoring a majority of the members is enough.
//
// Restore refuses a data dir that is not empty, and removes what it wrote
// when the backup turns out damaged or a write fails. Until it is done, the
// data dir holds the marker file "restoring", and a node refuses to start
// from a data dir that has it, so a restore cut short by a crash is never
// taken for a node's state.

// restoringFile is the marker file of a restore in progress.
const restoringFile = "restoring"

// ErrDataDirNotEmpty is returned by Restore for a data dir that holds
// anything.
var ErrDataDirNotEmpty = errors.New("node: restore: the data dir is not empty")

// ErrNamedLogBackup is returned by Restore for a backup of a named log:
// it restores into a named log of a running cluster (transport.OpRestoreLog),
// not into a new cluster's default log.
var ErrNamedLogBackup = errors.New("node: restore: the backup is of a named log")

// ErrRestoreIncomplete is returned by Start for a data dir that a restore
// did not finish.
var ErrRestoreIncomplete = errors.New("node: the data dir holds a restore that did not finish")

// RestoreConfig says what Restore writes.
type RestoreConfig struct {
	// ID is the id of the node the data dir is for; Bootstrap must list it.
	ID string
	// DataDir is the node's data dir: missing or empty.
	DataDir string
	// Bootstrap lists the members of the new cluster and their raft
	// addresses, this node included; every member's restore gets the same
	// list, and each member's serve flags must agree with it. The new
	// cluster's id is derived from it (a member restored with another
	// list gets another id, and the others refuse it).
	Bootstrap []Peer
	// ClusterToken goes into the new cluster's id (restoreid.go); every
	// member's restore gets the same one. Default "". Two restores of one
	// backup onto the same member list get the same id unless their
	// tokens differ: give each its own if both clusters may run at once.
	ClusterToken string
	// SegmentSize is the commit-log segment size; default 64 MiB, what
	// Config.SegmentSize defaults to.
	SegmentSize int64
	// Logger receives what Restore does; default none.
	Logger hclog.Logger
}

// RestoreInfo describes a restored backup.
type RestoreInfo struct {
	// Header is the backup's header: its index, term and floor.
	Header backup.Header
	// Summary is what the backup held.
	Summary backup.Summary
	// Sessions is the number of client sessions the state carried over.
	Sessions int
	// ClusterID is the new cluster's id, written into the data dir's
	// cluster-id file (RestoredClusterID).
	ClusterID catalog.ClusterID
	// DroppedLogs names, in order, the named logs the backup's catalog
	// listed. A default log's backup holds none of their records (each
	// has its own: node backup --log), so the new cluster starts without
	// them, and without the old cluster's nodes in its catalog; restore
	// each into it from its own backup (transport.OpRestoreLog).
	DroppedLogs []string
}

// Restore reads a backup from in and writes the data dir of node cfg.ID of
// a new cluster from it (see above). It reads the whole backup and checks
// every checksum before it returns: an error wrapping one of package
// backup's errors names what is wrong with the file, and leaves the data
// dir as it was (missing or empty).
func Restore(in io.Reader, cfg RestoreConfig) (info RestoreInfo, err error) {
	if err := cfg.check(); err != nil {
		return info, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	dir := cfg.DataDir
	existed, err := checkEmptyDir(dir)
	if err != nil {
		return info, err
	}
	br, err := backup.NewReader(in)
	if err != nil {
		return info, fmt.Errorf("node: restore: %w", err)
	}
	info.Header = br.Header()
	if name := info.Header.Log.Name; name != backup.DefaultLog {
		return info, fmt.Errorf("%w %q, not of the default log", ErrNamedLogBackup, name)
	}
	state, want, sessions, dropped, err := restoredState(br.State(), info.Header)
	if err != nil {
		return info, err
	}
	info.Sessions, info.DroppedLogs = sessions, dropped

	if err := vfs.Default.MkdirAll(dir, 0o755); err != nil {
		return info, fmt.Errorf("node: restore: create %s: %w", dir, err)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		if err := vfs.Default.SyncDir(filepath.Dir(abs)); err != nil {
			return info, fmt.Errorf("node: restore: sync the data dir's parent: %w", err)
		}
	}
	defer func() {
		if err != nil {
			undoRestore(dir, existed, cfg.Logger)
		}
	}()
	marks := &markers{dir: dir}
	if err := marks.write(restoringFile, []byte("a restore of a backup that did not finish: remove this directory's contents and restore again\n")); err != nil {
		return info, err
	}
	if info.Summary, err = restoreLog(br, cfg, state, want); err != nil {
		return info, err
	}
	if err := writeRestoredSnapshot(cfg, info.Header, state); err != nil {
		return info, err
	}
	if info.ClusterID, err = RestoredClusterID(info.Header, info.Summary, br.State(), cfg.Bootstrap, cfg.ClusterToken); err != nil {
		return info, fmt.Errorf("node: restore: %w", err)
	}
	if err := marks.write(clusterIDFile, []byte(info.ClusterID.String()+"\n")); err != nil {
		return info, fmt.Errorf("node: restore: %w", err)
	}
	if err := marks.remove(restoringFile); err != nil {
		return info, err
	}
	cfg.Logger.Info("restored a backup", "index", info.Header.Index, "term", info.Header.Term, "floor", info.Header.Floor,
		"entries", info.Summary.Entries, "sessions", sessions, "dropped_logs", dropped, "cluster_id", info.ClusterID, "data_dir", dir)
	return info, nil
}

// check checks a RestoreConfig.
func (cfg *RestoreConfig) check() error {
	switch {
	case cfg.ID == "":
		return errors.New("node: restore: no node id")
	case cfg.DataDir == "":
		return errors.New("node: restore: no data dir")
	}
	if err := checkMembers(cfg.Bootstrap); err != nil {
		return err
	}
	if !slices.ContainsFunc(cfg.Bootstrap, func(p Peer) bool { return p.ID == cfg.ID }) {
		return fmt.Errorf("node: restore: the members do not include this node (%s)", cfg.ID)
	}
	return nil
}

// checkEmptyDir refuses a data dir that exists and holds anything, and
// reports whether it exists.
func checkEmptyDir(dir string) (bool, error) {
	names, err := vfs.Default.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("node: restore: %w", err)
	}
	if len(names) == 0 {
		return true, nil
	}
	if len(names) > 4 {
		names = append(names[:4:4], "...")
	}
	hint := "restore seeds a new node: give a missing or empty directory"
	for _, n := range names {
		if n == restoringFile {
			hint = "it holds a restore that did not finish: remove its contents and restore again"
		}
	}
	return true, fmt.Errorf("%w: %s holds %s; %s", ErrDataDirNotEmpty, dir, strings.Join(names, ", "), hint)
}

// undoRestore removes what a failed restore wrote in dir: dir itself if it
// did not exist before, else its contents (it was empty).
func undoRestore(dir string, existed bool, logger hclog.Logger) {
	var err error
	if !existed {
		err = os.RemoveAll(dir)
	} else {
		var names []string
		if names, err = vfs.Default.ReadDir(dir); err == nil {
			for _, n := range names {
				if n == restoringFile {
					continue // last, so that a failure leaves it
				}
				err = errors.Join(err, os.RemoveAll(filepath.Join(dir, n)))
			}
			if err == nil {
				err = (&markers{dir: dir}).remove(restoringFile)
			}
		}
	}
	if err != nil {
		logger.Error("removing what a failed restore wrote; remove it by hand (a node refuses to start from it)", "data_dir", dir, "error", err)
	}
}

// restoredState checks the backup's state against its header and returns
// the state the restored nodes start from (the old members' client
// addresses and the catalog forgotten), the entries' size by its byte
// ledger, the number of client sessions and the names of the named logs
// the catalog listed.
//
// The catalog goes: it lists the old cluster's nodes, on which placement
// would put new logs' replicas, and named logs whose records this backup
// does not hold, which would stay in the new cluster's catalog with no
// replica able to serve them and their names taken. The new cluster starts
// its catalog afresh, from its own nodes, at its first log.
func restoredState(state []byte, hdr backup.Header) ([]byte, uint64, int, []string, error) {
	out, recordBytes, sessions, err := replica.RestoredLogState(state, hdr.Floor)
	switch {
	case errors.Is(err, replica.ErrStateVersion):
		return nil, 0, 0, nil, fmt.Errorf("node: restore: %w: the state machine's state in it has version %d; this node reads 1 to %d (a backup from a newer raftlog)",
			backup.ErrUnsupportedVersion, state[0], replica.StateVersion)
	case err != nil:
		return nil, 0, 0, nil, fmt.Errorf("node: restore: %w: %v", backup.ErrCorrupt, err)
	}
	dropped, err := BackupNamedLogs(state)
	if err != nil {
		return nil, 0, 0, nil, fmt.Errorf("node: restore: %w", err)
	}
	return out, recordBytes, sessions, dropped, nil
}

// BackupNamedLogs returns, sorted, the names of the named logs the catalog
// in a default log's backup state (backup.Reader.State) lists: a full
// restore of it starts the new cluster without them (RestoreInfo). An
// error wraps backup.ErrCorrupt.
func BackupNamedLogs(state []byte) ([]string, error) {
	cat, err := backupCatalog(state)
	if err != nil || cat == nil {
		return nil, err
	}
	var names []string
	for _, l := range cat.LogsByName() {
		if l.ID != catalog.DefaultID && l.State == catalog.LogActive {
			names = append(names, l.Name)
		}
	}
	return names, nil
}

// restoreLog stores the backup's entries in the first archive group of a
// new DB in the data dir, and raft's current term.
func restoreLog(br *backup.Reader, cfg RestoreConfig, state []byte, want uint64) (backup.Summary, error) {
	hdr := br.Header()
	db, err := raftstore.OpenDB(filepath.Join(cfg.DataDir, "store"), &raftstore.Options{
		Flush: raftstore.AsyncFlush, SegmentSize: cfg.SegmentSize, NoGoMetrics: true, Monotonic: true,
	})
	if err != nil {
		return backup.Summary{}, fmt.Errorf("node: restore: %w", err)
	}
	view, err := replica.NewLogView(db, logGroups)
	if err == nil {
		err = storeBackup(br, view.Archives[0], hdr, want)
	}
	if err == nil {
		// Raft's current term: see the top of this file.
		err = view.Live.SetUint64([]byte("CurrentTerm"), hdr.Term)
	}
	if err == nil {
		err = db.Sync()
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return backup.Summary{}, fmt.Errorf("node: restore: %w", err)
	}
	return br.Summary(), nil
}

// storeBackup stores the backup's entries in st, from its floor to its
// index, no-ops standing in for raft's own entries, and checks their size
// against the state's byte ledger (want).
func storeBackup(br *backup.Reader, st *raftstore.Store, hdr backup.Header, want uint64) error {
	w := replica.NewEntryWriter(st, hdr.Floor, hdr.Term)
	var ledger uint64
	for {
		e, err := br.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		ledger += replica.StreamRecordSize(len(e.Data))
		if err := w.Write(&raft.Log{Index: e.Index, Term: e.Term, Type: raft.LogCommand, Data: e.Data, AppendedAt: time.Unix(0, e.AppendedAt)}); err != nil {
			return err
		}
	}
	if err := w.Finish(hdr.Index); err != nil {
		return err
	}
	if ledger != want {
		return fmt.Errorf("%w: its entries come to %d bytes, its state's byte ledger says %d: the state and the entries do not belong together", backup.ErrCorrupt, ledger, want)
	}
	return nil
}

// writeRestoredSnapshot writes the snapshot file that makes the restored
// archive the node's log (see the top of this file).
func writeRestoredSnapshot(cfg RestoreConfig, hdr backup.Header, state []byte) error {
	dir := filepath.Join(cfg.DataDir, "snapshots")
	if err := vfs.Default.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("node: restore: create %s: %w", dir, err)
	}
	var conf raft.Configuration
	for _, p := range cfg.Bootstrap {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
	}
	f := &replica.SnapFile{
		Meta: raft.SnapshotMeta{
			Version:            raft.SnapshotVersionMax,
			ID:                 fmt.Sprintf("%020d-%020d-%d", hdr.Index, hdr.Term, time.Now().UnixMilli()),
			Index:              hdr.Index,
			Term:               hdr.Term,
			Configuration:      conf,
			ConfigurationIndex: hdr.Index,
		},
		State:    state,
		Archive:  logGroups.ArchiveA,
		Received: true,
	}
	b, err := replica.EncodeSnapFile(f)
	if err != nil {
		return fmt.Errorf("node: restore: %w", err)
	}
	if _, err := replica.WriteFileFS(vfs.Default, filepath.Join(dir, f.Meta.ID+replica.SnapSuffix), b); err != nil {
		return fmt.Errorf("node: restore: %w", err)
	}
	return nil
}

// checkRestoreDone refuses to start from a data dir whose restore did not
// finish.
func (n *Node) checkRestoreDone() error {
	ok, err := n.marks.has(restoringFile)
	if err != nil || !ok {
		return err
	}
	return fmt.Errorf("%w: %s has the marker %q; remove the data dir's contents and run node restore again", ErrRestoreIncomplete, n.cfg.DataDir, restoringFile)
}
