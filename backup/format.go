package backup

// The backup file format. Everything in this file is wire format: backup
// files outlive the program that wrote them, so constants here never
// change meaning; a new layout gets a new Version. Integers are
// big-endian.
//
//	file   = header | frame(log) | frame(state) | frame(entries)* | frame(end) | EOF
//
// (Version 1 files, written before named logs, have no log frame: they are
// backups of the default log, whose settings they do not record.)
//
// The header, 52 bytes:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+---------------------------------------------------------------+
//	|                                                               |  0
//	+                     magic "RLBACKUP"                          +
//	|                                                               |  4
//	+---------------------------------------------------------------+
//	|                    version = 2 (or 1)                         |  8
//	+---------------------------------------------------------------+
//	|                  flags = 0 (none defined)                     | 12
//	+---------------------------------------------------------------+
//	|     index: the last raft index the backup covers (u64)        | 16
//	+---------------------------------------------------------------+
//	|     term: the term of the entry at index (u64)                | 24
//	+---------------------------------------------------------------+
//	|     floor: the first retained index (u64)                     | 32
//	+---------------------------------------------------------------+
//	|     created: when the backup began, Unix nanoseconds (i64)    | 40
//	+---------------------------------------------------------------+
//	|     CRC-32C of bytes [0, 48)                                  | 48
//	+---------------------------------------------------------------+
//
// (each u64 row is 8 bytes wide.) A frame is a 13-byte frame header and a
// payload:
//
//	+-------+-----------------+------------------+------------------+----------+
//	| type  | length u32      | CRC-32C(payload) | CRC-32C of the   | payload  |
//	| u8    | of the payload  | u32              | 9 bytes before   | (length) |
//	+-------+-----------------+------------------+------------------+----------+
//
// Frame types and payloads:
//
//	4 log      the log backed up: name length u8 | name | replicas u32 |
//	           retention bytes u64 | retention age i64 (ns); 0: no bound
//	1 state    the state machine's state as of index, opaque here (the
//	           node's own encoding, which carries its own version)
//	2 entries  one or more entries: index u64 | term u64 |
//	           appendedAt i64 (Unix ns) | length u32 | data
//	3 end      entries u64 | data bytes u64 | CRC-32C of every byte of the
//	           file before the end frame (u32)
//
// Rules a reader enforces: in version 2, exactly one log frame, first;
// exactly one state frame, first after it; entries in
// increasing index order within [floor, index], with terms in [1, term];
// one end frame, last, whose counts and file checksum match; nothing
// after it. The frame header has a checksum of its own, so that a damaged
// length reads as damage (ErrCorrupt) rather than as a file cut short
// (ErrTruncated).
//
// Entries are the log's command entries as the node stores them (each
// record an append, trims and the members' addresses too): their data is
// opaque here. The indexes between them hold raft's own entries
// (elections, configuration changes), which a backup leaves out.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
)

// Wire format constants.
const (
	// Magic starts every backup file.
	Magic = "RLBACKUP"
	// Version is the format version written here. Version 1, without the
	// log frame, is read too.
	Version = 2
	// version1 is the format before named logs: no log frame.
	version1 = 1
	// HeaderSize is the size of the file header.
	HeaderSize = 52
	// frameHeaderSize is the size of a frame's header.
	frameHeaderSize = 13
	// entryHeaderSize is the size of an entry's fixed fields.
	entryHeaderSize = 28
	// endPayloadSize is the size of the end frame's payload.
	endPayloadSize = 20
	// logFixedSize is the size of a log frame's payload besides the name.
	logFixedSize = 1 + 4 + 8 + 8
	// maxLogName is the longest log name a log frame holds.
	maxLogName = 64
	// MaxFramePayload bounds a frame's payload: a state of up to 1 GiB,
	// or an entry of up to 1 GiB with its fixed fields.
	MaxFramePayload = 1<<30 + 1<<10

	frameState   byte = 1
	frameEntries byte = 2
	frameEnd     byte = 3
	frameLog     byte = 4
)

// DefaultLog is the name of the default log, the one a version 1 file is
// a backup of.
const DefaultLog = "default"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is what a backup file says about itself before its contents.
type Header struct {
	// Version is the format version (Version).
	Version uint32
	// Index is the last raft index the backup covers: the state is as of
	// it, and every retained entry up to it is in the file.
	Index uint64
	// Term is the raft term of the entry at Index.
	Term uint64
	// Floor is the first retained index: the entries of the file lie in
	// [Floor, Index].
	Floor uint64
	// Created is when the node began the backup.
	Created time.Time
	// Log is the log the backup was taken of; a version 1 file's is the
	// default log, without its settings.
	Log Source
}

