package commitlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// formatTestPayload returns n bytes of a recognisable, non-zero pattern.
func formatTestPayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + 3)
	}
	return p
}

// formatTestEpoch is the epoch of the records and fillers the tests encode.
const formatTestEpoch = 3

// formatTestRecord returns a record for payload encoded at position with
// timestamp ts in epoch formatTestEpoch.
func formatTestRecord(position, ts int64, payload []byte) []byte {
	b := make([]byte, recordSize(len(payload)))
	encodeRecord(b, position, ts, formatTestEpoch, payload)
	return b
}

// formatTestFiller returns a filler header encoded at position in epoch
// formatTestEpoch, followed by rest zero bytes.
func formatTestFiller(position int64, rest uint32) []byte {
	b := make([]byte, HeaderSize+int(rest))
	encodeFiller(b, position, formatTestEpoch, rest)
	return b
}

// formatTestReseal recomputes the CRC of the record or filler in b after a
// test edited it, so that decoding fails for the edited field alone. n is
// the number of bytes the CRC covers, counted from the start of b.
func formatTestReseal(b []byte, n int) []byte {
	binary.LittleEndian.PutUint32(b[0:4], crc32.Checksum(b[4:n], castagnoli))
	return b
}

func TestRecordRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		size     int
		position int64
		ts       int64
		epoch    uint32
	}{
		{"empty", 0, 0, 0, 1},
		{"one byte", 1, 32, 1, 2},
		{"100 bytes", 100, 4096, 1_700_000_000_000_000_000, 1 << 16},
		{"64 KiB", 64 << 10, 1 << 40, -1, ^uint32(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload := formatTestPayload(tt.size)
			b := make([]byte, recordSize(tt.size))
			if n := encodeRecord(b, tt.position, tt.ts, tt.epoch, payload); int64(n) != recordSize(tt.size) {
				t.Fatalf("encodeRecord wrote %d bytes, want %d", n, recordSize(tt.size))
			}
			for _, room := range []int64{recordSize(tt.size), recordSize(tt.size) + 1, 1 << 30} {
				h, got, err := decodeRecord(b, tt.position, room)
				if err != nil {
					t.Fatalf("room %d: decodeRecord: %v", room, err)
				}
				want := header{length: uint32(tt.size), kind: kindRecord, position: tt.position, timestamp: tt.ts, epoch: tt.epoch}
				if h != want {
					t.Errorf("room %d: header %+v, want %+v", room, h, want)
				}
				if !bytes.Equal(got, payload) {
					t.Errorf("room %d: payload differs from what was encoded", room)
				}
			}
		})
	}

	t.Run("filler", func(t *testing.T) {
		const position, rest = 1<<20 - 100, 100 - HeaderSize
		b := formatTestFiller(position, rest)
		// A filler is valid from its header alone.
		for _, buf := range [][]byte{b, b[:HeaderSize]} {
			h, got, err := decodeRecord(buf, position, HeaderSize+rest)
			if err != nil {
				t.Fatalf("decodeRecord of %d bytes: %v", len(buf), err)
			}
			want := header{length: rest, kind: kindFiller, position: position, epoch: formatTestEpoch}
			if h != want {
				t.Errorf("header %+v, want %+v", h, want)
			}
			if got != nil {
				t.Errorf("filler payload %v, want nil", got)
			}
		}
	})
}

