package replica

import (
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
// the records into an archive group (logview.go, snapinstall.go), filling
// indexes that held raft's own entries with no-ops, so the archive holds
// exactly the retained range. The stream's size, which raft needs before it sends one,
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

// StreamRecordSize is the size of a command entry of n data bytes in a
// snapshot stream.
func StreamRecordSize(n int) uint64 { return uint64(streamRecordFixed + n) }

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
		return streamHeader{}, fmt.Errorf("replica: snapshot header: %w", err)
	}
	if string(fixed[:len(streamMagic)]) != streamMagic {
		return streamHeader{}, fmt.Errorf("replica: snapshot does not start with %q", streamMagic)
	}
	h := streamHeader{flags: fixed[len(streamMagic)]}
	n := binary.BigEndian.Uint32(fixed[len(streamMagic)+1:])
	if n > maxStateSize {
		return streamHeader{}, fmt.Errorf("replica: snapshot state of %d bytes", n)
	}
	buf := make([]byte, int(n)+4)
	if _, err := io.ReadFull(r, buf); err != nil {
		return streamHeader{}, fmt.Errorf("replica: snapshot state: %w", err)
	}
	h.state = buf[:n]
	if crc32.Checksum(h.state, crcTable) != binary.BigEndian.Uint32(buf[n:]) {
		return streamHeader{}, errors.New("replica: snapshot state fails its checksum")
	}
	return h, nil
}

// stateLedger reads the floor and byte ledger at the start of an encoded
// state.
func stateLedger(state []byte) (floor, recordBytes uint64, err error) {
	if len(state) == 0 || !knownStateVersion(state[0]) {
		return 0, 0, errors.New("replica: unknown snapshot state version")
	}
	r := cmdReader{b: state[1:]}
	floor, floorCum, total := r.uvarint(), r.uvarint(), r.uvarint()
	if r.err == nil && floorCum > total {
		r.err = errBadCommand
	}
	if r.err != nil {
		return 0, 0, fmt.Errorf("replica: snapshot state ledger: %w", r.err)
	}
	return floor, total - floorCum, nil
}

// SnapStore is the node's raft.SnapshotStore. Snapshot files live in dir,
// one per snapshot, written atomically (snapinstall.go); each names the
// archive group that holds its records.
type SnapStore struct {
	// fs, dir, view, groups (view's), db, logger and retain (how many
	// snapshots to keep) are set by OpenSnapStore and never change.
	fs     vfs.FS
	dir    string
	view   *LogView
	groups Groups
	db     *raftstore.DB
	logger hclog.Logger
	retain int
	// Fail is called when a snapshot file cannot be written for any
	// reason but a full disk, or when a failed sync leaves it unknown
	// whether an install switched to its snapshot: the node must stop
	// (failstop.go), and its next start finds out from the disk. nil: the
	// snapshot only returns the error. Set before raft starts, never
	// changed.
	Fail func(error)
	// Latest is the index and term of the newest durable snapshot
	// (failStopStore.GetLog); nil when there is none.
	Latest atomic.Pointer[SnapPoint]
	// Kept counts the entries past a received snapshot that the node held
	// when it installed it, and Kept (for tests).
	Kept atomic.Uint64

	// mu serialises writes and removals of snapshot files, the switch of
	// the current archive (view.archive) and the deletions that follow a
	// snapshot.
	mu sync.Mutex
	// staging holds a token while a sink stores a received snapshot's
	// records in the archive group that is not current.
	staging chan struct{}
}

// SnapPoint is the last entry a snapshot covers.
type SnapPoint struct{ Index, Term uint64 }

// noteLatest records p as the newest snapshot unless a newer one is.
func (s *SnapStore) noteLatest(p SnapPoint) {
	for {
		cur := s.Latest.Load()
		if cur != nil && cur.Index >= p.Index {
			return
		}
		if s.Latest.CompareAndSwap(cur, &p) {
			return
		}
	}
}

