package catalog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, canceled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.canceled = true; return nil }

// snapshotOf takes and persists a snapshot of f as raft would.
func snapshotOf(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil || !sink.closed {
		t.Fatalf("persist: %v, closed %v", err, sink.closed)
	}
	return sink.Bytes()
}

func restoreInto(f *FSM, b []byte) error {
	return f.Restore(io.NopCloser(bytes.NewReader(b)))
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    *applier
	}{{"initial", newApplier(t)}, {"base", base(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			b := snapshotOf(t, tc.a.f)
			f := New()
			if err := restoreInto(f, b); err != nil {
				t.Fatal(err)
			}
			want, got := tc.a.f.State(), f.State()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("restored %+v, want %+v", got, want)
			}
			if !bytes.Equal(snapshotOf(t, f), b) {
				t.Fatal("the restored catalog's snapshot differs")
			}
		})
	}
}

// TestSnapshotEqualsReplay: a catalog restored from a snapshot taken after
// the first k commands, then given the rest, equals one that applied them
// all, and refuses the same commands with the same errors.
func TestSnapshotEqualsReplay(t *testing.T) {
	cmds := randomCommands(rand.New(rand.NewPCG(1, 2)), 400)
	all := newApplier(t)
	for k := 0; k <= len(cmds); k += 50 {
		part := newApplier(t)
		for _, c := range cmds[:k] {
			part.try(c)
		}
		restored := &applier{t: t, f: New(), index: part.index}
		if err := restoreInto(restored.f, snapshotOf(t, part.f)); err != nil {
			t.Fatal(err)
		}
		for i, c := range cmds[k:] {
			r1, r2 := part.try(c), restored.try(c)
			if resultString(r1) != resultString(r2) {
				t.Fatalf("k=%d, command %d (%v): results %+v and %+v", k, k+i, c.Kind(), r1, r2)
			}
		}
		if k == 0 {
			for _, c := range cmds {
				all.try(c)
			}
		}
		if !Equal(restored.f.State(), all.f.State()) || !Equal(part.f.State(), all.f.State()) {
			t.Fatalf("k=%d: catalogs differ", k)
		}
	}
}

// TestDeterminism: the same commands give byte-identical snapshots after
// every command, in catalogs built separately (Go orders each map's
// iteration at random, so an order that leaked would show).
func TestDeterminism(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		cmds := randomCommands(rand.New(rand.NewPCG(seed, 7)), 300)
		a, b := newApplier(t), newApplier(t)
		accepted := 0
		for i, c := range cmds {
			r1, r2 := a.try(c), b.try(c)
			if r1.Err == nil {
				accepted++
			}
			if resultString(r1) != resultString(r2) || !bytes.Equal(snapshotOf(t, a.f), snapshotOf(t, b.f)) {
				t.Fatalf("seed %d, command %d (%v): catalogs differ", seed, i, c.Kind())
			}
			checkInvariants(t, a.f.State())
		}
		if accepted < len(cmds)/3 {
			t.Fatalf("seed %d: only %d of %d commands accepted; the workload tests little", seed, accepted, len(cmds))
		}
	}
}

// reseal fixes the checksum of a snapshot whose body was changed.
func reseal(b []byte) []byte {
	end := len(b) - 4
	binary.BigEndian.PutUint32(b[len(snapshotMagic)+1:], uint32(end-snapshotHeader))
	binary.BigEndian.PutUint32(b[end:], crc32.Checksum(b[len(snapshotMagic):end], crcTable))
	return b
}

// TestRestoreCorrupt: a snapshot with any byte changed, cut short or
// extended is refused with an error, and the catalog stays as it was.
func TestRestoreCorrupt(t *testing.T) {
	good := snapshotOf(t, base(t).f)
	f := started(t, 2).f
	before := snapshotOf(t, f)
	check := func(what string, b []byte, want ...error) {
		t.Helper()
		err := restoreInto(f, b)
		ok := false
		for _, w := range want {
			ok = ok || errors.Is(err, w)
		}
		if !ok {
			t.Fatalf("%s: %v, want one of %v", what, err, want)
		}
		if !bytes.Equal(snapshotOf(t, f), before) {
			t.Fatalf("%s: the catalog changed", what)
		}
	}
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x5a
		check(fmt.Sprintf("byte %d changed", i), b, ErrCorrupt, ErrUnsupported)
	}
	for n := 0; n < len(good); n++ {
		check(fmt.Sprintf("%d of %d bytes", n, len(good)), good[:n], ErrCorrupt)
	}
	check("a trailing byte", append(bytes.Clone(good), 0), ErrCorrupt)
	v2 := bytes.Clone(good)
	v2[len(snapshotMagic)] = 2
	check("version 2", v2, ErrUnsupported)

	// Sealed, but the catalog inside breaks an invariant.
	bad := func(change func(s *State)) []byte {
		s := base(t).f.State()
		c := *s
		c.logs = map[uint64]*Log{}
		for id, l := range s.logs {
			c.logs[id] = l.clone()
		}
		change(&c)
		return AppendSnapshot(nil, &c)
	}
	for _, tc := range []struct {
		name   string
		change func(s *State)
	}{
		{"member not a node", func(s *State) { s.logs[idA].Members[0] = "n9" }},
		{"member twice", func(s *State) { s.logs[idA].Members[0] = "n2" }},
		{"members not replicas", func(s *State) { s.logs[idA].Members = s.logs[idA].Members[:2] }},
		{"move from a non-member", func(s *State) { s.logs[idMv].Leaving = "n4" }},
		{"move without a joining node", func(s *State) { s.logs[idMv].Joining = "" }},
		{"move before start", func(s *State) { s.logs[idMv].Initial = []string{"n1"} }},
		{"invalid name", func(s *State) { s.logs[idA].Name = "a b" }},
		{"id not below next id", func(s *State) { s.nextID = idMv }},
		{"no default log", func(s *State) { delete(s.logs, DefaultID) }},
		{"two replicas", func(s *State) { s.logs[idA].Settings.Replicas = 2 }},
		{"dropped by a non-host", func(s *State) { s.logs[idGone].Dropped = []string{"n1"} }},
		{"lost replica of a non-member", func(s *State) { s.logs[idA].Dropped = []string{"n4"} }},
		{"lost replicas unsorted", func(s *State) { s.logs[idA].Dropped = []string{"n2", "n1"} }},
		{"rebuild of a replica not lost", func(s *State) { s.logs[idA].Joining, s.logs[idA].Leaving = "n1", "n1" }},
		{"log state 3", func(s *State) { s.logs[idA].State = 3 }},
		{"version 0", func(s *State) { s.logs[idA].Version = 0 }},
	} {
		check(tc.name, bad(tc.change), ErrMalformed)
	}
	dup := bad(func(s *State) {})
	// Append a second copy of log "a" to the body and bump the count.
	check("body re-sealed with a trailing byte", reseal(append(dup[:len(dup)-4:len(dup)-4], 0, 0, 0, 0, 0)), ErrMalformed)
}

