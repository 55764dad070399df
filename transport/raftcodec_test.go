//lint:file-ignore SA1019 the tests set raft's deprecated Leader and Candidate fields, which raft v1.8.0 still sets and reads

package transport

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// sampleRaftRequests returns one request of each kind with every field
// set, and some with nil and empty variants.
func sampleRaftRequests() []any {
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte("127.0.0.1:7000")}
	at := time.Unix(1_700_000_000, 123_456_789)
	return []any{
		&raft.AppendEntriesRequest{
			RPCHeader: hdr, Term: 7, Leader: []byte("127.0.0.1:7000"), PrevLogEntry: 100, PrevLogTerm: 6, LeaderCommitIndex: 99,
			Entries: []*raft.Log{
				{Index: 101, Term: 7, Type: raft.LogCommand, Data: []byte("hello"), Extensions: []byte("ext"), AppendedAt: at},
				{Index: 102, Term: 7, Type: raft.LogNoop},
				{Index: 103, Term: 7, Type: raft.LogConfiguration, Data: []byte{}, Extensions: []byte{}, AppendedAt: at.Add(time.Nanosecond)},
				{Index: 1 << 62, Term: 1 << 40, Type: raft.LogBarrier, AppendedAt: time.Unix(-5, 1)},
			},
		},
		&raft.AppendEntriesRequest{RPCHeader: hdr, Term: 7}, // a heartbeat: nil Entries
		&raft.AppendEntriesRequest{Entries: []*raft.Log{}},
		&raft.RequestVoteRequest{RPCHeader: hdr, Term: 9, Candidate: []byte("c"), LastLogIndex: 50, LastLogTerm: 8, LeadershipTransfer: true},
		&raft.RequestVoteRequest{},
		&raft.RequestPreVoteRequest{RPCHeader: hdr, Term: 9, LastLogIndex: 50, LastLogTerm: 8},
		&raft.TimeoutNowRequest{RPCHeader: hdr},
		&raft.InstallSnapshotRequest{
			RPCHeader: hdr, SnapshotVersion: raft.SnapshotVersionMax, Term: 9, Leader: []byte("l"), LastLogIndex: 1000, LastLogTerm: 8,
			Peers: []byte("p"), Configuration: []byte("conf"), ConfigurationIndex: 900, Size: 1 << 33,
		},
	}
}

func sampleRaftResponses() []any {
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte("127.0.0.1:7001")}
	return []any{
		&raft.AppendEntriesResponse{RPCHeader: hdr, Term: 7, LastLog: 103, Success: true, NoRetryBackoff: true},
		&raft.AppendEntriesResponse{},
		&raft.RequestVoteResponse{RPCHeader: hdr, Term: 9, Peers: []byte("peers"), Granted: true},
		&raft.RequestPreVoteResponse{RPCHeader: hdr, Term: 9, Granted: true},
		&raft.TimeoutNowResponse{RPCHeader: hdr},
		&raft.InstallSnapshotResponse{RPCHeader: hdr, Term: 9, Success: true},
	}
}

func kindOf(v any) raftKind {
	switch v.(type) {
	case *raft.AppendEntriesRequest, *raft.AppendEntriesResponse:
		return raftAppendEntries
	case *raft.RequestVoteRequest, *raft.RequestVoteResponse:
		return raftRequestVote
	case *raft.RequestPreVoteRequest, *raft.RequestPreVoteResponse:
		return raftRequestPreVote
	case *raft.TimeoutNowRequest, *raft.TimeoutNowResponse:
		return raftTimeoutNow
	case *raft.InstallSnapshotRequest, *raft.InstallSnapshotResponse:
		return raftInstallSnapshot
	}
	panic("no kind")
}

// newResponse returns a zero response of kind k.
func newResponse(k raftKind) any {
	switch k {
	case raftAppendEntries:
		return new(raft.AppendEntriesResponse)
	case raftRequestVote:
		return new(raft.RequestVoteResponse)
	case raftRequestPreVote:
		return new(raft.RequestPreVoteResponse)
	case raftTimeoutNow:
		return new(raft.TimeoutNowResponse)
	case raftInstallSnapshot:
		return new(raft.InstallSnapshotResponse)
	}
	panic("no kind")
}