const (
	SnapSuffix = ".snap"
	tmpSuffix  = ".tmp"
)

// SnapFile is a snapshot on disk.
type SnapFile struct {
	Meta        raft.SnapshotMeta
	State       []byte
	Floor       uint64
	RecordBytes uint64
	// Archive is the group that holds the snapshot's records below raft's
	// log.
	Archive uint64
	// Received is set for a snapshot a leader sent, whose records the
	// stream carried; false for one taken here.
	Received bool
}

func (f *SnapFile) streamSize() int64 {
	return int64(streamHeaderFixed+len(f.State)) + int64(f.RecordBytes) + streamEndSize
}

// The snapshot file (all integers big-endian):
//
//	"RLSNAPF2" | len u32 | meta JSON | archive u64 | flags u8 | len u32 | state | crc32c u32
//
// flags bit 0: the snapshot was received. The crc covers everything before
// it. Version 1 files ("RLSNAPF1", without archive and flags) are read as
// taken here, their records in the first archive group.
const (
	fileMagic   = "RLSNAPF2"
	fileMagicV1 = "RLSNAPF1"
	fileFlagRcv = 1
)

// EncodeSnapFile encodes a snapshot file.
func EncodeSnapFile(f *SnapFile) ([]byte, error) {
	mj, err := json.Marshal(&f.Meta)
	if err != nil {
		return nil, err
	}
	b := []byte(fileMagic)
	b = binary.BigEndian.AppendUint32(b, uint32(len(mj)))
	b = append(b, mj...)
	b = binary.BigEndian.AppendUint64(b, f.Archive)
	var flags byte
	if f.Received {
		flags |= fileFlagRcv
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint32(b, uint32(len(f.State)))
	b = append(b, f.State...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable)), nil
}

