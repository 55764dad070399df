package commitlog

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/raftlog/raftlog/commitlog/vfs"
)

// GatherMin is the size from which WriteParts writes a part from where it
// is (pwritev) instead of copying it into the run it writes. Below it a
// copy costs less than another buffer for the kernel to walk.
const GatherMin = 4096

// gather lays out one run of records, the bytes of one segment that one
// write covers. b holds the run as it will be in the file; with gathering
// set (the pwrite path), the large parts of payloads stay where the caller
// has them and b's bytes under them are never filled: the run is written
// as b's other bytes and those parts, in file order.
type gather struct {
	b         []byte
	gathering bool
	iov       [][]byte // the run's buffers so far, in file order
	from      int      // the start of b's bytes not yet in iov
}

// record encodes the record stored at position, at off in the run.
func (g *gather) record(off, position, ts int64, epoch uint32, parts [][]byte) {
	n := partsLen(parts)
	_ = g.b[off+HeaderSize+int64(n)-1] // the run holds the whole record
	h := g.b[off : off+HeaderSize]
	putHeader(h, header{length: uint32(n), kind: kindRecord, position: position, timestamp: ts, epoch: epoch})
	crc := crc32.Update(0, castagnoli, h[4:])
	at := int(off) + HeaderSize
	for _, p := range parts {
		crc = crc32.Update(crc, castagnoli, p)
		if g.gathering && len(p) >= GatherMin {
			g.iov = append(g.iov, g.b[g.from:at], p)
			g.from = at + len(p)
		} else {
			copy(g.b[at:], p)
		}
		at += len(p)
	}
	binary.LittleEndian.PutUint32(h[0:4], crc)
}

// write writes the run to f at off: one pwrite when every part was
// copied, else one pwritev of its buffers.
func (g *gather) write(f vfs.File, off int64) error {
	if len(g.iov) == 0 {
		_, err := f.WriteAt(g.b, off)
		return err
	}
	g.iov = append(g.iov, g.b[g.from:])
	return f.WriteVAt(g.iov, off)
}

// release returns the buffer list for reuse, emptied so that it keeps no
// caller's part alive.
func (g *gather) release() [][]byte {
	clear(g.iov)
	return g.iov[:0]
}

// partsLen returns the length of the concatenation of parts.
func partsLen(parts [][]byte) int {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n
}
