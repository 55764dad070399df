package transport

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// fastTypes lists the body types with a hand-written codec.
func fastTypes() []reflect.Type {
	return []reflect.Type{
		reflect.TypeFor[AppendRequest](), reflect.TypeFor[AppendResponse](),
		reflect.TypeFor[ReadRequest](), reflect.TypeFor[ReadResponse](),
		reflect.TypeFor[TailRequest](), reflect.TypeFor[TailItem](),
		reflect.TypeFor[Credit](),
	}
}

// checkFastCodec checks one value both ways: the hand-written encoder
// writes go-msgpack's bytes, and the hand-written decoder reads them (and
// go-msgpack reads the hand-written bytes) into an equal value, without
// falling back to reflection.
func checkFastCodec(t *testing.T, v any) {
	t.Helper()
	m := fastOf(v)
	if m == nil {
		t.Fatalf("%T has no hand-written codec", v)
	}
	want, err := encodeReflect(v)
	if err != nil {
		t.Fatal(err)
	}
	got := m.appendMsgpack(nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("%T:\nhand-written % x\n  go-msgpack % x", v, short(got), short(want))
	}
	if n := m.msgpackSize(); n != len(got) {
		t.Fatalf("%T: msgpackSize %d, encoding of %d bytes", v, n, len(got))
	}
	fromReflect := newZero(v)
	if err := decodeReflect(got, fromReflect); err != nil {
		t.Fatalf("go-msgpack refuses the hand-written % x: %v", short(got), err)
	}
	fromFast := newZero(v)
	if !fastOf(fromFast).decodeMsgpack(want) {
		t.Fatalf("hand-written decoder gives up on go-msgpack's % x", short(want))
	}
	if !reflect.DeepEqual(fromFast, fromReflect) || !reflect.DeepEqual(fromFast, v) {
		t.Fatalf("%T decodes differently:\n    value %.300v\nhand-written %.300v\n  go-msgpack %.300v", v, v, fromFast, fromReflect)
	}
}

// short cuts b for a failure message.
func short(b []byte) []byte { return b[:min(len(b), 100)] }

// Sizes at the edges of msgpack's encodings.
var (
	edgeUints = []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64}
	edgeInts  = []int64{0, 1, -1, -32, -33, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769,
		math.MaxInt32, math.MaxInt32 + 1, math.MinInt32, math.MinInt32 - 1, math.MaxInt64, math.MinInt64}
	edgeLens = []int{0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536}
)

func TestFastCodecMatchesReflection(t *testing.T) {
	var vals []any
	for _, v := range sampleMessages() {
		if fastOf(v) != nil {
			vals = append(vals, v)
		}
	}
	vals = append(vals,
		&AppendRequest{}, &AppendRequest{Records: [][]byte{}}, &AppendRequest{Records: [][]byte{nil, {}, {0}}},
		&AppendResponse{}, &AppendResponse{Indexes: []uint64{}}, &AppendResponse{Duplicate: true},
		&ReadResponse{}, &ReadResponse{Records: []Record{}}, &ReadResponse{Records: []Record{{}}},
		&TailRequest{Stale: true}, &TailItem{}, &Credit{}, &Credit{Items: math.MaxUint32},
	)
	for _, u := range edgeUints {
		vals = append(vals,
			&AppendRequest{ClientID: "c", Seq: u, Base: u, After: u, Records: [][]byte{{1}}},
			&AppendResponse{Indexes: []uint64{u, u}},
			&ReadRequest{From: u, MaxRecords: uint32(u), MaxBytes: uint32(u >> 1)},
			&ReadResponse{Next: u, Records: []Record{{Index: u}}},
		)
	}
	for _, i := range edgeInts {
		vals = append(vals, &TailItem{Records: []Record{{Index: 1, AppendedAt: i, Data: []byte{}}}})
	}
	for _, n := range edgeLens {
		name := strings.Repeat("L", n)
		vals = append(vals,
			&AppendRequest{Log: name, Records: [][]byte{{1}}},
			&ReadRequest{Log: name, From: 1},
			&TailRequest{Log: name, MaxBytes: 7},
		)
		vals = append(vals,
			&AppendRequest{ClientID: strings.Repeat("c", n), Seq: 1, Records: [][]byte{make([]byte, n)}},
			&AppendRequest{Records: make([][]byte, min(n, MaxBodyElements))},
			&AppendResponse{Indexes: make([]uint64, min(n, MaxBodyElements))},
			&ReadResponse{Records: make([]Record, min(n, MaxBodyElements))},
		)
	}
	for _, v := range vals {
		checkFastCodec(t, v)
	}
}

