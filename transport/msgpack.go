package transport

// Hand-written msgpack primitives for the hot-path codecs of fastcodec.go.
//
// The writers produce exactly the bytes that go-msgpack (the handle of
// body.go: new spec, WriteExt, no fixed-width numbers) produces for the
// same Go value, so a body has one encoding whichever codec wrote it:
//
//	Go value         msgpack                    bytes
//	uint 0..127      positive fixint            0xxxxxxx
//	uint up to 2^8   uint 8                     cc XX
//	uint up to 2^16  uint 16                    cd XXXX
//	uint up to 2^32  uint 32                    ce XXXXXXXX
//	other uint       uint 64                    cf XXXXXXXXXXXXXXXX
//	int -32..127     fixint                     one byte
//	int 128..2^15    int 16 (not uint 8)        d1 XXXX
//	int up to 2^31   int 32                     d2 XXXXXXXX
//	other int > 0    int 64                     d3 ...
//	int -128..-33    int 8                      d0 XX
//	int down to 2^15 int 16, then int 32, int 64
//	bool             false, true                c2, c3
//	string           fixstr < 32 bytes, str 8, str 16, str 32
//	[]byte           nil: c0; bin 8, bin 16, bin 32 (also when empty)
//	slice            nil: c0; fixarray < 16, array 16, array 32
//	struct           map (fixmap < 16, map 16, map 32) of the fields that
//	                 omitempty keeps, keyed by tag name, keys sorted
//
// The reader (mpDec) accepts only the canonical encodings that the writers
// produce (and a few equivalent ones noted at each method); anything else
// makes it give up, and DecodeBody then takes the reflection codec, which
// decides what the body means or why it is malformed. So the hand-written
// decoders never accept a body the reflection decoder refuses, nor read
// one differently: fuzz_test.go checks both.

import (
	"encoding/binary"
	"math"
)

// msgpack type bytes used here.
const (
	mpNil     = 0xc0
	mpFalse   = 0xc2
	mpTrue    = 0xc3
	mpBin8    = 0xc4
	mpBin16   = 0xc5
	mpBin32   = 0xc6
	mpUint8   = 0xcc
	mpUint16  = 0xcd
	mpUint32  = 0xce
	mpUint64  = 0xcf
	mpInt8    = 0xd0
	mpInt16   = 0xd1
	mpInt32   = 0xd2
	mpInt64   = 0xd3
	mpStr8    = 0xd9
	mpStr16   = 0xda
	mpStr32   = 0xdb
	mpArray16 = 0xdc
	mpArray32 = 0xdd
	mpMap16   = 0xde
	mpMap32   = 0xdf

	mpFixMap   = 0x80 // | n, n < 16
	mpFixArray = 0x90 // | n, n < 16
	mpFixStr   = 0xa0 // | n, n < 32
)

// appendUint appends v as go-msgpack encodes an unsigned integer.
func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= math.MaxInt8:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, mpUint8, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, mpUint16), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, mpUint32), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, mpUint64), v)
}

// sizeUint is the length of appendUint's encoding of v.
func sizeUint(v uint64) int {
	switch {
	case v <= math.MaxInt8:
		return 1
	case v <= math.MaxUint8:
		return 2
	case v <= math.MaxUint16:
		return 3
	case v <= math.MaxUint32:
		return 5
	}
	return 9
}

// appendInt appends v as go-msgpack encodes a signed integer: positive
// values above 127 take the signed types.
func appendInt(b []byte, v int64) []byte {
	switch {
	case v > math.MaxInt32:
		return binary.BigEndian.AppendUint64(append(b, mpInt64), uint64(v))
	case v > math.MaxInt16:
		return binary.BigEndian.AppendUint32(append(b, mpInt32), uint32(v))
	case v > math.MaxInt8:
		return binary.BigEndian.AppendUint16(append(b, mpInt16), uint16(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, mpInt8, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, mpInt16), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, mpInt32), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, mpInt64), uint64(v))
}

