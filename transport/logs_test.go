package transport

import (
	"bytes"
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestCheckLogName(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  string // what the error says; "" for a valid name
	}{
		{"orders", ""},
		{"a", ""},
		{"0rders_2024-EU", ""},
		{DefaultLog, ""},
		{strings.Repeat("x", MaxLogNameLength), ""},
		{"", "empty"},
		{strings.Repeat("x", MaxLogNameLength+1), "of 65 characters, limit 64"},
		{strings.Repeat("x", MaxLogNameLength-1) + "é", `holds 'é'`},
		{"-orders", "starts with '-'"},
		{"_orders", "starts with '_'"},
		{"éorders", "starts with 'é'"},
		{"orders.eu", `holds '.'`},
		{"orders eu", `holds ' '`},
		{"ordérs", `holds 'é'`},
		{"orders/eu", `holds '/'`},
		{"orders\xff", `holds the byte 0xff`},
	} {
		err := CheckLogName(tc.name)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("CheckLogName(%q) = %v, want nil", tc.name, err)
		case tc.bad != "" && (ErrorCode(err) != CodeBadRequest || !strings.Contains(err.Error(), tc.bad) || !strings.Contains(err.Error(), logNameRule)):
			t.Errorf("CheckLogName(%q) = %v, want BadRequest saying %q and the rule", tc.name, err, tc.bad)
		}
	}
	if LogName("") != DefaultLog || LogName("orders") != "orders" || LogField(DefaultLog) != "" || LogField("orders") != "orders" {
		t.Error("LogName and LogField do not map the default log to the empty field and back")
	}
}

// The request types of the record operations as they were before named
// logs: what a server of that version decodes requests into.
type (
	oldAppendRequest struct {
		ClientID string   `msgpack:"client_id,omitempty"`
		Seq      uint64   `msgpack:"seq,omitempty"`
		Base     uint64   `msgpack:"base,omitempty"`
		After    uint64   `msgpack:"after,omitempty"`
		Records  [][]byte `msgpack:"records"`
	}
	oldReadRequest struct {
		From       uint64 `msgpack:"from,omitempty"`
		MaxRecords uint32 `msgpack:"max_records,omitempty"`
		MaxBytes   uint32 `msgpack:"max_bytes,omitempty"`
		Stale      bool   `msgpack:"stale,omitempty"`
	}
	oldTrimRequest struct {
		Below uint64 `msgpack:"below"`
	}
)

// TestLogFieldCompatibility checks the compatibility rule: a request for
// the default log is, byte for byte, the request of the version before
// named logs, which an older server reads; one that names another log is
// refused by an older server as a body with an unknown field, never read
// as a request for the default log.
func TestLogFieldCompatibility(t *testing.T) {
	recs := [][]byte{[]byte("a"), {}}
	for _, tc := range []struct {
		req, named, old, want any
	}{
		{&AppendRequest{ClientID: "c", Seq: 3, Base: 1, After: 2, Records: recs}, &AppendRequest{ClientID: "c", Seq: 3, Records: recs, Log: "orders"},
			&oldAppendRequest{}, &oldAppendRequest{ClientID: "c", Seq: 3, Base: 1, After: 2, Records: recs}},
		{&ReadRequest{From: 7, MaxRecords: 9, Stale: true}, &ReadRequest{From: 7, Log: "orders"},
			&oldReadRequest{}, &oldReadRequest{From: 7, MaxRecords: 9, Stale: true}},
		{&TailRequest{From: 7, MaxBytes: 100}, &TailRequest{Log: "orders"},
			&oldReadRequest{}, &oldReadRequest{From: 7, MaxBytes: 100}},
		{&TrimRequest{Below: 5}, &TrimRequest{Below: 5, Log: "orders"},
			&oldTrimRequest{}, &oldTrimRequest{Below: 5}},
	} {
		b, err := EncodeBody(tc.req)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(keyLog)) {
			t.Errorf("%T for the default log carries the log field: % x", tc.req, b)
		}
		if err := DecodeBody(b, tc.old); err != nil || !reflect.DeepEqual(tc.old, tc.want) {
			t.Errorf("%T: an older server reads %+v, %v; want %+v", tc.req, tc.old, err, tc.want)
		}
		if want, _ := encodeReflect(tc.want); !bytes.Equal(b, want) {
			t.Errorf("%T: % x, the version before named logs wrote % x", tc.req, b, want)
		}
		b, err = EncodeBody(tc.named)
		if err != nil {
			t.Fatal(err)
		}
		old := newZero(tc.old)
		if err := DecodeBody(b, old); !errors.Is(err, ErrMalformedBody) || !strings.Contains(err.Error(), "with key log") {
			t.Errorf("%T naming a log: an older server reads %+v, %v; want it refused for the unknown field log", tc.named, old, err)
		}
		got := newZero(tc.named)
		if err := DecodeBody(b, got); err != nil || !reflect.DeepEqual(got, tc.named) {
			t.Errorf("%T naming a log decodes as %+v, %v", tc.named, got, err)
		}
	}
}