// Source describes the log a backup was taken of, as its cluster's
// catalog recorded it when the backup began.
type Source struct {
	// Name is the log's name; DefaultLog for the default log.
	Name string
	// Replicas is how many nodes held the log (for the default log, its
	// voters); 0 in a version 1 file.
	Replicas uint32
	// RetentionBytes and RetentionAge are the log's retention; 0: no
	// bound (or, in a version 1 file, not recorded).
	RetentionBytes uint64
	RetentionAge   time.Duration
}

// Entry is one command entry of the log.
type Entry struct {
	// Index is the entry's raft index, its position in the log.
	Index uint64
	// Term is the raft term it was appended in.
	Term uint64
	// AppendedAt is when the leader appended it, in Unix nanoseconds.
	AppendedAt int64
	// Data is the entry's command, as the node stores it.
	Data []byte
}

// Summary is what the end frame of a file counts.
type Summary struct {
	// Entries is the number of entries in the file.
	Entries uint64
	// DataBytes is the size of their data.
	DataBytes uint64
	// Size is the size of the whole file.
	Size int64
	// Checksum is the CRC-32C of every byte of the file before the end
	// frame, which the end frame carries: with the header, it names the
	// file's content (a restored cluster's id is derived from them, see
	// package node). 0 until the end frame has been read.
	Checksum uint32
}

// appendHeader appends the encoding of h, of format version.
func appendHeader(dst []byte, h Header, version uint32) []byte {
	start := len(dst)
	dst = append(dst, Magic...)
	dst = binary.BigEndian.AppendUint32(dst, version)
	dst = binary.BigEndian.AppendUint32(dst, 0)
	dst = binary.BigEndian.AppendUint64(dst, h.Index)
	dst = binary.BigEndian.AppendUint64(dst, h.Term)
	dst = binary.BigEndian.AppendUint64(dst, h.Floor)
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.Created.UnixNano()))
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// decodeHeader decodes a header of HeaderSize bytes. The magic is checked
// first (a file that is no backup), then the version and flags (one this
// reader cannot read), then the checksum, then the fields' sense.
func decodeHeader(b []byte) (Header, error) {
	if string(b[:len(Magic)]) != Magic {
		return Header{}, fmt.Errorf("%w: it does not start with %q", ErrNotBackup, Magic)
	}
	h := Header{Version: binary.BigEndian.Uint32(b[8:])}
	flags := binary.BigEndian.Uint32(b[12:])
	if (h.Version != Version && h.Version != version1) || flags != 0 {
		return Header{}, fmt.Errorf("%w: format version %d, flags %#x; this program reads versions %d to %d without flags (a backup written by a newer raftlog, or a damaged header)",
			ErrUnsupportedVersion, h.Version, flags, version1, Version)
	}
	if crc32.Checksum(b[:48], castagnoli) != binary.BigEndian.Uint32(b[48:]) {
		return Header{}, fmt.Errorf("%w: the header fails its checksum", ErrCorrupt)
	}
	h.Index = binary.BigEndian.Uint64(b[16:])
	h.Term = binary.BigEndian.Uint64(b[24:])
	h.Floor = binary.BigEndian.Uint64(b[32:])
	h.Created = time.Unix(0, int64(binary.BigEndian.Uint64(b[40:])))
	if err := h.check(); err != nil {
		return Header{}, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	return h, nil
}

// check reports a header whose fields cannot describe a log.
func (h Header) check() error {
	switch {
	case h.Index == 0 || h.Term == 0:
		return fmt.Errorf("index %d, term %d: both must be at least 1", h.Index, h.Term)
	case h.Floor == 0 || h.Floor > h.Index+1:
		return fmt.Errorf("floor %d outside [1, index+1 = %d]", h.Floor, h.Index+1)
	}
	return nil
}

// appendFrameHeader appends the header of a frame of type typ whose
// payload is payload.
func appendFrameHeader(dst []byte, typ byte, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, typ)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.BigEndian.AppendUint32(dst, crc32.Checksum(payload, castagnoli))
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// frameHeader is a decoded frame header.
type frameHeader struct {
	typ    byte
	length uint32
	sum    uint32 // the payload's checksum
}

// decodeFrameHeader decodes a frame header of frameHeaderSize bytes.
func decodeFrameHeader(b []byte) (frameHeader, error) {
	if crc32.Checksum(b[:9], castagnoli) != binary.BigEndian.Uint32(b[9:]) {
		return frameHeader{}, fmt.Errorf("%w: frame header fails its checksum", ErrCorrupt)
	}
	f := frameHeader{typ: b[0], length: binary.BigEndian.Uint32(b[1:]), sum: binary.BigEndian.Uint32(b[5:])}
	switch {
	case f.typ != frameState && f.typ != frameEntries && f.typ != frameEnd && f.typ != frameLog:
		return frameHeader{}, fmt.Errorf("%w: frame type %d", ErrCorrupt, f.typ)
	case f.length > MaxFramePayload:
		return frameHeader{}, fmt.Errorf("%w: frame of %d bytes, more than the %d a frame may hold", ErrCorrupt, f.length, MaxFramePayload)
	case f.typ == frameEnd && f.length != endPayloadSize:
		return frameHeader{}, fmt.Errorf("%w: end frame of %d bytes, want %d", ErrCorrupt, f.length, endPayloadSize)
	case f.typ == frameEntries && f.length < entryHeaderSize:
		return frameHeader{}, fmt.Errorf("%w: entries frame of %d bytes holds no entry", ErrCorrupt, f.length)
	}
	return f, nil
}

// appendLog appends a log frame's payload.
func appendLog(dst []byte, s Source) []byte {
	dst = append(dst, byte(len(s.Name)))
	dst = append(dst, s.Name...)
	dst = binary.BigEndian.AppendUint32(dst, s.Replicas)
	dst = binary.BigEndian.AppendUint64(dst, s.RetentionBytes)
	return binary.BigEndian.AppendUint64(dst, uint64(s.RetentionAge))
}

// decodeLog decodes a log frame's payload.
func decodeLog(b []byte) (Source, error) {
	if len(b) < logFixedSize || len(b) != logFixedSize+int(b[0]) {
		return Source{}, fmt.Errorf("a log frame of %d bytes", len(b))
	}
	n := int(b[0])
	s := Source{Name: string(b[1 : 1+n])}
	b = b[1+n:]
	s.Replicas = binary.BigEndian.Uint32(b)
	s.RetentionBytes = binary.BigEndian.Uint64(b[4:])
	s.RetentionAge = time.Duration(binary.BigEndian.Uint64(b[12:]))
	return s, s.check()
}

// check reports a Source that cannot describe a log.
func (s Source) check() error {
	switch {
	case s.Name == "" || len(s.Name) > maxLogName:
		return fmt.Errorf("log name of %d bytes, want 1 to %d", len(s.Name), maxLogName)
	case s.RetentionAge < 0:
		return fmt.Errorf("log %q: retention age %v", s.Name, s.RetentionAge)
	}
	return nil
}

// appendEntry appends the encoding of e to an entries payload.
func appendEntry(dst []byte, e Entry) []byte {
	dst = binary.BigEndian.AppendUint64(dst, e.Index)
	dst = binary.BigEndian.AppendUint64(dst, e.Term)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.AppendedAt))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(e.Data)))
	return append(dst, e.Data...)
}