// sizeInt is the length of appendInt's encoding of v.
func sizeInt(v int64) int {
	switch {
	case v > math.MaxInt32 || v < math.MinInt32:
		return 9
	case v > math.MaxInt16 || v < math.MinInt16:
		return 5
	case v > math.MaxInt8 || v < math.MinInt8:
		return 3
	case v >= -32:
		return 1
	}
	return 2
}

// appendBool appends v.
func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, mpTrue)
	}
	return append(b, mpFalse)
}

// appendStr appends s as a str.
func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, mpFixStr|byte(n))
	case n <= math.MaxUint8:
		b = append(b, mpStr8, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, mpStr16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpStr32), uint32(n))
	}
	return append(b, s...)
}

// sizeStr is the length of appendStr's encoding of a string of n bytes.
func sizeStr(n int) int {
	switch {
	case n < 32:
		return 1 + n
	case n <= math.MaxUint8:
		return 2 + n
	case n <= math.MaxUint16:
		return 3 + n
	}
	return 5 + n
}

// appendBin appends p as a bin, or nil for a nil slice.
func appendBin(b []byte, p []byte) []byte {
	n := len(p)
	switch {
	case p == nil:
		return append(b, mpNil)
	case n <= math.MaxUint8:
		b = append(b, mpBin8, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, mpBin16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpBin32), uint32(n))
	}
	return append(b, p...)
}

// sizeBin is the length of appendBin's encoding of p.
func sizeBin(p []byte) int {
	n := len(p)
	switch {
	case p == nil:
		return 1
	case n <= math.MaxUint8:
		return 2 + n
	case n <= math.MaxUint16:
		return 3 + n
	}
	return 5 + n
}

// appendArray appends the header of an array of n elements.
func appendArray(b []byte, n int) []byte {
	return appendContainer(b, n, mpFixArray, mpArray16, mpArray32)
}

// appendMap appends the header of a map of n pairs.
func appendMap(b []byte, n int) []byte {
	return appendContainer(b, n, mpFixMap, mpMap16, mpMap32)
}

func appendContainer(b []byte, n int, fix, b16, b32 byte) []byte {
	switch {
	case n < 16:
		return append(b, fix|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, b16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, b32), uint32(n))
}

// sizeContainer is the length of an array or map header of n elements.
func sizeContainer(n int) int {
	switch {
	case n < 16:
		return 1
	case n <= math.MaxUint16:
		return 3
	}
	return 5
}

// mpDec reads canonical msgpack from b. The first value it does not
// expect sets bad; from then on every method returns zero values, and the
// caller checks bad once at the end. It never reads past b, and never
// allocates for a length b cannot hold.
type mpDec struct {
	b   []byte
	off int
	bad bool
}

// fail marks the input as one to leave to the reflection codec.
func (d *mpDec) fail() { d.bad = true; d.off = len(d.b) }

// done reports whether the whole input was read without giving up.
func (d *mpDec) done() bool { return !d.bad && d.off == len(d.b) }

