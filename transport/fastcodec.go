package transport

// Hand-written codecs of the hot-path bodies: Append and its reply, Read
// and its reply, Tail and its items, and Credit. Every append, read and
// tail item crosses them twice (client and server), so they avoid
// go-msgpack's reflection, which cost a leader under load a seventh of its
// CPU. The format does not change: each encoder writes the bytes
// go-msgpack writes for the same value (the field keys in sorted order,
// omitempty fields left out, see msgpack.go), and each decoder reads
// what go-msgpack writes, in any key order; on anything else it gives up
// and DecodeBody hands the body to the reflection codec, which accepts it
// or says why not. Other bodies keep the reflection codec.

// fastMessage is a body type with a hand-written codec.
type fastMessage interface {
	// msgpackSize is the length of the encoding.
	msgpackSize() int
	// appendMsgpack appends the encoding to b.
	appendMsgpack(b []byte) []byte
	// decodeMsgpack decodes a whole body into the zero value it is called
	// on and reports success; on failure the value is zero again. Byte
	// slices in the value alias b.
	decodeMsgpack(b []byte) bool
}

// fastOf returns v as a fastMessage, or nil when v (a nil pointer
// included) has no hand-written codec. Tail's request and item have the
// layout, tags included, of Read's.
func fastOf(v any) fastMessage {
	switch m := v.(type) {
	case *AppendRequest:
		if m != nil {
			return m
		}
	case *AppendResponse:
		if m != nil {
			return m
		}
	case *ReadRequest:
		if m != nil {
			return m
		}
	case *ReadResponse:
		if m != nil {
			return m
		}
	case *TailRequest:
		if m != nil {
			return (*ReadRequest)(m)
		}
	case *TailItem:
		if m != nil {
			return (*ReadResponse)(m)
		}
	case *Credit:
		if m != nil {
			return m
		}
	}
	return nil
}

// Map keys as encoded (fixstr header and name) and as decoded (name).
// They are the msgpack tags of messages.go; TestFastCodecMatchesReflection
// fails if one differs.
const (
	keyAfter      = "\xa5" + "after"
	keyAppendedAt = "\xab" + "appended_at"
	keyBase       = "\xa4" + "base"
	keyClientID   = "\xa9" + "client_id"
	keyData       = "\xa4" + "data"
	keyDuplicate  = "\xa9" + "duplicate"
	keyFrom       = "\xa4" + "from"
	keyIndex      = "\xa5" + "index"
	keyIndexes    = "\xa7" + "indexes"
	keyItems      = "\xa5" + "items"
	keyLog        = "\xa3" + "log"
	keyMaxBytes   = "\xa9" + "max_bytes"
	keyMaxRecords = "\xab" + "max_records"
	keyNext       = "\xa4" + "next"
	keyRecords    = "\xa7" + "records"
	keySeq        = "\xa3" + "seq"
	keyStale      = "\xa5" + "stale"
)

// name strips a key's header.
func name(key string) string { return key[1:] }

// fields tracks the keys a decoder has seen, to give up on a repeated one
// (go-msgpack would decode it twice into the same field).
type fields uint8

// see records field bit f, and fails d if it was seen before.
func (s *fields) see(d *mpDec, f fields) {
	if *s&f != 0 {
		d.fail()
	}
	*s |= f
}

// AppendRequest: after, base, client_id, log, records, seq. The log field
// is left out for the default log: one comparison more per request.

func (m *AppendRequest) msgpackSize() int {
	n, size := 1, len(keyRecords)+sizeBinArray(m.Records)
	if m.After != 0 {
		n, size = n+1, size+len(keyAfter)+sizeUint(m.After)
	}
	if m.Base != 0 {
		n, size = n+1, size+len(keyBase)+sizeUint(m.Base)
	}
	if m.ClientID != "" {
		n, size = n+1, size+len(keyClientID)+sizeStr(len(m.ClientID))
	}
	if m.Log != "" {
		n, size = n+1, size+len(keyLog)+sizeStr(len(m.Log))
	}
	if m.Seq != 0 {
		n, size = n+1, size+len(keySeq)+sizeUint(m.Seq)
	}
	return sizeContainer(n) + size
}

func (m *AppendRequest) appendMsgpack(b []byte) []byte {
	n := 1
	if m.After != 0 {
		n++
	}
	if m.Base != 0 {
		n++
	}
	if m.ClientID != "" {
		n++
	}
	if m.Log != "" {
		n++
	}
	if m.Seq != 0 {
		n++
	}
	b = appendMap(b, n)
	if m.After != 0 {
		b = appendUint(append(b, keyAfter...), m.After)
	}
	if m.Base != 0 {
		b = appendUint(append(b, keyBase...), m.Base)
	}
	if m.ClientID != "" {
		b = appendStr(append(b, keyClientID...), m.ClientID)
	}
	if m.Log != "" {
		b = appendStr(append(b, keyLog...), m.Log)
	}
	b = appendBinArray(append(b, keyRecords...), m.Records)
	if m.Seq != 0 {
		b = appendUint(append(b, keySeq...), m.Seq)
	}
	return b
}

