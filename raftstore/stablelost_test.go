package raftstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// slEntries returns entries lo..hi of term 4.
func slEntries(lo, hi uint64) []*raft.Log {
	var logs []*raft.Log
	for i := lo; i <= hi; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 4, Type: raft.LogCommand, Data: []byte("entry")})
	}
	return logs
}

// slRaftState stores a term and a vote, as raft does, failing t if it
// cannot.
func slRaftState(t *testing.T, s *Store, term uint64) {
	t.Helper()
	for _, err := range []error{
		s.SetUint64([]byte("CurrentTerm"), term),
		s.SetUint64([]byte("LastVoteTerm"), term),
		s.Set([]byte("LastVoteCand"), []byte("n2")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// slUsedStore makes a store as raft leaves it: term 4, a vote in term 4,
// entries 1..3 of term 4; both stable files are valid.
func slUsedStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	slRaftState(t, s, 4)
	if err := s.StoreLogs(slEntries(1, 3)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// slFiles returns the contents of both stable files in dir, nil for a
// missing one.
func slFiles(t *testing.T, dir string) [2][]byte {
	t.Helper()
	var out [2][]byte
	for i := range out {
		b, err := os.ReadFile(stablePath(dir, i))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// A used store whose two stable files are both missing, empty or damaged
// is refused by Open and OpenDB, rather than opened with term 0 and no
// vote while its log holds entries of term 4: with ErrStableLost naming
// each file and what is wrong with it, what shows the store was used, and
// what to do; with ErrCorrupt too when a file is damaged. The refusal
// changes neither file, Inspect reports the same error, and
// Options.UnsafeResetStableState opens the store with an empty stable
// state, its entries intact, after which it opens as any other.
func TestOpenRefusesLostStableState(t *testing.T) {
	remove := func(t *testing.T, path string) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	empty := func(t *testing.T, path string) {
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
	}
	flip := func(t *testing.T, path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[stableHeader+1] ^= 0x40
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	garbage := func(t *testing.T, path string) {
		if err := os.WriteFile(path, bytes.Repeat([]byte{0xa5}, 100), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		damage  [2]func(*testing.T, string)
		want    [2]string
		corrupt bool
	}{
		{"both missing", [2]func(*testing.T, string){remove, remove}, [2]string{"stable.0: missing", "stable.1: missing"}, false},
		{"both empty", [2]func(*testing.T, string){empty, empty}, [2]string{"stable.0: empty", "stable.1: empty"}, false},
		{"both fail their checksum", [2]func(*testing.T, string){flip, flip}, [2]string{"stable.0: checksum mismatch", "stable.1: checksum mismatch"}, true},
		{"missing and overwritten", [2]func(*testing.T, string){remove, garbage}, [2]string{"stable.0: missing", "stable.1: 100 bytes without the stable-file magic"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := slUsedStore(t)
			for i, damage := range c.damage {
				damage(t, stablePath(dir, i))
			}
			before := slFiles(t, dir)
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, ErrStableLost) || errors.Is(err, ErrCorrupt) != c.corrupt {
					t.Fatalf("%s: %v; want ErrStableLost, matching ErrCorrupt: %v", what, err, c.corrupt)
				}
				for _, want := range []string{
					filepath.Join(dir, c.want[0]), filepath.Join(dir, c.want[1]),
					"its checkpoint lists group 0 (entries 1..3)", "commit log was written up to offset",
					"can vote twice in a term", "start it with --join", "Options.UnsafeResetStableState",
				} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("%s: %v; want it to say %q", what, err, want)
					}
				}
			}
			s, err := Open(dir, nil)
			if err == nil {
				term, _ := s.GetUint64([]byte("CurrentTerm"))
				last, _ := s.LastIndex()
				s.Close()
				t.Fatalf("Open succeeded with term %d and entries up to %d", term, last)
			}
			check("Open", err)
			db, openErr := OpenDB(dir, nil)
			if openErr == nil {
				db.Close()
				t.Fatal("OpenDB succeeded")
			}
			check("OpenDB", openErr)
			if after := slFiles(t, dir); !bytes.Equal(after[0], before[0]) || !bytes.Equal(after[1], before[1]) || (after[0] == nil) != (before[0] == nil) || (after[1] == nil) != (before[1] == nil) {
				t.Fatalf("the refused opens changed the stable files: %q, then %q", before, after)
			}
			in, err := Inspect(dir, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			check("Inspect's StableLost", in.StableLost)
			if in.StableLost.Error() != openErr.Error() {
				t.Fatalf("Inspect reports %q, OpenDB refuses with %q", in.StableLost, openErr)
			}

			s, err = Open(dir, &Options{UnsafeResetStableState: true})
			if err != nil {
				t.Fatalf("Open with UnsafeResetStableState: %v", err)
			}
			var l raft.Log
			if term, err := s.GetUint64([]byte("CurrentTerm")); term != 0 || err != nil {
				t.Fatalf("CurrentTerm %d, %v after a reset, want 0", term, err)
			}
			if err := s.GetLog(3, &l); err != nil || l.Term != 4 {
				t.Fatalf("GetLog(3) after a reset = %v, term %d", err, l.Term)
			}
			slRaftState(t, s, 9)
			s.Close()
			if s, err = Open(dir, nil); err != nil {
				t.Fatalf("Open after the reset: %v", err)
			}
			if term, _ := s.GetUint64([]byte("CurrentTerm")); term != 9 {
				t.Fatalf("CurrentTerm %d after a reset and a new term, want 9", term)
			}
			s.Close()
		})
	}
}

// In a DB of many groups the stable files hold the state of all of them:
// losing them is refused when a group holds entries, and when the only
// group holds none but has a term and a vote (a new member that voted
// before it received an entry), shown by the checkpoint or, before any
// checkpoint, by the group's index directory alone. The error lists the
// groups.
func TestOpenDBRefusesLostStableStateOfEveryGroup(t *testing.T) {
	dir := t.TempDir()
	db, err := OpenDB(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []uint64{1, 5, 9} {
		s, err := db.Store(g)
		if err != nil {
			t.Fatal(err)
		}
		slRaftState(t, s, 4+g)
		if g == 5 {
			if err := s.StoreLogs(slEntries(10, 12)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := os.Remove(stablePath(dir, i)); err != nil {
			t.Fatal(err)
		}
	}
	want := "its checkpoint lists group 1 (no entries), 5 (entries 10..12), 9 (no entries); it holds the index directory of group 1, 5, 9"
	if db, err := OpenDB(dir, nil); !errors.Is(err, ErrStableLost) || !strings.Contains(err.Error(), want) {
		if err == nil {
			db.Close()
		}
		t.Fatalf("OpenDB of 3 groups without stable files: %v; want ErrStableLost saying %q", err, want)
	}

	// One group without entries, voted, and a crash before any
	// checkpoint listed it: its index directory shows it.
	fs := faultfs.New(1)
	db, err = OpenDB(crDir, crOptions(fs, SyncFlush))
	if err != nil {
		t.Fatal(err)
	}
	s, err := db.Store(3)
	if err != nil {
		t.Fatal(err)
	}
	slRaftState(t, s, 7)
	fs = fs.CrashDropAll()
	for i := range 2 {
		if err := fs.Remove(stablePath(crDir, i)); err != nil {
			t.Fatal(err)
		}
	}
	want = "(it holds the index directory of group 3)"
	if db, err := OpenDB(crDir, crOptions(fs, SyncFlush)); !errors.Is(err, ErrStableLost) || !strings.Contains(err.Error(), want) {
		if err == nil {
			db.Close()
		}
		t.Fatalf("OpenDB of a voted group without entries or checkpoint, without stable files: %v; want ErrStableLost saying %q", err, want)
	}
}

// A directory that shows no group opens without stable files: a new one,
// and one opened before without a group being created.
func TestOpenWithoutStableFilesWhenUnused(t *testing.T) {
	dir := t.TempDir()
	db, err := OpenDB(dir, nil)
	if err != nil {
		t.Fatalf("OpenDB of a new directory: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := os.Remove(stablePath(dir, i)); err != nil {
			t.Fatal(err)
		}
	}
	if in, err := Inspect(dir, nil, nil); err != nil || in.StableLost != nil {
		t.Fatalf("Inspect of a DB never used, without stable files: %v, StableLost %v", err, in.StableLost)
	}
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("Open of a DB never used, without stable files: %v", err)
	}
	if err := s.StoreLogs(slEntries(1, 2)); err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// A crash during the first write of the stable state, which creates the
// DB's first group, leaves no valid stable file: the DB shows no group,
// and opens. With every outcome of the crash (seeded), including torn
// ones, the reopened DB opens and takes the group and its entries.
func TestCrashDuringFirstStableWriteOpens(t *testing.T) {
	torn := 0
	for seed := int64(1); seed <= 40; seed++ {
		fs := faultfs.New(seed)
		db, err := OpenDB(crDir, crOptions(fs, SyncFlush))
		if err != nil {
			t.Fatal(err)
		}
		fs.Inject(faultfs.Fault{Op: faultfs.OpSync, Path: "/stable."})
		if _, err := db.Store(0); err == nil {
			t.Fatalf("seed %d: Store(0) succeeded with the stable file's sync failing", seed)
		}
		fs = fs.Crash()
		if _, _, found, err := readStableOffline(Options{FS: fs}, crDir); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		} else if newest(found) == nil && found[1].size > 0 {
			torn++
		}
		db, err = OpenDB(crDir, crOptions(fs, SyncFlush))
		if err != nil {
			t.Fatalf("seed %d: OpenDB after a crash during the first stable write: %v", seed, err)
		}
		s, err := db.Store(0)
		if err == nil {
			err = s.StoreLogs(slEntries(1, 2))
		}
		if err != nil {
			t.Fatalf("seed %d: after a crash during the first stable write: %v", seed, err)
		}
		db.Close()
	}
	if torn == 0 {
		t.Fatal("no seed left stable.1 torn: the test did not test the crash it is about")
	}
}

// A crash during the first write of the stable state after entries were
// stored (raft's first SetUint64 of a store whose group holds entries, or
// the first Set of one used as raft's LogStore) leaves the file written
// at the group's creation valid: the DB opens with its entries, and the
// term is the old one or the new, never lost.
func TestCrashDuringFirstSetAfterEntriesOpens(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		fs := faultfs.New(seed)
		db, err := OpenDB(crDir, crOptions(fs, SyncFlush))
		if err != nil {
			t.Fatal(err)
		}
		s, err := db.Store(0)
		if err == nil {
			err = s.StoreLogs(slEntries(1, 5))
		}
		if err != nil {
			t.Fatal(err)
		}
		fs.Inject(faultfs.Fault{Op: faultfs.OpSync, Path: "/stable."})
		if err := s.SetUint64([]byte("CurrentTerm"), 4); err == nil {
			t.Fatalf("seed %d: SetUint64 succeeded with the stable file's sync failing", seed)
		}
		fs = fs.Crash()
		db, err = OpenDB(crDir, crOptions(fs, SyncFlush))
		if err != nil {
			t.Fatalf("seed %d: OpenDB after a crash during the first Set after entries: %v", seed, err)
		}
		s, err = db.Store(0)
		if err != nil {
			t.Fatal(err)
		}
		last, _ := s.LastIndex()
		term, err := s.GetUint64([]byte("CurrentTerm"))
		if last != 5 || err != nil || term != 0 && term != 4 {
			t.Fatalf("seed %d: after the crash: last index %d, CurrentTerm %d, %v; want 5 and 0 or 4", seed, last, term, err)
		}
		db.Close()
	}
}

// A stable file that cannot be read fails the open, naming it, rather than
// being passed over for the other file, whose state may be older: the
// newer file's vote would be forgotten.
func TestOpenFailsOnUnreadableStableFile(t *testing.T) {
	fs := faultfs.New(1)
	db, err := OpenDB(crDir, crOptions(fs, SyncFlush))
	if err != nil {
		t.Fatal(err)
	}
	s, err := db.Store(0) // the group's creation: stable.1
	if err != nil {
		t.Fatal(err)
	}
	// Three writes: stable.0, stable.1, stable.0; then stable.1, the newest.
	slRaftState(t, s, 4)
	if err := s.SetUint64([]byte("CurrentTerm"), 5); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	fs.Inject(faultfs.Fault{Op: faultfs.OpRead, Path: "/stable.1"})
	db, err = OpenDB(crDir, crOptions(fs, SyncFlush))
	if err == nil {
		s, _ := db.Store(0)
		term, _ := s.GetUint64([]byte("CurrentTerm"))
		db.Close()
		t.Fatalf("OpenDB with stable.1 unreadable succeeded, with CurrentTerm %d", term)
	}
	if want := "read " + stablePath(crDir, 1); !strings.Contains(err.Error(), want) {
		t.Fatalf("OpenDB with stable.1 unreadable: %v; want it to say %q", err, want)
	}
	db, err = OpenDB(crDir, crOptions(fs, SyncFlush))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if s, err = db.Store(0); err != nil {
		t.Fatal(err)
	}
	if term, _ := s.GetUint64([]byte("CurrentTerm")); term != 5 {
		t.Fatalf("CurrentTerm %d once stable.1 reads again, want 5", term)
	}
}
