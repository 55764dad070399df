package replica

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/raftstore"
)

// fsmHarness feeds entries to an fsm and stores them in a live log, as
// raft would.
type fsmHarness struct {
	t    *testing.T
	db   *raftstore.DB
	view *LogView
	f    *FSM
	next uint64
}

func newHarness(t *testing.T) *fsmHarness {
	t.Helper()
	db, err := raftstore.OpenDB(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	h := &fsmHarness{t: t, db: db, next: 1}
	if h.view, err = NewLogView(db, GroupsOf(0)); err != nil {
		t.Fatal(err)
	}
	h.f = NewFSM(h.view, discardLogger())
	return h
}

// apply stores and applies one entry and returns the FSM's answer.
func (h *fsmHarness) apply(typ raft.LogType, data []byte) any {
	h.t.Helper()
	l := &raft.Log{Index: h.next, Term: 1, Type: typ, Data: data, AppendedAt: time.Unix(0, int64(h.next))}
	h.next++
	if err := h.view.Live.StoreLogs([]*raft.Log{l}); err != nil {
		h.t.Fatal(err)
	}
	return h.f.ApplyBatch([]*raft.Log{l})[0]
}

func (h *fsmHarness) record(client string, seq, i, n uint64, payload string) AppendResult {
	h.t.Helper()
	return *h.apply(raft.LogCommand, AppendRecordCmd(nil, client, seq, i, n, 0, 0, []byte(payload))).(*AppendResult)
}

func TestFSMDeduplicates(t *testing.T) {
	h := newHarness(t)
	h.apply(raft.LogNoop, nil)       // 1
	r := h.record("c", 1, 0, 2, "a") // 2
	if r.Void || r.Indexes != nil {
		t.Fatalf("first part: %+v", r)
	}
	if r := h.record("c", 1, 0, 2, "a"); !r.Void || !r.Dup || r.Indexes != nil { // 3: a retry's first part
		t.Fatalf("repeated first part: %+v", r)
	}
	if r := h.record("c", 1, 1, 2, "b"); r.Void || !slices.Equal(r.Indexes, []uint64{2, 4}) { // 4
		t.Fatalf("second part: %+v", r)
	}
	if r := h.record("c", 1, 1, 2, "b"); !r.Void || !r.Dup || !slices.Equal(r.Indexes, []uint64{2, 4}) { // 5
		t.Fatalf("repeated second part: %+v", r)
	}
	if r := h.record("c", 3, 1, 2, "z"); !r.Void || r.Dup { // 6: runs ahead of its first part
		t.Fatalf("part without its first: %+v", r)
	}
	if r := h.record("c", 2, 0, 1, "x"); r.Void || !slices.Equal(r.Indexes, []uint64{7}) { // 7: out of order is fine
		t.Fatalf("seq 2: %+v", r)
	}
	if r := h.record("", 0, 0, 0, "anon"); !slices.Equal(r.Indexes, []uint64{8}) { // 8
		t.Fatalf("anonymous: %+v", r)
	}
	if got, ok := h.f.Lookup("c", 1); !ok || !slices.Equal(got, []uint64{2, 4}) {
		t.Fatalf("lookup: %v %v", got, ok)
	}
	if _, ok := h.f.Lookup("c", 3); ok {
		t.Fatal("incomplete request looked up as complete")
	}
	rv := h.f.ReadView()
	for idx, want := range map[uint64]bool{2: false, 3: true, 4: false, 5: true, 6: true, 7: false, 8: false} {
		if rv.Void(idx) != want {
			t.Errorf("void(%d) = %v, want %v", idx, !want, want)
		}
	}
}

func TestFSMSessionWindow(t *testing.T) {
	h := newHarness(t)
	for seq := uint64(1); seq <= sessionWindow+10; seq++ {
		h.record("c", seq, 0, 1, "x")
	}
	if _, ok := h.f.Lookup("c", 5); ok {
		t.Fatal("sequence 5 still remembered past the window")
	}
	if _, ok := h.f.Lookup("c", sessionWindow+10); !ok {
		t.Fatal("latest sequence forgotten")
	}
	if r := h.record("c", 5, 0, 1, "x"); !r.Void || !errors.Is(r.Err, ErrSessionExpired) {
		t.Fatalf("retry below the window: %+v", r)
	}
	for i := range MaxSessions + 5 {
		h.record(string(rune('A'+i%26))+string(rune(i)), 1, 0, 1, "y")
	}
	if len(h.f.sessions) != MaxSessions {
		t.Fatalf("%d sessions, want %d", len(h.f.sessions), MaxSessions)
	}
}

// The state survives encode and decode, and a snapshot stream built from
// it has exactly the size the ledger announces, after trims too.
func TestFSMStateAndStreamSize(t *testing.T) {
	h := newHarness(t)
	for i := range 3000 {
		switch {
		case i%500 == 7:
			h.apply(raft.LogNoop, nil)
		case i%3 == 0:
			h.record("c", uint64(i), 0, 1, string(bytes.Repeat([]byte{'x'}, i%97)))
		default:
			h.record("", 0, 0, 0, string(bytes.Repeat([]byte{'y'}, i%31)))
		}
	}
	h.apply(raft.LogCommand, EncodeMemberCmd("n1", "127.0.0.1:1"))
	for _, below := range []uint64{2, 1500, 2049, 2500} {
		h.apply(raft.LogCommand, EncodeTrimCmd(below))
		if h.f.ReadView().Floor != below {
			t.Fatalf("floor %d after trim below %d", h.f.ReadView().Floor, below)
		}
		snap, _ := h.f.Snapshot()
		state := snap.(*fsmSnapshot).state
		g := NewFSM(h.view, discardLogger())
		if err := g.Restore(io.NopCloser(bytes.NewReader(appendStreamHeader(nil, state)))); err != nil {
			t.Fatal(err)
		}
		g.mu.Lock()
		again := g.encodeLocked()
		g.mu.Unlock()
		if !bytes.Equal(again, state) {
			t.Fatalf("state does not survive a round trip after trim below %d", below)
		}
		floor, want, err := stateLedger(state)
		if err != nil {
			t.Fatal(err)
		}
		rs := &recordStream{view: h.view, next: floor, last: h.next - 1, want: want}
		n, err := io.Copy(io.Discard, rs)
		if err != nil {
			t.Fatalf("stream after trim below %d: %v", below, err)
		}
		if uint64(n) != want+streamEndSize {
			t.Fatalf("stream of %d bytes, ledger says %d", n, want+streamEndSize)
		}
	}
	if got := h.f.Member("n1"); got != "127.0.0.1:1" {
		t.Fatalf("member n1 = %q", got)
	}
	bad := []byte{StateVersion, 0x80} // a truncated varint
	if err := h.f.Restore(io.NopCloser(bytes.NewReader(appendStreamHeader(nil, bad)))); err == nil {
		t.Fatal("restore of a corrupt state succeeded")
	}
}

func TestCommandDecodeRejectsGarbage(t *testing.T) {
	for _, data := range [][]byte{
		{kindRecord},
		{kindRecord, 5, 'a'},
		AppendRecordCmd(nil, "c", 0, 0, 1, 0, 0, nil)[:5],
		AppendRecordCmd(nil, "c", 1, 2, 2, 0, 0, []byte("x")), // part 2 of 2
	} {
		if _, err := decodeRecordCmd(data); err == nil {
			t.Errorf("%x decoded", data)
		}
	}
	c, err := decodeRecordCmd(AppendRecordCmd(nil, "cli", 7, 1, 3, 0, 0, []byte("payload")))
	if err != nil || string(c.client) != "cli" || c.seq != 7 || c.i != 1 || c.n != 3 || string(c.payload) != "payload" {
		t.Fatalf("%+v %v", c, err)
	}
}

func FuzzDecodeState(f *testing.F) {
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		g := NewFSM(nil, discardLogger())
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.decodeLocked(b) == nil {
			again := g.encodeLocked()
			if g.decodeLocked(again) != nil {
				t.Fatal("re-encoded state does not decode")
			}
		}
	})
}

