package replica

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// recordBase stores and applies a record entry that carries a session
// base.
func (h *fsmHarness) recordBase(client string, seq, base uint64, payload string) AppendResult {
	h.t.Helper()
	return *h.apply(raft.LogCommand, AppendRecordCmd(nil, client, seq, 0, 1, base, 0, []byte(payload))).(*AppendResult)
}

// fillSessions stores one append from each of n new clients, in one batch,
// so that as many older sessions are evicted.
func (h *fsmHarness) fillSessions(prefix string, n int) {
	h.t.Helper()
	logs := make([]*raft.Log, n)
	for i := range logs {
		data := AppendRecordCmd(nil, fmt.Sprintf("%s-%d", prefix, i), 1, 0, 1, 1, 0, []byte("f"))
		logs[i] = &raft.Log{Index: h.next, Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Unix(0, int64(h.next))}
		h.next++
	}
	if err := h.view.Live.StoreLogs(logs); err != nil {
		h.t.Fatal(err)
	}
	for i, res := range h.f.ApplyBatch(logs) {
		if r := res.(*AppendResult); r.Void || r.Err != nil {
			h.t.Fatalf("filler %d: %+v", i, r)
		}
	}
}

// expired checks that r refused its entry as SessionExpired, stored as a
// void entry.
func expired(t *testing.T, what string, h *fsmHarness, r AppendResult) {
	t.Helper()
	if !r.Void || !errors.Is(r.Err, ErrSessionExpired) || r.Indexes != nil {
		t.Fatalf("%s: %+v, want a void entry and SessionExpired", what, r)
	}
	if idx := h.next - 1; !h.f.ReadView().Void(idx) {
		t.Fatalf("%s: entry %d is readable as a record", what, idx)
	}
}

// A retry from a client whose session was evicted is refused, not stored
// again, and the refusal survives a snapshot.
func TestFSMEvictedSessionRetry(t *testing.T) {
	h := newHarness(t)
	if r := h.recordBase("old", 1, 1, "a"); r.Void || r.Err != nil {
		t.Fatalf("first append: %+v", r)
	}
	if r := h.recordBase("old", 2, 1, "b"); r.Void || r.Err != nil {
		t.Fatalf("second append: %+v", r)
	}
	h.fillSessions("other", MaxSessions)
	if _, ok := h.f.Lookup("old", 2); ok {
		t.Fatal("the session is still held after maxSessions newer ones")
	}
	// The client retries sequence number 2, whose reply it lost; it has
	// finished with 1.
	expired(t, "retry of 2 after eviction", h, h.recordBase("old", 2, 2, "b"))
	expired(t, "retry of 2 from an older client", h, h.record("old", 2, 0, 1, "b"))
	expired(t, "retry of 1 after eviction", h, h.recordBase("old", 1, 1, "a"))

	// The refusal is part of the replicated state.
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := NewFSM(h.view, discardLogger())
	if err := g.Restore(io.NopCloser(bytes.NewReader(appendStreamHeader(nil, snap.(*fsmSnapshot).state)))); err != nil {
		t.Fatal(err)
	}
	h.f = g
	expired(t, "retry of 2 after a restore", h, h.recordBase("old", 2, 2, "b"))

	// A client that has finished with everything the evicted session
	// stored starts again, above its base.
	if r := h.recordBase("old", 3, 3, "c"); r.Void || r.Err != nil || len(r.Indexes) != 1 {
		t.Fatalf("new append above everything stored: %+v", r)
	}
	expired(t, "retry of 2 after the session started again", h, h.recordBase("old", 2, 2, "b"))
	if r := h.recordBase("old", 3, 3, "c"); !r.Void || !r.Dup || len(r.Indexes) != 1 {
		t.Fatalf("retry of 3 in the new session: %+v", r)
	}
}

