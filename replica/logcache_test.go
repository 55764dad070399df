package replica

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
)

// countingStore counts the reads that reach the store.
type countingStore struct {
	*raft.InmemStore
	reads atomic.Int64
}

func (s *countingStore) GetLog(idx uint64, l *raft.Log) error {
	s.reads.Add(1)
	return s.InmemStore.GetLog(idx, l)
}

func newCountingStore() *countingStore { return &countingStore{InmemStore: raft.NewInmemStore()} }

// entries returns the entries [from, to] with size bytes of data each.
func entries(from, to uint64, size int) []*raft.Log {
	var ls []*raft.Log
	for i := from; i <= to; i++ {
		ls = append(ls, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, size)})
	}
	return ls
}

// cached reports which of [from, to] c serves without reading its store.
func cached(t *testing.T, c *logCache, s *countingStore, from, to uint64) (hits []uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		before := s.reads.Load()
		var l raft.Log
		if err := c.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		if l.Index != i || len(l.Data) == 0 || l.Data[0] != byte(i) {
			t.Fatalf("GetLog(%d) returned entry %d, data %x", i, l.Index, l.Data[:min(len(l.Data), 4)])
		}
		if s.reads.Load() == before {
			hits = append(hits, i)
		}
	}
	return hits
}

func span(hits []uint64) string {
	if len(hits) == 0 {
		return "none"
	}
	for i := range hits[1:] {
		if hits[i+1] != hits[i]+1 {
			return fmt.Sprintf("not contiguous: %v", hits)
		}
	}
	return fmt.Sprintf("%d-%d", hits[0], hits[len(hits)-1])
}