// TestApplyBatchAllocations: applying an Append's records costs a few
// allocations per batch, not one or more per record (each record's result
// boxed on its own, its client id copied into a string).
func TestApplyBatchAllocations(t *testing.T) {
	const records, runs = 64, 20
	h := newHarness(t)
	batches := make([][]*raft.Log, runs+1)
	for b := range batches {
		for i := range records {
			data := AppendRecordCmd(nil, "client-0123456789abcdef", uint64(b+1), uint64(i), records, 1, 0, []byte("payload"))
			batches[b] = append(batches[b], &raft.Log{Index: h.next, Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Unix(0, int64(h.next))})
			h.next++
		}
		if err := h.view.Live.StoreLogs(batches[b]); err != nil {
			t.Fatal(err)
		}
	}
	next := 0
	allocs := testing.AllocsPerRun(runs, func() {
		out := h.f.ApplyBatch(batches[next])
		next++
		if r, ok := out[records-1].(*AppendResult); !ok || len(r.Indexes) != records {
			t.Fatalf("batch %d answered %#v", next, out[records-1])
		}
	})
	if allocs > records/4 {
		t.Fatalf("applying %d records allocated %.0f times; want at most %d", records, allocs, records/4)
	}
	t.Logf("%d records: %.0f allocations", records, allocs)
}
