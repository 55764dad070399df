package transport

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// Body limits. They are wire format: a body that exceeds them is refused
// whatever the configured Limits.
const (
	// MaxBodyElements is the most elements one msgpack array or map in a body
	// may hold. It bounds what a small body can make a decoder allocate: a
	// one-byte element can become a 48-byte Go value.
	MaxBodyElements = 1 << 16
	// MaxBodyDepth is the deepest nesting of arrays and maps in a body.
	MaxBodyDepth = 8
)

// handle is the msgpack configuration every body uses. A configured handle
// is safe for concurrent use; it is never modified after this.
var handle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{WriteExt: true}
	h.TypeInfos = codec.NewTypeInfos([]string{"msgpack"})
	h.ErrorIfNoField = true
	h.MaxDepth = MaxBodyDepth + 1
	return h
}()

// EncodeBody encodes v, normally a pointer to one of this package's message
// types, as a body. Struct fields are written as a map keyed by their
// msgpack tag names in sorted order, fields tagged omitempty left out when
// zero, so equal values encode to equal bytes. The hot-path messages
// (Append, Read and Tail, their replies and items, Credit) take the
// hand-written codec of fastcodec.go, the others go-msgpack's; both write
// the same bytes.
func EncodeBody(v any) ([]byte, error) {
	if m := fastOf(v); m != nil {
		return m.appendMsgpack(make([]byte, 0, m.msgpackSize())), nil
	}
	return encodeReflect(v)
}

// appendBody appends the encoding of v, as EncodeBody writes it, to dst.
func appendBody(dst []byte, v any) ([]byte, error) {
	if m := fastOf(v); m != nil {
		return m.appendMsgpack(dst), nil
	}
	b, err := encodeReflect(v)
	return append(dst, b...), err
}

// encodeReflect encodes v with go-msgpack.
func encodeReflect(v any) ([]byte, error) {
	var b []byte
	e := encoders.Get().(*codec.Encoder)
	e.ResetBytes(&b)
	err := e.Encode(v)
	e.ResetBytes(nil)
	encoders.Put(e)
	if err != nil {
		return nil, fmt.Errorf("transport: encode %T: %w", v, err)
	}
	return b, nil
}

// Encoders and decoders are reused: making one costs more than encoding a
// small body. A reset one keeps no reference to the last body.
var (
	encoders = sync.Pool{New: func() any { return codec.NewEncoderBytes(new([]byte), handle) }}
	decoders = sync.Pool{New: func() any { return codec.NewDecoderBytes(nil, handle) }}
)

// DecodeBody decodes a body into v, a pointer to a zero value of one of this
// package's message types. It is strict: the body must be exactly one
// msgpack map (or nil, which leaves v zero) with no trailing bytes, nested
// no deeper than MaxBodyDepth, with no array or map of more than
// MaxBodyElements, no extension types, and only field names that v's type
// declares. Every failure wraps ErrMalformedBody. A field added to a message
// is therefore a protocol change: old peers refuse it rather than ignore it.
//
// For the hot-path messages (see EncodeBody) the byte slices of the decoded
// value (records, record data) share memory with b, which the caller must
// no longer modify; strings are copies. Their hand-written decoder reads
// the fields in any order; a body it does not expect goes to go-msgpack's,
// so both codecs accept and refuse the same bodies.
func DecodeBody(b []byte, v any) error {
	if m := fastOf(v); m != nil && m.decodeMsgpack(b) {
		return nil
	}
	return decodeReflect(b, v)
}

// decodeReflect decodes b into v with go-msgpack, as DecodeBody.
func decodeReflect(b []byte, v any) error {
	if err := checkBody(b); err != nil {
		return err
	}
	d := decoders.Get().(*codec.Decoder)
	d.ResetBytes(b)
	err := d.Decode(v)
	n := d.NumBytesRead()
	d.ResetBytes(nil)
	decoders.Put(d)
	if err != nil {
		return fmt.Errorf("%w: %T: %v", ErrMalformedBody, v, err)
	}
	if n != len(b) {
		return fmt.Errorf("%w: %T: decoded %d of %d bytes", ErrMalformedBody, v, n, len(b))
	}
	return nil
}

