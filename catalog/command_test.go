package catalog

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"
)

// samples returns one command of every kind, every field set.
func samples() []Command {
	st := Settings{Replicas: 3, RetentionBytes: 1 << 40, RetentionAge: 36 * time.Hour}
	return []Command{
		&Start{Nodes: nodes(3), Members: []string{"n1", "n2", "n3"}, Settings: st},
		&AddNode{ID: "n7", RaftAddr: "127.0.0.1:17", ClientAddr: "127.0.0.1:27"},
		&MarkLeaving{ID: "n6"},
		&MarkActive{ID: "n6"},
		&ForgetNode{ID: "n6"},
		&CreateLog{Name: "orders", Settings: st, Members: []string{"n1", "n4", "n5"}},
		&LogStarted{ID: idSolo, Version: 1},
		&BeginMove{ID: idA, Version: 2, From: "n3", To: "n5"},
		&FinishMove{ID: idMv, Version: 2},
		&CancelMove{ID: idMv, Version: 2},
		&SetPreferredLeader{ID: idA, Version: 2, Node: "n2"},
		&UpdateSettings{ID: idA, Version: 2, Settings: Settings{RetentionBytes: 7, RetentionAge: time.Second}},
		&DeleteLog{ID: idA, Version: 2},
		&ReplicaDropped{ID: idGone, Version: 2, Node: "n2"},
		&LogDeleted{ID: idGone, Version: 2},
		&SetClusterID{ID: testClusterID},
	}
}

func TestCommandRoundTrip(t *testing.T) {
	seen := map[Kind]bool{}
	for _, c := range samples() {
		seen[c.Kind()] = true
		b := Encode(c)
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%v: %v", c.Kind(), err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("%v: decoded %+v, want %+v", c.Kind(), got, c)
		}
		if !bytes.Equal(Encode(got), b) {
			t.Fatalf("%v: re-encoding differs", c.Kind())
		}
		// Every prefix is refused as malformed, and so is a trailing byte.
		for n := 2; n < len(b); n++ {
			if _, err := Decode(b[:n]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%v: %d of %d bytes: %v, want ErrMalformed", c.Kind(), n, len(b), err)
			}
		}
		if _, err := Decode(append(b[:len(b):len(b)], 0)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%v: trailing byte: %v", c.Kind(), err)
		}
	}
	for k := Kind(1); newCommand(k) != nil; k++ {
		if !seen[k] {
			t.Errorf("no sample of kind %v", k)
		}
	}
}

// TestCommandWireFormat pins the bytes of commands: they are in the
// catalog group's raft log forever.
func TestCommandWireFormat(t *testing.T) {
	for _, tc := range []struct {
		c    Command
		want []byte
	}{
		{&CreateLog{Name: "ab", Settings: Settings{Replicas: 3, RetentionBytes: 300, RetentionAge: -1}, Members: []string{"n1", "n2", "n3"}}, []byte{
			1, 6, // version, kind
			2, 'a', 'b', // name
			3, 0xd8, 0x04, 1, // replicas, retention bytes 300 (zigzag 600), age -1 (zigzag 1)
			3, 2, 'n', '1', 2, 'n', '2', 2, 'n', '3', // members
		}},
		{&SetClusterID{ID: testClusterID}, []byte{
			1, 16, // version, kind
			1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, // the id, as it is
		}},
	} {
		if got := Encode(tc.c); !bytes.Equal(got, tc.want) {
			t.Errorf("%v: encoding % x, want % x", tc.c.Kind(), got, tc.want)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := Encode(&MarkLeaving{ID: "n1"})
	tests := []struct {
		name string
		b    []byte
		err  error
	}{
		{"empty", nil, ErrMalformed},
		{"version only", []byte{CommandVersion}, ErrMalformed},
		{"version 0", append([]byte{0}, good[1:]...), ErrUnsupported},
		{"version 2", append([]byte{2}, good[1:]...), ErrUnsupported},
		{"kind 0", []byte{CommandVersion, 0, 0}, ErrUnsupported},
		{"kind 17", []byte{CommandVersion, 17, 0}, ErrUnsupported},
		{"kind 255", []byte{CommandVersion, 255}, ErrUnsupported},
		{"string past the end", []byte{CommandVersion, byte(KindMarkLeaving), 5, 'n'}, ErrMalformed},
		{"string too long", append([]byte{CommandVersion, byte(KindMarkLeaving), 0x81, 0x80, 0x04}, make([]byte, maxField+1)...), ErrMalformed},
		{"huge count", []byte{CommandVersion, byte(KindCreateLog), 1, 'a', 1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, ErrMalformed},
		{"cluster id short", append([]byte{CommandVersion, byte(KindSetClusterID)}, testClusterID[:15]...), ErrMalformed},
		{"bad varint", []byte{CommandVersion, byte(KindLogStarted), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0}, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Decode(tc.b)
			if !errors.Is(err, tc.err) || c != nil {
				t.Fatalf("Decode: %v, %v; want %v", c, err, tc.err)
			}
			t.Log(err)
		})
	}
}

// TestApplyMalformed: an entry that does not decode is refused, and the
// catalog changes only its applied index.
func TestApplyMalformed(t *testing.T) {
	a := base(t)
	s0 := a.f.State()
	r := a.f.Apply(rlog(a.index+1, []byte{CommandVersion, 99})).(Result)
	if !errors.Is(r.Err, ErrUnsupported) || r.Log != nil {
		t.Fatalf("result %+v", r)
	}
	s := a.f.State()
	if s.Index() != a.index+1 || withoutIndex(s) != withoutIndex(s0) {
		t.Fatal("catalog changed")
	}
}

// FuzzDecode: Decode never panics; what it accepts re-encodes to a
// command that decodes the same, and applies to a catalog without
// breaking an invariant.
func FuzzDecode(f *testing.F) {
	for _, c := range samples() {
		f.Add(Encode(c))
	}
	f.Add([]byte{CommandVersion, byte(KindStart), 0xff, 0x01})
	f.Add(Encode(&SetClusterID{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v wraps neither ErrMalformed nor ErrUnsupported", err)
			}
			return
		}
		again, err := Decode(Encode(c))
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("re-decoded %+v, %v; want %+v", again, err, c)
		}
		for _, a := range []*applier{newApplier(t), base(t)} {
			s0 := a.f.State()
			r := a.try(c)
			if r.Err != nil && withoutIndex(s0) != withoutIndex(a.f.State()) {
				t.Fatalf("refused command changed the catalog: %v", r.Err)
			}
			checkInvariants(t, a.f.State())
		}
	})
}
