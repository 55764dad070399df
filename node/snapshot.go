package node

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/raftstore"
)

// Snapshots: the log is the state, so a snapshot on disk is small (the
// state machine's state, see fsm.go) and never copies the log. When raft
// sends a snapshot to a follower, the stream carries the state and then
// every retained command entry, read from the commit log as it is sent:
//
//	stream  = header | record* | end
//	header  = "RLSNAP01" | flags u8 | len u32 | state | crc32c(state) u32
//	record  = 0x01 | index u64 | term u64 | appendedAt i64 | len u32 | crc32c(data) u32 | data
//	end     = 0x00 | records u64
//
// Integers are big-endian. flags bit 0 says the records from the state's
// floor to the snapshot index follow; a snapshot persisted locally has no
// records, since they are in the node's own log. The receiving side writes
// the records into the archive group (logview.go), filling indexes that
// held raft's own entries with no-ops, so the archive holds exactly the
// retained range. The stream's size, which raft needs before it sends one,
// comes from the state's byte ledger.
const (
	streamMagic       = "RLSNAP01"
	streamHeaderFixed = len(streamMagic) + 1 + 4 + 4
	streamEndSize     = 1 + 8
	// streamRecordFixed is the bytes of a stream record besides its data.
	streamRecordFixed = 1 + 8 + 8 + 8 + 4 + 4
	flagRecords       = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// streamRecordSize is the size of a command entry of n data bytes in a
// snapshot stream.
func streamRecordSize(n int) uint64 { return uint64(streamRecordFixed + n) }

func appendStreamHeaderFlags(dst, state []byte, flags byte) []byte {
	dst = append(dst, streamMagic...)
	dst = append(dst, flags)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(state)))
	dst = append(dst, state...)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(state, crcTable))
}

// appendStreamHeader appends a header without records.
func appendStreamHeader(dst, state []byte) []byte { return appendStreamHeaderFlags(dst, state, 0) }

func appendStreamEnd(dst []byte, records uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, 0), records)
}

func appendStreamRecord(dst []byte, l *raft.Log) []byte {
	dst = append(dst, 1)
	dst = binary.BigEndian.AppendUint64(dst, l.Index)
	dst = binary.BigEndian.AppendUint64(dst, l.Term)
	dst = binary.BigEndian.AppendUint64(dst, uint64(l.AppendedAt.UnixNano()))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(l.Data)))
	dst = binary.BigEndian.AppendUint32(dst, crc32.Checksum(l.Data, crcTable))
	return append(dst, l.Data...)
}

type streamHeader struct {
	flags byte
	state []byte
}

// maxStateSize bounds the state a stream may carry.
const maxStateSize = 1 << 30

func readStreamHeader(r io.Reader) (streamHeader, error) {
	var fixed [len(streamMagic) + 1 + 4]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return streamHeader{}, fmt.Errorf("node: snapshot header: %w", err)
	}
	if string(fixed[:len(streamMagic)]) != streamMagic {
		return streamHeader{}, fmt.Errorf("node: snapshot does not start with %q", streamMagic)
	}
	h := streamHeader{flags: fixed[len(streamMagic)]}
	n := binary.BigEndian.Uint32(fixed[len(streamMagic)+1:])
	if n > maxStateSize {
		return streamHeader{}, fmt.Errorf("node: snapshot state of %d bytes", n)
	}
	buf := make([]byte, int(n)+4)
	if _, err := io.ReadFull(r, buf); err != nil {
		return streamHeader{}, fmt.Errorf("node: snapshot state: %w", err)
	}
	h.state = buf[:n]
	if crc32.Checksum(h.state, crcTable) != binary.BigEndian.Uint32(buf[n:]) {
		return streamHeader{}, errors.New("node: snapshot state fails its checksum")
	}
	return h, nil
}

// stateLedger reads the floor and byte ledger at the start of an encoded
// state.
func stateLedger(state []byte) (floor, recordBytes uint64, err error) {
	if len(state) == 0 || !knownStateVersion(state[0]) {
		return 0, 0, errors.New("node: unknown snapshot state version")
	}
	r := cmdReader{b: state[1:]}
	floor, floorCum, total := r.uvarint(), r.uvarint(), r.uvarint()
	if r.err == nil && floorCum > total {
		r.err = errBadCommand
	}
	if r.err != nil {
		return 0, 0, fmt.Errorf("node: snapshot state ledger: %w", r.err)
	}
	return floor, total - floorCum, nil
}