// A session the state machine never held opens, whatever the client's
// base: no entry of the client is in the log. A new client whose first
// appends met a leader change (base past 1) must not be refused.
func TestFSMUnknownSession(t *testing.T) {
	h := newHarness(t)
	if r := h.recordBase("b", 7, 5, "w"); r.Void || r.Err != nil {
		t.Fatalf("unknown session, base 5: %+v", r)
	}
	if r := h.recordBase("b", 7, 5, "w"); !r.Void || !r.Dup {
		t.Fatalf("its retry: %+v, want a duplicate", r)
	}
	if r := h.recordBase("c", 2, 1, "x"); r.Void || r.Err != nil {
		t.Fatalf("new client, base 1, sequence 2 first: %+v", r)
	}
	if r := h.recordBase("c", 1, 1, "y"); r.Void || r.Err != nil {
		t.Fatalf("new client, sequence 1 second: %+v", r)
	}
	if r := h.record("legacy", 9, 0, 1, "z"); r.Void || r.Err != nil {
		t.Fatalf("older client without a base: %+v", r)
	}
	// A later part of an Append whose first part was never stored.
	if r := h.apply(raft.LogCommand, AppendRecordCmd(nil, "d", 1, 1, 2, 1, 0, []byte("p"))).(*AppendResult); !r.Void || r.Err != nil {
		t.Fatalf("second part without a session: %+v", r)
	}
}

// The evicted sessions kept are bounded; the oldest go first, and a
// session opened again leaves no stale entry behind.
func TestFSMEvictedBound(t *testing.T) {
	f := NewFSM(nil, discardLogger())
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range uint64(maxEvicted + 10) {
		f.rememberEvicted(i, i)
	}
	if len(f.evicted) != maxEvicted {
		t.Fatalf("%d evicted sessions kept, want %d", len(f.evicted), maxEvicted)
	}
	if _, ok := f.evicted[9]; ok {
		t.Fatal("the oldest evicted session is still kept")
	}
	for i := range uint64(3 * maxEvicted) {
		f.rememberEvicted(1<<40, i) // the same session, evicted again and again
	}
	if len(f.evictOrder) > 2*maxEvicted || f.evicted[1<<40].maxSeq != 3*maxEvicted-1 {
		t.Fatalf("%d entries in the eviction order, max seq %d", len(f.evictOrder), f.evicted[1<<40].maxSeq)
	}
	if live := f.liveEvicted(); len(live) != len(f.evicted) || !slices.IsSortedFunc(live, func(a, b evictedRef) int { return int(a.pos - b.pos) }) {
		t.Fatalf("%d live entries for %d evicted sessions", len(live), len(f.evicted))
	}
}

// A state written before the evicted sessions existed (version 1) still
// restores.
func TestFSMRestoresVersion1(t *testing.T) {
	h := newHarness(t)
	h.recordBase("c", 1, 1, "x")
	h.apply(raft.LogCommand, EncodeMemberCmd("n1", "127.0.0.1:1"))
	h.f.mu.Lock()
	v2 := h.f.encodeLocked()
	h.f.mu.Unlock()
	if v2[0] != 2 || v2[len(v2)-1] != 0 {
		t.Fatalf("state %x does not end in an empty evicted list", v2)
	}
	v1 := append([]byte{1}, v2[1:len(v2)-1]...)
	g := NewFSM(h.view, discardLogger())
	if err := g.Restore(io.NopCloser(bytes.NewReader(appendStreamHeader(nil, v1)))); err != nil {
		t.Fatalf("version 1 state: %v", err)
	}
	if idx, ok := g.Lookup("c", 1); !ok || !slices.Equal(idx, []uint64{1}) || g.Member("n1") != "127.0.0.1:1" {
		t.Fatalf("version 1 state restored as sessions %v, member %q", idx, g.Member("n1"))
	}
	if floor, _, err := stateLedger(v1); err != nil || floor != 1 {
		t.Fatalf("ledger of a version 1 state: floor %d, %v", floor, err)
	}
}
