package replica

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// recordAfter stores and applies record i of n of the Append seq, which
// must follow the Append after.
func (h *fsmHarness) recordAfter(client string, seq, i, n, base, after uint64, payload string) AppendResult {
	h.t.Helper()
	return *h.apply(raft.LogCommand, AppendRecordCmd(nil, client, seq, i, n, base, after, []byte(payload))).(*AppendResult)
}

// An Append that must follow another is stored only once that one is: a
// copy that reaches the log first is void, its later records too, and the
// client is told to retry; after the earlier one, it is stored.
func TestFSMAppendAfter(t *testing.T) {
	h := newHarness(t)
	h.apply(raft.LogNoop, nil) // 1
	if r := h.recordAfter("c", 1, 0, 1, 1, 0, "one"); r.Void || r.Err != nil || len(r.Indexes) != 1 {
		t.Fatalf("seq 1: %+v", r)
	}
	// Seq 3 must follow seq 2, which is not stored: void, both records.
	r := h.recordAfter("c", 3, 0, 2, 2, 2, "three-a")
	if !r.Void || !errors.Is(r.Err, ErrOutOfOrder) {
		t.Fatalf("seq 3 before seq 2: %+v, want void and out of order", r)
	}
	if r := h.recordAfter("c", 3, 1, 2, 2, 0, "three-b"); !r.Void {
		t.Fatalf("the second record of a void Append: %+v, want void", r)
	}
	if _, ok := h.f.Lookup("c", 3); ok {
		t.Fatal("the void Append is remembered as stored")
	}
	// Seq 2 (after seq 1, stored), then seq 3 again: both stored.
	if r := h.recordAfter("c", 2, 0, 1, 2, 1, "two"); r.Void || r.Err != nil {
		t.Fatalf("seq 2 after seq 1: %+v", r)
	}
	h.recordAfter("c", 3, 0, 2, 2, 2, "three-a")
	if r := h.recordAfter("c", 3, 1, 2, 2, 0, "three-b"); r.Void || len(r.Indexes) != 2 {
		t.Fatalf("seq 3 after seq 2: %+v", r)
	}
	// An Append the client has finished with (below its session base)
	// holds nothing up, stored or not: the client gave up on seq 4.
	if r := h.recordAfter("c", 6, 0, 1, 5, 4, "six"); r.Void || r.Err != nil {
		t.Fatalf("seq 6 after seq 4, below the base 5: %+v", r)
	}
	// A new session: what it must follow is not stored.
	if r := h.recordAfter("d", 2, 0, 1, 1, 1, "d-two"); !r.Void || !errors.Is(r.Err, ErrOutOfOrder) {
		t.Fatalf("a new session's append after seq 1: %+v, want void and out of order", r)
	}
}

func TestCommandRecordAfter(t *testing.T) {
	c, err := decodeRecordCmd(AppendRecordCmd(nil, "cli", 7, 0, 3, 5, 6, []byte("payload")))
	if err != nil || string(c.client) != "cli" || c.seq != 7 || c.i != 0 || c.n != 3 || c.base != 5 || c.after != 6 || string(c.payload) != "payload" {
		t.Fatalf("%+v %v", c, err)
	}
	// Only the first record names the Append it follows.
	if c, err := decodeRecordCmd(AppendRecordCmd(nil, "cli", 7, 1, 3, 5, 6, nil)); err != nil || c.after != 0 || c.base != 5 {
		t.Fatalf("second record: %+v %v", c, err)
	}
	for _, data := range [][]byte{
		{kindRecordAfter, 1, 'c', 7, 0, 3, 5, 7}, // follows itself
		{kindRecordAfter, 1, 'c', 7, 0, 3, 5, 0}, // follows nothing
		{kindRecordAfter, 1, 'c', 7, 1, 3, 5, 6}, // not the first record
		{kindRecordAfter, 1, 'c', 7, 0, 3, 5},    // truncated
	} {
		if _, err := decodeRecordCmd(data); err == nil {
			t.Errorf("%x decoded", data)
		}
	}
}
