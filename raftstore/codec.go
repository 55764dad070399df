package raftstore

// The payload of every commit-log record raftstore writes. This is wire
// format: it outlives the program, so kinds and flags never change meaning.
//
//	entry record (kind 1): one raft.Log of one group
//	+------+-------+-------+------+------+-------+----------+-----------------+
//	| kind | group | index | term | type | flags | [commit] | appendedAt sec  |
//	| 1 B  | uvar  | uvar  | uvar | 1 B  | 1 B   | uvar     | varint          |
//	+------+-------+-------+------+------+-------+----------+-----------------+
//	| appendedAt nsec | len(data) | data ... | len(extensions) | extensions... |
//	| uvar            | uvar      |          | uvar            |               |
//	+-----------------+-----------+----------+-----------------+---------------+
//
//	flags: bit 0 = last entry of its StoreLogs batch; bit 1 = a staged
//	commit index follows (only on the last entry of a batch).
//
//	delete-range record (kind 2): DeleteRange(min, max) of one group
//	+------+-------+-----+-----+
//	| kind | group | min | max |
//	| 1 B  | uvar  | uvar| uvar|
//	+------+-------+-----+-----+
//
// The commit log's record header already carries a CRC-32C over the whole
// payload, so none is repeated here. A batch is visible only once its last
// entry (flag bit 0) is on disk: recovery drops a trailing batch that lacks
// it, so a partially written StoreLogs never becomes visible.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

const (
	kindEntry       byte = 1
	kindDeleteRange byte = 2

	flagBatchEnd  byte = 1 << 0
	flagHasCommit byte = 1 << 1
	knownFlags         = flagBatchEnd | flagHasCommit
)

var errShortRecord = errors.New("raftstore: record payload too short")

// entryHeaderMax bounds the encoded size of an entry without its data and
// extensions.
const entryHeaderMax = 1 + 5*binary.MaxVarintLen64 + 2 + 2*binary.MaxVarintLen64 + 2*binary.MaxVarintLen64

// appendEntry encodes l as an entry record of group onto b.
func appendEntry(b []byte, group uint64, l *raft.Log, flags byte, commit uint64) []byte {
	b = appendEntryHead(b, group, l, flags, commit)
	b = append(b, l.Data...)
	return appendEntryTail(b, l)
}

// appendEntryHead encodes what comes before l's data in its entry record:
// the record is the head, l.Data and the tail (appendEntryTail).
func appendEntryHead(b []byte, group uint64, l *raft.Log, flags byte, commit uint64) []byte {
	b = append(b, kindEntry)
	b = binary.AppendUvarint(b, group)
	b = binary.AppendUvarint(b, l.Index)
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type), flags)
	if flags&flagHasCommit != 0 {
		b = binary.AppendUvarint(b, commit)
	}
	b = binary.AppendVarint(b, l.AppendedAt.Unix())
	b = binary.AppendUvarint(b, uint64(l.AppendedAt.Nanosecond()))
	return binary.AppendUvarint(b, uint64(len(l.Data)))
}

// appendEntryTail encodes what comes after l's data in its entry record.
func appendEntryTail(b []byte, l *raft.Log) []byte {
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	return append(b, l.Extensions...)
}

// appendDeleteRange encodes a delete-range record.
func appendDeleteRange(b []byte, group, min, max uint64) []byte {
	b = append(b, kindDeleteRange)
	b = binary.AppendUvarint(b, group)
	b = binary.AppendUvarint(b, min)
	return binary.AppendUvarint(b, max)
}

// record is a decoded payload.
type record struct {
	kind     byte
	group    uint64
	flags    byte
	commit   uint64 // entry with flagHasCommit
	min, max uint64 // delete range
	log      raft.Log
}

// decoder reads varints from a payload, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || (n > 1 && d.b[n-1] == 0) { // malformed, or not minimal
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 || (n > 1 && d.b[n-1] == 0) { // malformed, or not minimal
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns the next length-prefixed field, aliasing the payload, or
// nil when it is empty.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	if n == 0 {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errShortRecord
	}
}

// decodeRecord decodes a payload. Data and Extensions alias p, which the
// caller owns (commitlog.Read returns a private copy).
func decodeRecord(p []byte) (record, error) {
	d := decoder{b: p}
	var r record
	r.kind = d.byte()
	r.group = d.uvarint()
	switch r.kind {
	case kindEntry:
		r.log.Index = d.uvarint()
		r.log.Term = d.uvarint()
		r.log.Type = raft.LogType(d.byte())
		r.flags = d.byte()
		if r.flags&^knownFlags != 0 {
			return record{}, fmt.Errorf("raftstore: unknown entry flags %#x", r.flags)
		}
		if r.flags&flagHasCommit != 0 {
			r.commit = d.uvarint()
		}
		sec := d.varint()
		nsec := d.uvarint()
		if nsec >= 1e9 {
			return record{}, fmt.Errorf("raftstore: entry nanoseconds %d out of range", nsec)
		}
		r.log.AppendedAt = time.Unix(sec, int64(nsec))
		r.log.Data = d.bytes()
		r.log.Extensions = d.bytes()
	case kindDeleteRange:
		r.min = d.uvarint()
		r.max = d.uvarint()
	default:
		if d.err == nil {
			return record{}, fmt.Errorf("raftstore: unknown record kind %d", r.kind)
		}
	}
	if d.err != nil {
		return record{}, d.err
	}
	if len(d.b) != 0 {
		return record{}, fmt.Errorf("raftstore: %d trailing bytes after record", len(d.b))
	}
	return r, nil
}
