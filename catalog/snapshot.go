package catalog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
)

// Snapshot format (wire format: a catalog snapshot is stored by raft and
// sent to nodes that fall behind):
//
//	snapshot = magic "RLCATSNP" | version u8 | length u32 | body | crc32c u32
//	body     = catalog                 (version 1)
//	         | catalog | cluster id    (version 2)
//	catalog  = uint index | uint started (0 or 1) | uint next id
//	           | uint node count | node* | uint log count | log*
//	log      = string name | uint id | settings | uint state | strings members
//	           | strings initial | string joining | string leaving
//	           | strings dropped | uint version
//
// length is the body's length; the CRC-32C (Castagnoli) covers version,
// length and body. Fixed-width integers are big-endian; the body is in the
// primitives of codec.go. Nodes are in increasing id order, logs in
// increasing id order, so the same catalog always gives the same bytes.
//
// Versions. A catalog without a cluster id is written as version 1, byte
// for byte as before version 2 existed, so that a node of an earlier
// release (which reads version 1 only) reads it. A catalog with a cluster
// id is written as version 2: the version-1 body followed by the id's 16
// bytes, never the zero id. ReadSnapshot reads both; a version-2 body
// without its 16 id bytes, with bytes after them, or with the zero id is
// refused (ErrMalformed). An earlier release refuses a version-2 snapshot
// (ErrUnsupported), as it refuses the SetClusterID command that gives a
// catalog its id: that command is proposed only once every node runs a
// release that knows it.
const (
	snapshotMagic = "RLCATSNP"
	// SnapshotVersion is the newest snapshot format: version 2, which this
	// code writes for a catalog with a cluster id. A catalog without one is
	// written as version 1, which earlier releases read. ReadSnapshot reads
	// versions 1 and 2. Wire format.
	SnapshotVersion = snapshotV2
	// snapshotV1 is the format of a catalog without a cluster id. Wire
	// format.
	snapshotV1 byte = 1
	// snapshotV2 is the format of a catalog with a cluster id: version 1's
	// body, then the id. Wire format.
	snapshotV2     byte = 2
	snapshotHeader      = len(snapshotMagic) + 1 + 4
	// MaxSnapshotBody is the largest snapshot body read, a bound on what a
	// damaged length can make Restore allocate. A catalog of 100,000 logs
	// takes about 10 MiB.
	MaxSnapshotBody = 256 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// AppendSnapshot appends the snapshot of s to dst: version 1 if s has no
// cluster id, version 2 if it has one.
func AppendSnapshot(dst []byte, s *State) []byte {
	w := &writer{}
	w.uint(s.index)
	if s.started {
		w.uint(1)
	} else {
		w.uint(0)
	}
	w.uint(s.nextID)
	ids := s.nodeIDs()
	w.uint(uint64(len(ids)))
	for _, id := range ids {
		w.node(s.nodes[id])
	}
	lids := s.logIDs()
	w.uint(uint64(len(lids)))
	for _, id := range lids {
		l := s.logs[id]
		w.string(l.Name)
		w.uint(l.ID)
		w.settings(l.Settings)
		w.uint(uint64(l.State))
		w.strings(l.Members)
		w.strings(l.Initial)
		w.string(l.Joining)
		w.string(l.Leaving)
		w.strings(l.Dropped)
		w.uint(l.Version)
	}
	version := snapshotV1
	if !s.clusterID.IsZero() {
		version = snapshotV2
		w.clusterID(s.clusterID)
	}
	start := len(dst)
	dst = append(dst, snapshotMagic...)
	dst = append(dst, version)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(w.b)))
	dst = append(dst, w.b...)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start+len(snapshotMagic):], crcTable))
}

// ReadSnapshot reads a snapshot that AppendSnapshot wrote, and nothing
// after it: trailing bytes are an error. It checks the magic, version (1
// or 2), length and checksum, decodes the catalog, and checks its invariants
// (valid names, unique ids, members that are distinct catalog nodes, a
// consistent move), so that a catalog it returns applies commands as one
// built by commands would.
func ReadSnapshot(r io.Reader) (*State, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(snapshotHeader+MaxSnapshotBody+4+1)))
	if err != nil {
		return nil, fmt.Errorf("catalog: read snapshot: %w", err)
	}
	return decodeSnapshot(b)
}