// FuzzRestore: Restore never panics; a catalog it accepts snapshots to the
// same bytes, and takes commands, placement and plans without panicking
// or breaking an invariant.
func FuzzRestore(f *testing.F) {
	for _, fsm := range []*FSM{New(), base(f).f, started(f, 1).f} {
		b := snapshotOf(f, fsm)
		f.Add(b, false)
		f.Add(b[snapshotHeader:len(b)-4], true)
	}
	f.Fuzz(func(t *testing.T, b []byte, seal bool) {
		if seal {
			// b is a body: frame it, so that the fuzzer reaches the
			// decoding of the catalog past the checksum.
			framed := append([]byte(snapshotMagic), SnapshotVersion, 0, 0, 0, 0)
			b = reseal(append(append(framed, b...), 0, 0, 0, 0))
		}
		s, err := decodeSnapshot(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalidNode) && !errors.Is(err, ErrInvalidMembers) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if !bytes.Equal(AppendSnapshot(nil, s), b) {
			t.Fatal("accepted snapshot does not re-encode to its bytes")
		}
		a := &applier{t: t, f: New(), index: s.Index()}
		if err := restoreInto(a.f, b); err != nil {
			t.Fatal(err)
		}
		for _, c := range samples() {
			a.try(c)
			checkInvariants(t, a.f.State())
		}
		_, _ = Place(s, 3, nil)
		Plan(s, nil)
		AssignLeaders(s)
	})
}

// randomCommands returns n commands, most of them valid for the catalog
// they build, some not, drawn with rng: the catalog's own decisions
// (Place, Plan, AssignLeaders) mixed with operator and reconciler
// commands.
func randomCommands(rng *rand.Rand, n int) []Command {
	a := newApplier(nil) // only try, which needs no testing.TB
	var out []Command
	emit := func(c Command) {
		out = append(out, c)
		a.try(c)
	}
	emit(&Start{Nodes: nodes(4), Members: []string{"n1", "n2", "n3"}, Settings: Settings{Replicas: 3}})
	nextNode := 5
	for len(out) < n {
		s := a.f.State()
		logs := s.Logs()
		l := logs[rng.IntN(len(logs))]
		ns := s.Nodes()
		nd := ns[rng.IntN(len(ns))].ID
		switch rng.IntN(14) {
		case 0:
			emit(&AddNode{ID: fmt.Sprintf("n%d", nextNode), RaftAddr: "r", ClientAddr: "c"})
			nextNode++
		case 1:
			emit(&MarkLeaving{ID: nd})
		case 2:
			emit(&MarkActive{ID: nd})
		case 3:
			emit(&ForgetNode{ID: nd})
		case 4, 5:
			reps := []int{1, 3, 5}[rng.IntN(3)]
			members, err := Place(s, reps, nil)
			if err != nil {
				members = []string{nd}
			}
			emit(&CreateLog{Name: fmt.Sprintf("log%d", rng.IntN(40)), Settings: Settings{Replicas: reps}, Members: members})
		case 6:
			emit(&LogStarted{ID: l.ID})
		case 7:
			if moves := Plan(s, nil); len(moves) > 0 {
				emit(moves[rng.IntN(len(moves))].Command())
			} else {
				emit(&BeginMove{ID: l.ID, From: l.PreferredLeader(), To: nd})
			}
		case 8:
			for _, m := range logs {
				if m.Moving() && rng.IntN(2) == 0 {
					l = m
				}
			}
			if rng.IntN(4) == 0 {
				emit(&CancelMove{ID: l.ID})
			} else {
				emit(&FinishMove{ID: l.ID, Version: l.Version})
			}
		case 9:
			if ch := AssignLeaders(s); len(ch) > 0 {
				emit(ch[0].Command())
			} else {
				emit(&SetPreferredLeader{ID: l.ID, Node: nd})
			}
		case 10:
			emit(&UpdateSettings{ID: l.ID, Settings: Settings{RetentionBytes: int64(rng.IntN(3)) - 1}})
		case 11:
			emit(&DeleteLog{ID: l.ID})
		case 12:
			if h := l.Hosts(); len(h) > 0 {
				emit(&ReplicaDropped{ID: l.ID, Node: h[rng.IntN(len(h))]})
			}
		case 13:
			emit(&LogDeleted{ID: l.ID, Version: l.Version - uint64(rng.IntN(2))})
		}
	}
	return out
}

var _ raft.SnapshotSink = (*memSink)(nil)
