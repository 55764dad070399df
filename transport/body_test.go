package transport

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sampleMessages holds a populated value of every message type, used by
// the round-trip tests and as fuzz seeds.
func sampleMessages() []any {
	return []any{
		&AppendRequest{ClientID: "client-1", Seq: 7, Records: [][]byte{[]byte("a"), {}, bytes.Repeat([]byte{0xff}, 300)}},
		&AppendRequest{Records: [][]byte{[]byte("only")}},
		&AppendResponse{Indexes: []uint64{5, 6, 9}, Duplicate: true},
		&ReadRequest{From: 10, MaxRecords: 100, MaxBytes: 1 << 20, Stale: true},
		&ReadRequest{},
		&ReadResponse{Records: []Record{{Index: 10, Data: []byte("x"), AppendedAt: 1_700_000_000_000_000_000}, {Index: 12, Data: []byte{}}}, Next: 13},
		&TailRequest{From: 1, MaxRecords: 10, MaxBytes: 4096},
		&TailItem{Records: []Record{{Index: 1, Data: []byte("r")}}, Next: 2},
		&StatusRequest{},
		&StatusRequest{Details: true},
		&StatusResponse{
			NodeID: "n1", Role: "Leader", LeaderID: "n1", LeaderAddr: "10.0.0.1:7000", Term: 3,
			FirstIndex: 1, LastIndex: 100, CommitIndex: 99, AppliedIndex: 98,
			Store: StoreStatus{Segments: 2, Bytes: 1 << 30, Written: 12345, Flushed: 12000},
		},
		&StatusResponse{
			NodeID: "n2", Role: "Follower", Term: 3,
			Details: &StatusDetails{
				Version: "v1.2.0", Commit: "bd96097", Modified: true, GoVersion: "go1.26.8", Platform: "linux/amd64", Flush: "async",
				Settings: []Setting{{Name: "flush", Value: "async"}, {Name: "retention-age", Value: "168h0m0s"}},
			},
		},
		&JoinRequest{NodeID: "n4", RaftAddr: "10.0.0.4:7001", ClientAddr: "10.0.0.4:7000"},
		&JoinResponse{Index: 44},
		&RemoveRequest{NodeID: "n2"},
		&RemoveResponse{Index: 45},
		&TransferLeadershipRequest{Target: "n3"},
		&TransferLeadershipResponse{},
		&TrimRequest{Below: 50},
		&TrimResponse{Index: 46},
		&Error{Code: CodeNotLeader, Message: "not the leader", LeaderID: "n2", LeaderAddr: "10.0.0.2:7000"},
		&Error{Code: CodeUnsupportedVersion, Version: 1},
		&Credit{Items: 64},
		&BackupRequest{},
		&BackupItem{Data: []byte("RLBACKUP\x00\x00\x00\x01")},
		&AppendRequest{Log: "orders", ClientID: "client-1", Seq: 2, Base: 1, After: 1, Records: [][]byte{[]byte("o")}},
		&ReadRequest{Log: "orders", From: 3},
		&TailRequest{Log: "orders-2024_eu", Stale: true},
		&TrimRequest{Log: "orders", Below: 9},
		&BackupRequest{Log: "orders"},
		&RestoreLogRequest{Log: "orders", Offset: 1 << 20, Data: []byte("RLBACKUP"), Done: true},
		&RestoreLogResponse{Received: 3 << 20, BackupIndex: 100, Index: 101, Replicas: 3},
		&Error{Code: CodeNotLeader, Message: "n1 does not lead log \"orders\"", MemberID: "n3", MemberAddr: "10.0.0.3:7000"},
		&CreateLogRequest{Name: "orders", Replicas: 3, RetentionBytes: 1 << 30, RetentionAge: 7 * 24 * time.Hour},
		&CreateLogRequest{Name: "o"},
		&CreateLogResponse{Log: LogInfo{Name: "orders", ID: 4, Replicas: 3, State: LogActive, Members: []string{"n2", "n3", "n1"}}},
		&ListLogsRequest{},
		&ListLogsResponse{Logs: []LogInfo{
			{Name: DefaultLog, Replicas: 3, State: LogActive, Members: []string{"n1", "n2", "n3"}, LeaderID: "n1"},
			{Name: "orders", ID: 4, Replicas: 1, RetentionAge: time.Hour, State: LogDeleting},
		}},
		&DescribeLogRequest{},
		&DescribeLogRequest{Name: "orders"},
		&DescribeLogRequest{Name: "orders", Local: true},
		&DescribeLogResponse{
			Log:        LogInfo{Name: "orders", ID: 4, Replicas: 3, RetentionBytes: 5000, State: LogActive, Members: []string{"n2", "n3", "n4"}, LeaderID: "n2"},
			LeaderAddr: "10.0.0.2:7000", FirstIndex: 1, LastIndex: 90, CommitIndex: 90, Bytes: 123456,
			Members: []LogMember{
				{NodeID: "n2", ClientAddr: "10.0.0.2:7000", Role: RoleLeader, CaughtUp: true},
				{NodeID: "n3", Role: RoleFollower},
				{NodeID: "n4", Role: RolePending},
				{NodeID: "n1", Role: RoleLeaving, CaughtUp: true},
			},
			ConfigIndex: 87,
		},
		&DescribeLogResponse{},
		&DeleteLogRequest{Name: "orders"},
		&DeleteLogResponse{Log: LogInfo{Name: "orders", ID: 4, Replicas: 3, State: LogDeleting}},
	}
}