// sameRequest compares requests, entries field by field and times with
// Equal (the location does not travel).
func sameRequest(t *testing.T, got, want any) {
	t.Helper()
	g, ok1 := got.(*raft.AppendEntriesRequest)
	w, ok2 := want.(*raft.AppendEntriesRequest)
	if !ok1 || !ok2 {
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded\n%#v\nwant\n%#v", got, want)
		}
		return
	}
	gc, wc := *g, *w
	gc.Entries, wc.Entries = nil, nil
	if !reflect.DeepEqual(gc, wc) {
		t.Fatalf("decoded\n%#v\nwant\n%#v", gc, wc)
	}
	if (g.Entries == nil) != (w.Entries == nil) || len(g.Entries) != len(w.Entries) {
		t.Fatalf("decoded entries %#v, want %#v", g.Entries, w.Entries)
	}
	for i := range w.Entries {
		ge, we := *g.Entries[i], *w.Entries[i]
		if !ge.AppendedAt.Equal(we.AppendedAt) || ge.AppendedAt.IsZero() != we.AppendedAt.IsZero() {
			t.Fatalf("entry %d AppendedAt %v, want %v", i, ge.AppendedAt, we.AppendedAt)
		}
		ge.AppendedAt, we.AppendedAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(ge, we) {
			t.Fatalf("entry %d\n%#v\nwant\n%#v", i, ge, we)
		}
	}
}