// decodeSnapFile decodes a snapshot file; path names it in errors.
func decodeSnapFile(path string, b []byte, groups Groups) (*SnapFile, error) {
	bad := func(what string) error { return fmt.Errorf("replica: snapshot %s: %s", path, what) }
	if len(b) < len(fileMagic)+12 {
		return nil, bad("not a snapshot file")
	}
	magic := string(b[:len(fileMagic)])
	if magic != fileMagic && magic != fileMagicV1 {
		return nil, bad("not a snapshot file")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, bad("fails its checksum")
	}
	rest := body[len(fileMagic):]
	chunk := func() []byte {
		if len(rest) < 4 {
			rest = nil
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
	f := &SnapFile{Archive: groups.ArchiveA}
	mj := chunk()
	if magic == fileMagic && len(rest) >= 9 {
		f.Archive = binary.BigEndian.Uint64(rest)
		f.Received = rest[8]&fileFlagRcv != 0
		rest = rest[9:]
	} else if magic == fileMagic {
		rest = nil
	}
	f.State = chunk()
	if mj == nil || f.State == nil || len(rest) != 0 {
		return nil, bad("is truncated")
	}
	if !groups.isArchive(f.Archive) {
		return nil, bad(fmt.Sprintf("names group %d as its archive", f.Archive))
	}
	if err := json.Unmarshal(mj, &f.Meta); err != nil {
		return nil, bad(err.Error())
	}
	var err error
	if f.Floor, f.RecordBytes, err = stateLedger(f.State); err != nil {
		return nil, bad(err.Error())
	}
	f.Meta.Size = f.streamSize()
	return f, nil
}

func (s *SnapStore) path(id string) string { return filepath.Join(s.dir, id+SnapSuffix) }

func (s *SnapStore) readFile(id string) (*SnapFile, error) {
	path := s.path(id)
	b, err := readFileFS(s.fs, path)
	if err != nil {
		return nil, fmt.Errorf("replica: read snapshot %s: %w", path, err)
	}
	return decodeSnapFile(path, b, s.groups)
}

// readFileFS reads a whole file.
func readFileFS(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	if n > maxStateSize+1<<20 {
		return nil, fmt.Errorf("replica: %s: %d bytes is too large for a snapshot file", path, n)
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// List implements raft.SnapshotStore: newest first.
func (s *SnapStore) List() ([]*raft.SnapshotMeta, error) {
	files, err := s.Files()
	if err != nil {
		return nil, err
	}
	metas := make([]*raft.SnapshotMeta, len(files))
	for i, f := range files {
		metas[i] = &f.Meta
	}
	return metas, nil
}

// ReadSnapFiles returns the snapshot files in dir, newest first, for a
// log whose groups are groups, without opening a store: a file that does
// not read is an error.
func ReadSnapFiles(fs vfs.FS, dir string, groups Groups) ([]*SnapFile, error) {
	s := &SnapStore{fs: fs, dir: dir, groups: groups, logger: hclog.NewNullLogger()}
	return s.ReadFiles(true)
}

// Files returns the readable snapshots, newest first, skipping the others
// with a warning.
func (s *SnapStore) Files() ([]*SnapFile, error) { return s.ReadFiles(false) }

// ReadFiles returns the snapshots, newest first. A file that does not
// read is an error when strict is set, and skipped otherwise.
func (s *SnapStore) ReadFiles(strict bool) ([]*SnapFile, error) {
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("replica: list snapshots: %w", err)
	}
	var files []*SnapFile
	for _, name := range names {
		id, ok := strings.CutSuffix(name, SnapSuffix)
		if !ok {
			continue
		}
		f, err := s.readFile(id)
		if err != nil {
			if strict {
				return nil, err
			}
			s.logger.Warn("skipping unreadable snapshot", "error", err)
			continue
		}
		files = append(files, f)
	}
	sort.Slice(files, func(i, j int) bool { return newer(files[i], files[j]) })
	return files, nil
}

// newer orders snapshots newest first: by index, then term, then ID (the
// same snapshot received again: the later copy first, as IDs end in the
// creation time in milliseconds).
func newer(a, b *SnapFile) bool {
	if a.Meta.Index != b.Meta.Index {
		return a.Meta.Index > b.Meta.Index
	}
	if a.Meta.Term != b.Meta.Term {
		return a.Meta.Term > b.Meta.Term
	}
	return a.Meta.ID > b.Meta.ID
}

// Open implements raft.SnapshotStore. The reader yields the state and then
// the retained records, read from the log only if the reader gets that far
// (FSM.Restore stops after the state).
func (s *SnapStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	f, err := s.readFile(id)
	if err != nil {
		return nil, nil, err
	}
	meta := f.Meta
	hdr := appendStreamHeaderFlags(nil, f.State, flagRecords)
	rs := &recordStream{view: s.view, next: f.Floor, last: meta.Index, want: f.RecordBytes}
	return &meta, readCloser{io.MultiReader(bytes.NewReader(hdr), rs)}, nil
}

type readCloser struct{ io.Reader }

func (readCloser) Close() error { return nil }

// recordStream reads the command entries of [next, last] and encodes them,
// then the end marker. It fails if their size differs from want, which
// would break the size raft announced.
type recordStream struct {
	view       *LogView
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
		if err := r.view.GetLog(r.next, &l); err != nil {
			return fmt.Errorf("replica: snapshot stream at index %d: %w", r.next, err)
		}
		r.next++
		if l.Type != raft.LogCommand {
			continue
		}
		r.sent += StreamRecordSize(len(l.Data))
		r.records++
		r.buf = appendStreamRecord(r.buf[:len(r.buf):len(r.buf)], &l)
	}
	if r.next > r.last {
		if r.sent != r.want {
			return fmt.Errorf("replica: snapshot stream holds %d record bytes, its ledger says %d", r.sent, r.want)
		}
		r.buf = appendStreamEnd(r.buf, r.records)
		r.done = true
	}
	return nil
}