func decodeSnapshot(b []byte) (*State, error) {
	if len(b) < snapshotHeader+4 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a snapshot's header and checksum", ErrCorrupt, len(b))
	}
	if string(b[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("%w: no snapshot magic", ErrCorrupt)
	}
	version := b[len(snapshotMagic)]
	if version != snapshotV1 && version != snapshotV2 {
		return nil, fmt.Errorf("%w: snapshot version %d, this node reads versions %d and %d", ErrUnsupported, version, snapshotV1, snapshotV2)
	}
	n := binary.BigEndian.Uint32(b[len(snapshotMagic)+1:])
	if n > MaxSnapshotBody {
		return nil, fmt.Errorf("%w: snapshot body length %d exceeds %d", ErrCorrupt, n, MaxSnapshotBody)
	}
	if want := snapshotHeader + int(n) + 4; len(b) != want {
		return nil, fmt.Errorf("%w: snapshot of %d bytes, its header says %d", ErrCorrupt, len(b), want)
	}
	end := snapshotHeader + int(n)
	if sum, want := crc32.Checksum(b[len(snapshotMagic):end], crcTable), binary.BigEndian.Uint32(b[end:]); sum != want {
		return nil, fmt.Errorf("%w: snapshot checksum %08x, computed %08x", ErrCorrupt, want, sum)
	}
	s, err := decodeState(b[snapshotHeader:end], version)
	if err != nil {
		return nil, fmt.Errorf("catalog: snapshot: %w", err)
	}
	return s, nil
}

// decodeState decodes and checks the body of a snapshot of version
// version (1 or 2).
func decodeState(b []byte, version byte) (*State, error) {
	r := &reader{b: b}
	s := &State{nodes: map[string]*Node{}, logs: map[uint64]*Log{}, byName: map[string]uint64{}}
	s.index = r.uint()
	switch r.uint() {
	case 0:
	case 1:
		s.started = true
	default:
		r.fail("started flag out of range")
	}
	s.nextID = r.uint()
	var prevNode string
	nn := r.count(4)
	for i := 0; i < nn && r.err == nil; i++ {
		n := r.node()
		if r.err != nil {
			break
		}
		if i > 0 && n.ID <= prevNode {
			return nil, fmt.Errorf("%w: node %q out of order", ErrMalformed, n.ID)
		}
		prevNode = n.ID
		if err := validateNode(n.ID, n.RaftAddr, n.ClientAddr); err != nil {
			return nil, err
		}
		if n.State != NodeActive && n.State != NodeLeaving {
			return nil, fmt.Errorf("%w: node %q in state %v", ErrMalformed, n.ID, n.State)
		}
		s.nodes[n.ID] = n
	}
	var prevLog uint64
	nl := r.count(8)
	for i := 0; i < nl && r.err == nil; i++ {
		l := &Log{Name: r.string(MaxNameLen), ID: r.uint(), Settings: r.settings()}
		st := r.uint()
		if st > math.MaxUint8 {
			r.fail("log state out of range")
		}
		l.State = LogState(st)
		l.Members = r.strings(MaxNodeIDLen)
		l.Initial = r.strings(MaxNodeIDLen)
		l.Joining = r.string(MaxNodeIDLen)
		l.Leaving = r.string(MaxNodeIDLen)
		l.Dropped = r.strings(MaxNodeIDLen)
		l.Version = r.uint()
		if r.err != nil {
			break
		}
		if i > 0 && l.ID < prevLog {
			return nil, fmt.Errorf("%w: log id %d out of order", ErrMalformed, l.ID)
		}
		prevLog = l.ID
		if _, dup := s.logs[l.ID]; dup {
			return nil, fmt.Errorf("%w: log id %d twice", ErrMalformed, l.ID)
		}
		if _, dup := s.byName[l.Name]; dup {
			return nil, fmt.Errorf("%w: log name %q twice", ErrMalformed, l.Name)
		}
		if err := s.checkLog(l); err != nil {
			return nil, fmt.Errorf("%w: log %q (id %d): %v", ErrMalformed, l.Name, l.ID, err)
		}
		s.logs[l.ID] = l
		s.byName[l.Name] = l.ID
	}
	if version == snapshotV2 {
		s.clusterID = r.clusterID()
	}
	r.end()
	if r.err != nil {
		return nil, r.err
	}
	if version == snapshotV2 && s.clusterID.IsZero() {
		return nil, fmt.Errorf("%w: a version %d snapshot with the zero cluster id (a catalog without an id is written as version %d)", ErrMalformed, snapshotV2, snapshotV1)
	}
	def, ok := s.logs[DefaultID]
	switch {
	case !ok || def.Name != DefaultName:
		return nil, fmt.Errorf("%w: no log %q with id %d", ErrMalformed, DefaultName, DefaultID)
	case !s.started && len(def.Members) > 0:
		return nil, fmt.Errorf("%w: the catalog has not started but the default log has members", ErrMalformed)
	case s.nextID == 0 || s.nextID > MaxLogID+1:
		return nil, fmt.Errorf("%w: next log id %d out of range", ErrMalformed, s.nextID)
	}
	return s, nil
}

