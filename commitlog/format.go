package commitlog

// The record format. Everything in this file is wire format: the bytes it
// describes outlive the program that wrote them, so constants here never
// change meaning; a new layout gets a new version.
//
// A segment is a sequence of records and, at most once, a filler at its end.
// Every record starts with a 32-byte header, all integers little-endian:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+---------------------------------------------------------------+
//	|                 CRC-32C of bytes [4, 32+length)               |  0
//	+---------------------------------------------------------------+
//	|                     length of the payload                     |  4
//	+-------------------------------+---------------+---------------+
//	|        magic 0x4C52 "RL"      |  version = 1  |     kind      |  8
//	+-------------------------------+---------------+---------------+
//	|                                                               | 12
//	+       position: logical offset of this header in the log      +
//	|                                                               | 16
//	+---------------------------------------------------------------+
//	|                                                               | 20
//	+            store timestamp, Unix nanoseconds (int64)          +
//	|                                                               | 24
//	+---------------------------------------------------------------+
//	|            epoch: log generation that wrote the record        | 28
//	+---------------------------------------------------------------+
//	|                 payload (length bytes) ...                    | 32
//	+---------------------------------------------------------------+
//
// kind is 1 for a record and 2 for a filler. The epoch starts at 1 and goes
// up by one at every suffix truncation and every recovery from a crash; the
// checkpoint file records the current epoch and the position where it began.
// Recovery accepts at and past that position only records of the current
// epoch, so bytes left behind past a truncation point or a torn tail, which
// carry an older epoch, can never be taken for new records.
//
// A filler marks the rest of its segment as unused because the next record
// did not fit; its length is the number of bytes that follow its header up
// to the end of the segment, and its CRC covers only its header. When fewer than 32 bytes are left in a
// segment no filler is written and readers skip to the next segment.
//
// Why zeroed or stale bytes never decode as a record: zeroed bytes fail the
// magic check; a record left behind by an earlier layout fails because its
// position field, covered by the CRC, names another offset, or because its
// epoch is older than the current one. Any other garbage must match the
// magic, the version, the position and a 32-bit CRC at once.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

const (
	// HeaderSize is the size of a record header in bytes.
	HeaderSize = 32
	// FormatVersion is the version of the record layout written here.
	FormatVersion = 1

	recordMagic uint16 = 0x4C52 // "RL" little-endian
	kindRecord  byte   = 1
	kindFiller  byte   = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is a decoded record header.
type header struct {
	length    uint32
	kind      byte
	position  int64
	timestamp int64
	epoch     uint32
}

// Reasons a header fails to decode. They are wrapped into ErrCorrupt by the
// callers, which know the file and offset.
var (
	errNoMagic    = errors.New("no record magic")
	errVersion    = errors.New("unknown record format version")
	errKind       = errors.New("unknown record kind")
	errEpoch      = errors.New("record from an older epoch")
	errPosition   = errors.New("record belongs to another position")
	errLength     = errors.New("record length runs past the end of its segment")
	errChecksum   = errors.New("checksum mismatch")
	errShortBytes = errors.New("fewer bytes than a record header")
)

// putHeader encodes the header of a record (or filler) into b[:HeaderSize],
// leaving the CRC field zero.
func putHeader(b []byte, h header) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint32(b[0:4], 0)
	binary.LittleEndian.PutUint32(b[4:8], h.length)
	binary.LittleEndian.PutUint16(b[8:10], recordMagic)
	b[10] = FormatVersion
	b[11] = h.kind
	binary.LittleEndian.PutUint64(b[12:20], uint64(h.position))
	binary.LittleEndian.PutUint64(b[20:28], uint64(h.timestamp))
	binary.LittleEndian.PutUint32(b[28:32], h.epoch)
}

// encodeRecord writes a complete record for payload, stored at position
// with timestamp ts in the given epoch, into b, which must hold HeaderSize+len(payload) bytes.
// It returns the number of bytes written. It is gather.record with every
// byte copied into b.
func encodeRecord(b []byte, position, ts int64, epoch uint32, payload []byte) int {
	g := gather{b: b}
	g.record(0, position, ts, epoch, [][]byte{payload})
	return HeaderSize + len(payload)
}

// encodeFiller writes a filler header at position into b; rest is the
// number of bytes after the header up to the end of the segment.
func encodeFiller(b []byte, position int64, epoch uint32, rest uint32) {
	putHeader(b, header{length: rest, kind: kindFiller, position: position, epoch: epoch})
	binary.LittleEndian.PutUint32(b[0:4], crc32.Checksum(b[4:HeaderSize], castagnoli))
}

// decodeHeader checks the fixed part of the header in b, which was read at
// position and has room left bytes before the end of its segment (counting
// the header itself). It does not check the CRC.
func decodeHeader(b []byte, position int64, room int64) (header, error) {
	if len(b) < HeaderSize {
		return header{}, errShortBytes
	}
	if binary.LittleEndian.Uint16(b[8:10]) != recordMagic {
		return header{}, errNoMagic
	}
	if b[10] != FormatVersion {
		return header{}, fmt.Errorf("%w %d", errVersion, b[10])
	}
	h := header{
		length:    binary.LittleEndian.Uint32(b[4:8]),
		kind:      b[11],
		position:  int64(binary.LittleEndian.Uint64(b[12:20])),
		timestamp: int64(binary.LittleEndian.Uint64(b[20:28])),
		epoch:     binary.LittleEndian.Uint32(b[28:32]),
	}
	if h.kind != kindRecord && h.kind != kindFiller {
		return header{}, fmt.Errorf("%w %d", errKind, h.kind)
	}
	if h.epoch == 0 {
		return header{}, errEpoch
	}
	if h.position != position {
		return header{}, fmt.Errorf("%w (%d)", errPosition, h.position)
	}
	if int64(h.length)+HeaderSize > room {
		return header{}, errLength
	}
	if h.kind == kindFiller && int64(h.length) != room-HeaderSize {
		return header{}, errLength
	}
	return h, nil
}

// checkRecord verifies the CRC of the record or filler whose header h was
// decoded from b; b must hold the whole record for kind record, and at
// least the header for a filler.
func checkRecord(b []byte, h header) error {
	n := HeaderSize
	if h.kind == kindRecord {
		n += int(h.length)
	}
	if len(b) < n {
		return errShortBytes
	}
	if crc32.Checksum(b[4:n], castagnoli) != binary.LittleEndian.Uint32(b[0:4]) {
		return errChecksum
	}
	return nil
}

// decodeRecord decodes and verifies the record or filler at the start of b,
// which was read at position and has room bytes before its segment ends. The
// returned payload aliases b.
func decodeRecord(b []byte, position int64, room int64) (header, []byte, error) {
	h, err := decodeHeader(b, position, room)
	if err != nil {
		return header{}, nil, err
	}
	if err := checkRecord(b, h); err != nil {
		return header{}, nil, err
	}
	if h.kind == kindFiller {
		return h, nil, nil
	}
	return h, b[HeaderSize : HeaderSize+int(h.length)], nil
}

// recordSize is the number of bytes a record with an n-byte payload takes.
func recordSize(n int) int64 { return HeaderSize + int64(n) }
