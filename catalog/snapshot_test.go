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
	"strings"
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

// TestSnapshotRoundTrip: a catalog restored from its snapshot is the same
// catalog and snapshots to the same bytes, of version 1 without a cluster
// id (which earlier releases read) and 2 with one.
func TestSnapshotRoundTrip(t *testing.T) {
	initial, based := New().State(), base(t).f.State()
	for _, tc := range []struct {
		name    string
		s       *State
		version byte
	}{
		{"initial", initial, 1},
		{"base", based, 1},
		{"initial with a cluster id", withClusterID(initial, testClusterID), 2},
		{"base with a cluster id", withClusterID(based, otherClusterID), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := AppendSnapshot(nil, tc.s)
			if v := b[len(snapshotMagic)]; v != tc.version {
				t.Fatalf("snapshot version %d, want %d", v, tc.version)
			}
			f := New()
			if err := restoreInto(f, b); err != nil {
				t.Fatal(err)
			}
			got := f.State()
			if !reflect.DeepEqual(got, tc.s) || got.ClusterID() != tc.s.ClusterID() {
				t.Fatalf("restored %+v, want %+v", got, tc.s)
			}
			if !bytes.Equal(snapshotOf(t, f), b) {
				t.Fatal("the restored catalog's snapshot differs")
			}
		})
	}
}