// newZero returns a pointer to a zero value of v's pointed-to type.
func newZero(v any) any { return reflect.New(reflect.TypeOf(v).Elem()).Interface() }

func TestBodyRoundTrip(t *testing.T) {
	for _, v := range sampleMessages() {
		b, err := EncodeBody(v)
		if err != nil {
			t.Fatalf("EncodeBody(%T): %v", v, err)
		}
		got := newZero(v)
		if err := DecodeBody(b, got); err != nil {
			t.Fatalf("DecodeBody(%T): %v", v, err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Fatalf("%T round trip:\n got %+v\nwant %+v", v, got, v)
		}
		again, err := EncodeBody(got)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%T re-encodes differently (%v)", v, err)
		}
	}
}

func TestBodyUsesTagNames(t *testing.T) {
	b, err := EncodeBody(&TrimRequest{Below: 3})
	if err != nil {
		t.Fatal(err)
	}
	// fixmap of 1, fixstr "below", positive fixint 3.
	if want := []byte{0x81, 0xa5, 'b', 'e', 'l', 'o', 'w', 3}; !bytes.Equal(b, want) {
		t.Fatalf("TrimRequest encodes as % x, want % x", b, want)
	}
	b, err = EncodeBody(&AppendRequest{Records: [][]byte{{1}}})
	if err != nil {
		t.Fatal(err)
	}
	// Records use the bin type (0xc4), not str.
	if !bytes.Contains(b, []byte{0x91, 0xc4, 1, 1}) {
		t.Fatalf("records are not bin: % x", b)
	}
}

func TestDecodeBodyStrict(t *testing.T) {
	trim, _ := EncodeBody(&TrimRequest{Below: 3})
	nested := []byte{0x81, 0xa1, 'x'}
	for range MaxBodyDepth {
		nested = append(nested, 0x91)
	}
	nested = append(nested, 0)
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"trailing byte", append(append([]byte{}, trim...), 0)},
		{"two values", append(append([]byte{}, trim...), trim...)},
		{"unknown field", []byte{0x81, 0xa3, 'f', 'o', 'o', 1}},
		{"array at the top", []byte{0x91, 3}},
		{"integer at the top", []byte{3}},
		{"string at the top", []byte{0xa1, 'x'}},
		{"truncated map", trim[:len(trim)-1]},
		{"truncated key", trim[:3]},
		{"map 16 claims more than present", []byte{0xde, 0xff, 0xff, 0xa5, 'b', 'e', 'l', 'o', 'w', 3}},
		{"map 32 claims 4 billion", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}},
		{"str 32 claims 4 GiB", []byte{0x81, 0xdb, 0xff, 0xff, 0xff, 0xff}},
		{"ext type", []byte{0x81, 0xa5, 'b', 'e', 'l', 'o', 'w', 0xd4, 1, 1}},
		{"never used 0xc1", []byte{0x81, 0xa5, 'b', 'e', 'l', 'o', 'w', 0xc1}},
		{"negative into uint", []byte{0x81, 0xa5, 'b', 'e', 'l', 'o', 'w', 0xff}},
		{"string into uint", []byte{0x81, 0xa5, 'b', 'e', 'l', 'o', 'w', 0xa1, '1'}},
		{"nested too deep", nested},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v TrimRequest
			if err := DecodeBody(tt.in, &v); !errors.Is(err, ErrMalformedBody) {
				t.Fatalf("DecodeBody(% x) = %v, want ErrMalformedBody", tt.in, err)
			}
		})
	}
}