func TestLogCacheKeepsLastEntries(t *testing.T) {
	s := newCountingStore()
	b := NewCacheBudget(DefaultCacheBytes)
	c := newLogCache(s, b)
	for from := uint64(1); from <= 1500; from += 100 {
		if err := c.StoreLogs(entries(from, min(from+99, 1500), 16)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := span(cached(t, c, s, 1, 1500)), fmt.Sprintf("%d-1500", 1500-logCacheSize+1); got != want {
		t.Errorf("cached %s, want %s (the last %d)", got, want, logCacheSize)
	}
	if want := int64(logCacheSize) * (16 + 96); b.Held() != want {
		t.Errorf("budget holds %d bytes, want %d", b.Held(), want)
	}
}

func TestLogCacheSharesBudget(t *testing.T) {
	const size = 1024
	per := int64(size + 96)
	b := NewCacheBudget(256 * per)
	s1, s2 := newCountingStore(), newCountingStore()
	c1 := newLogCache(s1, b)
	if err := c1.StoreLogs(entries(1, 400, size)); err != nil {
		t.Fatal(err)
	}
	if got := span(cached(t, c1, s1, 1, 400)); got != "145-400" {
		t.Errorf("one log on a budget of 256 entries: cached %s, want 145-400", got)
	}
	c2 := newLogCache(s2, b)
	// Each now gets half; c1 gives up its excess when it next stores.
	for _, c := range []*logCache{c1, c2} {
		last, _ := c.store.LastIndex()
		if err := c.StoreLogs(entries(last+1, last+200, size)); err != nil {
			t.Fatal(err)
		}
	}
	if got := span(cached(t, c1, s1, 1, 600)); got != "473-600" {
		t.Errorf("two logs: the first cached %s, want 473-600", got)
	}
	if got := span(cached(t, c2, s2, 1, 200)); got != "73-200" {
		t.Errorf("two logs: the second cached %s, want 73-200", got)
	}
	if b.Held() > 256*per {
		t.Errorf("budget holds %d bytes, more than its %d", b.Held(), 256*per)
	}
	// A log whose replica stops gives its share back.
	c2.close()
	c2.close()
	if got := span(cached(t, c2, s2, 1, 200)); got != "none" {
		t.Errorf("closed cache serves %s", got)
	}
	if err := c1.StoreLogs(entries(601, 800, size)); err != nil {
		t.Fatal(err)
	}
	if got := span(cached(t, c1, s1, 1, 800)); got != "545-800" {
		t.Errorf("after the second closed: cached %s, want 545-800", got)
	}
	if want := 256 * per; b.Held() != want {
		t.Errorf("budget holds %d bytes, want %d", b.Held(), want)
	}
}

// A single entry larger than the share is still cached: raft replicates
// and applies it next.
func TestLogCacheKeepsNewestEntry(t *testing.T) {
	s := newCountingStore()
	c := newLogCache(s, NewCacheBudget(1000))
	if err := c.StoreLogs(entries(1, 3, 4000)); err != nil {
		t.Fatal(err)
	}
	if got := span(cached(t, c, s, 1, 3)); got != "3-3" {
		t.Errorf("cached %s, want 3-3", got)
	}
}

func TestLogCacheRuns(t *testing.T) {
	s := newCountingStore()
	b := NewCacheBudget(DefaultCacheBytes)
	c := newLogCache(s, b)
	if err := c.StoreLogs(entries(1, 10, 8)); err != nil {
		t.Fatal(err)
	}
	// Raft replaces a follower's conflicting entries: it deletes them,
	// then stores the leader's.
	if err := c.DeleteRange(6, 10); err != nil {
		t.Fatal(err)
	}
	if b.Held() != 0 {
		t.Errorf("after DeleteRange the budget holds %d bytes", b.Held())
	}
	if err := c.StoreLogs(entries(6, 12, 8)); err != nil {
		t.Fatal(err)
	}
	if got := span(cached(t, c, s, 1, 12)); got != "6-12" {
		t.Errorf("cached %s, want 6-12", got)
	}
	// Entries stored past a gap (after a snapshot) start a new run.
	if err := c.StoreLogs(entries(100, 104, 8)); err != nil {
		t.Fatal(err)
	}
	if got := span(cached(t, c, s, 100, 104)); got != "100-104" {
		t.Errorf("cached %s, want 100-104", got)
	}
	for _, i := range []uint64{6, 12} {
		var l raft.Log
		before := s.reads.Load()
		if err := c.GetLog(i, &l); err != nil || s.reads.Load() == before {
			t.Errorf("entry %d of the old run: %v, read from the store: %v", i, err, s.reads.Load() != before)
		}
	}
	if want := int64(5 * (8 + 96)); b.Held() != want {
		t.Errorf("budget holds %d bytes, want %d", b.Held(), want)
	}
}

// failingStore fails every StoreLogs.
type failingStore struct{ *raft.InmemStore }

func (failingStore) StoreLogs([]*raft.Log) error { return errStoreFull }

var errStoreFull = errors.New("disk full")

func TestLogCacheStoreError(t *testing.T) {
	b := NewCacheBudget(DefaultCacheBytes)
	c := newLogCache(failingStore{raft.NewInmemStore()}, b)
	if err := c.StoreLogs(entries(1, 3, 8)); err != errStoreFull {
		t.Fatalf("StoreLogs: %v, want the store's error", err)
	}
	var l raft.Log
	if err := c.GetLog(1, &l); err != raft.ErrLogNotFound {
		t.Errorf("GetLog of an entry never stored: %v, want ErrLogNotFound", err)
	}
	if b.Held() != 0 {
		t.Errorf("budget holds %d bytes", b.Held())
	}
}

func TestLogCacheConcurrent(t *testing.T) {
	s := newCountingStore()
	b := NewCacheBudget(64 * (64 + 96))
	c := newLogCache(s, b)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); ; i = i%2000 + 1 {
				select {
				case <-done:
					return
				default:
				}
				var l raft.Log
				if err := c.GetLog(i, &l); err == nil && (l.Index != i || l.Data[0] != byte(i)) {
					t.Errorf("GetLog(%d) returned entry %d", i, l.Index)
					return
				}
			}
		}()
	}
	for from := uint64(1); from <= 2000; from += 10 {
		if err := c.StoreLogs(entries(from, from+9, 64)); err != nil {
			t.Error(err)
			break
		}
	}
	close(done)
	wg.Wait()
	if b.Held() > 64*(64+96) {
		t.Errorf("budget holds %d bytes, more than its %d", b.Held(), 64*(64+96))
	}
}