// randomMessage returns a random value of a hand-written type, with
// integers and lengths drawn around the encodings' edges.
func randomMessage(rng *rand.Rand, typ reflect.Type) any {
	u := func() uint64 {
		if rng.IntN(4) == 0 {
			return 0
		}
		return edgeUints[rng.IntN(len(edgeUints))] + uint64(rng.IntN(3)) - 1
	}
	i := func() int64 {
		return edgeInts[rng.IntN(len(edgeInts))] + int64(rng.IntN(3)) - 1
	}
	n := func(limit int) int {
		if rng.IntN(2) == 0 {
			return rng.IntN(4)
		}
		return min(edgeLens[rng.IntN(len(edgeLens))]+rng.IntN(3), limit)
	}
	bin := func() []byte {
		switch rng.IntN(8) {
		case 0:
			return nil
		case 1:
			return []byte{}
		}
		p := make([]byte, n(70000))
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		return p
	}
	// logName is empty (the default log) half the time, else a name of a
	// length around the str encodings' edges (the codec does not check
	// names; Validate does).
	logName := func() string {
		if rng.IntN(2) == 0 {
			return ""
		}
		return strings.Repeat("l", max(1, n(300)))
	}
	records := func() []Record {
		if rng.IntN(6) == 0 {
			return nil
		}
		rs := make([]Record, n(40))
		for j := range rs {
			rs[j] = Record{Index: u(), Data: bin(), AppendedAt: i()}
		}
		return rs
	}
	switch typ {
	case reflect.TypeFor[AppendRequest]():
		r := &AppendRequest{Seq: u(), Base: u(), After: u(), ClientID: strings.Repeat("id", n(300)/2), Log: logName()}
		if rng.IntN(6) != 0 {
			r.Records = make([][]byte, n(40))
			for j := range r.Records {
				r.Records[j] = bin()
			}
		}
		return r
	case reflect.TypeFor[AppendResponse]():
		r := &AppendResponse{Duplicate: rng.IntN(2) == 0}
		if rng.IntN(6) != 0 {
			r.Indexes = make([]uint64, n(MaxBodyElements))
			for j := range r.Indexes {
				r.Indexes[j] = u()
			}
		}
		return r
	case reflect.TypeFor[ReadRequest]():
		return &ReadRequest{From: u(), MaxRecords: uint32(u()), MaxBytes: uint32(u()), Stale: rng.IntN(2) == 0, Log: logName()}
	case reflect.TypeFor[TailRequest]():
		return &TailRequest{From: u(), MaxRecords: uint32(u()), MaxBytes: uint32(u()), Stale: rng.IntN(2) == 0, Log: logName()}
	case reflect.TypeFor[ReadResponse]():
		return &ReadResponse{Records: records(), Next: u()}
	case reflect.TypeFor[TailItem]():
		return &TailItem{Records: records(), Next: u()}
	case reflect.TypeFor[Credit]():
		return &Credit{Items: uint32(u())}
	}
	panic(typ)
}

// Randomized values round-trip both ways between the two codecs.
func TestFastCodecRandomized(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for range 300 {
		for _, typ := range fastTypes() {
			checkFastCodec(t, randomMessage(rng, typ))
		}
	}
}

// mapEntries splits a body that is one map into its entries, each a key
// and its value as raw bytes.
func mapEntries(t *testing.T, b []byte) (header []byte, entries [][]byte) {
	t.Helper()
	d := mpDec{b: b}
	n := d.mapLen()
	if d.bad {
		t.Fatalf("% x is not a map", b)
	}
	header, off := b[:d.off], d.off
	for range n {
		k, err := skipValue(b, off, 0)
		if err != nil {
			t.Fatal(err)
		}
		end, err := skipValue(b, k, 0)
		if err != nil {
			t.Fatal(err)
		}
		entries, off = append(entries, b[off:end]), end
	}
	return header, entries
}

// The hand-written decoders read fields in any order, as go-msgpack does.
func TestFastDecodeAnyKeyOrder(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for range 200 {
		for _, typ := range fastTypes() {
			v := randomMessage(rng, typ)
			b, err := encodeReflect(v)
			if err != nil {
				t.Fatal(err)
			}
			header, entries := mapEntries(t, b)
			rng.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
			shuffled := bytes.Join(append([][]byte{header}, entries...), nil)
			got, want := reflect.New(typ).Interface(), reflect.New(typ).Interface()
			if err := decodeReflect(shuffled, want); err != nil {
				t.Fatal(err)
			}
			if !fastOf(got).decodeMsgpack(shuffled) {
				t.Fatalf("%v: hand-written decoder gives up on % x", typ, short(shuffled))
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%v: % x decodes as %.300v, go-msgpack %.300v", typ, short(shuffled), got, want)
			}
		}
	}
}

