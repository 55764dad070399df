package raftstore

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The contract suite: what hashicorp/raft relies on from a LogStore,
// StableStore, MonotonicLogStore and CommitTrackingLogStore (see DESIGN.md,
// "raftstore and hashicorp/raft"), checked against a Store of its own (Open)
// and against one group of a DB whose other groups write around it, in both
// flush modes. Every state is checked again after Close and reopen.

// ctMode is one way of running the suite.
type ctMode struct {
	name  string
	db    bool // one group of a DB with neighbours, instead of Open
	flush FlushMode
}

var ctModes = []ctMode{
	{"Open/sync", false, SyncFlush},
	{"Open/async", false, AsyncFlush},
	{"DB/sync", true, SyncFlush},
	{"DB/async", true, AsyncFlush},
}

func ctForModes(t *testing.T, f func(t *testing.T, m ctMode)) {
	for _, m := range ctModes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// In DB modes the store under test is group ctGroup, created between its
// neighbours, which get an entry and stable keys of their own every time
// the test stores a batch.
const ctGroup = 7

var ctNeighbours = []uint64{3, 11}

// ctEnv is a store under test and, in DB modes, its neighbours.
type ctEnv struct {
	t      *testing.T
	mode   ctMode
	dir    string
	opts   Options
	db     *DB // nil when mode.db is false
	s      *Store
	nb     []*Store
	nbLogs [][]*raft.Log // what each neighbour holds, from index 1
	open   bool
}

func ctOpen(t *testing.T, m ctMode, opts Options) *ctEnv {
	t.Helper()
	e := &ctEnv{t: t, mode: m, dir: t.TempDir(), opts: opts}
	e.opts.Flush = m.flush
	if e.opts.SegmentSize == 0 {
		e.opts.SegmentSize = 4 << 20
	}
	e.nbLogs = make([][]*raft.Log, len(ctNeighbours))
	e.reopenNoClose()
	t.Cleanup(func() {
		if e.open {
			e.close()
		}
	})
	return e
}

func (e *ctEnv) reopenNoClose() {
	e.t.Helper()
	opts := e.opts
	if !e.mode.db {
		s, err := Open(e.dir, &opts)
		if err != nil {
			e.t.Fatalf("Open: %v", err)
		}
		e.s, e.open = s, true
		return
	}
	db, err := OpenDB(e.dir, &opts)
	if err != nil {
		e.t.Fatalf("OpenDB: %v", err)
	}
	e.db, e.open = db, true
	get := func(g uint64) *Store {
		s, err := db.Store(g)
		if err != nil {
			e.t.Fatalf("Store(%d): %v", g, err)
		}
		return s
	}
	e.nb = e.nb[:0]
	e.nb = append(e.nb, get(ctNeighbours[0]))
	e.s = get(ctGroup)
	e.nb = append(e.nb, get(ctNeighbours[1]))
	for i, s := range e.nb {
		if err := s.SetUint64([]byte("CurrentTerm"), 1000+ctNeighbours[i]); err != nil {
			e.t.Fatal(err)
		}
		if err := s.Set([]byte(fmt.Sprintf("only-%d", ctNeighbours[i])), []byte{byte(i)}); err != nil {
			e.t.Fatal(err)
		}
	}
	e.checkNeighbours()
}

// close closes the store (and checks the neighbours first).
func (e *ctEnv) close() {
	e.t.Helper()
	e.open = false
	if !e.mode.db {
		if err := e.s.Close(); err != nil {
			e.t.Fatalf("Close: %v", err)
		}
		return
	}
	e.checkNeighbours()
	if err := e.db.Close(); err != nil {
		e.t.Fatalf("DB.Close: %v", err)
	}
}

func (e *ctEnv) reopen() {
	e.t.Helper()
	e.close()
	e.reopenNoClose()
	if e.mode.db {
		want := []uint64{ctNeighbours[0], ctGroup, ctNeighbours[1]}
		slices.Sort(want)
		if got := e.db.Groups(); !slices.Equal(got, want) {
			e.t.Fatalf("Groups() after reopen = %v, want %v", got, want)
		}
	}
}

// noise appends one entry to every neighbour.
func (e *ctEnv) noise() {
	e.t.Helper()
	for i, s := range e.nb {
		n := uint64(len(e.nbLogs[i]) + 1)
		l := ctEntry(n, ctNeighbours[i], int(n%97))
		if err := s.StoreLogs([]*raft.Log{l}); err != nil {
			e.t.Fatalf("neighbour %d StoreLogs: %v", ctNeighbours[i], err)
		}
		e.nbLogs[i] = append(e.nbLogs[i], l)
	}
}

func (e *ctEnv) checkNeighbours() {
	e.t.Helper()
	for i, s := range e.nb {
		m := &ctModel{first: 1, logs: e.nbLogs[i]}
		if len(m.logs) == 0 {
			m.first = 0
		}
		if err := ctCheckStore(s, m); err != nil {
			e.t.Fatalf("neighbour group %d: %v", ctNeighbours[i], err)
		}
		if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 1000+ctNeighbours[i] {
			e.t.Fatalf("neighbour group %d CurrentTerm = %d, %v", ctNeighbours[i], v, err)
		}
	}
}

// store stores a batch that must succeed, and writes noise around it.
func (e *ctEnv) store(logs []*raft.Log) {
	e.t.Helper()
	e.noise()
	if err := e.s.StoreLogs(logs); err != nil {
		e.t.Fatalf("StoreLogs(%d..%d): %v", logs[0].Index, logs[len(logs)-1].Index, err)
	}
	e.noise()
}

// check checks the store under test against m.
func (e *ctEnv) check(m *ctModel) {
	e.t.Helper()
	if err := ctCheckStore(e.s, m); err != nil {
		e.t.Fatal(err)
	}
}

// ctModel is what a group must hold: entries first..first+len(logs)-1 and
// the persisted commit index.
type ctModel struct {
	first  uint64
	logs   []*raft.Log
	commit uint64
}

func (m *ctModel) last() uint64 {
	if len(m.logs) == 0 {
		return 0
	}
	return m.first + uint64(len(m.logs)) - 1
}

func (m *ctModel) clone() *ctModel {
	c := *m
	c.logs = slices.Clone(m.logs)
	return &c
}

func (m *ctModel) get(i uint64) *raft.Log {
	if len(m.logs) == 0 || i < m.first || i > m.last() {
		return nil
	}
	return m.logs[i-m.first]
}

// store applies a StoreLogs that succeeded; staged is the commit index
// staged before it (0 for none).
func (m *ctModel) store(logs []*raft.Log, staged uint64) {
	if len(m.logs) == 0 {
		m.first = logs[0].Index
	}
	m.logs = append(m.logs, logs...)
	if staged != 0 {
		m.commit = staged
	}
}

// deleteRange applies DeleteRange(lo, hi) for a prefix, a suffix or
// everything.
func (m *ctModel) deleteRange(lo, hi uint64) {
	first, last := m.first, m.last()
	if last == 0 || hi < first || lo > last || lo > hi {
		return
	}
	switch {
	case lo <= first && hi >= last:
		m.first, m.logs = 0, nil
	case lo <= first:
		m.logs = slices.Clone(m.logs[hi+1-first:])
		m.first = hi + 1
	case hi >= last:
		m.logs = slices.Clone(m.logs[:lo-first])
		m.commit = min(m.commit, lo-1)
	default:
		panic("middle delete")
	}
}

func (m *ctModel) commitIndex() uint64 { return min(m.commit, m.last()) }

func (m *ctModel) String() string {
	return fmt.Sprintf("first %d last %d commit %d", m.first, m.last(), m.commitIndex())
}

// ctCheckStore checks every index of s against m, and that the indexes
// around it are exactly raft.ErrLogNotFound.
func ctCheckStore(s *Store, m *ctModel) error {
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != m.first || last != m.last() {
		return fmt.Errorf("group %d: first %d last %d, want %d and %d", s.Group(), first, last, m.first, m.last())
	}
	var out raft.Log
	for i, want := range m.logs {
		idx := m.first + uint64(i)
		if err := s.GetLog(idx, &out); err != nil {
			return fmt.Errorf("group %d: GetLog(%d): %v", s.Group(), idx, err)
		}
		if err := ctLogsEqual(&out, want); err != nil {
			return fmt.Errorf("group %d: GetLog(%d): %v", s.Group(), idx, err)
		}
	}
	probes := []uint64{0, 1, last + 1, last + 2, math.MaxUint64}
	if first > 0 {
		probes = append(probes, first-1)
	}
	for _, i := range probes {
		if m.get(i) != nil {
			continue
		}
		if err := s.GetLog(i, &out); err != raft.ErrLogNotFound {
			return fmt.Errorf("group %d: GetLog(%d) of a missing entry = %v, want raft.ErrLogNotFound itself", s.Group(), i, err)
		}
	}
	c, err := s.GetCommitIndex()
	if err != nil || c != m.commitIndex() {
		return fmt.Errorf("group %d: GetCommitIndex = %d, %v; want %d", s.Group(), c, err, m.commitIndex())
	}
	return nil
}

// ctLogsEqual compares every field of two entries; times with Equal.
func ctLogsEqual(got, want *raft.Log) error {
	switch {
	case got.Index != want.Index:
		return fmt.Errorf("index %d, want %d", got.Index, want.Index)
	case got.Term != want.Term:
		return fmt.Errorf("entry %d: term %d, want %d", want.Index, got.Term, want.Term)
	case got.Type != want.Type:
		return fmt.Errorf("entry %d: type %v, want %v", want.Index, got.Type, want.Type)
	case !bytes.Equal(got.Data, want.Data):
		return fmt.Errorf("entry %d: data differs (%d bytes, want %d)", want.Index, len(got.Data), len(want.Data))
	case !bytes.Equal(got.Extensions, want.Extensions):
		return fmt.Errorf("entry %d: extensions %q, want %q", want.Index, got.Extensions, want.Extensions)
	case !got.AppendedAt.Equal(want.AppendedAt):
		return fmt.Errorf("entry %d: appended at %v, want %v", want.Index, got.AppendedAt, want.AppendedAt)
	}
	return nil
}

// ctData returns size bytes that depend on index and term.
func ctData(index, term uint64, size int) []byte {
	b := make([]byte, size)
	x := index*0x9E3779B97F4A7C15 ^ term
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// ctEntry returns the entry at index of term with size bytes of data.
func ctEntry(index, term uint64, size int) *raft.Log {
	l := &raft.Log{
		Index:      index,
		Term:       term,
		Type:       raft.LogType(index % 6),
		Data:       ctData(index, term, size),
		AppendedAt: time.Unix(1_700_000_000+int64(index), int64(index*7919%1e9)),
	}
	if index%5 == 0 {
		l.Extensions = []byte(fmt.Sprintf("ext-%d-%d", index, term))
	}
	return l
}

// ctEntries returns n entries from first.
func ctEntries(first uint64, n int, term uint64, size int) []*raft.Log {
	logs := make([]*raft.Log, n)
	for i := range logs {
		logs[i] = ctEntry(first+uint64(i), term, size)
	}
	return logs
}

func ctCloneLog(l *raft.Log) *raft.Log {
	c := *l
	c.Data = bytes.Clone(l.Data)
	c.Extensions = bytes.Clone(l.Extensions)
	return &c
}

func TestContractInterfaces(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var x any = s
	if _, ok := x.(raft.LogStore); !ok {
		t.Error("not a raft.LogStore")
	}
	if _, ok := x.(raft.StableStore); !ok {
		t.Error("not a raft.StableStore")
	}
	// Not monotonic by default: raft v1.8.0 empties a monotonic store
	// after a snapshot install (hashicorp/raft#697).
	if ms, ok := x.(raft.MonotonicLogStore); ok && ms.IsMonotonic() {
		t.Error("IsMonotonic() = true without Options.Monotonic")
	}
	if _, ok := x.(raft.CommitTrackingLogStore); !ok {
		t.Error("not a raft.CommitTrackingLogStore")
	}
	m, err := Open(t.TempDir(), &Options{SegmentSize: 1 << 20, Monotonic: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.IsMonotonic() {
		t.Error("IsMonotonic() = false with Options.Monotonic")
	}
}

func TestContractEmpty(t *testing.T) {
	ctForModes(t, func(t *testing.T, m ctMode) {
		e := ctOpen(t, m, Options{})
		for round := 0; round < 2; round++ {
			if f, err := e.s.FirstIndex(); f != 0 || err != nil {
				t.Fatalf("FirstIndex = %d, %v", f, err)
			}
			if l, err := e.s.LastIndex(); l != 0 || err != nil {
				t.Fatalf("LastIndex = %d, %v", l, err)
			}
			var out raft.Log
			for _, i := range []uint64{0, 1, 2, 1000, math.MaxUint64} {
				if err := e.s.GetLog(i, &out); err != raft.ErrLogNotFound {
					t.Fatalf("GetLog(%d) = %v, want raft.ErrLogNotFound itself", i, err)
				}
			}
			if c, err := e.s.GetCommitIndex(); c != 0 || err != nil {
				t.Fatalf("GetCommitIndex = %d, %v", c, err)
			}
			e.noise()
			e.reopen()
		}
	})
}

func TestContractStoreAndGet(t *testing.T) {
	ctForModes(t, func(t *testing.T, m ctMode) {
		e := ctOpen(t, m, Options{})
		model := &ctModel{}
		// The first batch of an empty store may start anywhere.
		one := ctEntry(1000, 1, 10)
		e.noise()
		if err := e.s.StoreLog(one); err != nil {
			t.Fatal(err)
		}
		model.store([]*raft.Log{one}, 0)
		e.check(model)
		for b := 0; b < 5; b++ {
			logs := ctEntries(model.last()+1, 1+b*30, 2, 50*b)
			e.store(logs)
			model.store(logs, 0)
			e.check(model)
		}
		e.reopen()
		e.check(model)
		logs := ctEntries(model.last()+1, 64, 3, 200)
		e.store(logs)
		model.store(logs, 0)
		e.reopen()
		e.check(model)
	})
}

func TestContractBatchErrors(t *testing.T) {
	ctForModes(t, func(t *testing.T, m ctMode) {
		e := ctOpen(t, m, Options{Monotonic: true}) // refuses gaps too
		model := &ctModel{}
		mk := func(idx ...uint64) []*raft.Log {
			var logs []*raft.Log
			for _, i := range idx {
				logs = append(logs, ctEntry(i, 9, 20))
			}
			return logs
		}
		// Bad first batches of an empty store change nothing either.
		for _, bad := range [][]*raft.Log{mk(5, 7), mk(5, 5), mk(6, 5), mk(0, 1), mk(0)} {
			if err := e.s.StoreLogs(bad); err == nil {
				t.Fatalf("StoreLogs(%v) on an empty store succeeded", ctIndexes(bad))
			}
			e.check(model)
		}
		logs := ctEntries(1000, 10, 1, 30)
		e.store(logs)
		model.store(logs, 0)
		cases := []struct {
			name string
			logs []*raft.Log
		}{
			{"gap", mk(1011, 1012)},
			{"far gap", mk(70000)},
			{"overlap last", mk(1009, 1010)},
			{"overlap inside", mk(1003, 1004, 1005)},
			{"restart at first", mk(1000)},
			{"before first", mk(1, 2, 3)},
			{"non-contiguous", mk(1010, 1012)},
			{"duplicate", mk(1010, 1010)},
			{"descending", mk(1010, 1009)},
			{"bad tail", mk(1010, 1011, 1011)},
		}
		for _, c := range cases {
			if err := e.s.StoreLogs(c.logs); err == nil {
				t.Fatalf("%s: StoreLogs(%v) succeeded after 1000..1009", c.name, ctIndexes(c.logs))
			}
			e.check(model)
		}
		e.reopen()
		e.check(model)
		// The store still takes the right batch.
		logs = ctEntries(1010, 5, 2, 30)
		e.store(logs)
		model.store(logs, 0)
		e.check(model)
		e.reopen()
		e.check(model)
	})
}

// TestContractGapDropsOlderEntries stores batches that start past the
// next index, as raft does after installing a snapshot that covers
// everything a follower holds (with a store that is not monotonic, it
// compacts only up to the snapshot, or nothing with its trailing logs):
// the batch is stored and every older entry is gone, for good.
func TestContractGapDropsOlderEntries(t *testing.T) {
	ctForModes(t, func(t *testing.T, m ctMode) {
		e := ctOpen(t, m, Options{})
		model := &ctModel{}
		logs := ctEntries(1000, 10, 1, 30)
		e.store(logs)
		model.store(logs, 0)
		if err := e.s.StageCommitIndex(1005); err != nil {
			t.Fatal(err)
		}
		logs = ctEntries(1010, 2, 1, 30)
		e.store(logs)
		model.store(logs, 1005)
		for _, start := range []uint64{1020, 1030 + indexSlotsPerFile, 3 * indexSlotsPerFile} {
			if err := e.s.StageCommitIndex(start + 1); err != nil {
				t.Fatal(err)
			}
			logs := ctEntries(start, 5, 2, 40)
			e.store(logs)
			model.deleteRange(model.first, model.last())
			model.store(logs, start+1)
			e.check(model)
			e.reopen()
			e.check(model)
		}
		// An overlap is still refused.
		if err := e.s.StoreLogs(ctEntries(model.last(), 2, 2, 40)); err == nil {
			t.Fatalf("StoreLogs at %d after last %d succeeded", model.last(), model.last())
		}
		e.check(model)
	})
}

func ctIndexes(logs []*raft.Log) []uint64 {
	var out []uint64
	for _, l := range logs {
		out = append(out, l.Index)
	}
	return out
}

func TestContractFieldsRoundTrip(t *testing.T) {
	big := ctData(1, 1, 1<<20)
	times := []time.Time{
		{},
		time.Unix(1_700_000_000, 123_456_789),
		time.Unix(0, 1),
		time.Unix(-1, 999_999_999),
		time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(2262, 4, 11, 23, 47, 16, 854_775_807, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.FixedZone("x", 3600)),
		time.Now(), // with a monotonic reading
	}
	datas := [][]byte{nil, {}, {0x42}, big, bytes.Repeat([]byte{0}, 300)}
	exts := [][]byte{nil, {}, {1}, bytes.Repeat([]byte("ext"), 100)}
	types := []raft.LogType{raft.LogCommand, raft.LogNoop, raft.LogAddPeerDeprecated,
		raft.LogRemovePeerDeprecated, raft.LogBarrier, raft.LogConfiguration}
	var want []*raft.Log
	next := uint64(1000)
	add := func(l raft.Log) {
		l.Index = next
		next++
		want = append(want, &l)
	}
	for i, typ := range types {
		add(raft.Log{Term: uint64(i + 1), Type: typ, Data: []byte{byte(i)}})
	}
	for i, d := range datas {
		add(raft.Log{Term: 7, Data: d, Extensions: exts[i%len(exts)]})
	}
	for i, x := range exts {
		add(raft.Log{Term: 8, Type: raft.LogConfiguration, Extensions: x, Data: datas[i%3]})
	}
	for _, at := range times {
		add(raft.Log{Term: 9, AppendedAt: at, Data: []byte("t")})
	}
	add(raft.Log{Term: math.MaxUint64, Type: raft.LogCommand, Data: big[:1000], AppendedAt: times[1]})

	ctForModes(t, func(t *testing.T, m ctMode) {
		e := ctOpen(t, m, Options{})
		model := &ctModel{}
		// Half in one batch, then one at a time.
		half := len(want) / 2
		e.store(want[:half])
		model.store(want[:half], 0)
		for _, l := range want[half:] {
			e.store([]*raft.Log{l})
			model.store([]*raft.Log{l}, 0)
		}
		e.check(model)
		var out raft.Log
		for _, l := range want {
			if l.AppendedAt.IsZero() {
				if err := e.s.GetLog(l.Index, &out); err != nil || !out.AppendedAt.IsZero() {
					t.Fatalf("entry %d: zero AppendedAt came back as %v (%v)", l.Index, out.AppendedAt, err)
				}
			}
		}
		e.reopen()
		e.check(model)
	})
}

func TestContractGetLogReturnsCopy(t *testing.T) {
	ctForModes(t, func(t *testing.T, m ctMode) {
		e := ctOpen(t, m, Options{SegmentSize: 64 << 10})
		logs := ctEntries(1, 40, 1, 100)
		orig := make([]*raft.Log, len(logs))
		for i, l := range logs {
			orig[i] = ctCloneLog(l)
		}
		e.store(logs)
		// Mutate the caller's entries after StoreLogs returned.
		for _, l := range logs {
			for i := range l.Data {
				l.Data[i] ^= 0xff
			}
			for i := range l.Extensions {
				l.Extensions[i] ^= 0xff
			}
			l.Term = 99
		}
		model := &ctModel{first: 1, logs: orig}
		e.check(model)

		// Mutating a returned value does not change the next one.
		var out raft.Log
		if err := e.s.GetLog(10, &out); err != nil {
			t.Fatal(err)
		}
		for i := range out.Data {
			out.Data[i] = 0
		}
		for i := range out.Extensions {
			out.Extensions[i] = 0
		}
		var kept raft.Log
		if err := e.s.GetLog(10, &kept); err != nil {
			t.Fatal(err)
		}
		if err := ctLogsEqual(&kept, orig[9]); err != nil {
			t.Fatalf("after mutating an earlier result: %v", err)
		}
		// Reusing out for another GetLog does not change kept either.
		keptCopy := kept
		if err := e.s.GetLog(11, &keptCopy); err != nil {
			t.Fatal(err)
		}
		checkKept := func(when string) {
			t.Helper()
			if err := ctLogsEqual(&kept, orig[9]); err != nil {
				t.Fatalf("%s: a value GetLog returned earlier changed: %v", when, err)
			}
		}
		checkKept("after another GetLog")

		// Rewrite index 10 with different entries.
		if err := e.s.DeleteRange(10, 40); err != nil {
			t.Fatal(err)
		}
		checkKept("after DeleteRange")
		newer := ctEntries(10, 31, 2, 100)
		e.store(newer)
		model = &ctModel{first: 1, logs: append(slices.Clone(orig[:9]), newer...)}
		e.check(model)
		checkKept("after StoreLogs at the same index")

		// Compact it away, with enough writes to release segments.
		for i := 0; i < 20; i++ {
			more := ctEntries(model.last()+1, 64, 3, 1000)
			e.store(more)
			model.store(more, 0)
		}
		if err := e.s.DeleteRange(1, model.last()-5); err != nil {
			t.Fatal(err)
		}
		model.deleteRange(1, model.last()-5)
		e.check(model)
		checkKept("after compaction")
		e.reopen()
		checkKept("after reopen")
		e.check(model)
	})
}

func TestContractDeleteRange(t *testing.T) {
	cases := []struct {
		name        string
		lo, hi      uint64
		first, last uint64 // afterwards; 0, 0 for empty
		err         bool
	}{
		{"prefix", 100, 199, 200, 399, false},
		{"prefix one", 100, 100, 101, 399, false},
		{"prefix partly outside", 1, 149, 150, 399, false},
		{"prefix from zero", 0, 300, 301, 399, false},
		{"prefix but the last", 100, 398, 399, 399, false},
		{"suffix", 300, 399, 100, 299, false},
		{"suffix one", 399, 399, 100, 398, false},
		{"suffix partly outside", 350, 10_000, 100, 349, false},
		{"suffix to max", 101, math.MaxUint64, 100, 100, false},
		{"everything", 100, 399, 0, 0, false},
		{"everything partly outside", 50, 500, 0, 0, false},
		{"everything from zero to max", 0, math.MaxUint64, 0, 0, false},
		{"below", 1, 99, 100, 399, false},
		{"above", 400, 1000, 100, 399, false},
		{"reversed", 300, 200, 100, 399, false},
		{"middle", 200, 250, 100, 399, true},
	}
	ctForModes(t, func(t *testing.T, m ctMode) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				e := ctOpen(t, m, Options{SegmentSize: 1 << 20})
				model := &ctModel{}
				for b := 0; b < 3; b++ {
					logs := ctEntries(100+uint64(b)*100, 100, 1, 64)
					e.store(logs)
					model.store(logs, 0)
				}
				err := e.s.DeleteRange(c.lo, c.hi)
				if (err != nil) != c.err {
					t.Fatalf("DeleteRange(%d, %d) = %v, want error %v", c.lo, c.hi, err, c.err)
				}
				if !c.err {
					model.deleteRange(c.lo, c.hi)
				}
				if model.first != c.first || model.last() != c.last {
					t.Fatalf("test model is wrong: %v", model)
				}
				e.check(model)
				e.reopen()
				e.check(model)
				// Append again: after the last (an overlap is
				// refused), or anywhere when empty.
				start := model.last() + 1
				if model.last() == 0 {
					start = 5000
				} else if err := e.s.StoreLogs(ctEntries(start-1, 5, 2, 64)); err == nil {
					t.Fatalf("StoreLogs at %d after last %d succeeded", start-1, model.last())
				}
				logs := ctEntries(start, 20, 2, 64)
				e.store(logs)
				model.store(logs, 0)
				e.check(model)
				e.reopen()
				e.check(model)
			})
		}
	})
}