// snapStore is the node's raft.SnapshotStore.
type snapStore struct {
	dir    string
	view   *logView
	db     *raftstore.DB
	logger hclog.Logger
	retain int
	// installed is called once a snapshot is durable, with its floor and
	// index and whether a leader sent it, to delete the log below the
	// floor (and, for a snapshot sent, raft's own entries up to it).
	installed func(floor, index uint64, received bool)
	// latest is the index and term of the newest durable snapshot
	// (failStopStore.GetLog); nil when there is none.
	latest atomic.Pointer[snapPoint]

	mu sync.Mutex // serialises writes of snapshot files
}

// snapPoint is the last entry a snapshot covers.
type snapPoint struct{ index, term uint64 }

// noteLatest records p as the newest snapshot unless a newer one is.
func (s *snapStore) noteLatest(p snapPoint) {
	for {
		cur := s.latest.Load()
		if cur != nil && cur.index >= p.index {
			return
		}
		if s.latest.CompareAndSwap(cur, &p) {
			return
		}
	}
}

const snapSuffix = ".snap"

func newSnapStore(dir string, view *logView, db *raftstore.DB, logger hclog.Logger) (*snapStore, error) {
	if err := vfs.Default.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("node: create %s: %w", dir, err)
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range names {
		if strings.HasSuffix(e.Name(), ".tmp") {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	s := &snapStore{dir: dir, view: view, db: db, logger: logger, retain: 2}
	files, err := s.files()
	if err != nil {
		return nil, err
	}
	if len(files) > 0 {
		s.noteLatest(snapPoint{files[0].meta.Index, files[0].meta.Term})
	}
	return s, nil
}

// snapFile is a snapshot on disk.
type snapFile struct {
	meta        raft.SnapshotMeta
	state       []byte
	floor       uint64
	recordBytes uint64
}

func (f *snapFile) streamSize() int64 {
	return int64(streamHeaderFixed+len(f.state)) + int64(f.recordBytes) + streamEndSize
}

// file layout: "RLSNAPF1" | len u32 | meta JSON | len u32 | state | crc32c u32
const fileMagic = "RLSNAPF1"

func encodeSnapFile(meta *raft.SnapshotMeta, state []byte) ([]byte, error) {
	mj, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	b := []byte(fileMagic)
	b = binary.BigEndian.AppendUint32(b, uint32(len(mj)))
	b = append(b, mj...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(state)))
	b = append(b, state...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable)), nil
}

func (s *snapStore) readFile(id string) (*snapFile, error) {
	path := filepath.Join(s.dir, id+snapSuffix)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	bad := func(what string) error { return fmt.Errorf("node: snapshot %s: %s", path, what) }
	if len(b) < len(fileMagic)+12 || string(b[:len(fileMagic)]) != fileMagic {
		return nil, bad("not a snapshot file")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, bad("fails its checksum")
	}
	rest := body[len(fileMagic):]
	chunk := func() []byte {
		if len(rest) < 4 {
			return nil
		}
		n := binary.BigEndian.Uint32(rest)
		if uint64(n) > uint64(len(rest)-4) {
			rest = nil
			return nil
		}
		c := rest[4 : 4+n]
		rest = rest[4+n:]
		return c
	}
	f := &snapFile{}
	mj := chunk()
	f.state = chunk()
	if mj == nil || f.state == nil || len(rest) != 0 {
		return nil, bad("is truncated")
	}
	if err := json.Unmarshal(mj, &f.meta); err != nil {
		return nil, bad(err.Error())
	}
	if f.floor, f.recordBytes, err = stateLedger(f.state); err != nil {
		return nil, bad(err.Error())
	}
	f.meta.Size = f.streamSize()
	return f, nil
}

// List implements raft.SnapshotStore: newest first.
func (s *snapStore) List() ([]*raft.SnapshotMeta, error) {
	files, err := s.files()
	if err != nil {
		return nil, err
	}
	metas := make([]*raft.SnapshotMeta, len(files))
	for i, f := range files {
		metas[i] = &f.meta
	}
	return metas, nil
}