// Bodies the hand-written decoders do not expect are left to go-msgpack:
// DecodeBody then returns exactly what go-msgpack returns, a value or an
// error.
func TestFastDecodeFallsBack(t *testing.T) {
	key := func(k string) []byte { return []byte(k) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name string
		v    any
		in   []byte
	}{
		{"unknown field", &AppendRequest{}, cat([]byte{0x81}, key("\xa3foo"), []byte{1})},
		{"repeated field", &AppendRequest{}, cat([]byte{0x82}, key(keySeq), []byte{1}, key(keySeq), []byte{2})},
		{"str record", &AppendRequest{}, cat([]byte{0x81}, key(keyRecords), []byte{0x91, 0xa1, 'x'})},
		{"bin key", &AppendRequest{}, cat([]byte{0x81, 0xc4, 3}, []byte("seq"), []byte{1})},
		{"bin client id", &AppendRequest{}, cat([]byte{0x81}, key(keyClientID), []byte{0xc4, 1, 'x'})},
		{"int 8 seq", &AppendRequest{}, cat([]byte{0x81}, key(keySeq), []byte{0xd0, 5})},
		{"negative seq", &AppendRequest{}, cat([]byte{0x81}, key(keySeq), []byte{0xff})},
		{"nil seq", &AppendRequest{}, cat([]byte{0x81}, key(keySeq), []byte{0xc0})},
		{"float seq", &AppendRequest{}, cat([]byte{0x81}, key(keySeq), []byte{0xca, 0x40, 0, 0, 0})},
		{"record as array of ints", &AppendRequest{}, cat([]byte{0x81}, key(keyRecords), []byte{0x91, 0x92, 1, 2})},
		{"trailing byte", &AppendRequest{}, cat([]byte{0x81}, key(keySeq), []byte{1, 0})},
		{"truncated", &AppendRequest{}, cat([]byte{0x81}, key(keyRecords), []byte{0x92, 0xc4, 1})},
		{"nil duplicate", &AppendResponse{}, cat([]byte{0x81}, key(keyDuplicate), []byte{0xc0})},
		{"int duplicate", &AppendResponse{}, cat([]byte{0x81}, key(keyDuplicate), []byte{1})},
		{"bin indexes", &AppendResponse{}, cat([]byte{0x81}, key(keyIndexes), []byte{0xc4, 2, 1, 2})},
		{"max records over 32 bits", &ReadRequest{}, cat([]byte{0x81}, key(keyMaxRecords), []byte{0xcf, 0, 0, 0, 1, 0, 0, 0, 0})},
		{"nil record", &ReadResponse{}, cat([]byte{0x81}, key(keyRecords), []byte{0x91, 0xc0})},
		{"uint appended at", &TailItem{}, cat([]byte{0x81}, key(keyRecords), []byte{0x91, 0x81}, key(keyAppendedAt), []byte{0xcc, 200})},
		{"huge appended at", &TailItem{}, cat([]byte{0x81}, key(keyRecords), []byte{0x91, 0x81}, key(keyAppendedAt), []byte{0xcf, 0xff, 0, 0, 0, 0, 0, 0, 0})},
		{"repeated log", &ReadRequest{}, cat([]byte{0x82}, key(keyLog), []byte{0xa1, 'a'}, key(keyLog), []byte{0xa1, 'b'})},
		{"bin log", &AppendRequest{}, cat([]byte{0x82}, key(keyLog), []byte{0xc4, 1, 'a'}, key(keyRecords), []byte{0x91, 0xc4, 1, 'x'})},
		{"int log", &TailRequest{}, cat([]byte{0x81}, key(keyLog), []byte{1})},
		{"array at the top", &Credit{}, []byte{0x91, 1}},
		{"empty", &Credit{}, nil},
		{"too many elements", &AppendResponse{}, cat([]byte{0x81}, key(keyIndexes), []byte{0xdd, 0, 1, 0, 1}, bytes.Repeat([]byte{1}, MaxBodyElements+1))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if fastOf(newZero(tt.v)).decodeMsgpack(tt.in) {
				t.Fatalf("hand-written decoder accepts % x", tt.in)
			}
			got, want := newZero(tt.v), newZero(tt.v)
			gotErr, wantErr := DecodeBody(tt.in, got), decodeReflect(tt.in, want)
			if (gotErr == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("DecodeBody = %+v, %v; go-msgpack %+v, %v", got, gotErr, want, wantErr)
			}
		})
	}
}

// A hand-written decoder that gives up leaves its value zero, so that
// go-msgpack decodes into a zero value.
func TestFastDecodeFailureLeavesZero(t *testing.T) {
	var r AppendRequest
	in := bytes.Join([][]byte{{0x82}, []byte(keySeq), {7}, []byte(keyRecords), {0x91, 0xa1, 'x'}}, nil)
	if r.decodeMsgpack(in) {
		t.Fatal("accepted a str record")
	}
	if !reflect.DeepEqual(r, AppendRequest{}) {
		t.Fatalf("left %+v", r)
	}
}