// TestContractIndexFileBoundaries deletes and appends across the boundaries
// of the index files (indexSlotsPerFile entries each), the way raft does
// after a snapshot install far ahead.
func TestContractIndexFileBoundaries(t *testing.T) {
	const n = indexSlotsPerFile
	ctForModes(t, func(t *testing.T, m ctMode) {
		e := ctOpen(t, m, Options{})
		model := &ctModel{}
		step := func(what string, f func()) {
			t.Helper()
			f()
			if err := ctCheckStore(e.s, model); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			e.reopen()
			if err := ctCheckStore(e.s, model); err != nil {
				t.Fatalf("%s, after reopen: %v", what, err)
			}
		}
		del := func(lo, hi uint64) {
			t.Helper()
			if err := e.s.DeleteRange(lo, hi); err != nil {
				t.Fatalf("DeleteRange(%d, %d): %v", lo, hi, err)
			}
			model.deleteRange(lo, hi)
		}
		add := func(first uint64, k int, term uint64) {
			t.Helper()
			logs := ctEntries(first, k, term, 16)
			e.store(logs)
			model.store(logs, 0)
		}
		step("straddle", func() { add(n-10, 30, 1) })
		step("suffix back across", func() { del(n-4, n+19) })
		step("append across again", func() { add(n-4, 64, 2) })
		step("prefix across", func() { del(0, n+2) })
		step("everything", func() { del(n+3, n+59) })
		step("far ahead", func() { add(5*n+7, 10, 3) })
		step("everything then below", func() { del(5*n+7, 5*n+16); add(1, 10, 4) })
		step("everything then far ahead again", func() { del(0, math.MaxUint64); add(3*n-1, 3, 5) })
	})
}