func TestValidateLogs(t *testing.T) {
	for _, tc := range []struct {
		req Request
		bad string // what the error says; "" when valid
	}{
		{&AppendRequest{Log: "orders", Records: [][]byte{{1}}}, ""},
		{&AppendRequest{Log: DefaultLog, Records: [][]byte{{1}}}, ""},
		{&AppendRequest{Log: "or ders", Records: [][]byte{{1}}}, `log name "or ders"`},
		{&ReadRequest{Log: "-x"}, "starts with '-'"},
		{&TailRequest{Log: strings.Repeat("x", 65)}, "log name of 65 characters, limit 64"},
		{&TrimRequest{Log: "x!", Below: 1}, `holds '!'`},
		{&BackupRequest{Log: "orders"}, ""},
		{&BackupRequest{}, ""},
		{&BackupRequest{Log: "or ders"}, `log name "or ders"`},
		{&RestoreLogRequest{Log: "orders", Data: []byte("x")}, ""},
		{&RestoreLogRequest{Log: DefaultLog}, "cannot be restored"},
		{&RestoreLogRequest{}, "log name is empty"},
		{&CreateLogRequest{Name: "orders"}, ""},
		{&CreateLogRequest{Name: "orders", Replicas: 5, RetentionBytes: 1, RetentionAge: time.Hour}, ""},
		{&CreateLogRequest{Name: ""}, "log name is empty"},
		{&CreateLogRequest{Name: DefaultLog}, "cannot be created"},
		{&CreateLogRequest{Name: "orders", Replicas: 2}, "2 replicas: a log has 1, 3 or 5"},
		{&CreateLogRequest{Name: "orders", RetentionAge: -time.Second}, "negative retention age"},
		{&DescribeLogRequest{}, ""},
		{&DescribeLogRequest{Name: "a.b"}, `holds '.'`},
		{&DeleteLogRequest{Name: "orders"}, ""},
		{&DeleteLogRequest{Name: DefaultLog}, "cannot be deleted"},
		{&DeleteLogRequest{}, "log name is empty"},
		{&ListLogsRequest{}, ""},
	} {
		err := tc.req.Validate(Limits{})
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.req, err)
		case tc.bad != "" && (ErrorCode(err) != CodeBadRequest || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%+v: %v, want BadRequest saying %q", tc.req, err, tc.bad)
		}
	}
}

// logHandler serves the log operations and the record operations of
// named logs, as a node would, to check them end to end over Serve.
type logHandler struct{}

func (logHandler) Handle(_ context.Context, op Op, req any) (any, error) {
	switch r := req.(type) {
	case *CreateLogRequest:
		if r.Name == "orders" {
			return nil, DuplicateLog(r.Name)
		}
		return &CreateLogResponse{Log: LogInfo{Name: r.Name, ID: 7, Replicas: r.Replicas, RetentionAge: r.RetentionAge, State: LogActive, Members: []string{"n1"}}}, nil
	case *ListLogsRequest:
		return &ListLogsResponse{Logs: []LogInfo{{Name: DefaultLog, Replicas: 3, State: LogActive}, {Name: "orders", ID: 1, Replicas: 3, State: LogActive}}}, nil
	case *DescribeLogRequest:
		if LogName(r.Name) != "orders" {
			return nil, NotFoundLog(LogName(r.Name))
		}
		return &DescribeLogResponse{Log: LogInfo{Name: "orders", ID: 1}, LastIndex: 4, Members: []LogMember{{NodeID: "n1", Role: RoleLeader, CaughtUp: true}}}, nil
	case *DeleteLogRequest:
		return &DeleteLogResponse{Log: LogInfo{Name: r.Name, State: LogDeleting}}, nil
	case *AppendRequest:
		return nil, &Error{Code: CodeNotLeader, Message: "log " + r.Log, MemberID: "n3", MemberAddr: "127.0.0.1:3"}
	}
	return nil, errorf(CodeUnknownOp, "%v", op)
}

func (logHandler) Stream(context.Context, Op, any, *ServerStream) error {
	return errorf(CodeUnknownOp, "no streams")
}