// TestSnapshotWireFormat pins the bytes of the initial catalog's snapshot,
// without a cluster id (version 1, as every release before version 2
// wrote it) and with one (version 2: the same catalog, then the id).
func TestSnapshotWireFormat(t *testing.T) {
	body := []byte{
		0, 0, 1, // index 0, not started, next id 1
		0, 1, // no nodes, one log:
		7, 'd', 'e', 'f', 'a', 'u', 'l', 't', 0, // name "default", id 0
		0, 0, 0, // replicas, retention bytes and age 0
		1, 0, 0, 0, 0, 0, 1, // active; no members, initial, move, dropped; version 1
	}
	// magic, version, body length (24 bytes; 40 with the id), body, CRC-32C
	v1 := append([]byte("RLCATSNP\x01\x00\x00\x00\x18"), body...)
	v1 = append(v1, 0xa7, 0xa2, 0x82, 0xb9)
	v2 := append([]byte("RLCATSNP\x02\x00\x00\x00\x28"), body...)
	v2 = append(v2, testClusterID[:]...)
	v2 = append(v2, 0xd9, 0x1d, 0xa0, 0x13)
	for _, tc := range []struct {
		name string
		s    *State
		want []byte
	}{
		{"without a cluster id", New().State(), v1},
		{"with a cluster id", withClusterID(New().State(), testClusterID), v2},
	} {
		if got := AppendSnapshot(nil, tc.s); !bytes.Equal(got, tc.want) {
			t.Errorf("%s: snapshot\n% x, want\n% x", tc.name, got, tc.want)
		}
		s, err := decodeSnapshot(tc.want)
		if err != nil || !Equal(s, tc.s) {
			t.Errorf("%s: read back: %v", tc.name, err)
		}
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

// sealed frames body as a snapshot of version, with its length and
// checksum.
func sealed(version byte, body []byte) []byte {
	b := append([]byte(snapshotMagic), version, 0, 0, 0, 0)
	return reseal(append(append(b, body...), 0, 0, 0, 0))
}

// bodyOf returns the body of the snapshot b.
func bodyOf(b []byte) []byte { return b[snapshotHeader : len(b)-4] }

// TestRestoreCorrupt: a snapshot with any byte changed, cut short or
// extended is refused with an error, and the catalog stays as it was.
func TestRestoreCorrupt(t *testing.T) {
	good := snapshotOf(t, base(t).f)
	goodID := AppendSnapshot(nil, withClusterID(base(t).f.State(), testClusterID))
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
	for _, good := range [][]byte{good, goodID} {
		v := good[len(snapshotMagic)]
		for i := range good {
			b := bytes.Clone(good)
			b[i] ^= 0x5a
			check(fmt.Sprintf("version %d, byte %d changed", v, i), b, ErrCorrupt, ErrUnsupported)
		}
		for n := 0; n < len(good); n++ {
			check(fmt.Sprintf("version %d, %d of %d bytes", v, n, len(good)), good[:n], ErrCorrupt)
		}
		check(fmt.Sprintf("version %d, a trailing byte", v), append(bytes.Clone(good), 0), ErrCorrupt)
	}
	relabel := func(b []byte, version byte) []byte {
		b = bytes.Clone(b)
		b[len(snapshotMagic)] = version
		return b
	}
	// The checksum covers the version.
	check("version 1 relabelled 2", relabel(good, 2), ErrCorrupt)
	check("version 2 relabelled 1", relabel(goodID, 1), ErrCorrupt)
	check("version 0", reseal(relabel(good, 0)), ErrUnsupported)
	check("version 3", reseal(relabel(goodID, 3)), ErrUnsupported)

	// Sealed, but the cluster id does not fit the version.
	body, bodyID := bodyOf(good), bodyOf(goodID)
	for _, tc := range []struct {
		name string
		b    []byte
		says string
	}{
		{"version 2 without a cluster id", sealed(2, body), "cluster id of 16 bytes runs past the end (0 bytes left)"},
		{"version 2 with 15 bytes of cluster id", sealed(2, bodyID[:len(bodyID)-1]), "(15 bytes left)"},
		{"version 2 with a byte after the cluster id", sealed(2, append(bytes.Clone(bodyID), 0)), "1 trailing bytes"},
		{"version 2 with the zero cluster id", sealed(2, append(bytes.Clone(body), make([]byte, 16)...)), "zero cluster id"},
		{"version 1 with a cluster id", sealed(1, bodyID), "16 trailing bytes"},
	} {
		check(tc.name, tc.b, ErrMalformed)
		if err := restoreInto(f, tc.b); !strings.Contains(err.Error(), tc.says) {
			t.Fatalf("%s: error %q does not say %q", tc.name, err, tc.says)
		}
	}

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
	// Logs out of id order: the body of base with its last two logs
	// swapped, spliced from the bodies of base without them.
	drop := func(ids ...uint64) func(s *State) {
		return func(s *State) {
			for _, id := range ids {
				delete(s.byName, s.logs[id].Name)
				delete(s.logs, id)
			}
		}
	}
	all, upToGone, upToSolo := bodyOf(bad(func(*State) {})), bodyOf(bad(drop(idMv))), bodyOf(bad(drop(idGone, idMv)))
	swapped := append(bytes.Clone(all[:len(upToSolo)]), all[len(upToGone):]...)
	swapped = append(swapped, upToGone[len(upToSolo):]...)
	check("logs out of order", sealed(snapshotV1, swapped), ErrMalformed)

	dup := bad(func(s *State) {})
	// Append a second copy of log "a" to the body and bump the count.
	check("body re-sealed with a trailing byte", reseal(append(dup[:len(dup)-4:len(dup)-4], 0, 0, 0, 0, 0)), ErrMalformed)
}

// FuzzRestore: Restore never panics; a catalog it accepts snapshots to the
// same bytes, and takes commands, placement and plans without panicking
// or breaking an invariant.
func FuzzRestore(f *testing.F) {
	for _, s := range []*State{New().State(), base(f).f.State(), started(f, 1).f.State()} {
		for _, id := range []ClusterID{{}, testClusterID} {
			b := AppendSnapshot(nil, withClusterID(s, id))
			f.Add(b, byte(0))
			f.Add(bodyOf(b), b[len(snapshotMagic)])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, frame byte) {
		if frame != 0 {
			// b is a body: frame it as a snapshot of version frame, so
			// that the fuzzer reaches the decoding of the catalog past
			// the checksum.
			b = sealed(frame, b)
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
		switch rng.IntN(15) {
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
		case 14:
			emit(&SetClusterID{ID: []ClusterID{testClusterID, otherClusterID, {}}[rng.IntN(3)]})
		}
	}
	return out
}

var _ raft.SnapshotSink = (*memSink)(nil)