// entrySize is the encoded size of an entry of n data bytes.
func entrySize(n int) int { return entryHeaderSize + n }

// decodeEntry decodes the entry at the start of an entries payload and
// returns it (its data aliasing b) and the rest.
func decodeEntry(b []byte) (Entry, []byte, error) {
	if len(b) < entryHeaderSize {
		return Entry{}, nil, fmt.Errorf("%w: %d bytes left in an entries frame, fewer than an entry's header", ErrCorrupt, len(b))
	}
	e := Entry{
		Index:      binary.BigEndian.Uint64(b),
		Term:       binary.BigEndian.Uint64(b[8:]),
		AppendedAt: int64(binary.BigEndian.Uint64(b[16:])),
	}
	n := binary.BigEndian.Uint32(b[24:])
	if uint64(n) > uint64(len(b)-entryHeaderSize) {
		return Entry{}, nil, fmt.Errorf("%w: entry at index %d of %d bytes overruns its frame", ErrCorrupt, e.Index, n)
	}
	e.Data = b[entryHeaderSize : entryHeaderSize+int(n) : entryHeaderSize+int(n)]
	return e, b[entryHeaderSize+int(n):], nil
}

// appendEnd appends the end frame's payload.
func appendEnd(dst []byte, s Summary, fileSum uint32) []byte {
	dst = binary.BigEndian.AppendUint64(dst, s.Entries)
	dst = binary.BigEndian.AppendUint64(dst, s.DataBytes)
	return binary.BigEndian.AppendUint32(dst, fileSum)
}

// decodeEnd decodes the end frame's payload of endPayloadSize bytes.
func decodeEnd(b []byte) (s Summary, fileSum uint32) {
	return Summary{Entries: binary.BigEndian.Uint64(b), DataBytes: binary.BigEndian.Uint64(b[8:])}, binary.BigEndian.Uint32(b[16:])
}