func (m *AppendRequest) decodeMsgpack(b []byte) bool {
	d := mpDec{b: b}
	if !d.isNil() {
		var seen fields
		for range d.mapLen() {
			switch string(d.key()) {
			case name(keyAfter):
				seen.see(&d, 16)
				m.After = d.uint()
			case name(keyBase):
				seen.see(&d, 1)
				m.Base = d.uint()
			case name(keyClientID):
				seen.see(&d, 2)
				m.ClientID = d.str()
			case name(keyLog):
				seen.see(&d, 32)
				m.Log = d.str()
			case name(keyRecords):
				seen.see(&d, 4)
				m.Records = d.binArray()
			case name(keySeq):
				seen.see(&d, 8)
				m.Seq = d.uint()
			default:
				d.fail()
			}
			if d.bad {
				break
			}
		}
	}
	if !d.done() {
		*m = AppendRequest{}
		return false
	}
	return true
}

// AppendResponse: duplicate, indexes.

func (m *AppendResponse) msgpackSize() int {
	n, size := 1, len(keyIndexes)+sizeUintArray(m.Indexes)
	if m.Duplicate {
		n, size = n+1, size+len(keyDuplicate)+1
	}
	return sizeContainer(n) + size
}

func (m *AppendResponse) appendMsgpack(b []byte) []byte {
	if m.Duplicate {
		b = appendBool(append(appendMap(b, 2), keyDuplicate...), true)
	} else {
		b = appendMap(b, 1)
	}
	return appendUintArray(append(b, keyIndexes...), m.Indexes)
}

func (m *AppendResponse) decodeMsgpack(b []byte) bool {
	d := mpDec{b: b}
	if !d.isNil() {
		var seen fields
		for range d.mapLen() {
			switch string(d.key()) {
			case name(keyDuplicate):
				seen.see(&d, 1)
				m.Duplicate = d.bool()
			case name(keyIndexes):
				seen.see(&d, 2)
				m.Indexes = d.uintArray()
			default:
				d.fail()
			}
			if d.bad {
				break
			}
		}
	}
	if !d.done() {
		*m = AppendResponse{}
		return false
	}
	return true
}

// ReadRequest, and TailRequest: from, log, max_bytes, max_records, stale.

func (m *ReadRequest) msgpackSize() int {
	n, size := 0, 0
	if m.From != 0 {
		n, size = n+1, size+len(keyFrom)+sizeUint(m.From)
	}
	if m.Log != "" {
		n, size = n+1, size+len(keyLog)+sizeStr(len(m.Log))
	}
	if m.MaxBytes != 0 {
		n, size = n+1, size+len(keyMaxBytes)+sizeUint(uint64(m.MaxBytes))
	}
	if m.MaxRecords != 0 {
		n, size = n+1, size+len(keyMaxRecords)+sizeUint(uint64(m.MaxRecords))
	}
	if m.Stale {
		n, size = n+1, size+len(keyStale)+1
	}
	return sizeContainer(n) + size
}

func (m *ReadRequest) appendMsgpack(b []byte) []byte {
	n := 0
	for _, set := range [...]bool{m.From != 0, m.Log != "", m.MaxBytes != 0, m.MaxRecords != 0, m.Stale} {
		if set {
			n++
		}
	}
	b = appendMap(b, n)
	if m.From != 0 {
		b = appendUint(append(b, keyFrom...), m.From)
	}
	if m.Log != "" {
		b = appendStr(append(b, keyLog...), m.Log)
	}
	if m.MaxBytes != 0 {
		b = appendUint(append(b, keyMaxBytes...), uint64(m.MaxBytes))
	}
	if m.MaxRecords != 0 {
		b = appendUint(append(b, keyMaxRecords...), uint64(m.MaxRecords))
	}
	if m.Stale {
		b = appendBool(append(b, keyStale...), true)
	}
	return b
}

func (m *ReadRequest) decodeMsgpack(b []byte) bool {
	d := mpDec{b: b}
	if !d.isNil() {
		var seen fields
		for range d.mapLen() {
			switch string(d.key()) {
			case name(keyFrom):
				seen.see(&d, 1)
				m.From = d.uint()
			case name(keyLog):
				seen.see(&d, 16)
				m.Log = d.str()
			case name(keyMaxBytes):
				seen.see(&d, 2)
				m.MaxBytes = d.uint32()
			case name(keyMaxRecords):
				seen.see(&d, 4)
				m.MaxRecords = d.uint32()
			case name(keyStale):
				seen.see(&d, 8)
				m.Stale = d.bool()
			default:
				d.fail()
			}
			if d.bad {
				break
			}
		}
	}
	if !d.done() {
		*m = ReadRequest{}
		return false
	}
	return true
}

// ReadResponse, and TailItem: next, records.

func (m *ReadResponse) msgpackSize() int {
	size := sizeContainer(2) + len(keyNext) + sizeUint(m.Next) + len(keyRecords)
	if m.Records == nil {
		return size + 1
	}
	size += sizeContainer(len(m.Records))
	for i := range m.Records {
		size += m.Records[i].msgpackSize()
	}
	return size
}