func TestDecodeRecordErrors(t *testing.T) {
	const position = 8192
	rec := func() []byte { return formatTestRecord(position, 42, formatTestPayload(100)) }
	size := recordSize(100)
	tests := []struct {
		name     string
		b        []byte
		position int64
		room     int64
		want     error
	}{
		{"zeroed bytes", make([]byte, 256), position, 256, errNoMagic},
		{"zeroed header, room too small", make([]byte, HeaderSize), position, 0, errNoMagic},
		{"wrong magic", func() []byte {
			b := rec()
			b[9] ^= 0x80
			return formatTestReseal(b, int(size))
		}(), position, size, errNoMagic},
		{"version 0", func() []byte {
			b := rec()
			b[10] = 0
			return formatTestReseal(b, int(size))
		}(), position, size, errVersion},
		{"version 2", func() []byte {
			b := rec()
			b[10] = FormatVersion + 1
			return formatTestReseal(b, int(size))
		}(), position, size, errVersion},
		{"kind 0", func() []byte {
			b := rec()
			b[11] = 0
			return formatTestReseal(b, int(size))
		}(), position, size, errKind},
		{"kind 3", func() []byte {
			b := rec()
			b[11] = 3
			return formatTestReseal(b, int(size))
		}(), position, size, errKind},
		{"epoch 0", func() []byte {
			b := rec()
			binary.LittleEndian.PutUint32(b[28:32], 0)
			return formatTestReseal(b, int(size))
		}(), position, size, errEpoch},
		{"filler of epoch 0", func() []byte {
			b := formatTestFiller(position, 64)
			binary.LittleEndian.PutUint32(b[28:32], 0)
			return formatTestReseal(b, HeaderSize)
		}(), position, HeaderSize + 64, errEpoch},
		{"epoch changed", func() []byte {
			b := rec()
			b[31] = 0x80
			return b
		}(), position, size, errChecksum},
		{"record read at a later position", rec(), position + size, 1 << 20, errPosition},
		{"record read at an earlier position", rec(), position - size, 1 << 20, errPosition},
		{"record read at position 0", rec(), 0, 1 << 20, errPosition},
		{"filler read at another position", formatTestFiller(position, 64), position + 4096, HeaderSize + 64, errPosition},
		{"record one byte past room", rec(), position, size - 1, errLength},
		{"record, room smaller than a header", rec(), position, HeaderSize - 1, errLength},
		{"record, no room", rec(), position, 0, errLength},
		{"record, negative room", rec(), position, -1, errLength},
		{"empty record, room smaller than a header", formatTestRecord(position, 0, nil), position, HeaderSize - 1, errLength},
		{"filler short of the segment end", formatTestFiller(position, 64), position, HeaderSize + 65, errLength},
		{"filler far short of the segment end", formatTestFiller(position, 0), position, 1 << 20, errLength},
		{"filler past the segment end", formatTestFiller(position, 64), position, HeaderSize + 63, errLength},
		{"no bytes", nil, position, 1 << 20, errShortBytes},
		{"one byte", rec()[:1], position, 1 << 20, errShortBytes},
		{"header less one byte", rec()[:HeaderSize-1], position, 1 << 20, errShortBytes},
		{"header only", rec()[:HeaderSize], position, 1 << 20, errShortBytes},
		{"payload less one byte", rec()[:size-1], position, 1 << 20, errShortBytes},
		{"payload byte changed", func() []byte {
			b := rec()
			b[HeaderSize+50]++
			return b
		}(), position, size, errChecksum},
		{"timestamp changed", func() []byte {
			b := rec()
			b[20]++
			return b
		}(), position, size, errChecksum},
		{"stored CRC changed", func() []byte {
			b := rec()
			b[0]++
			return b
		}(), position, size, errChecksum},
		{"length shortened", func() []byte {
			b := rec()
			binary.LittleEndian.PutUint32(b[4:8], 99)
			return b
		}(), position, size, errChecksum},
		{"filler CRC changed", func() []byte {
			b := formatTestFiller(position, 64)
			b[3]++
			return b
		}(), position, HeaderSize + 64, errChecksum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, payload, err := decodeRecord(tt.b, tt.position, tt.room)
			if !errors.Is(err, tt.want) {
				t.Fatalf("decodeRecord: error %v, want %v", err, tt.want)
			}
			if h != (header{}) || payload != nil {
				t.Errorf("decodeRecord failed but returned header %+v and %d payload bytes", h, len(payload))
			}
		})
	}
}

