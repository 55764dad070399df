package replica

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/raftstore"
)

// Installing a snapshot, and what a crash leaves of one.
//
// A received snapshot brings the retained records below its index. They
// must replace the archive, but the old snapshot needs the old archive
// until the new snapshot is durable. So the records go to the archive
// group that is not current (staging), and the snapshot file, which names
// its archive group, is the switch:
//
//  1. empty the staging group; store the stream's records in it;
//  2. sync the DB: the staged records are durable;
//  3. write the snapshot file as name.tmp, fsync it, rename it to
//     name.snap and fsync the directory: once the rename is durable the
//     newest snapshot names the staging group, which becomes current;
//  4. empty the old archive group, remove the snapshot files that name it
//     and fsync the directory;
//  5. finish the snapshot: delete raft's entries it replaces and those
//     below its floor (snapStore.finish).
//
// A crash before step 3's rename is durable leaves the old snapshot newest,
// with its archive intact; a crash after it leaves the new one, with all
// its records. Opening the store (openSnapStore) makes the group the newest
// snapshot names current, empties the other, removes temporary files and
// snapshot files naming the other group, and runs step 5 again for the
// newest snapshot (it is idempotent). A snapshot taken here carries no
// records: its file names the current archive group, and only steps 2, 3
// and 5 apply.

// OpenSnapStore opens the snapshot store in dir, on fs, and recovers it: see
// above. view's archive is set to the group the newest snapshot names.
// Raft must not run yet.
func OpenSnapStore(fs vfs.FS, dir string, view *LogView, db *raftstore.DB, logger hclog.Logger) (*SnapStore, error) {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("replica: create %s: %w", dir, err)
	}
	if err := fs.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("replica: create %s: %w", dir, err)
	}
	s := &SnapStore{fs: fs, dir: dir, view: view, groups: view.Groups, db: db, logger: logger, retain: 2, staging: make(chan struct{}, 1)}
	if err := s.recover(); err != nil {
		return nil, err
	}
	return s, nil
}

// recover finishes or rolls back what a crash interrupted.
func (s *SnapStore) recover() error {
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("replica: list snapshots: %w", err)
	}
	dirty := false
	for _, name := range names {
		if strings.HasSuffix(name, tmpSuffix) {
			if err := s.fs.Remove(filepath.Join(s.dir, name)); err != nil {
				return fmt.Errorf("replica: remove %s: %w", name, err)
			}
			dirty = true
		}
	}
	// Snapshot files are written whole and renamed into place, so one
	// that does not read is damage, not a crash: refuse to guess which
	// archive group holds the records.
	files, err := s.ReadFiles(true)
	if err != nil {
		return fmt.Errorf("%w: the data dir is damaged; wipe it and start the node with --join", err)
	}
	cur := s.view.Groups.ArchiveA
	if len(files) > 0 {
		cur = files[0].Archive
	}
	if err := s.switchArchive(cur); err != nil {
		return err
	}
	removed, err := s.removeStale(files, cur, "")
	if err != nil {
		return err
	}
	if dirty || removed {
		if err := s.fs.SyncDir(s.dir); err != nil {
			return err
		}
	}
	if len(files) > 0 {
		f := files[0]
		s.noteLatest(SnapPoint{f.Meta.Index, f.Meta.Term})
		s.finish(f)
	}
	return nil
}

// switchArchive makes group g the current archive and empties the other.
// mu must be held, or the store not yet shared.
func (s *SnapStore) switchArchive(g uint64) error {
	st, err := s.view.archiveStore(g)
	if err != nil {
		return err
	}
	s.view.Archive.Store(st)
	other, _ := s.view.archiveStore(s.view.Groups.otherArchive(g))
	if err := EmptyStore(other); err != nil {
		return fmt.Errorf("replica: empty the old archive (group %d): %w", s.view.Groups.otherArchive(g), err)
	}
	return nil
}