// TestLogOpsOverServe runs the log operations through Serve and a Conn:
// requests, replies, and the errors that name a log or a member.
func TestLogOpsOverServe(t *testing.T) {
	cli, srv := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); Serve(ctx, srv, logHandler{}, Limits{}) }()
	defer func() { cancel(); <-done }()
	c, err := NewConn(cli, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var cr CreateLogResponse
	if err := c.Call(ctx, OpCreateLog, &CreateLogRequest{Name: "events", Replicas: 3, RetentionAge: 90 * time.Minute}, &cr); err != nil ||
		cr.Log.Name != "events" || cr.Log.ID != 7 || cr.Log.RetentionAge != 90*time.Minute {
		t.Fatalf("create: %+v, %v", cr, err)
	}
	err = c.Call(ctx, OpCreateLog, &CreateLogRequest{Name: "orders"}, &cr)
	if ErrorCode(err) != CodeFailedPrecondition || !strings.Contains(err.Error(), `log "orders" exists already`) {
		t.Errorf("duplicate create: %v", err)
	}
	err = c.Call(ctx, OpCreateLog, &CreateLogRequest{Name: "bad name"}, &cr)
	if ErrorCode(err) != CodeBadRequest {
		t.Errorf("create of a bad name: %v", err)
	}
	var lr ListLogsResponse
	if err := c.Call(ctx, OpListLogs, &ListLogsRequest{}, &lr); err != nil || len(lr.Logs) != 2 || lr.Logs[1].Name != "orders" {
		t.Errorf("list: %+v, %v", lr, err)
	}
	var dr DescribeLogResponse
	if err := c.Call(ctx, OpDescribeLog, &DescribeLogRequest{Name: "orders"}, &dr); err != nil || dr.LastIndex != 4 || len(dr.Members) != 1 || !dr.Members[0].CaughtUp {
		t.Errorf("describe: %+v, %v", dr, err)
	}
	err = c.Call(ctx, OpDescribeLog, &DescribeLogRequest{Name: "nosuch"}, &dr)
	if ErrorCode(err) != CodeNotFound || !strings.Contains(err.Error(), `log "nosuch" does not exist`) {
		t.Errorf("describe of an unknown log: %v", err)
	}
	var del DeleteLogResponse
	if err := c.Call(ctx, OpDeleteLog, &DeleteLogRequest{Name: "orders"}, &del); err != nil || del.Log.State != LogDeleting {
		t.Errorf("delete: %+v, %v", del, err)
	}
	err = c.Call(ctx, OpAppend, &AppendRequest{Log: "orders", Records: [][]byte{{1}}}, &AppendResponse{})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotLeader || e.MemberID != "n3" || e.MemberAddr != "127.0.0.1:3" || e.LeaderAddr != "" ||
		!strings.Contains(err.Error(), `(member "n3" at "127.0.0.1:3")`) {
		t.Errorf("append to a log whose leader is unknown: %v", err)
	}
}

// TestLogFieldCost checks that the hand-written codecs stay as cheap for
// the default log: encoding allocates nothing, and a named log costs its
// decoder one allocation more (the name), nothing else.
func TestLogFieldCost(t *testing.T) {
	recs := [][]byte{[]byte("record one"), []byte("record two")}
	for _, tc := range []struct {
		def, named fastMessage
		zero       func() fastMessage
	}{
		{&AppendRequest{ClientID: "c", Seq: 9, Records: recs}, &AppendRequest{ClientID: "c", Seq: 9, Records: recs, Log: "orders"},
			func() fastMessage { return new(AppendRequest) }},
		{&ReadRequest{From: 9}, &ReadRequest{From: 9, Log: "orders"}, func() fastMessage { return new(ReadRequest) }},
		{(*ReadRequest)(&TailRequest{From: 9}), (*ReadRequest)(&TailRequest{From: 9, Log: "orders"}), func() fastMessage { return new(ReadRequest) }},
	} {
		allocs := func(m fastMessage) (enc, dec float64) {
			buf := make([]byte, 0, 256)
			b := m.appendMsgpack(nil)
			enc = testing.AllocsPerRun(50, func() { buf = m.appendMsgpack(buf[:0]) })
			dec = testing.AllocsPerRun(50, func() {
				if !tc.zero().decodeMsgpack(b) {
					t.Fatal("decode failed")
				}
			})
			return enc, dec
		}
		de, dd := allocs(tc.def)
		ne, nd := allocs(tc.named)
		if de != 0 || ne != 0 || nd != dd+1 {
			t.Errorf("%T: allocations to encode %v (default log), %v (named); to decode %v (default log), %v (named); want 0, 0, n, n+1", tc.def, de, ne, dd, nd)
		}
	}
}
