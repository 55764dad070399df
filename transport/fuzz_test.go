package transport

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// FuzzReadFrame feeds arbitrary bytes to the frame decoder. It must never
// panic, must fail only with the documented errors, and a frame it accepts
// must re-encode to exactly the bytes it consumed.
func FuzzReadFrame(f *testing.F) {
	for _, v := range sampleMessages() {
		body, err := EncodeBody(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(goodFrame(FrameRequest, OpAppend, 1, body))
	}
	f.Add(goodFrame(FrameCancel, OpTail, 9, nil))
	f.Add(rawFrame(12, 2, FrameRequest, OpRead, 1, nil))
	f.Add(rawFrame(MaxFrameLength, Version, FrameRequest, OpRead, 1, nil))
	f.Add(rawFrame(3, Version, FrameRequest, OpRead, 1, nil))
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{})
	const maxSize = 64 << 10
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for {
			start := len(in) - r.Len()
			fr, err := ReadFrame(r, maxSize)
			if err != nil {
				switch {
				case err == io.EOF, err == io.ErrUnexpectedEOF,
					errors.Is(err, ErrMalformedFrame), errors.Is(err, ErrUnsupportedVersion), errors.Is(err, ErrFrameTooLarge):
				default:
					t.Fatalf("unexpected error %v", err)
				}
				if err == io.EOF && start != len(in) {
					t.Fatalf("io.EOF with %d bytes left", len(in)-start)
				}
				return
			}
			if FrameLength(len(fr.Body)) > maxSize {
				t.Fatalf("accepted a body of %d bytes", len(fr.Body))
			}
			enc, err := AppendFrame(nil, fr)
			if err != nil {
				t.Fatalf("re-encoding an accepted frame: %v", err)
			}
			if consumed := in[start : len(in)-r.Len()]; !bytes.Equal(enc, consumed) {
				t.Fatalf("re-encoded % x, consumed % x", enc, consumed)
			}
		}
	})
}

// bodyTypes lists every type DecodeBody meets on either side.
func bodyTypes() []reflect.Type {
	var ts []reflect.Type
	for _, i := range ops[1:] {
		ts = append(ts, i.req, i.resp)
	}
	return append(ts, reflect.TypeFor[Error](), reflect.TypeFor[Credit]())
}

// FuzzDecodeBody decodes arbitrary bytes into every request, response,
// stream item and framing body type. Decoding and validation must never
// panic, and a decoded value must survive a round trip: its encoding
// decodes to an equal value that encodes to the same bytes.
func FuzzDecodeBody(f *testing.F) {
	for _, v := range sampleMessages() {
		b, err := EncodeBody(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xc0})
	f.Add([]byte{0x80})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x81, 0xa7, 'r', 'e', 'c', 'o', 'r', 'd', 's', 0x92, 0xc4, 1, 1, 0xa1, 'x'})
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, typ := range bodyTypes() {
			v := reflect.New(typ).Interface()
			if err := DecodeBody(in, v); err != nil {
				if !errors.Is(err, ErrMalformedBody) {
					t.Fatalf("%v: error %v does not wrap ErrMalformedBody", typ, err)
				}
				continue
			}
			if req, ok := v.(Request); ok {
				_ = req.Validate(Limits{})
			}
			enc, err := EncodeBody(v)
			if err != nil {
				t.Fatalf("%v: re-encoding %+v: %v", typ, v, err)
			}
			v2 := reflect.New(typ).Interface()
			if err := DecodeBody(enc, v2); err != nil {
				t.Fatalf("%v: decoding its own encoding % x: %v", typ, enc, err)
			}
			if !reflect.DeepEqual(v, v2) {
				t.Fatalf("%v: round trip changed %+v into %+v", typ, v, v2)
			}
			enc2, err := EncodeBody(v2)
			if err != nil || !bytes.Equal(enc, enc2) {
				t.Fatalf("%v: encodings differ: % x and % x (%v)", typ, enc, enc2, err)
			}
		}
	})
}