// checkBody verifies that b is one well-formed msgpack value, a map or nil,
// within the body limits, before the decoder sees it. The decoder then never
// reads past the end, and never allocates for a length the body cannot hold.
func checkBody(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty", ErrMalformedBody)
	}
	if c := b[0]; c != 0xc0 && c&0xf0 != 0x80 && c != 0xde && c != 0xdf {
		return fmt.Errorf("%w: top-level value is not a map (0x%02x)", ErrMalformedBody, c)
	}
	end, err := skipValue(b, 0, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedBody, err)
	}
	if end != len(b) {
		return fmt.Errorf("%w: %d trailing bytes", ErrMalformedBody, len(b)-end)
	}
	return nil
}

var errTruncated = errors.New("value runs past the end of the body")

// skipValue returns the offset just past the msgpack value that starts at
// b[off]. The encodings follow the msgpack specification.
func skipValue(b []byte, off, depth int) (int, error) {
	if off >= len(b) {
		return 0, errTruncated
	}
	c := b[off]
	off++
	switch {
	case c <= 0x7f, c >= 0xe0: // positive and negative fixint
		return off, nil
	case c <= 0x8f: // fixmap
		return skipElems(b, off, int(c&0x0f), 2, depth)
	case c <= 0x9f: // fixarray
		return skipElems(b, off, int(c&0x0f), 1, depth)
	case c <= 0xbf: // fixstr
		return skipBytes(b, off, int(c&0x1f))
	}
	switch c {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return off, nil
	case 0xc4, 0xd9: // bin 8, str 8
		n, off, err := readLen(b, off, 1)
		if err != nil {
			return 0, err
		}
		return skipBytes(b, off, n)
	case 0xc5, 0xda: // bin 16, str 16
		n, off, err := readLen(b, off, 2)
		if err != nil {
			return 0, err
		}
		return skipBytes(b, off, n)
	case 0xc6, 0xdb: // bin 32, str 32
		n, off, err := readLen(b, off, 4)
		if err != nil {
			return 0, err
		}
		return skipBytes(b, off, n)
	case 0xcc, 0xd0: // uint 8, int 8
		return skipBytes(b, off, 1)
	case 0xcd, 0xd1: // uint 16, int 16
		return skipBytes(b, off, 2)
	case 0xca, 0xce, 0xd2: // float 32, uint 32, int 32
		return skipBytes(b, off, 4)
	case 0xcb, 0xcf, 0xd3: // float 64, uint 64, int 64
		return skipBytes(b, off, 8)
	case 0xdc: // array 16
		n, off, err := readLen(b, off, 2)
		if err != nil {
			return 0, err
		}
		return skipElems(b, off, n, 1, depth)
	case 0xdd: // array 32
		n, off, err := readLen(b, off, 4)
		if err != nil {
			return 0, err
		}
		return skipElems(b, off, n, 1, depth)
	case 0xde: // map 16
		n, off, err := readLen(b, off, 2)
		if err != nil {
			return 0, err
		}
		return skipElems(b, off, n, 2, depth)
	case 0xdf: // map 32
		n, off, err := readLen(b, off, 4)
		if err != nil {
			return 0, err
		}
		return skipElems(b, off, n, 2, depth)
	}
	// 0xc1 (never used), ext 8/16/32 and fixext: not part of any body.
	return 0, fmt.Errorf("type byte 0x%02x is not allowed", c)
}

// readLen reads a big-endian length of size bytes at b[off].
func readLen(b []byte, off, size int) (int, int, error) {
	if len(b)-off < size {
		return 0, 0, errTruncated
	}
	var n uint64
	for _, x := range b[off : off+size] {
		n = n<<8 | uint64(x)
	}
	return int(n), off + size, nil
}

// skipBytes skips n bytes of payload.
func skipBytes(b []byte, off, n int) (int, error) {
	if n > len(b)-off {
		return 0, errTruncated
	}
	return off + n, nil
}

// skipElems skips the n elements of an array (per = 1) or map (per = 2).
func skipElems(b []byte, off, n, per, depth int) (int, error) {
	if depth+1 > MaxBodyDepth {
		return 0, fmt.Errorf("nested deeper than %d", MaxBodyDepth)
	}
	if n > MaxBodyElements {
		return 0, fmt.Errorf("container of %d elements exceeds %d", n, MaxBodyElements)
	}
	n *= per
	if n > len(b)-off { // every value takes at least one byte
		return 0, errTruncated
	}
	var err error
	for range n {
		if off, err = skipValue(b, off, depth+1); err != nil {
			return 0, err
		}
	}
	return off, nil
}