func TestContractStable(t *testing.T) {
	big := ctData(3, 3, 64<<10)
	ctForModes(t, func(t *testing.T, m ctMode) {
		e := ctOpen(t, m, Options{})
		s := e.s
		uints := map[string]uint64{"CurrentTerm": 1 << 40, "LastVoteTerm": 7, "u-zero": 0, "u-max": math.MaxUint64}
		vals := map[string][]byte{
			"LastVoteCand": []byte("node-3:8300"),
			"empty":        {},
			"big":          big,
			"bin\x00key":   {0, 1, 2},
			"":             []byte("empty key"),
		}
		check := func() {
			t.Helper()
			for k, v := range uints {
				got, err := s.GetUint64([]byte(k))
				if err != nil || got != v {
					t.Fatalf("GetUint64(%q) = %d, %v; want %d", k, got, err, v)
				}
			}
			for k, v := range vals {
				got, err := s.Get([]byte(k))
				if err != nil || !bytes.Equal(got, v) {
					t.Fatalf("Get(%q) = %d bytes, %v; want %d bytes", k, len(got), err, len(v))
				}
			}
			for _, k := range []string{"missing", "CurrentTerm2", "Current"} {
				if v, err := s.Get([]byte(k)); err != nil || len(v) != 0 {
					t.Fatalf("Get(%q) of a missing key = %q, %v", k, v, err)
				}
				if v, err := s.GetUint64([]byte(k)); err != nil || v != 0 {
					t.Fatalf("GetUint64(%q) of a missing key = %d, %v", k, v, err)
				}
			}
			if e.mode.db {
				for i, nb := range e.nb {
					if v, err := nb.Get([]byte("big")); err != nil || len(v) != 0 {
						t.Fatalf("neighbour %d sees the key of group %d: %d bytes, %v", ctNeighbours[i], ctGroup, len(v), err)
					}
					if v, _ := nb.GetUint64([]byte("CurrentTerm")); v != 1000+ctNeighbours[i] {
						t.Fatalf("neighbour %d CurrentTerm = %d", ctNeighbours[i], v)
					}
					if v, err := s.Get([]byte(fmt.Sprintf("only-%d", ctNeighbours[i]))); err != nil || len(v) != 0 {
						t.Fatalf("group %d sees a key of neighbour %d: %q, %v", ctGroup, ctNeighbours[i], v, err)
					}
				}
			}
		}
		// Overwrite to check the last value wins.
		if err := s.SetUint64([]byte("CurrentTerm"), 1); err != nil {
			t.Fatal(err)
		}
		if err := s.Set([]byte("big"), []byte("small")); err != nil {
			t.Fatal(err)
		}
		for k, v := range uints {
			if err := s.SetUint64([]byte(k), v); err != nil {
				t.Fatal(err)
			}
		}
		for k, v := range vals {
			if err := s.Set([]byte(k), v); err != nil {
				t.Fatal(err)
			}
		}
		// Set copies: changing the caller's slice afterwards does nothing.
		scratch := []byte("node-9")
		if err := s.Set([]byte("scratch"), scratch); err != nil {
			t.Fatal(err)
		}
		scratch[0] = 'X'
		vals["scratch"] = []byte("node-9")
		// Get returns a copy too.
		if v, _ := s.Get([]byte("LastVoteCand")); len(v) > 0 {
			v[0] = 'X'
		}
		check()
		e.reopen()
		s = e.s
		check()
		e.noise()
		e.reopen()
		s = e.s
		check()
	})
}