func TestRaftCodecRequestsRoundTrip(t *testing.T) {
	for _, req := range sampleRaftRequests() {
		k := kindOf(req)
		body, err := appendRequest(nil, k, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRequest(k, body)
		if err != nil {
			t.Fatalf("%v: %v", k, err)
		}
		sameRequest(t, got, req)
		again, err := appendRequest(nil, k, got)
		if err != nil || !bytes.Equal(again, body) {
			t.Fatalf("%v: re-encoding gives %x (%v), want %x", k, again, err, body)
		}
	}
}

func TestRaftCodecResponsesRoundTrip(t *testing.T) {
	for _, resp := range sampleRaftResponses() {
		k := kindOf(resp)
		for _, rpcErr := range []error{nil, errors.New("no leader")} {
			body := appendResponse(nil, k, resp, rpcErr)
			got := newResponse(k)
			msg, err := decodeResponse(k, body, got)
			if err != nil {
				t.Fatalf("%v: %v", k, err)
			}
			if want := errString(rpcErr); msg != want {
				t.Fatalf("%v: error %q, want %q", k, msg, want)
			}
			if !reflect.DeepEqual(got, resp) {
				t.Fatalf("%v: decoded %#v, want %#v", k, got, resp)
			}
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestRaftCodecResponseWithoutBody: raft answers some RPCs with an error
// and no response, or (a bug) a response of another type; the peer gets
// the error and a zero response.
func TestRaftCodecResponseWithoutBody(t *testing.T) {
	body := appendResponse(nil, raftAppendEntries, nil, errors.New("unexpected command"))
	var r raft.AppendEntriesResponse
	if msg, err := decodeResponse(raftAppendEntries, body, &r); err != nil || msg != "unexpected command" || r.Success {
		t.Fatalf("nil response: %q %v %+v", msg, err, r)
	}
	body = appendResponse(nil, raftRequestVote, &raft.AppendEntriesResponse{Success: true}, nil)
	var v raft.RequestVoteResponse
	if msg, err := decodeResponse(raftRequestVote, body, &v); err != nil || !strings.Contains(msg, "AppendEntriesResponse") || v.Granted {
		t.Fatalf("wrong response type: %q %v %+v", msg, err, v)
	}
	long := errors.New(strings.Repeat("x", 2*raftMaxErrorLen))
	body = appendResponse(nil, raftTimeoutNow, nil, long)
	if msg, err := decodeResponse(raftTimeoutNow, body, new(raft.TimeoutNowResponse)); err != nil || len(msg) != raftMaxErrorLen {
		t.Fatalf("long error: %d bytes, %v", len(msg), err)
	}
}

// TestRaftCodecMalformed: every way a body can break the rules is an
// ErrMalformedBody, and nothing panics.
func TestRaftCodecMalformed(t *testing.T) {
	good, err := appendRequest(nil, raftRequestVote, &raft.RequestVoteRequest{Term: 1, Candidate: []byte("c")})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		kind raftKind
		body []byte
	}{
		{"empty", raftRequestVote, nil},
		{"truncated", raftRequestVote, good[:len(good)-1]},
		{"trailing byte", raftRequestVote, append(append([]byte{}, good...), 0)},
		{"long varint", raftRequestPreVote, []byte{0, 0, 0, 0x81, 0x00, 0, 0}},
		{"overflowing varint", raftRequestPreVote, []byte{0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0}},
		{"bytes past the end", raftTimeoutNow, []byte{0, 10, 'a', 0}},
		{"bad bool", raftRequestVote, []byte{0, 0, 0, 1, 0, 0, 0, 2}},
		{"bad time tag", raftAppendEntries, []byte{0, 0, 0, 1, 0, 0, 0, 0, 2, 1, 1, 0, 0, 0, 7}},
		{"nanoseconds past a second", raftAppendEntries, append([]byte{0, 0, 0, 1, 0, 0, 0, 0, 2, 1, 1, 0, 0, 0, 1, 2}, appendUvarint(nil, 1e9)...)},
		{"zero time written as a time", raftAppendEntries, append([]byte{0, 0, 0, 1, 0, 0, 0, 0, 2, 1, 1, 0, 0, 0, 1}, appendUvarint(appendVarint(nil, time.Time{}.Unix()), 0)...)},
		{"more entries than bytes", raftAppendEntries, []byte{0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 1, 0, 0, 0, 0}},
		{"size past int64", raftInstallSnapshot, append(make([]byte, 11), appendUvarint(nil, 1<<63)...)},
		{"protocol version out of range", raftTimeoutNow, append(appendVarint(nil, 1<<40), 0, 0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := decodeRequest(c.kind, c.body); !errors.Is(err, ErrMalformedBody) {
				t.Fatalf("decode %x: %v, want ErrMalformedBody", c.body, err)
			}
		})
	}
	if _, err := decodeRequest(raftKind(9), good); !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("unknown kind: %v", err)
	}
	resp := appendResponse(nil, raftRequestPreVote, &raft.RequestPreVoteResponse{Granted: true}, nil)
	if _, err := decodeResponse(raftRequestPreVote, append(resp, 0), new(raft.RequestPreVoteResponse)); !errors.Is(err, ErrMalformedBody) {
		t.Fatalf("response with a trailing byte: %v", err)
	}
	if _, err := decodeResponse(raftRequestPreVote, append([]byte{1}, resp[1:]...), new(raft.RequestPreVoteResponse)); !errors.Is(err, ErrMalformedBody) {
		t.Fatalf("response with an empty error message: %v", err)
	}
}

// TestRaftCodecAliasing: decoded entries alias the frame body (no copy per
// entry), and a holder appending to an entry's Data cannot overwrite the
// next field.
func TestRaftCodecAliasing(t *testing.T) {
	req := sampleRaftRequests()[0].(*raft.AppendEntriesRequest)
	body, err := appendRequest(nil, raftAppendEntries, req)
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeRequest(raftAppendEntries, body)
	if err != nil {
		t.Fatal(err)
	}
	got := v.(*raft.AppendEntriesRequest)
	d := got.Entries[0].Data
	if i := bytes.Index(body, []byte("hello")); i < 0 || &body[i] != &d[0] {
		t.Fatal("Data does not alias the body")
	}
	_ = append(d, "XXXX"...)
	if string(got.Entries[0].Extensions) != "ext" {
		t.Fatalf("an append to Data overwrote Extensions: %q", got.Entries[0].Extensions)
	}
}

// TestRaftCodecAllocs: encoding an AppendEntries of 256 entries into a
// pooled buffer allocates nothing once the buffer has grown, and decoding
// one allocates a fixed number of times whatever the entries.
func TestRaftCodecAllocs(t *testing.T) {
	req := benchAppendRequest(256, 1024)
	var buf []byte
	enc := testing.AllocsPerRun(20, func() {
		var err error
		buf, err = appendAppendEntriesRequest(buf[:0], req, len(req.Entries))
		if err != nil {
			t.Fatal(err)
		}
	})
	if enc != 0 {
		t.Errorf("encode: %v allocations, want 0", enc)
	}
	dec := testing.AllocsPerRun(20, func() {
		if _, err := decodeRequest(raftAppendEntries, buf); err != nil {
			t.Fatal(err)
		}
	})
	if dec > 3 {
		t.Errorf("decode: %v allocations, want at most 3", dec)
	}
}

func benchAppendRequest(n, size int) *raft.AppendEntriesRequest {
	req := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte("127.0.0.1:7000")},
		Term:      3, PrevLogEntry: 1_000_000, PrevLogTerm: 3, LeaderCommitIndex: 999_999,
	}
	now := time.Now()
	for i := range n {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(i + j)
		}
		req.Entries = append(req.Entries, &raft.Log{Index: 1_000_001 + uint64(i), Term: 3, Type: raft.LogCommand, Data: data, AppendedAt: now})
	}
	return req
}