func (m *ReadResponse) appendMsgpack(b []byte) []byte {
	b = appendUint(append(appendMap(b, 2), keyNext...), m.Next)
	b = append(b, keyRecords...)
	if m.Records == nil {
		return append(b, mpNil)
	}
	b = appendArray(b, len(m.Records))
	for i := range m.Records {
		b = m.Records[i].appendMsgpack(b)
	}
	return b
}

func (m *ReadResponse) decodeMsgpack(b []byte) bool {
	d := mpDec{b: b}
	if !d.isNil() {
		var seen fields
		for range d.mapLen() {
			switch string(d.key()) {
			case name(keyNext):
				seen.see(&d, 1)
				m.Next = d.uint()
			case name(keyRecords):
				seen.see(&d, 2)
				m.Records = d.recordArray()
			default:
				d.fail()
			}
			if d.bad {
				break
			}
		}
	}
	if !d.done() {
		*m = ReadResponse{}
		return false
	}
	return true
}

// Record: appended_at, data, index.

func (r *Record) msgpackSize() int {
	n, size := 2, len(keyData)+sizeBin(r.Data)+len(keyIndex)+sizeUint(r.Index)
	if r.AppendedAt != 0 {
		n, size = n+1, size+len(keyAppendedAt)+sizeInt(r.AppendedAt)
	}
	return sizeContainer(n) + size
}

func (r *Record) appendMsgpack(b []byte) []byte {
	if r.AppendedAt != 0 {
		b = appendInt(append(appendMap(b, 3), keyAppendedAt...), r.AppendedAt)
	} else {
		b = appendMap(b, 2)
	}
	b = appendBin(append(b, keyData...), r.Data)
	return appendUint(append(b, keyIndex...), r.Index)
}

// record decodes one Record, which must be a map (go-msgpack also takes a
// nil, as a zero Record; that is left to it).
func (d *mpDec) record(r *Record) {
	var seen fields
	for range d.mapLen() {
		switch string(d.key()) {
		case name(keyAppendedAt):
			seen.see(d, 1)
			r.AppendedAt = d.int()
		case name(keyData):
			seen.see(d, 2)
			r.Data = d.bin()
		case name(keyIndex):
			seen.see(d, 4)
			r.Index = d.uint()
		default:
			d.fail()
		}
		if d.bad {
			return
		}
	}
}

// Credit: items.

func (m *Credit) msgpackSize() int {
	return sizeContainer(1) + len(keyItems) + sizeUint(uint64(m.Items))
}

func (m *Credit) appendMsgpack(b []byte) []byte {
	return appendUint(append(appendMap(b, 1), keyItems...), uint64(m.Items))
}

func (m *Credit) decodeMsgpack(b []byte) bool {
	d := mpDec{b: b}
	if !d.isNil() {
		var seen fields
		for range d.mapLen() {
			switch string(d.key()) {
			case name(keyItems):
				seen.see(&d, 1)
				m.Items = d.uint32()
			default:
				d.fail()
			}
			if d.bad {
				break
			}
		}
	}
	if !d.done() {
		*m = Credit{}
		return false
	}
	return true
}

// Arrays.

func sizeBinArray(a [][]byte) int {
	if a == nil {
		return 1
	}
	size := sizeContainer(len(a))
	for _, p := range a {
		size += sizeBin(p)
	}
	return size
}

func appendBinArray(b []byte, a [][]byte) []byte {
	if a == nil {
		return append(b, mpNil)
	}
	b = appendArray(b, len(a))
	for _, p := range a {
		b = appendBin(b, p)
	}
	return b
}

// binArray reads an array of bins, or nil.
func (d *mpDec) binArray() [][]byte {
	if d.isNil() {
		return nil
	}
	n := d.arrayLen()
	if d.bad {
		return nil
	}
	a := make([][]byte, n)
	for i := range a {
		if a[i] = d.bin(); d.bad {
			return nil
		}
	}
	return a
}

func sizeUintArray(a []uint64) int {
	if a == nil {
		return 1
	}
	size := sizeContainer(len(a))
	for _, v := range a {
		size += sizeUint(v)
	}
	return size
}

func appendUintArray(b []byte, a []uint64) []byte {
	if a == nil {
		return append(b, mpNil)
	}
	b = appendArray(b, len(a))
	for _, v := range a {
		b = appendUint(b, v)
	}
	return b
}

// uintArray reads an array of unsigned integers, or nil.
func (d *mpDec) uintArray() []uint64 {
	if d.isNil() {
		return nil
	}
	n := d.arrayLen()
	if d.bad {
		return nil
	}
	a := make([]uint64, n)
	for i := range a {
		if a[i] = d.uint(); d.bad {
			return nil
		}
	}
	return a
}

// recordArray reads an array of Records, or nil.
func (d *mpDec) recordArray() []Record {
	if d.isNil() {
		return nil
	}
	n := d.arrayLen()
	if d.bad {
		return nil
	}
	a := make([]Record, n)
	for i := range a {
		if d.record(&a[i]); d.bad {
			return nil
		}
	}
	return a
}
