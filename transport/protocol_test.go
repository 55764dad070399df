package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"testing"
)

// rawFrame builds frame bytes by hand, so tests can break any field.
func rawFrame(length uint32, version byte, typ FrameType, op Op, id uint64, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, length)
	b = append(b, version, byte(typ))
	b = binary.BigEndian.AppendUint16(b, uint16(op))
	b = binary.BigEndian.AppendUint64(b, id)
	return append(b, body...)
}

// goodFrame is rawFrame with a correct length and version.
func goodFrame(typ FrameType, op Op, id uint64, body []byte) []byte {
	return rawFrame(uint32(HeaderSize+len(body)), Version, typ, op, id, body)
}

func TestFrameLayout(t *testing.T) {
	got, err := AppendFrame(nil, Frame{Type: FrameRequest, Op: OpRead, ID: 0x0102030405060708, Body: []byte{0x80}})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		0, 0, 0, 13, // length: 12 header bytes + 1 body byte
		1,    // version
		1,    // type Request
		0, 2, // op Read
		1, 2, 3, 4, 5, 6, 7, 8, // request id
		0x80, // body
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendFrame = % x\nwant          % x", got, want)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 300<<10) // several read chunks
	frames := []Frame{
		{Type: FrameRequest, Op: OpAppend, ID: 1, Body: []byte{0x80}},
		{Type: FrameResponse, Op: OpRead, ID: 2, Body: []byte{0x81, 0xa1, 'a', 1}},
		{Type: FrameError, Op: OpStatus, ID: 0, Body: []byte{0x80}},
		{Type: FrameStreamItem, Op: OpTail, ID: 1<<64 - 1, Body: big},
		{Type: FrameCredit, Op: OpTail, ID: 7, Body: []byte{0x81, 0xa5, 'i', 't', 'e', 'm', 's', 5}},
		{Type: FrameCancel, Op: OpTail, ID: 7},
		{Type: FrameRequest, Op: Op(0xffff), ID: 9, Body: nil},
	}
	var stream bytes.Buffer
	for _, f := range frames {
		var one bytes.Buffer
		if err := WriteFrame(&one, f); err != nil {
			t.Fatalf("WriteFrame(%v): %v", f.Type, err)
		}
		appended, err := AppendFrame(nil, f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(one.Bytes(), appended) {
			t.Fatalf("WriteFrame and AppendFrame differ for %v", f.Type)
		}
		stream.Write(appended)
	}
	r := bytes.NewReader(stream.Bytes())
	for i, want := range frames {
		got, err := ReadFrame(r, DefaultMaxFrameSize)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if len(want.Body) == 0 {
			want.Body = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("frame %d: got %+v, want %+v", i, got.Type, want.Type)
		}
	}
	if _, err := ReadFrame(r, DefaultMaxFrameSize); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadFrameErrors(t *testing.T) {
	body := []byte{0x80, 0x80, 0x80}
	valid := goodFrame(FrameRequest, OpStatus, 3, body)
	tests := []struct {
		name    string
		in      []byte
		max     int
		want    error
		wantHdr Frame // header fields returned with ErrFrameTooLarge
	}{
		{name: "empty", in: nil, want: io.EOF},
		{name: "partial length", in: []byte{0, 0, 0}, want: io.ErrUnexpectedEOF},
		{name: "zero length", in: []byte{0, 0, 0, 0, 1}, want: ErrMalformedFrame},
		{name: "length without version", in: []byte{0, 0, 0, 12}, want: io.ErrUnexpectedEOF},
		{name: "version 0", in: rawFrame(13, 0, FrameRequest, OpRead, 1, []byte{0x80}), want: ErrUnsupportedVersion},
		{name: "version 2", in: rawFrame(13, 2, FrameRequest, OpRead, 1, []byte{0x80}), want: ErrUnsupportedVersion},
		{name: "version 255 short length", in: []byte{0, 0, 0, 1, 255}, want: ErrUnsupportedVersion},
		{name: "length shorter than header", in: rawFrame(11, Version, FrameRequest, OpRead, 1, nil)[:15], want: ErrMalformedFrame},
		{name: "length 1", in: []byte{0, 0, 0, 1, Version}, want: ErrMalformedFrame},
		{name: "type 0", in: rawFrame(12, Version, 0, OpRead, 1, nil), want: ErrMalformedFrame},
		{name: "type 7", in: rawFrame(12, Version, 7, OpRead, 1, nil), want: ErrMalformedFrame},
		{name: "type 255", in: rawFrame(12, Version, 255, OpRead, 1, nil), want: ErrMalformedFrame},
		{name: "truncated header", in: valid[:10], want: io.ErrUnexpectedEOF},
		{name: "header only, body missing", in: valid[:16], want: io.ErrUnexpectedEOF},
		{name: "truncated body", in: valid[:len(valid)-1], want: io.ErrUnexpectedEOF},
		{
			name: "over max", max: 4096, in: rawFrame(4097, Version, FrameRequest, OpAppend, 42, nil),
			want: ErrFrameTooLarge, wantHdr: Frame{Type: FrameRequest, Op: OpAppend, ID: 42},
		},
		{
			name: "max uint32 length", in: rawFrame(MaxFrameLength, Version, FrameRequest, OpRead, 5, nil),
			want: ErrFrameTooLarge, wantHdr: Frame{Type: FrameRequest, Op: OpRead, ID: 5},
		},
		{name: "exactly max", max: 4096, in: goodFrame(FrameRequest, OpAppend, 1, make([]byte, 4096-HeaderSize))},
		{name: "valid", in: valid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ReadFrame(bytes.NewReader(tt.in), tt.max)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("ReadFrame: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("ReadFrame error = %v, want %v", err, tt.want)
			}
			if f.Body != nil || f.Type != tt.wantHdr.Type || f.Op != tt.wantHdr.Op || f.ID != tt.wantHdr.ID {
				t.Fatalf("frame with error = %+v, want header %+v and no body", f, tt.wantHdr)
			}
		})
	}
}

func TestReadFrameTruncatedAnywhere(t *testing.T) {
	valid := goodFrame(FrameResponse, OpRead, 77, bytes.Repeat([]byte{0xc0}, 40))
	for n := range len(valid) {
		_, err := ReadFrame(bytes.NewReader(valid[:n]), 0)
		want := io.ErrUnexpectedEOF
		if n == 0 {
			want = io.EOF
		}
		if err != want {
			t.Fatalf("cut at %d: %v, want %v", n, err, want)
		}
	}
}

// oneByteReader returns one byte per Read, as a slow network might.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

func TestReadFrameSlowReader(t *testing.T) {
	body := bytes.Repeat([]byte{1, 2, 3}, 100<<10)
	f, err := ReadFrame(oneByteReader{bytes.NewReader(goodFrame(FrameRequest, OpAppend, 1, body))}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.Body, body) {
		t.Fatal("body differs")
	}
}

func TestReadFrameHostileLengthAllocatesLittle(t *testing.T) {
	// A frame that announces the maximum and sends 100 bytes must not make
	// the reader allocate the maximum.
	in := append(rawFrame(DefaultMaxFrameSize, Version, FrameRequest, OpAppend, 1, nil), make([]byte, 100)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		if _, err := ReadFrame(bytes.NewReader(in), DefaultMaxFrameSize); err != io.ErrUnexpectedEOF {
			t.Fatalf("ReadFrame: %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 10*2*readChunk {
		t.Fatalf("10 truncated frames allocated %d bytes", got)
	}
}

func TestWriteFrameRefusesUnknownType(t *testing.T) {
	for _, typ := range []FrameType{0, 7, 200} {
		if err := WriteFrame(io.Discard, Frame{Type: typ, ID: 1}); !errors.Is(err, ErrMalformedFrame) {
			t.Fatalf("type %d: %v", typ, err)
		}
		if _, err := AppendFrame(nil, Frame{Type: typ, ID: 1}); !errors.Is(err, ErrMalformedFrame) {
			t.Fatalf("type %d: %v", typ, err)
		}
	}
}

func TestNames(t *testing.T) {
	if FrameStreamItem.String() != "StreamItem" || FrameType(9).String() != "FrameType(9)" {
		t.Fatal("frame type names")
	}
	if OpTransferLeadership.String() != "TransferLeadership" || Op(99).String() != "Op(99)" || Op(0).Valid() {
		t.Fatal("op names")
	}
	if !OpTail.Streaming() || !OpBackup.Streaming() || OpRead.Streaming() || OpBackup.String() != "Backup" {
		t.Fatal("streaming ops")
	}
	if r, ok := NewRequest(OpJoin); !ok || reflect.TypeOf(r) != reflect.TypeFor[*JoinRequest]() {
		t.Fatalf("NewRequest(OpJoin) = %T", r)
	}
	if OpCreateLog.String() != "CreateLog" || OpDeleteLog.String() != "DeleteLog" || OpListLogs.Streaming() || !OpDescribeLog.Valid() {
		t.Fatal("log ops")
	}
	if r, ok := NewRequest(OpDescribeLog); !ok || reflect.TypeOf(r) != reflect.TypeFor[*DescribeLogRequest]() {
		t.Fatalf("NewRequest(OpDescribeLog) = %T", r)
	}
	if _, ok := NewRequest(Op(99)); ok {
		t.Fatal("NewRequest of an unknown op")
	}
	if CodeNotLeader.String() != "NotLeader" || Code(0).String() != "Code(0)" || CodeFailedPrecondition.String() != "FailedPrecondition" || Code(99).String() != "Code(99)" {
		t.Fatal("code names")
	}
}
