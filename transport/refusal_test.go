package transport

import (
	"context"
	"slices"
	"sync"
	"testing"
)

// refusal is one call of RefusalObserver.Refused.
type refusal struct {
	op   Op
	code Code
}

// refusalRecorder is echoHandler that records the refusals Serve reports.
type refusalRecorder struct {
	funcHandler
	mu  sync.Mutex
	got []refusal // guarded by mu
}

func (r *refusalRecorder) Refused(op Op, e *Error) {
	r.mu.Lock()
	r.got = append(r.got, refusal{op, e.Code})
	r.mu.Unlock()
}

func (r *refusalRecorder) refusals() []refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// Serve tells a handler that implements RefusalObserver of every request it
// refuses by itself, with the code the client gets and the op the frame
// names, and of nothing else: not of what the handler answers, not of a
// connection that ends mid-frame.
func TestRefusalObserver(t *testing.T) {
	status, _ := EncodeBody(&StatusRequest{})
	bigRecord, _ := EncodeBody(&AppendRequest{Records: [][]byte{make([]byte, 2000)}})
	noRecords, _ := EncodeBody(&AppendRequest{})
	notANumber, _ := EncodeBody(&AppendRequest{Records: [][]byte{[]byte("x")}})
	trim, _ := EncodeBody(&TrimRequest{Below: 1})
	lim := Limits{MaxFrameSize: 4096, MaxRecordSize: 1024, MaxInFlight: 1}
	tests := []struct {
		name string
		in   [][]byte // written one after another, each answered before the next
		want []refusal
		// hangUp: the client closes the connection after writing in,
		// expecting no answer.
		hangUp bool
	}{
		{"zero length", [][]byte{{0, 0, 0, 0}}, []refusal{{0, CodeBadRequest}}, false},
		{"unknown frame type", [][]byte{rawFrame(12, Version, 9, OpStatus, 1, nil)}, []refusal{{0, CodeBadRequest}}, false},
		{"unsupported version", [][]byte{rawFrame(13, 7, FrameRequest, OpStatus, 1, status)}, []refusal{{0, CodeUnsupportedVersion}}, false},
		{"frame too large", [][]byte{rawFrame(1<<20, Version, FrameRequest, OpAppend, 42, make([]byte, 100))}, []refusal{{OpAppend, CodeTooLarge}}, false},
		{"response from a client", [][]byte{goodFrame(FrameResponse, OpStatus, 1, status)}, []refusal{{OpStatus, CodeBadRequest}}, false},
		{"body does not decode", [][]byte{goodFrame(FrameRequest, OpAppend, 1, []byte{0xc1})}, []refusal{{OpAppend, CodeBadRequest}}, false},
		{"record too large", [][]byte{goodFrame(FrameRequest, OpAppend, 1, bigRecord)}, []refusal{{OpAppend, CodeTooLarge}}, false},
		{"append of no records", [][]byte{goodFrame(FrameRequest, OpAppend, 1, noRecords)}, []refusal{{OpAppend, CodeBadRequest}}, false},
		{"unknown op", [][]byte{goodFrame(FrameRequest, Op(99), 1, status)}, []refusal{{Op(99), CodeUnknownOp}}, false},
		{"served, or refused by the handler", [][]byte{
			goodFrame(FrameRequest, OpStatus, 1, status),
			goodFrame(FrameRequest, OpAppend, 2, notANumber),
		}, nil, false},
		{"ends mid-frame", [][]byte{goodFrame(FrameRequest, OpStatus, 1, status)[:10]}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &refusalRecorder{funcHandler: echoHandler()}
			srv := startServer(t, h, lim)
			raw := srv.dialRaw(t)
			for _, b := range tt.in {
				raw.Write(b)
				if tt.hangUp {
					raw.Close()
					srv.nextErr(t)
					continue
				}
				if _, err := ReadFrame(raw, 0); err != nil {
					t.Fatalf("no reply: %v", err)
				}
			}
			if got := h.refusals(); !slices.Equal(got, tt.want) {
				t.Fatalf("refusals %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("busy", func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan struct{})
		h := &refusalRecorder{funcHandler: echoHandler()}
		h.handle = func(ctx context.Context, op Op, req any) (any, error) {
			if op == OpTrim {
				close(started)
				<-release
			}
			return echoHandler().handle(ctx, op, req)
		}
		srv := startServer(t, h, lim)
		t.Cleanup(func() { close(release) })
		raw := srv.dialRaw(t)
		raw.Write(goodFrame(FrameRequest, OpTrim, 1, trim))
		<-started
		raw.Write(goodFrame(FrameRequest, OpStatus, 2, status))
		f, err := ReadFrame(raw, 0)
		if err != nil {
			t.Fatal(err)
		}
		wantErrorFrame(t, f, 2, CodeBusy)
		if got, want := h.refusals(), []refusal{{OpStatus, CodeBusy}}; !slices.Equal(got, want) {
			t.Fatalf("refusals %v, want %v", got, want)
		}
	})
}