// removeStale removes the snapshot files (files, newest first) that name
// an archive group other than cur, whose records are gone, and those past
// the newest s.retain, never the one with ID keep. It reports whether it
// removed any; the caller syncs the directory. mu must be held, or the
// store not yet shared.
func (s *SnapStore) removeStale(files []*SnapFile, cur uint64, keep string) (bool, error) {
	removed, kept := false, 0
	for _, f := range files {
		if f.Meta.ID == keep || (f.Archive == cur && kept < s.retain) {
			kept++
			continue
		}
		if err := s.fs.Remove(s.path(f.Meta.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("replica: remove snapshot %s: %w", f.Meta.ID, err)
		}
		removed = true
	}
	return removed, nil
}

// finish deletes what a durable snapshot makes obsolete: for a received
// one, raft's entries up to its index (the archive holds the retained
// ones); for every one, the entries below its floor. Both are idempotent,
// so the store's recovery runs them again for the newest snapshot. mu must
// be held, or the store not yet shared.
func (s *SnapStore) finish(f *SnapFile) {
	if f.Received {
		kept, err := s.view.DropLiveThrough(f.Meta.Index)
		if err != nil {
			s.logger.Error("deleting the entries a received snapshot covers", "index", f.Meta.Index, "error", err)
		}
		s.Kept.Add(kept)
	}
	if err := s.view.DeleteBelow(f.Floor, f.Meta.Index); err != nil {
		s.logger.Error("deleting trimmed entries", "floor", f.Floor, "error", err)
	}
}

// Create implements raft.SnapshotStore. The sink parses what raft writes
// as it arrives: records go to the staging archive group, the state to
// the file written at Close.
func (s *SnapStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	now := time.Now()
	meta := raft.SnapshotMeta{
		Version:            version,
		ID:                 fmt.Sprintf("%020d-%020d-%d", index, term, now.UnixMilli()),
		Index:              index,
		Term:               term,
		Configuration:      configuration,
		ConfigurationIndex: configurationIndex,
	}
	pr, pw := io.Pipe()
	sink := &snapSink{store: s, meta: meta, pw: pw, done: make(chan error, 1)}
	go func() {
		err := sink.parse(bufio.NewReaderSize(pr, 1<<20))
		pr.CloseWithError(err)
		sink.done <- err
	}()
	return sink, nil
}

// snapSink receives one snapshot. Raft's goroutine calls its methods; a
// goroutine of its own parses the stream.
type snapSink struct {
	store  *SnapStore
	meta   raft.SnapshotMeta
	pw     *io.PipeWriter
	done   chan error
	closed bool  // owned by raft's goroutine
	err    error // what the first Close returned; owned by raft's goroutine

	// Set by parse before it sends on done.
	state    []byte
	floor    uint64
	received bool // the stream carried records: sent by a leader, not taken here
	// staged is the archive group holding the records, and the sink holds
	// store.staging, when received is set.
	staged uint64
}

// ID implements raft.SnapshotSink.
func (k *snapSink) ID() string { return k.meta.ID }

// Write implements io.Writer.
func (k *snapSink) Write(p []byte) (int, error) { return k.pw.Write(p) }

// Cancel implements raft.SnapshotSink: it drops the staged records, if
// any. The current archive and snapshots are untouched.
func (k *snapSink) Cancel() error {
	if k.closed {
		return nil
	}
	k.closed = true
	k.pw.CloseWithError(errors.New("replica: snapshot cancelled"))
	<-k.done
	k.unstage()
	return nil
}

// unstage empties the staging group and releases it.
func (k *snapSink) unstage() {
	if !k.received {
		return
	}
	k.received = false
	st, _ := k.store.view.archiveStore(k.staged)
	if err := EmptyStore(st); err != nil {
		// The next install or start empties it.
		k.store.logger.Warn("dropping the records of a snapshot not installed", "group", k.staged, "error", err)
	}
	<-k.store.staging
}

// Close implements raft.SnapshotSink: it waits for the stream to be
// parsed and its records stored, then installs the snapshot (see the top
// of this file).
//
// Raft calls Close after FSMSnapshot.Persist has closed the sink too; the
// second call returns what the first did.
func (k *snapSink) Close() error {
	if k.closed {
		return k.err
	}
	k.closed = true
	k.err = k.close()
	return k.err
}

func (k *snapSink) close() error {
	k.pw.Close()
	if err := <-k.done; err != nil {
		k.unstage()
		return err
	}
	s := k.store
	if err := s.db.Sync(); err != nil {
		k.unstage()
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &SnapFile{Meta: k.meta, State: k.state, Floor: k.floor, Archive: k.staged, Received: k.received}
	if !k.received {
		f.Archive = s.currentArchive()
	} else if p := s.Latest.Load(); p != nil && p.Index > f.Meta.Index {
		// Raft sends a snapshot only to a node whose log ends below the
		// leader's, so this does not happen; switching to an older
		// snapshot would leave the newer one without its records.
		k.unstage()
		return fmt.Errorf("replica: received snapshot at index %d is older than the one at %d held here", f.Meta.Index, p.Index)
	}
	b, err := EncodeSnapFile(f)
	if err != nil {
		k.unstage()
		return err
	}
	switched, err := WriteFileFS(s.fs, s.path(k.meta.ID), b)
	if err != nil {
		if !switched {
			k.unstage()
			if !commitlog.IsNoSpace(err) && s.Fail != nil {
				// The old snapshot stands, but the disk failed to write
				// the new one: stop, as the raft store does on a failed
				// write, rather than go on failing every snapshot (a
				// follower that can never catch up, a leader whose log
				// is never trimmed). A full disk is not a failure.
				s.Fail(fmt.Errorf("replica: snapshot %s: %w", k.meta.ID, err))
			}
			return err
		}
		// The rename happened, the directory sync failed: whether the
		// new snapshot or the old one survives a crash is unknown, so
		// neither archive may go. Stop; the next start finds out.
		err = fmt.Errorf("replica: snapshot %s: %w", k.meta.ID, err)
		if s.Fail != nil {
			s.Fail(err)
		}
		return err
	}
	if k.received {
		k.received = false // the staged records are the archive now
		if err := s.switchArchive(k.staged); err != nil {
			s.logger.Warn("after installing a snapshot; the next start finishes it", "error", err)
		}
		<-s.staging
	}
	s.noteLatest(SnapPoint{k.meta.Index, k.meta.Term})
	if files, err := s.Files(); err != nil {
		s.logger.Warn("listing snapshots to remove old ones", "error", err)
	} else if removed, err := s.removeStale(files, f.Archive, k.meta.ID); err != nil || removed {
		if err == nil {
			err = s.fs.SyncDir(s.dir)
		}
		if err != nil {
			s.logger.Warn("removing old snapshots; the next start retries", "error", err)
		}
	}
	s.finish(f)
	return nil
}

// currentArchive returns the group of the current archive.
func (s *SnapStore) currentArchive() uint64 {
	return s.view.Archive.Load().Group()
}

// parse reads a stream, storing its records (if flagged) in the staging
// archive group.
func (k *snapSink) parse(r *bufio.Reader) error {
	h, err := readStreamHeader(r)
	if err != nil {
		return err
	}
	floor, _, err := stateLedger(h.state)
	if err != nil {
		return err
	}
	k.state, k.floor = h.state, floor
	if h.flags&flagRecords == 0 {
		return expectEnd(r, 0)
	}
	s := k.store
	select {
	case s.staging <- struct{}{}:
	default:
		return errors.New("replica: another snapshot is being installed")
	}
	s.mu.Lock()
	k.staged = s.view.Groups.otherArchive(s.currentArchive())
	s.mu.Unlock()
	k.received = true
	st, _ := s.view.archiveStore(k.staged)
	if err := EmptyStore(st); err != nil {
		return err
	}
	return k.storeRecords(st, r, floor)
}

// storeRecords stores the stream's records in st, from floor to the
// snapshot's index, no-ops standing in for raft's own entries.
func (k *snapSink) storeRecords(st *raftstore.Store, r *bufio.Reader, floor uint64) error {
	w := NewEntryWriter(st, floor, k.meta.Term)
	var records uint64
	var fixed [streamRecordFixed]byte
	for {
		if _, err := io.ReadFull(r, fixed[:1]); err != nil {
			return fmt.Errorf("replica: snapshot stream after %d records: %w", records, err)
		}
		if fixed[0] == 0 {
			if err := expectCount(r, records); err != nil {
				return err
			}
			break
		}
		if fixed[0] != 1 {
			return fmt.Errorf("replica: snapshot stream: record tag %d after %d records", fixed[0], records)
		}
		if _, err := io.ReadFull(r, fixed[1:]); err != nil {
			return fmt.Errorf("replica: snapshot stream record %d: %w", records, err)
		}
		l := &raft.Log{
			Index:      binary.BigEndian.Uint64(fixed[1:]),
			Term:       binary.BigEndian.Uint64(fixed[9:]),
			Type:       raft.LogCommand,
			AppendedAt: time.Unix(0, int64(binary.BigEndian.Uint64(fixed[17:]))),
		}
		n, sum := binary.BigEndian.Uint32(fixed[25:]), binary.BigEndian.Uint32(fixed[29:])
		if l.Index < w.next || l.Index > k.meta.Index {
			return fmt.Errorf("replica: snapshot stream: record index %d outside [%d, %d]", l.Index, w.next, k.meta.Index)
		}
		if n > maxStateSize {
			return fmt.Errorf("replica: snapshot stream: record of %d bytes", n)
		}
		l.Data = make([]byte, n)
		if _, err := io.ReadFull(r, l.Data); err != nil {
			return fmt.Errorf("replica: snapshot stream record at index %d: %w", l.Index, err)
		}
		if crc32.Checksum(l.Data, crcTable) != sum {
			return fmt.Errorf("replica: snapshot stream record at index %d fails its checksum", l.Index)
		}
		if err := w.Write(l); err != nil {
			return err
		}
		records++
	}
	if err := w.Finish(k.meta.Index); err != nil {
		return err
	}
	k.store.logger.Info("snapshot records staged", "floor", floor, "index", k.meta.Index, "records", records, "group", st.Group())
	return nil
}

func expectEnd(r io.Reader, records uint64) error {
	var tag [1]byte
	if _, err := io.ReadFull(r, tag[:]); err != nil || tag[0] != 0 {
		return fmt.Errorf("replica: snapshot stream: missing end marker (%v)", err)
	}
	return expectCount(r, records)
}

func expectCount(r io.Reader, records uint64) error {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return fmt.Errorf("replica: snapshot stream end: %w", err)
	}
	if got := binary.BigEndian.Uint64(b[:]); got != records {
		return fmt.Errorf("replica: snapshot stream ends claiming %d records, %d came", got, records)
	}
	var extra [1]byte
	if n, _ := r.Read(extra[:]); n != 0 {
		return errors.New("replica: snapshot stream: bytes after the end marker")
	}
	return nil
}

// WriteFileSync writes path atomically and durably on the operating
// system's file system.
func WriteFileSync(path string, b []byte) error {
	_, err := WriteFileFS(vfs.Default, path, b)
	return err
}

// WriteFileFS writes path atomically and durably: a temporary file, fsync,
// rename, fsync of the directory. renamed reports that the rename was
// done, so that on an error the old or the new content may survive a
// crash; otherwise the old content does.
func WriteFileFS(fs vfs.FS, path string, b []byte) (renamed bool, err error) {
	tmp := path + tmpSuffix
	dir := filepath.Dir(path)
	f, err := fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return false, fmt.Errorf("replica: write %s: %w", path, err)
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err != nil {
		fs.Remove(tmp)
		return false, fmt.Errorf("replica: write %s: %w", path, err)
	}
	if err := fs.SyncDir(dir); err != nil {
		return true, fmt.Errorf("replica: write %s: %w", path, err)
	}
	return true, nil
}

// EntryWriter stores entries of increasing index in a store, in batches,
// with no-ops of its term for the indexes between them: what a snapshot
// install and a restore write into an archive group. It belongs to one
// goroutine.
type EntryWriter struct {
	st    *raftstore.Store
	term  uint64 // of the no-ops
	next  uint64 // the index the next entry or no-op takes
	batch []*raft.Log
	size  int // data bytes in batch
}

// NewEntryWriter returns a writer of entries into st from index from,
// filling gaps with no-ops of term.
func NewEntryWriter(st *raftstore.Store, from, term uint64) *EntryWriter {
	return &EntryWriter{st: st, next: from, term: term}
}

// Write stores l, after no-ops for the indexes before it; l.Index is at
// least the next index.
func (w *EntryWriter) Write(l *raft.Log) error {
	if err := w.noopsTo(l.Index); err != nil {
		return err
	}
	return w.add(l)
}

// Finish writes no-ops up to last and stores what is batched.
func (w *EntryWriter) Finish(last uint64) error {
	if err := w.noopsTo(last + 1); err != nil {
		return err
	}
	return w.flush()
}

func (w *EntryWriter) add(l *raft.Log) error {
	w.batch = append(w.batch, l)
	w.size += len(l.Data)
	w.next = l.Index + 1
	if len(w.batch) >= 512 || w.size >= 4<<20 {
		return w.flush()
	}
	return nil
}

// noopsTo writes no-ops for [next, end).
func (w *EntryWriter) noopsTo(end uint64) error {
	for w.next < end {
		if err := w.add(&raft.Log{Index: w.next, Term: w.term, Type: raft.LogNoop}); err != nil {
			return err
		}
	}
	return nil
}

func (w *EntryWriter) flush() error {
	if len(w.batch) == 0 {
		return nil
	}
	err := w.st.StoreLogs(w.batch)
	w.batch, w.size = w.batch[:0], 0
	return err
}
