package raftstore

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/internal/testwait"
)

// closedCallDeadline bounds each call made after Close: a call that spins
// or blocks fails the test instead of hanging it.
const closedCallDeadline = 10 * time.Second

// callBounded runs f and fails the test if it does not return within
// closedCallDeadline, or panics.
func callBounded(t *testing.T, name string, f func()) {
	t.Helper()
	testwait.Within(t, name+" after Close", closedCallDeadline, f)
}

// closedStoreCalls are the calls of a Store that return an error; each must
// return one matching ErrClosed after Close.
func closedStoreCalls(s *Store) []struct {
	name string
	call func() error
} {
	var out raft.Log
	return []struct {
		name string
		call func() error
	}{
		{"FirstIndex", func() error { _, err := s.FirstIndex(); return err }},
		{"LastIndex", func() error { _, err := s.LastIndex(); return err }},
		{"GetLog(first)", func() error { return s.GetLog(100, &out) }},
		{"GetLog(last)", func() error { return s.GetLog(299, &out) }},
		{"GetLog(missing)", func() error { return s.GetLog(5000, &out) }},
		{"StoreLog", func() error { return s.StoreLog(ctEntry(300, 2, 10)) }},
		{"StoreLogs", func() error { return s.StoreLogs(ctEntries(300, 3, 2, 10)) }},
		{"StoreLogs(gap)", func() error { return s.StoreLogs(ctEntries(400, 3, 2, 10)) }},
		{"DeleteRange(prefix)", func() error { return s.DeleteRange(100, 150) }},
		{"DeleteRange(suffix)", func() error { return s.DeleteRange(250, 299) }},
		{"StageCommitIndex", func() error { return s.StageCommitIndex(200) }},
		{"GetCommitIndex", func() error { _, err := s.GetCommitIndex(); return err }},
		{"Set", func() error { return s.Set([]byte("LastVoteCand"), []byte("x")) }},
		{"SetUint64", func() error { return s.SetUint64([]byte("CurrentTerm"), 9) }},
		{"Get", func() error { _, err := s.Get([]byte("LastVoteCand")); return err }},
		{"Get(missing)", func() error { _, err := s.Get([]byte("never")); return err }},
		{"GetUint64", func() error { _, err := s.GetUint64([]byte("CurrentTerm")); return err }},
		{"Sync", s.Sync},
		{"Close", s.Close},
	}
}