// files returns the readable snapshots, newest first.
func (s *snapStore) files() ([]*snapFile, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var files []*snapFile
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), snapSuffix)
		if !ok {
			continue
		}
		f, err := s.readFile(id)
		if err != nil {
			s.logger.Warn("skipping unreadable snapshot", "error", err)
			continue
		}
		files = append(files, f)
	}
	sort.Slice(files, func(i, j int) bool {
		a, b := files[i].meta, files[j].meta
		if a.Index != b.Index {
			return a.Index > b.Index
		}
		if a.Term != b.Term {
			return a.Term > b.Term
		}
		// The same snapshot received again: the later copy first (IDs
		// end in the creation time in milliseconds).
		return a.ID > b.ID
	})
	return files, nil
}

// Open implements raft.SnapshotStore. The reader yields the state and then
// the retained records, read from the log only if the reader gets that far
// (FSM.Restore stops after the state).
func (s *snapStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	f, err := s.readFile(id)
	if err != nil {
		return nil, nil, err
	}
	meta := f.meta
	hdr := appendStreamHeaderFlags(nil, f.state, flagRecords)
	rs := &recordStream{view: s.view, next: f.floor, last: meta.Index, want: f.recordBytes}
	return &meta, readCloser{io.MultiReader(bytes.NewReader(hdr), rs)}, nil
}

type readCloser struct{ io.Reader }

func (readCloser) Close() error { return nil }

// recordStream reads the command entries of [next, last] and encodes them,
// then the end marker. It fails if their size differs from want, which
// would break the size raft announced.
type recordStream struct {
	view       *logView
	next, last uint64
	want, sent uint64
	records    uint64
	buf        []byte
	done       bool
}

func (r *recordStream) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.done {
			return 0, io.EOF
		}
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *recordStream) fill() error {
	var l raft.Log
	for r.next <= r.last && len(r.buf) < 1<<20 {
		if err := r.view.getLog(r.next, &l); err != nil {
			return fmt.Errorf("node: snapshot stream at index %d: %w", r.next, err)
		}
		r.next++
		if l.Type != raft.LogCommand {
			continue
		}
		r.sent += streamRecordSize(len(l.Data))
		r.records++
		r.buf = appendStreamRecord(r.buf[:len(r.buf):len(r.buf)], &l)
	}
	if r.next > r.last {
		if r.sent != r.want {
			return fmt.Errorf("node: snapshot stream holds %d record bytes, its ledger says %d", r.sent, r.want)
		}
		r.buf = appendStreamEnd(r.buf, r.records)
		r.done = true
	}
	return nil
}

// Create implements raft.SnapshotStore. The sink parses what raft writes
// as it arrives: records go to the archive, the state to the file written
// at Close.
func (s *snapStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
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

// snapSink receives one snapshot.
type snapSink struct {
	store  *snapStore
	meta   raft.SnapshotMeta
	pw     *io.PipeWriter
	done   chan error
	closed bool
	err    error // what the first Close returned

	// Set by parse before it returns.
	state    []byte
	floor    uint64
	received bool // the stream carried records: sent by a leader, not taken here
}

// ID implements raft.SnapshotSink.
func (k *snapSink) ID() string { return k.meta.ID }

// Write implements io.Writer.
func (k *snapSink) Write(p []byte) (int, error) { return k.pw.Write(p) }

// Cancel implements raft.SnapshotSink.
func (k *snapSink) Cancel() error {
	if k.closed {
		return nil
	}
	k.closed = true
	k.pw.CloseWithError(errors.New("node: snapshot cancelled"))
	<-k.done
	return nil
}

// Close implements raft.SnapshotSink: it waits for the stream to be
// parsed and its records stored, syncs them, then writes the snapshot file
// durably and removes old ones.
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
		return err
	}
	s := k.store
	if err := s.db.Sync(); err != nil {
		return err
	}
	b, err := encodeSnapFile(&k.meta, k.state)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	path := filepath.Join(s.dir, k.meta.ID+snapSuffix)
	if err := writeFileSync(path, b); err != nil {
		return err
	}
	files, err := s.files()
	if err != nil {
		return err
	}
	for _, f := range files[min(len(files), s.retain):] {
		if f.meta.ID != k.meta.ID {
			os.Remove(filepath.Join(s.dir, f.meta.ID+snapSuffix))
		}
	}
	s.noteLatest(snapPoint{k.meta.Index, k.meta.Term})
	if s.installed != nil {
		s.installed(k.floor, k.meta.Index, k.received)
	}
	return nil
}