// TestDecodeRecordDetectsBitFlips flips every bit of a small record and of
// a filler header, one at a time, and checks that decodeRecord rejects each
// result, whether the buffer and room end with the record or go beyond it.
func TestDecodeRecordDetectsBitFlips(t *testing.T) {
	const position = 1 << 16
	tests := []struct {
		name  string
		b     []byte // the encoding, followed by zero bytes
		n     int    // bytes of b to flip bits in
		rooms []int64
	}{
		{
			name:  "record",
			b:     append(formatTestRecord(position, 1234567, formatTestPayload(24)), make([]byte, 64)...),
			n:     HeaderSize + 24,
			rooms: []int64{HeaderSize + 24, HeaderSize + 24 + 64, 1 << 20},
		},
		{
			name:  "filler",
			b:     formatTestFiller(position, 40),
			n:     HeaderSize,
			rooms: []int64{HeaderSize + 40},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, room := range tt.rooms {
				for _, length := range []int{tt.n, len(tt.b)} {
					b := bytes.Clone(tt.b[:length])
					if _, _, err := decodeRecord(b, position, room); err != nil {
						t.Fatalf("room %d, %d bytes: intact encoding fails: %v", room, length, err)
					}
					for bit := 0; bit < 8*tt.n; bit++ {
						b[bit/8] ^= 1 << (bit % 8)
						if h, _, err := decodeRecord(b, position, room); err == nil {
							t.Errorf("room %d, %d bytes: flipped bit %d (byte %d) decodes as %+v", room, length, bit, bit/8, h)
						}
						b[bit/8] ^= 1 << (bit % 8)
					}
				}
			}
		})
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, s := range []struct {
		b        []byte
		position int64
		room     int64
	}{
		{formatTestRecord(0, 0, nil), 0, HeaderSize},
		{formatTestRecord(0, 1, []byte("x")), 0, 1 << 20},
		{formatTestRecord(4096, 1_700_000_000_000_000_000, formatTestPayload(100)), 4096, 1 << 20},
		{formatTestRecord(1<<40, -5, formatTestPayload(300)), 1 << 40, recordSize(300)},
		{append(formatTestRecord(64, 7, formatTestPayload(10)), formatTestRecord(106, 8, nil)...), 64, 1 << 20},
		{formatTestFiller(1<<20-64, 64-HeaderSize), 1<<20 - 64, 64},
		{formatTestFiller(8192, 0)[:HeaderSize], 8192, HeaderSize},
		{formatTestFiller(0, 4000)[:HeaderSize], 0, HeaderSize + 4000},
		{make([]byte, 64), 0, 64},
		{nil, 0, 0},
	} {
		f.Add(s.b, s.position, s.room)
	}
	f.Fuzz(func(t *testing.T, b []byte, position, room int64) {
		in := bytes.Clone(b)
		h, payload, err := decodeRecord(b, position, room)
		if !bytes.Equal(in, b) {
			t.Fatal("decodeRecord modified its input")
		}
		if err != nil {
			if h != (header{}) || payload != nil {
				t.Fatalf("decodeRecord failed (%v) but returned header %+v and %d payload bytes", err, h, len(payload))
			}
			return
		}
		if h.position != position {
			t.Fatalf("decoded position %d, read at %d", h.position, position)
		}
		if h.epoch == 0 {
			t.Fatal("decoded a record or filler of epoch 0")
		}
		// Callers never pass a negative room, and for one near
		// math.MinInt64 the bound check in decodeHeader wraps around.
		if room >= 0 && recordSize(int(h.length)) > room {
			t.Fatalf("decoded a %d-byte record or filler with room %d", recordSize(int(h.length)), room)
		}
		switch h.kind {
		case kindRecord:
			if int(h.length) != len(payload) {
				t.Fatalf("header length %d, payload %d bytes", h.length, len(payload))
			}
			n := int(recordSize(len(payload)))
			out := make([]byte, n)
			encodeRecord(out, position, h.timestamp, h.epoch, payload)
			if !bytes.Equal(out, b[:n]) {
				t.Fatalf("re-encoded record\n%x\ndiffers from input\n%x", out, b[:n])
			}
		case kindFiller:
			if payload != nil {
				t.Fatalf("filler returned %d payload bytes", len(payload))
			}
			out := make([]byte, HeaderSize)
			encodeFiller(out, position, h.epoch, h.length)
			if !bytes.Equal(out, b[:HeaderSize]) {
				t.Fatalf("re-encoded filler\n%x\ndiffers from input\n%x", out, b[:HeaderSize])
			}
		default:
			t.Fatalf("decoded unknown kind %d", h.kind)
		}
	})
}