// TestCallsAfterClose calls every exported method of Store and DB after
// Close, for a Store of its own (Open) and for the stores of a DB: those
// that return an error return one matching ErrClosed, the others their
// documented values, and none spins or panics. Nothing they do reaches the
// disk: the store reopens as it was closed.
func TestCallsAfterClose(t *testing.T) {
	fill := func(t *testing.T, s *Store) *ctModel {
		m := &ctModel{}
		logs := ctEntries(100, 200, 1, 100)
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		m.store(logs, 0)
		if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
			t.Fatal(err)
		}
		if err := s.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
			t.Fatal(err)
		}
		return m
	}
	checkStoreClosed := func(t *testing.T, s *Store) {
		for _, c := range closedStoreCalls(s) {
			var err error
			callBounded(t, c.name, func() { err = c.call() })
			if !errors.Is(err, ErrClosed) {
				t.Errorf("Store.%s after Close = %v, want ErrClosed", c.name, err)
			}
		}
		callBounded(t, "the Store methods without an error", func() {
			if got := s.PinnedBytes(); got != 0 {
				t.Errorf("PinnedBytes after Close = %d, want 0", got)
			}
			if got := s.IsMonotonic(); got {
				t.Errorf("IsMonotonic after Close = %v", got)
			}
			if err := s.Err(); err != nil {
				t.Errorf("Err after a clean Close = %v, want nil", err)
			}
			_ = s.Group()
		})
	}
	reopened := func(t *testing.T, s *Store, m *ctModel) {
		if err := ctCheckStore(s, m); err != nil {
			t.Fatalf("after reopening: %v", err)
		}
		if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
			t.Fatalf("CurrentTerm after reopening = %d, %v; want 7", v, err)
		}
	}

	t.Run("Open", func(t *testing.T) {
		dir := t.TempDir()
		s, err := Open(dir, &Options{SegmentSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		m := fill(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		checkStoreClosed(t, s)
		s, err = Open(dir, &Options{SegmentSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		reopened(t, s, m)
	})

	t.Run("DB", func(t *testing.T) {
		dir := t.TempDir()
		db, err := OpenDB(dir, &Options{SegmentSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		s, err := db.Store(3)
		if err != nil {
			t.Fatal(err)
		}
		m := fill(t, s)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		checkStoreClosed(t, s)
		dbCalls := []struct {
			name string
			call func() error
		}{
			{"Store(existing)", func() error { _, err := db.Store(3); return err }},
			{"Store(new)", func() error { _, err := db.Store(4); return err }},
			{"Sync", db.Sync},
			{"Close", db.Close},
		}
		for _, c := range dbCalls {
			var err error
			callBounded(t, c.name, func() { err = c.call() })
			if !errors.Is(err, ErrClosed) {
				t.Errorf("DB.%s after Close = %v, want ErrClosed", c.name, err)
			}
		}
		callBounded(t, "the DB methods without an error", func() {
			if got := db.Groups(); got != nil {
				t.Errorf("Groups after Close = %v, want nil", got)
			}
			if got := db.Stats(); got != (Stats{}) {
				t.Errorf("Stats after Close = %+v, want zero", got)
			}
			if err := db.Err(); err != nil {
				t.Errorf("Err after a clean Close = %v, want nil", err)
			}
		})
		db, err = OpenDB(dir, &Options{SegmentSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if got := db.Groups(); len(got) != 1 || got[0] != 3 {
			t.Fatalf("Groups after reopening = %v, want [3]", got)
		}
		s, err = db.Store(3)
		if err != nil {
			t.Fatal(err)
		}
		reopened(t, s, m)
	})
}

// TestCallsRacingClose runs readers and writers of two groups while the DB
// closes: each ends with an error matching ErrClosed, none spins or
// panics, and nothing a call acknowledged is lost.
func TestCallsRacingClose(t *testing.T) {
	for round := range 10 {
		dir := t.TempDir()
		db, err := OpenDB(dir, &Options{SegmentSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		var stores []*Store
		for g := range uint64(2) {
			s, err := db.Store(g)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.StoreLogs(ctEntries(1, 50, 1, 200)); err != nil {
				t.Fatal(err)
			}
			stores = append(stores, s)
		}
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			acked = map[uint64]uint64{} // group: last index acknowledged
		)
		errs := make(chan error, 4)
		for _, s := range stores {
			wg.Add(2)
			go func() { // reader
				defer wg.Done()
				var out raft.Log
				for i := uint64(0); ; i++ {
					if err := s.GetLog(1+i%50, &out); err != nil {
						errs <- err
						return
					}
				}
			}()
			go func() { // writer
				defer wg.Done()
				for next := uint64(51); ; next++ {
					if err := s.StoreLogs([]*raft.Log{ctEntry(next, 1, 200)}); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					acked[s.Group()] = next
					mu.Unlock()
				}
			}()
		}
		// Vary where Close lands: after a few more acknowledgements each
		// round.
		deadline := time.Now().Add(closedCallDeadline)
		for {
			mu.Lock()
			n := acked[0] + acked[1]
			mu.Unlock()
			if n >= uint64(2*50+round*3) || time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			select {
			case err := <-errs:
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("round %d: a call racing Close returned %v, want ErrClosed", round, err)
				}
			case <-time.After(closedCallDeadline):
				t.Fatalf("round %d: a call racing Close did not return within %v", round, closedCallDeadline)
			}
		}
		wg.Wait()
		db, err = OpenDB(dir, &Options{SegmentSize: 64 << 10})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		for g, want := range acked {
			s, err := db.Store(g)
			if err != nil {
				t.Fatal(err)
			}
			if last, _ := s.LastIndex(); last < want {
				t.Fatalf("round %d: group %d reopened with last index %d, %d was acknowledged", round, g, last, want)
			}
		}
		db.Close()
	}
}