func TestCheckBodyTypes(t *testing.T) {
	// One value of every msgpack encoding a body may hold, by the spec.
	values := [][]byte{
		{0x05}, {0xe0}, {0xc0}, {0xc2}, {0xc3},
		{0xa2, 'h', 'i'}, {0xd9, 2, 'h', 'i'}, {0xda, 0, 2, 'h', 'i'}, {0xdb, 0, 0, 0, 2, 'h', 'i'},
		{0xc4, 1, 9}, {0xc5, 0, 1, 9}, {0xc6, 0, 0, 0, 1, 9},
		{0xcc, 1}, {0xcd, 0, 1}, {0xce, 0, 0, 0, 1}, {0xcf, 0, 0, 0, 0, 0, 0, 0, 1},
		{0xd0, 0xff}, {0xd1, 0, 1}, {0xd2, 0, 0, 0, 1}, {0xd3, 0, 0, 0, 0, 0, 0, 0, 1},
		{0xca, 0, 0, 0, 0}, {0xcb, 0, 0, 0, 0, 0, 0, 0, 0},
		{0x92, 1, 2}, {0xdc, 0, 2, 1, 2}, {0xdd, 0, 0, 0, 2, 1, 2},
		{0x81, 1, 2}, {0xde, 0, 1, 1, 2}, {0xdf, 0, 0, 0, 1, 1, 2},
	}
	for _, v := range values {
		body := append([]byte{0x81, 0xa1, 'k'}, v...)
		if err := checkBody(body); err != nil {
			t.Fatalf("% x: %v", v, err)
		}
		for n := 1; n < len(body); n++ {
			if err := checkBody(body[:n]); err == nil {
				t.Fatalf("% x cut to %d bytes accepted", body, n)
			}
		}
	}
	for _, top := range [][]byte{{0x80}, {0xde, 0, 0}, {0xdf, 0, 0, 0, 0}, {0xc0}} {
		if err := checkBody(top); err != nil {
			t.Fatalf("top-level % x: %v", top, err)
		}
	}
}

func TestDecodeBodyLimits(t *testing.T) {
	// An array of MaxBodyElements+1 one-byte records is refused before
	// the decoder allocates for it.
	n := MaxBodyElements + 1
	b := []byte{0x81, 0xa7, 'r', 'e', 'c', 'o', 'r', 'd', 's', 0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	b = append(b, bytes.Repeat([]byte{0xc0}, n)...)
	var req AppendRequest
	if err := DecodeBody(b, &req); !errors.Is(err, ErrMalformedBody) || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("oversized array: %v", err)
	}
	// A nil body leaves the value zero.
	if err := DecodeBody([]byte{0xc0}, &req); err != nil || req.Records != nil {
		t.Fatalf("nil body: %v %+v", err, req)
	}
}

func TestValidate(t *testing.T) {
	lim := Limits{MaxRecordSize: 10, MaxAppendRecords: 3, MaxReadRecords: 100, MaxReadBytes: 1000}
	long := strings.Repeat("x", MaxIDLength+1)
	tests := []struct {
		name string
		req  Request
		want Code // 0: valid
	}{
		{"append ok", &AppendRequest{Records: [][]byte{[]byte("0123456789"), {}}}, 0},
		{"append with session", &AppendRequest{ClientID: "c", Seq: 1, Records: [][]byte{{1}}}, 0},
		{"append no records", &AppendRequest{}, CodeBadRequest},
		{"append too many records", &AppendRequest{Records: make([][]byte, 4)}, CodeTooLarge},
		{"append record too large", &AppendRequest{Records: [][]byte{{1}, make([]byte, 11)}}, CodeTooLarge},
		{"append seq without client", &AppendRequest{Seq: 1, Records: [][]byte{{1}}}, CodeBadRequest},
		{"append client without seq", &AppendRequest{ClientID: "c", Records: [][]byte{{1}}}, CodeBadRequest},
		{"append client id too long", &AppendRequest{ClientID: long, Seq: 1, Records: [][]byte{{1}}}, CodeBadRequest},
		{"read ok", &ReadRequest{From: 1, MaxRecords: 100, MaxBytes: 1000}, 0},
		{"read too many records", &ReadRequest{MaxRecords: 101}, CodeBadRequest},
		{"read too many bytes", &ReadRequest{MaxBytes: 1001}, CodeBadRequest},
		{"tail ok", &TailRequest{}, 0},
		{"tail too many bytes", &TailRequest{MaxBytes: 1001}, CodeBadRequest},
		{"status", &StatusRequest{}, 0},
		{"join ok", &JoinRequest{NodeID: "n", RaftAddr: "h:1", ClientAddr: "[::1]:2"}, 0},
		{"join no id", &JoinRequest{RaftAddr: "h:1", ClientAddr: "h:2"}, CodeBadRequest},
		{"join bad raft addr", &JoinRequest{NodeID: "n", RaftAddr: "h", ClientAddr: "h:2"}, CodeBadRequest},
		{"join no host", &JoinRequest{NodeID: "n", RaftAddr: "h:1", ClientAddr: ":2"}, CodeBadRequest},
		{"remove ok", &RemoveRequest{NodeID: "n"}, 0},
		{"remove id too long", &RemoveRequest{NodeID: long}, CodeBadRequest},
		{"transfer any", &TransferLeadershipRequest{}, 0},
		{"transfer to", &TransferLeadershipRequest{Target: "n2"}, 0},
		{"transfer id too long", &TransferLeadershipRequest{Target: long}, CodeBadRequest},
		{"trim ok", &TrimRequest{Below: 1}, 0},
		{"trim zero", &TrimRequest{}, CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate(lim)
			if got := ErrorCode(err); got != tt.want || (tt.want == 0) != (err == nil) {
				t.Fatalf("Validate = %v, want code %v", err, tt.want)
			}
		})
	}
}