func TestContractCommitIndex(t *testing.T) {
	ctForModes(t, func(t *testing.T, m ctMode) {
		e := ctOpen(t, m, Options{})
		commit := func() uint64 {
			t.Helper()
			c, err := e.s.GetCommitIndex()
			if err != nil {
				t.Fatal(err)
			}
			last, _ := e.s.LastIndex()
			if c > last {
				t.Fatalf("GetCommitIndex %d is above LastIndex %d", c, last)
			}
			return c
		}
		expect := func(want uint64, when string) {
			t.Helper()
			if c := commit(); c != want {
				t.Fatalf("%s: GetCommitIndex = %d, want %d", when, c, want)
			}
		}
		expect(0, "empty")
		if err := e.s.StageCommitIndex(5); err != nil {
			t.Fatal(err)
		}
		expect(0, "staged without StoreLogs")
		e.store(ctEntries(1, 10, 1, 8))
		expect(5, "after StoreLogs")
		if err := e.s.StageCommitIndex(8); err != nil {
			t.Fatal(err)
		}
		expect(5, "staged 8 without StoreLogs")
		e.reopen()
		expect(5, "after reopen (8 staged, never stored)")
		e.store(ctEntries(11, 5, 1, 8))
		expect(5, "StoreLogs after reopen: the staged value died with the process")
		if err := e.s.StageCommitIndex(12); err != nil {
			t.Fatal(err)
		}
		e.store(ctEntries(16, 5, 1, 8))
		expect(12, "after StoreLogs")
		e.reopen()
		expect(12, "after reopen")
		// Above the last index.
		if err := e.s.StageCommitIndex(1000); err != nil {
			t.Fatal(err)
		}
		e.store(ctEntries(21, 5, 1, 8))
		expect(25, "staged above last")
		e.reopen()
		expect(25, "staged above last, after reopen")
		// A suffix delete takes it down with it.
		if err := e.s.DeleteRange(23, 25); err != nil {
			t.Fatal(err)
		}
		expect(22, "after suffix DeleteRange")
		e.reopen()
		expect(22, "after suffix DeleteRange and reopen")
		e.store(ctEntries(23, 10, 2, 8))
		expect(22, "after appending past the suffix delete")
		if err := e.s.StageCommitIndex(30); err != nil {
			t.Fatal(err)
		}
		e.store(ctEntries(33, 1, 2, 8))
		if err := e.s.DeleteRange(1, 20); err != nil {
			t.Fatal(err)
		}
		expect(30, "after prefix DeleteRange")
		e.reopen()
		expect(30, "after prefix DeleteRange and reopen")
		if err := e.s.DeleteRange(21, 33); err != nil {
			t.Fatal(err)
		}
		expect(0, "after deleting everything")
		e.reopen()
		expect(0, "after deleting everything and reopen")
	})
}