// frameBytes builds a frame: header fields as given, then body.
func frameBytes(length uint32, kind raftKind, flags byte, group uint64, body []byte) []byte {
	b := appendRaftHeader(nil, kind, group)
	b[5] = flags
	b = append(b, body...)
	b[0], b[1], b[2], b[3] = byte(length>>24), byte(length>>16), byte(length>>8), byte(length)
	return b
}

func TestReadRaftFrame(t *testing.T) {
	body := []byte("body")
	good := frameBytes(raftHeaderSize+4, raftRequestVote, 0, 7, body)
	f, err := readRaftFrame(bufio.NewReader(bytes.NewReader(good)), 1024, nil)
	if err != nil || f.kind != raftRequestVote || f.group != 7 || string(f.body) != "body" {
		t.Fatalf("good frame: %+v %v", f, err)
	}
	refused := appendRaftPreamble(nil)
	refused[len(refused)-1] = 9
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"nothing", nil, io.EOF},
		{"part of a header", good[:7], io.ErrUnexpectedEOF},
		{"part of a body", good[:len(good)-1], io.ErrUnexpectedEOF},
		{"short length", frameBytes(3, raftRequestVote, 0, 0, nil), ErrMalformedFrame},
		{"flags", frameBytes(raftHeaderSize, raftRequestVote, 1, 0, nil), ErrMalformedFrame},
		{"too long", frameBytes(raftHeaderSize+2000, raftRequestVote, 0, 0, nil), ErrFrameTooLarge},
		{"a preamble: the peer refused our version", refused, ErrRaftPeerVersion},
		{"huge length", frameBytes(0xffffffff, raftRequestVote, 0, 0, nil), ErrFrameTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := readRaftFrame(bufio.NewReader(bytes.NewReader(c.in)), 1024, nil)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if c.want == ErrRaftPeerVersion && !strings.Contains(err.Error(), "version 9") {
				t.Fatalf("%v does not name the peer's version", err)
			}
		})
	}
}

// TestReadRaftBodyBounded: a frame that announces more than it sends pins
// at most a chunk, not its announced length.
func TestReadRaftBodyBounded(t *testing.T) {
	in := frameBytes(1<<30, raftAppendEntries, 0, 0, []byte("short"))
	r := bufio.NewReader(bytes.NewReader(in))
	before := heapAllocBytes()
	_, err := readRaftFrame(r, 1<<30, nil)
	after := heapAllocBytes()
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v", err)
	}
	if grew := after - before; grew > 4*raftReadChunk {
		t.Fatalf("reading a frame that announced 1 GiB and sent 5 bytes allocated %d bytes", grew)
	}
}

// heapAllocBytes returns the bytes allocated so far by the process.
func heapAllocBytes() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

func TestRaftPreamble(t *testing.T) {
	if err := checkRaftPreamble(appendRaftPreamble(nil)); err != nil {
		t.Fatal(err)
	}
	if err := checkRaftPreamble([]byte{0, 0x85, 0xa4, 'T', 'e'}); !errors.Is(err, ErrRaftPeerVersion) || !strings.Contains(err.Error(), "NetworkTransport") {
		t.Fatalf("a NetworkTransport connection: %v", err)
	}
	p := appendRaftPreamble(nil)
	p[len(p)-1] = 2
	if err := checkRaftPreamble(p); !errors.Is(err, ErrRaftPeerVersion) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("another version: %v", err)
	}
	if raftMagic[0] == probeFirstByte || raftMagic[0] <= 4 {
		t.Fatal("the preamble's first byte collides with the probe protocol or NetworkTransport")
	}
}

// probeFirstByte is the first byte of node's probe protocol ("RLPROBE1"),
// which shares the raft port.
const probeFirstByte = 'R'

// TestRaftLogLen: logLen, which decides how many entries fit a frame, is
// the exact encoded size of an entry.
func TestRaftLogLen(t *testing.T) {
	entries := sampleRaftRequests()[0].(*raft.AppendEntriesRequest).Entries
	entries = append(entries,
		&raft.Log{Index: 1<<64 - 1, Term: 1<<64 - 1, Data: make([]byte, 200), Extensions: make([]byte, 1<<14), AppendedAt: time.Unix(1<<40, 999_999_999)},
		&raft.Log{AppendedAt: time.Unix(-1<<40, 0)},
		&raft.Log{AppendedAt: time.Unix(0, 1)},
	)
	for _, e := range entries {
		if got, want := logLen(e), len(appendLog(nil, e)); got != want {
			t.Errorf("logLen(%+v) = %d, want %d", e, got, want)
		}
	}
}
