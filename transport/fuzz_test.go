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

// FuzzFastCodec holds the hand-written codecs of the hot-path bodies to
// go-msgpack's on arbitrary bodies: a body the hand-written decoder
// accepts, go-msgpack accepts too and reads as the same value (one it
// gives up on is left zero); DecodeBody returns what go-msgpack returns,
// the same value or an error for both; and whatever value go-msgpack
// reads, the hand-written encoder writes as go-msgpack does.
func FuzzFastCodec(f *testing.F) {
	for _, v := range sampleMessages() {
		if fastOf(v) == nil {
			continue
		}
		b, err := EncodeBody(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x82\xa7records\x92\xc4\x01a\xc0\xa3seq\x05"))
	f.Add([]byte("\x82\xa3seq\x05\xa3seq\x06"))
	f.Add([]byte("\x81\xa7records\x91\x83\xa5index\x01\xa4data\xc4\x00\xabappended_at\xd0\x80"))
	f.Add([]byte("\x81\xa7indexes\xdc\x00\x02\x01\xcf\x00\x00\x00\x00\x00\x00\x00\x02"))
	f.Add([]byte("\x81\xa5items\xce\x00\x00\x00\x10"))
	f.Add([]byte("\x82\xa3log\xa6orders\xa7records\x91\xc4\x01a"))
	f.Add([]byte("\x83\xa4from\x05\xa3log\xd9\x06orders\xa5stale\xc3"))
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, typ := range fastTypes() {
			fast := reflect.New(typ).Interface()
			fastOK := fastOf(fast).decodeMsgpack(in)
			ref := reflect.New(typ).Interface()
			refErr := decodeReflect(in, ref)
			switch {
			case fastOK && refErr != nil:
				t.Fatalf("%v: hand-written decoder accepts what go-msgpack refuses: %v", typ, refErr)
			case fastOK && !reflect.DeepEqual(fast, ref):
				t.Fatalf("%v: hand-written decoder reads %+v, go-msgpack %+v", typ, fast, ref)
			case !fastOK && !reflect.DeepEqual(fast, reflect.New(typ).Interface()):
				t.Fatalf("%v: hand-written decoder gave up and left %+v", typ, fast)
			}
			got := reflect.New(typ).Interface()
			if err := DecodeBody(in, got); (err == nil) != (refErr == nil) || !reflect.DeepEqual(got, ref) {
				t.Fatalf("%v: DecodeBody = %+v, %v; go-msgpack %+v, %v", typ, got, err, ref, refErr)
			}
			if refErr != nil {
				continue
			}
			want, err := encodeReflect(ref)
			if err != nil {
				t.Fatal(err)
			}
			if enc, _ := EncodeBody(ref); !bytes.Equal(enc, want) {
				t.Fatalf("%v: %+v encodes as % x, go-msgpack % x", typ, ref, enc, want)
			}
		}
	})
}