// parse reads a stream, storing its records (if flagged) in the archive.
func (k *snapSink) parse(r *bufio.Reader) error {
	h, err := readStreamHeader(r)
	if err != nil {
		return err
	}
	floor, _, err := stateLedger(h.state)
	if err != nil {
		return err
	}
	k.state, k.floor, k.received = h.state, floor, h.flags&flagRecords != 0
	if h.flags&flagRecords == 0 {
		return expectEnd(r, 0)
	}
	return k.storeRecords(r, floor)
}

// storeRecords replaces the archive by the stream's records, from floor to
// the snapshot's index, no-ops standing in for raft's own entries.
func (k *snapSink) storeRecords(r *bufio.Reader, floor uint64) error {
	ar := k.store.view.archive
	if first, last := bounds(ar); last != 0 {
		if err := ar.DeleteRange(first, last); err != nil {
			return err
		}
	}
	var (
		batch   []*raft.Log
		bytes   int
		next    = floor
		records uint64
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := ar.StoreLogs(batch)
		batch, bytes = batch[:0], 0
		return err
	}
	add := func(l *raft.Log) error {
		batch = append(batch, l)
		bytes += len(l.Data)
		next = l.Index + 1
		if len(batch) >= 512 || bytes >= 4<<20 {
			return flush()
		}
		return nil
	}
	noopsTo := func(end uint64) error { // no-ops for [next, end)
		for next < end {
			if err := add(&raft.Log{Index: next, Term: k.meta.Term, Type: raft.LogNoop}); err != nil {
				return err
			}
		}
		return nil
	}
	var fixed [streamRecordFixed]byte
	for {
		if _, err := io.ReadFull(r, fixed[:1]); err != nil {
			return fmt.Errorf("node: snapshot stream after %d records: %w", records, err)
		}
		if fixed[0] == 0 {
			if err := expectCount(r, records); err != nil {
				return err
			}
			break
		}
		if fixed[0] != 1 {
			return fmt.Errorf("node: snapshot stream: record tag %d after %d records", fixed[0], records)
		}
		if _, err := io.ReadFull(r, fixed[1:]); err != nil {
			return fmt.Errorf("node: snapshot stream record %d: %w", records, err)
		}
		l := &raft.Log{
			Index:      binary.BigEndian.Uint64(fixed[1:]),
			Term:       binary.BigEndian.Uint64(fixed[9:]),
			Type:       raft.LogCommand,
			AppendedAt: time.Unix(0, int64(binary.BigEndian.Uint64(fixed[17:]))),
		}
		n, sum := binary.BigEndian.Uint32(fixed[25:]), binary.BigEndian.Uint32(fixed[29:])
		if l.Index < next || l.Index > k.meta.Index {
			return fmt.Errorf("node: snapshot stream: record index %d outside [%d, %d]", l.Index, next, k.meta.Index)
		}
		if n > maxStateSize {
			return fmt.Errorf("node: snapshot stream: record of %d bytes", n)
		}
		l.Data = make([]byte, n)
		if _, err := io.ReadFull(r, l.Data); err != nil {
			return fmt.Errorf("node: snapshot stream record at index %d: %w", l.Index, err)
		}
		if crc32.Checksum(l.Data, crcTable) != sum {
			return fmt.Errorf("node: snapshot stream record at index %d fails its checksum", l.Index)
		}
		if err := noopsTo(l.Index); err != nil {
			return err
		}
		if err := add(l); err != nil {
			return err
		}
		records++
	}
	if err := noopsTo(k.meta.Index + 1); err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	k.store.logger.Info("snapshot records stored", "floor", floor, "index", k.meta.Index, "records", records)
	return nil
}

func expectEnd(r io.Reader, records uint64) error {
	var tag [1]byte
	if _, err := io.ReadFull(r, tag[:]); err != nil || tag[0] != 0 {
		return fmt.Errorf("node: snapshot stream: missing end marker (%v)", err)
	}
	return expectCount(r, records)
}

func expectCount(r io.Reader, records uint64) error {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return fmt.Errorf("node: snapshot stream end: %w", err)
	}
	if got := binary.BigEndian.Uint64(b[:]); got != records {
		return fmt.Errorf("node: snapshot stream ends claiming %d records, %d came", got, records)
	}
	var extra [1]byte
	if n, _ := r.Read(extra[:]); n != 0 {
		return errors.New("node: snapshot stream: bytes after the end marker")
	}
	return nil
}

// writeFileSync writes path atomically and durably: a temporary file,
// fsync, rename, fsync of the directory.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("node: write %s: %w", path, err)
	}
	return vfs.Default.SyncDir(filepath.Dir(path))
}