func TestValidateFillsReadBounds(t *testing.T) {
	r := ReadRequest{MaxBytes: 5}
	if err := r.Validate(Limits{}); err != nil {
		t.Fatal(err)
	}
	if r.MaxRecords != DefaultMaxReadRecords || r.MaxBytes != 5 {
		t.Fatalf("bounds %d records, %d bytes", r.MaxRecords, r.MaxBytes)
	}
}

func TestLimits(t *testing.T) {
	l, err := Limits{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if l.MaxFrameSize != DefaultMaxFrameSize || l.MaxRecordSize != DefaultMaxRecordSize ||
		l.MaxReadBytes != DefaultMaxReadBytes || l.MaxReadRecords != DefaultMaxReadRecords ||
		l.MaxInFlight != DefaultMaxInFlight || l.IdleTimeout != DefaultIdleTimeout {
		t.Fatalf("defaults: %+v", l)
	}
	// Setting only a small frame size derives consistent sizes.
	for _, size := range []int{minFrameSize, 64 << 10, 1 << 20, 1 << 30} {
		if _, err := (Limits{MaxFrameSize: size}).WithDefaults(); err != nil {
			t.Fatalf("MaxFrameSize %d: %v", size, err)
		}
	}
	bad := []Limits{
		{MaxFrameSize: minFrameSize - 1},
		{MaxFrameSize: -1},
		{MaxRecordSize: -1},
		{MaxRecordSize: 2 << 20, MaxReadBytes: 1 << 20},
		{MaxAppendRecords: MaxBodyElements + 1},
		{MaxReadRecords: -5},
		{MaxReadBytes: DefaultMaxFrameSize},
		{MaxInFlight: -1},
		{IdleTimeout: -1},
		{WriteTimeout: -1},
	}
	for _, l := range bad {
		if _, err := l.WithDefaults(); err == nil {
			t.Fatalf("%+v accepted", l)
		}
	}
}

func TestError(t *testing.T) {
	e := &Error{Code: CodeNotLeader, Message: "not the leader", LeaderID: "n2", LeaderAddr: "h:7000"}
	if got := e.Error(); got != `transport: NotLeader: not the leader (leader "n2" at "h:7000")` {
		t.Fatalf("Error() = %q", got)
	}
	wrapped := errors.Join(errors.New("context"), e)
	if !errors.Is(wrapped, &Error{Code: CodeNotLeader}) || errors.Is(wrapped, &Error{Code: CodeBusy}) {
		t.Fatal("errors.Is by code")
	}
	if ErrorCode(wrapped) != CodeNotLeader || ErrorCode(errors.New("x")) != 0 || ErrorCode(nil) != 0 {
		t.Fatal("ErrorCode")
	}
	v := &Error{Code: CodeUnsupportedVersion, Version: 1}
	if !strings.Contains(v.Error(), "version 1") {
		t.Fatalf("Error() = %q", v.Error())
	}
}
