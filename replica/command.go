package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The data of every raft LogCommand entry a node writes starts with a kind
// byte:
//
//	record:  0x01 | uvarint len(client) | client | [uvarint seq | uvarint i | uvarint n, when client != ""] | payload
//	trim:    0x02 | uvarint below
//	member:  0x03 | uvarint len(id) | id | uvarint len(addr) | addr   (addr "" removes the member)
//	record with a session base:
//	         0x04 | uvarint len(client) | client | uvarint seq | uvarint i | uvarint n | uvarint base | payload
//	first record of an Append that must follow another (i = 0):
//	         0x05 | uvarint len(client) | client | uvarint seq | uvarint i | uvarint n | uvarint base | uvarint after | payload
//
// A record entry holds one appended record: its raft index is the record's
// position. An Append of n records with a client id and sequence number
// writes n entries, the i-th tagged (seq, i, n); the state machine keeps the
// first copy of each (seq, i) and marks later copies void (fsm.go). An
// Append that carries the client's session base (transport.AppendRequest.Base)
// writes kind 0x04 entries, which let the state machine decide about a
// session it does not hold (sessions.go); older clients' appends keep
// kind 0x01. An Append that must follow an earlier one of its session
// (transport.AppendRequest.After) writes its first entry as kind 0x05,
// naming that one: the state machine voids the Append unless it is stored
// (fsm.go). A node older than a kind would not read those entries as
// records: upgrade every node before the clients.
const (
	kindRecord      byte = 1
	kindTrim        byte = 2
	kindMember      byte = 3
	kindRecordBase  byte = 4
	kindRecordAfter byte = 5
)

// errBadCommand reports an entry that does not decode. Entries are written
// by nodes only, so it means a bug or a corrupt log.
var errBadCommand = errors.New("replica: malformed command entry")

// recordCmd is a decoded record entry.
type recordCmd struct {
	client  []byte // aliases the entry's data; empty without a client id
	seq     uint64
	i, n    uint64
	base    uint64 // the client's session base; 0 when not given
	after   uint64 // the Append that must be stored before this one; 0 for none
	payload []byte // aliases the entry's data
}

// recordCmdHeader bounds the bytes of a record entry's encoding beside
// its client id and payload: the kind byte and six uvarints.
const recordCmdHeader = 1 + 6*binary.MaxVarintLen64

// AppendRecordCmd appends the encoding of a record entry to dst: kind
// 0x05 for the first record of an Append that must follow another (after
// not 0, which needs base), 0x04 when the client gave its session base,
// 0x01 otherwise.
func AppendRecordCmd(dst []byte, client string, seq, i, n, base, after uint64, payload []byte) []byte {
	kind := kindRecord
	switch {
	case client != "" && base != 0 && after != 0 && i == 0:
		kind = kindRecordAfter
	case client != "" && base != 0:
		kind = kindRecordBase
	}
	dst = append(dst, kind)
	dst = binary.AppendUvarint(dst, uint64(len(client)))
	dst = append(dst, client...)
	if client != "" {
		dst = binary.AppendUvarint(dst, seq)
		dst = binary.AppendUvarint(dst, i)
		dst = binary.AppendUvarint(dst, n)
		if kind != kindRecord {
			dst = binary.AppendUvarint(dst, base)
		}
		if kind == kindRecordAfter {
			dst = binary.AppendUvarint(dst, after)
		}
	}
	return append(dst, payload...)
}

// EncodeTrimCmd encodes a trim: raise the first retained index to below.
func EncodeTrimCmd(below uint64) []byte {
	return binary.AppendUvarint([]byte{kindTrim}, below)
}

// EncodeMemberCmd encodes the record of a member's client address,
// which each leader commits first in its term.
func EncodeMemberCmd(id, addr string) []byte {
	b := []byte{kindMember}
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	b = binary.AppendUvarint(b, uint64(len(addr)))
	return append(b, addr...)
}

// cmdReader decodes the fields of a command.
type cmdReader struct {
	b   []byte
	err error
}

func (r *cmdReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errBadCommand
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *cmdReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errBadCommand
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *cmdReader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = errBadCommand
	}
	return r.err
}

// isRecordCmd reports whether data is a record entry's command, by its
// kind.
func isRecordCmd(data []byte) bool {
	return len(data) > 0 && (data[0] == kindRecord || data[0] == kindRecordBase || data[0] == kindRecordAfter)
}

// decodeRecordCmd decodes a record entry's data (kind byte included).
func decodeRecordCmd(data []byte) (recordCmd, error) {
	if !isRecordCmd(data) {
		return recordCmd{}, errBadCommand
	}
	r := cmdReader{b: data[1:]}
	var c recordCmd
	c.client = r.bytes()
	if len(c.client) != 0 {
		c.seq, c.i, c.n = r.uvarint(), r.uvarint(), r.uvarint()
		if data[0] != kindRecord {
			c.base = r.uvarint()
		}
		if data[0] == kindRecordAfter {
			c.after = r.uvarint()
		}
		if r.err == nil && (c.seq == 0 || c.n == 0 || c.i >= c.n) {
			r.err = fmt.Errorf("%w: record %d of %d, sequence %d", errBadCommand, c.i, c.n, c.seq)
		}
		if r.err == nil && data[0] != kindRecord && (c.base == 0 || c.base > c.seq) {
			r.err = fmt.Errorf("%w: session base %d, sequence %d", errBadCommand, c.base, c.seq)
		}
		if r.err == nil && data[0] == kindRecordAfter && (c.i != 0 || c.after == 0 || c.after >= c.seq) {
			r.err = fmt.Errorf("%w: record %d of sequence %d to follow %d", errBadCommand, c.i, c.seq, c.after)
		}
	} else if r.err == nil && data[0] != kindRecord {
		r.err = fmt.Errorf("%w: session base without a client id", errBadCommand)
	}
	if r.err != nil {
		return recordCmd{}, r.err
	}
	c.payload = r.b
	return c, nil
}

// RecordPayload returns the payload of a record entry without copying.
func RecordPayload(data []byte) ([]byte, bool) {
	c, err := decodeRecordCmd(data)
	if err != nil {
		return nil, false
	}
	return c.payload, true
}

func decodeTrimCmd(data []byte) (uint64, error) {
	r := cmdReader{b: data[1:]}
	below := r.uvarint()
	return below, r.end()
}

func decodeMemberCmd(data []byte) (id, addr string, err error) {
	r := cmdReader{b: data[1:]}
	id, addr = string(r.bytes()), string(r.bytes())
	return id, addr, r.end()
}