// checkLog checks the invariants of a log read from a snapshot against
// the nodes read before it.
func (s *State) checkLog(l *Log) error {
	if err := ValidateName(l.Name); err != nil {
		return err
	}
	if (l.ID == DefaultID) != (l.Name == DefaultName) {
		return fmt.Errorf("only the log with id %d may be named %q", DefaultID, DefaultName)
	}
	if l.ID != DefaultID && l.ID >= s.nextID {
		return fmt.Errorf("id at or above the next id %d", s.nextID)
	}
	if l.State != LogActive && l.State != LogDeleting {
		return fmt.Errorf("state %v", l.State)
	}
	if l.ID == DefaultID {
		if l.State != LogActive || l.Settings.Replicas != len(l.Members) && len(l.Members) > 0 {
			return fmt.Errorf("default log with state %v and %d replicas for %d members", l.State, l.Settings.Replicas, len(l.Members))
		}
		if err := validateRetention(l.Settings); err != nil {
			return err
		}
	} else {
		if err := ValidateSettings(l.Settings); err != nil {
			return err
		}
		if len(l.Members) != l.Settings.Replicas {
			return fmt.Errorf("%d members for %d replicas", len(l.Members), l.Settings.Replicas)
		}
	}
	for _, set := range [][]string{l.Members, l.Initial} {
		if err := distinct(set); err != nil {
			return err
		}
		for _, m := range set {
			if _, ok := s.nodes[m]; !ok {
				return fmt.Errorf("node %q is not in the catalog", m)
			}
		}
	}
	if (l.Joining == "") != (l.Leaving == "") {
		return fmt.Errorf("a move with joining %q and leaving %q", l.Joining, l.Leaving)
	}
	if l.Joining != "" {
		rebuild := l.Rebuilding() && l.Lost(l.Joining)
		if _, ok := s.nodes[l.Joining]; !ok || slices.Contains(l.Members, l.Joining) && !rebuild || !slices.Contains(l.Members, l.Leaving) || l.Initial != nil {
			return fmt.Errorf("a move of %q to %q that does not fit members %v", l.Leaving, l.Joining, l.Members)
		}
	}
	for _, d := range l.Dropped {
		if l.State == LogActive && !slices.Contains(l.Members, d) {
			return fmt.Errorf("lost replica on %q, which is not a member", d)
		}
	}
	if !slices.IsSorted(l.Dropped) || distinct(l.Dropped) != nil {
		return fmt.Errorf("dropped replicas %v not sorted and distinct", l.Dropped)
	}
	for _, d := range l.Dropped {
		if !l.HostedBy(d) {
			return fmt.Errorf("dropped replica on %q, which does not host the log", d)
		}
	}
	if l.Version == 0 {
		return fmt.Errorf("version 0")
	}
	return nil
}

// Equal reports whether a and b hold the same catalog, applied index
// included.
func Equal(a, b *State) bool {
	return bytes.Equal(AppendSnapshot(nil, a), AppendSnapshot(nil, b))
}