// ctSegmentFiles returns the bases of the commit log's segment files.
func ctSegmentFiles(t *testing.T, dir string) []int64 {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, logDirName))
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, ent := range ents {
		name := ent.Name()
		if len(name) != 20 {
			continue
		}
		var v int64
		ok := true
		for _, c := range name {
			if c < '0' || c > '9' {
				ok = false
				break
			}
			v = v*10 + int64(c-'0')
		}
		if ok {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

func TestContractSegmentRelease(t *testing.T) {
	for _, flush := range []FlushMode{SyncFlush, AsyncFlush} {
		t.Run(fmt.Sprintf("flush%d/Open", flush), func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, &Options{SegmentSize: 64 << 10, Flush: flush})
			if err != nil {
				t.Fatal(err)
			}
			model := &ctModel{}
			for b := 0; b < 40; b++ {
				logs := ctEntries(model.last()+1, 32, 1, 500)
				if err := s.StoreLogs(logs); err != nil {
					t.Fatal(err)
				}
				model.store(logs, 0)
			}
			before := ctSegmentFiles(t, dir)
			if len(before) < 10 {
				t.Fatalf("only %d segment files for 640 KB of entries", len(before))
			}
			if err := s.DeleteRange(1, model.last()-10); err != nil {
				t.Fatal(err)
			}
			model.deleteRange(1, model.last()-10)
			after := ctSegmentFiles(t, dir)
			if len(after) > len(before)-5 || after[0] == 0 {
				t.Fatalf("segments %v after compacting all but 10 entries, were %v", after, before)
			}
			if err := ctCheckStore(s, model); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = Open(dir, &Options{SegmentSize: 64 << 10, Flush: flush}); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := ctCheckStore(s, model); err != nil {
				t.Fatal(err)
			}
			if got := ctSegmentFiles(t, dir); len(got) > len(after)+1 || got[0] == 0 {
				t.Fatalf("segments %v after reopen, were %v", got, after)
			}
		})
		t.Run(fmt.Sprintf("flush%d/DB", flush), func(t *testing.T) {
			dir := t.TempDir()
			opts := &Options{SegmentSize: 64 << 10, Flush: flush}
			db, err := OpenDB(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { db.Close() }()
			a, _ := db.Store(1)
			b, _ := db.Store(2)
			ma, mb := &ctModel{}, &ctModel{}
			for i := 0; i < 40; i++ {
				for _, x := range []struct {
					s *Store
					m *ctModel
				}{{a, ma}, {b, mb}} {
					logs := ctEntries(x.m.last()+1, 16, 1, 500)
					if err := x.s.StoreLogs(logs); err != nil {
						t.Fatal(err)
					}
					x.m.store(logs, 0)
				}
			}
			before := ctSegmentFiles(t, dir)
			if len(before) < 10 {
				t.Fatalf("only %d segment files for 640 KB of entries", len(before))
			}
			// a compacts; b, which did not, pins every segment.
			if err := a.DeleteRange(1, ma.last()-10); err != nil {
				t.Fatal(err)
			}
			ma.deleteRange(1, ma.last()-10)
			pinned := ctSegmentFiles(t, dir)
			for _, base := range before {
				if !slices.Contains(pinned, base) {
					t.Fatalf("segment %d was removed while group 2 still needs it: %v, were %v", base, pinned, before)
				}
			}
			for _, x := range []struct {
				s *Store
				m *ctModel
			}{{a, ma}, {b, mb}} {
				if err := ctCheckStore(x.s, x.m); err != nil {
					t.Fatal(err)
				}
			}
			// Now b compacts too, and they go.
			if err := b.DeleteRange(1, mb.last()-10); err != nil {
				t.Fatal(err)
			}
			mb.deleteRange(1, mb.last()-10)
			after := ctSegmentFiles(t, dir)
			if len(after) > len(before)-5 || after[0] == 0 {
				t.Fatalf("segments %v after both groups compacted, were %v", after, before)
			}
			for _, x := range []struct {
				s *Store
				m *ctModel
			}{{a, ma}, {b, mb}} {
				if err := ctCheckStore(x.s, x.m); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if db, err = OpenDB(dir, opts); err != nil {
				t.Fatal(err)
			}
			a, _ = db.Store(1)
			b, _ = db.Store(2)
			if err := ctCheckStore(a, ma); err != nil {
				t.Fatal(err)
			}
			if err := ctCheckStore(b, mb); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestContractConcurrentReadWriteCompact runs raft's access pattern under
// -race: one goroutine appends batches of 64, four read random indexes,
// one compacts a prefix now and then. Readers see the right entry or, for
// a compacted index, raft.ErrLogNotFound itself.
func TestContractConcurrentReadWriteCompact(t *testing.T) {
	const (
		batches     = 120
		batchSize   = 64
		readers     = 4
		compactEach = 6 // batches between compactions
		keep        = 300
		maxReads    = 200_000
	)
	want := func(i uint64) *raft.Log { return ctEntry(i, 4, int(i%300)) }
	ctForModes(t, func(t *testing.T, m ctMode) {
		e := ctOpen(t, m, Options{SegmentSize: 64 << 10})
		s := e.s
		var (
			wg       sync.WaitGroup
			done     atomic.Bool
			failed   atomic.Bool
			compacts = make(chan uint64, batches)
		)
		fail := func(format string, args ...any) {
			failed.Store(true)
			t.Errorf(format, args...)
		}
		wg.Add(1)
		go func() { // writer
			defer wg.Done()
			defer close(compacts)
			defer done.Store(true)
			next := uint64(500)
			for b := 0; b < batches && !failed.Load(); b++ {
				logs := make([]*raft.Log, batchSize)
				for i := range logs {
					logs[i] = want(next + uint64(i))
				}
				if err := s.StoreLogs(logs); err != nil {
					fail("StoreLogs: %v", err)
					return
				}
				next += batchSize
				if b%compactEach == compactEach-1 {
					compacts <- next - 1
				}
			}
		}()
		wg.Add(1)
		go func() { // compactor
			defer wg.Done()
			for last := range compacts {
				first, _ := s.FirstIndex()
				if last > first+keep {
					if err := s.DeleteRange(first, last-keep); err != nil {
						fail("DeleteRange(%d, %d): %v", first, last-keep, err)
						return
					}
				}
			}
		}()
		var found, notFound atomic.Int64
		for r := 0; r < readers; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(r), 1))
				var out raft.Log
				for n := 0; n < maxReads && !done.Load() && !failed.Load(); n++ {
					// Last before first: StoreLogs publishes the first
					// index before the last, and compaction only raises
					// the first.
					last, _ := s.LastIndex()
					first, _ := s.FirstIndex()
					if last == 0 {
						runtime.Gosched()
						continue
					}
					if first == 0 {
						fail("FirstIndex 0 after LastIndex %d", last)
						return
					}
					if first > last {
						continue // compacted past what we saw
					}
					i := first + rng.Uint64N(last-first+1)
					err := s.GetLog(i, &out)
					switch {
					case err == nil:
						if err := ctLogsEqual(&out, want(i)); err != nil {
							fail("GetLog(%d): %v", i, err)
							return
						}
						found.Add(1)
					case err == raft.ErrLogNotFound:
						if f, _ := s.FirstIndex(); f <= i {
							fail("GetLog(%d) = ErrLogNotFound but first is %d and last was %d", i, f, last)
							return
						}
						notFound.Add(1)
					default:
						fail("GetLog(%d) in [%d, %d]: %v", i, first, last, err)
						return
					}
				}
			}()
		}
		if m.db {
			wg.Add(1)
			go func() { // the neighbours append too
				defer wg.Done()
				for b := 0; b < batches/4 && !failed.Load(); b++ {
					for i, nb := range e.nb {
						n := uint64(len(e.nbLogs[i]) + 1)
						logs := ctEntries(n, 8, ctNeighbours[i], 40)
						if err := nb.StoreLogs(logs); err != nil {
							fail("neighbour StoreLogs: %v", err)
							return
						}
						e.nbLogs[i] = append(e.nbLogs[i], logs...)
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		t.Logf("%d reads found, %d compacted", found.Load(), notFound.Load())
		if found.Load() == 0 {
			t.Fatal("no reader ever found an entry")
		}
		last, _ := s.LastIndex()
		first, _ := s.FirstIndex()
		model := &ctModel{first: first}
		for i := first; i <= last; i++ {
			model.logs = append(model.logs, want(i))
		}
		if last != 500+batches*batchSize-1 || first < 500 {
			t.Fatalf("first %d last %d", first, last)
		}
		e.check(model)
		e.reopen()
		e.check(model)
	})
}

// ctRandomBatch returns 1 to 64 entries from first, mostly small, now and
// then of several KB.
func ctRandomBatch(rng *rand.Rand, first uint64, term uint64) []*raft.Log {
	n := 1 + rng.IntN(64)
	logs := make([]*raft.Log, n)
	for i := range logs {
		size := rng.IntN(300)
		if rng.IntN(50) == 0 {
			size = 4000 + rng.IntN(8000)
		}
		logs[i] = ctEntry(first+uint64(i), term, size)
	}
	return logs
}

// TestContractDBEightGroups drives eight groups of one DB from eight
// goroutines at once, each against its own model, with segments small
// enough that compactions release them while the others write.
func TestContractDBEightGroups(t *testing.T) {
	const groups, ops = 8, 150
	for _, flush := range []FlushMode{SyncFlush, AsyncFlush} {
		t.Run(fmt.Sprintf("flush%d", flush), func(t *testing.T) {
			dir := t.TempDir()
			opts := &Options{SegmentSize: 64 << 10, Flush: flush}
			db, err := OpenDB(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			models := make([]*ctModel, groups)
			stables := make([]map[string]uint64, groups)
			values := make([]map[string][]byte, groups)
			var wg sync.WaitGroup
			for g := 0; g < groups; g++ {
				models[g] = &ctModel{}
				stables[g] = map[string]uint64{}
				values[g] = map[string][]byte{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := ctWorker(db, uint64(g+1), ops, models[g], stables[g], values[g]); err != nil {
						t.Errorf("group %d: %v", g+1, err)
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				db.Close()
				return
			}
			check := func(when string) {
				t.Helper()
				for g := 0; g < groups; g++ {
					s, err := db.Store(uint64(g + 1))
					if err != nil {
						t.Fatal(err)
					}
					if err := ctCheckStore(s, models[g]); err != nil {
						t.Fatalf("%s: %v", when, err)
					}
					for k, v := range stables[g] {
						if got, err := s.GetUint64([]byte(k)); err != nil || got != v {
							t.Fatalf("%s: group %d GetUint64(%q) = %d, %v; want %d", when, g+1, k, got, err, v)
						}
					}
					for k, v := range values[g] {
						if got, err := s.Get([]byte(k)); err != nil || !bytes.Equal(got, v) {
							t.Fatalf("%s: group %d Get(%q) = %x, %v; want %x", when, g+1, k, got, err, v)
						}
					}
				}
			}
			check("before close")
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if db, err = OpenDB(dir, opts); err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			want := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
			if got := db.Groups(); !slices.Equal(got, want) {
				t.Fatalf("Groups() after reopen = %v, want %v", got, want)
			}
			check("after reopen")
		})
	}
}

// ctWorker runs ops random operations on one group of db, keeping m and
// stable up to date.
func ctWorker(db *DB, group uint64, ops int, m *ctModel, stable map[string]uint64, values map[string][]byte) error {
	rng := rand.New(rand.NewPCG(group, 42))
	s, err := db.Store(group)
	if err != nil {
		return err
	}
	term, staged := uint64(1), uint64(0)
	var out raft.Log
	for op := 0; op < ops; op++ {
		first, last := m.first, m.last()
		switch p := rng.IntN(100); {
		case p < 50 || last == 0:
			start := last + 1
			if last == 0 {
				start = []uint64{1, 1000, 70_000, 1 << 20}[rng.IntN(4)] + uint64(rng.IntN(100))
			}
			logs := ctRandomBatch(rng, start, term)
			if err := s.StoreLogs(logs); err != nil {
				return fmt.Errorf("op %d: StoreLogs(%d..%d): %v", op, start, start+uint64(len(logs))-1, err)
			}
			m.store(logs, staged)
			staged = 0
		case p < 65:
			hi := first + rng.Uint64N(last-first+1)
			if err := s.DeleteRange(first, hi); err != nil {
				return fmt.Errorf("op %d: prefix DeleteRange(%d, %d): %v", op, first, hi, err)
			}
			m.deleteRange(first, hi)
		case p < 72:
			lo := last - rng.Uint64N(min(last-first+1, 20))
			if err := s.DeleteRange(lo, last+rng.Uint64N(3)); err != nil {
				return fmt.Errorf("op %d: suffix DeleteRange(%d, ...): %v", op, lo, err)
			}
			m.deleteRange(lo, math.MaxUint64)
			term++
		case p < 75:
			if err := s.DeleteRange(first, last); err != nil {
				return fmt.Errorf("op %d: DeleteRange(%d, %d): %v", op, first, last, err)
			}
			m.deleteRange(first, last)
		case p < 84:
			k := []string{"CurrentTerm", "LastVoteTerm", "other"}[rng.IntN(3)]
			v := rng.Uint64()
			if err := s.SetUint64([]byte(k), v); err != nil {
				return fmt.Errorf("op %d: SetUint64: %v", op, err)
			}
			stable[k] = v
		case p < 90:
			k := []string{"LastVoteCand", "conf"}[rng.IntN(2)]
			v := ctData(uint64(op), group, rng.IntN(100))
			if err := s.Set([]byte(k), v); err != nil {
				return fmt.Errorf("op %d: Set: %v", op, err)
			}
			values[k] = v
		case p < 95:
			staged = first + rng.Uint64N(last-first+2)
			if err := s.StageCommitIndex(staged); err != nil {
				return err
			}
		default:
			i := first + rng.Uint64N(last-first+1)
			if err := s.GetLog(i, &out); err != nil {
				return fmt.Errorf("op %d: GetLog(%d): %v", op, i, err)
			}
			if err := ctLogsEqual(&out, m.get(i)); err != nil {
				return fmt.Errorf("op %d: %v", op, err)
			}
		}
		if err := ctCheckBounds(s, m); err != nil {
			return fmt.Errorf("op %d: %v", op, err)
		}
	}
	return nil
}

// ctCheckBounds checks first, last and the two entries at the ends.
func ctCheckBounds(s *Store, m *ctModel) error {
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != m.first || last != m.last() {
		return fmt.Errorf("first %d last %d, want %d and %d", first, last, m.first, m.last())
	}
	if last == 0 {
		return nil
	}
	var out raft.Log
	for _, i := range []uint64{first, last} {
		if err := s.GetLog(i, &out); err != nil {
			return fmt.Errorf("GetLog(%d): %w", i, err)
		}
		if err := ctLogsEqual(&out, m.get(i)); err != nil {
			return err
		}
	}
	return nil
}