// byte1 returns the next byte, or fails at the end of the input.
func (d *mpDec) byte1() byte {
	if d.off >= len(d.b) {
		d.fail()
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

// fixed returns the next n bytes.
func (d *mpDec) fixed(n int) []byte {
	if n > len(d.b)-d.off {
		d.fail()
		return nil
	}
	p := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return p
}

// length reads a big-endian length of n bytes (1, 2 or 4).
func (d *mpDec) length(n int) int {
	p := d.fixed(n)
	switch n {
	case 1:
		if p != nil {
			return int(p[0])
		}
	case 2:
		if p != nil {
			return int(binary.BigEndian.Uint16(p))
		}
	case 4:
		if p != nil {
			return int(binary.BigEndian.Uint32(p))
		}
	}
	return 0
}

// isNil consumes a nil if one comes next.
func (d *mpDec) isNil() bool {
	if !d.bad && d.off < len(d.b) && d.b[d.off] == mpNil {
		d.off++
		return true
	}
	return false
}

// container reads an array or map header (fix, 16 or 32 bit) and returns
// its element count. It fails for a count above MaxBodyElements, or one the
// rest of the input cannot hold with per bytes at least per element.
func (d *mpDec) container(fix, b16, b32 byte, per int) int {
	c := d.byte1()
	n := 0
	switch {
	case c&0xf0 == fix:
		n = int(c & 0x0f)
	case c == b16:
		n = d.length(2)
	case c == b32:
		n = d.length(4)
	default:
		d.fail()
	}
	if n < 0 || n > MaxBodyElements || n*per > len(d.b)-d.off {
		d.fail()
		return 0
	}
	return n
}

// mapLen reads a map header and returns its pair count.
func (d *mpDec) mapLen() int { return d.container(mpFixMap, mpMap16, mpMap32, 2) }

// arrayLen reads an array header and returns its element count.
func (d *mpDec) arrayLen() int { return d.container(mpFixArray, mpArray16, mpArray32, 1) }

// key reads a map key: a fixstr or str 8. The slice aliases the input.
func (d *mpDec) key() []byte {
	c := d.byte1()
	switch {
	case c&0xe0 == mpFixStr:
		return d.fixed(int(c & 0x1f))
	case c == mpStr8:
		return d.fixed(d.length(1))
	}
	d.fail()
	return nil
}

// uint reads an unsigned integer in an unsigned encoding.
func (d *mpDec) uint() uint64 {
	c := d.byte1()
	switch {
	case c <= math.MaxInt8:
		return uint64(c)
	case c == mpUint8:
		return uint64(d.length(1))
	case c == mpUint16:
		return uint64(d.length(2))
	case c == mpUint32:
		return uint64(uint32(d.length(4)))
	case c == mpUint64:
		if p := d.fixed(8); p != nil {
			return binary.BigEndian.Uint64(p)
		}
		return 0
	}
	d.fail()
	return 0
}

// uint32 reads an unsigned integer of at most 32 bits.
func (d *mpDec) uint32() uint32 {
	v := d.uint()
	if v > math.MaxUint32 {
		d.fail()
		return 0
	}
	return uint32(v)
}

// int reads a signed integer in a signed encoding (any fixint counts).
func (d *mpDec) int() int64 {
	c := d.byte1()
	switch {
	case c <= math.MaxInt8, c >= 0xe0:
		return int64(int8(c))
	case c == mpInt8:
		if p := d.fixed(1); p != nil {
			return int64(int8(p[0]))
		}
		return 0
	case c == mpInt16:
		if p := d.fixed(2); p != nil {
			return int64(int16(binary.BigEndian.Uint16(p)))
		}
		return 0
	case c == mpInt32:
		if p := d.fixed(4); p != nil {
			return int64(int32(binary.BigEndian.Uint32(p)))
		}
		return 0
	case c == mpInt64:
		if p := d.fixed(8); p != nil {
			return int64(binary.BigEndian.Uint64(p))
		}
		return 0
	}
	d.fail()
	return 0
}

// bool reads a boolean.
func (d *mpDec) bool() bool {
	switch d.byte1() {
	case mpTrue:
		return true
	case mpFalse:
		return false
	}
	d.fail()
	return false
}

// str reads a str into a new string.
func (d *mpDec) str() string {
	c := d.byte1()
	n := 0
	switch {
	case c&0xe0 == mpFixStr:
		n = int(c & 0x1f)
	case c == mpStr8:
		n = d.length(1)
	case c == mpStr16:
		n = d.length(2)
	case c == mpStr32:
		n = d.length(4)
	default:
		d.fail()
	}
	return string(d.fixed(n))
}

// bin reads a bin, or nil. The slice aliases the input (its capacity ends
// with it) and is non-nil, if empty, for a bin of length zero.
func (d *mpDec) bin() []byte {
	n := 0
	switch d.byte1() {
	case mpNil:
		return nil
	case mpBin8:
		n = d.length(1)
	case mpBin16:
		n = d.length(2)
	case mpBin32:
		n = d.length(4)
	default:
		d.fail()
		return nil
	}
	return d.fixed(n)
}
