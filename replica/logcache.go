package replica

// The cache of recent raft entries that every replica keeps in front of
// its store, bounded in entries per log and in bytes per node.

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// logCacheSize is how many recent entries a log's cache holds at most.
const logCacheSize = 1024

// DefaultCacheBytes is the bytes of entries a node's logs keep in their
// caches together (NewCacheBudget).
const DefaultCacheBytes = 16 << 20

// CacheBudget is the bytes of recent raft entries that the replicas of one
// node keep in memory, shared among them. Each replica's cache holds up to
// logCacheSize entries and up to an equal share of the budget, so one busy
// log caches its last 1,024 entries while 64 logs on a node do not hold 64
// times that (with 1 KiB records, 16 MiB gives each of 64 logs its last 256
// entries: more than a raft batch, MaxAppendEntries).
//
// The cache serves raft the entries it replicates and applies, which are
// nearly always the last few batches; without it raft reads them back from
// the commit log. Its cost is heap, and a node runs with GOGC 400, so every
// byte held costs five of memory.
//
// A CacheBudget is safe for concurrent use.
type CacheBudget struct {
	bytes  int64        // immutable
	caches atomic.Int64 // the caches drawing on the budget
	held   atomic.Int64 // bytes of the entries they hold, for metrics and tests
}

// NewCacheBudget returns a budget of bytes (at least 1).
func NewCacheBudget(bytes int64) *CacheBudget {
	return &CacheBudget{bytes: max(bytes, 1)}
}

// Held returns the bytes of entries the caches on the budget hold now.
func (b *CacheBudget) Held() int64 { return b.held.Load() }

// share is the bytes each cache may hold now.
func (b *CacheBudget) share() int64 { return b.bytes / max(b.caches.Load(), 1) }

// logCache is raft's LogStore in front of a replica's store: a ring of the
// last entries stored, holding a contiguous run of indexes [lo, hi], at
// most logCacheSize of them and at most the budget's share in bytes; the
// oldest go first. It replaces raft.LogCache, which holds a fixed count.
type logCache struct {
	store  raft.LogStore
	budget *CacheBudget

	mu     sync.RWMutex
	ring   []*raft.Log // entry i in ring[i % len]; guarded by mu
	lo, hi uint64      // the cached indexes, none when lo > hi; guarded by mu
	bytes  int64       // Σ entrySize over the cached entries; guarded by mu
	closed bool        // guarded by mu
}

// newLogCache returns a cache over store drawing on budget until close.
func newLogCache(store raft.LogStore, budget *CacheBudget) *logCache {
	budget.caches.Add(1)
	return &logCache{store: store, budget: budget, ring: make([]*raft.Log, logCacheSize), lo: 1}
}

// entrySize is what an entry costs the budget: its data and extensions,
// plus the raft.Log itself.
func entrySize(l *raft.Log) int64 { return int64(len(l.Data) + len(l.Extensions) + 96) }

// IsMonotonic implements raft.MonotonicLogStore for the store's answer.
func (c *logCache) IsMonotonic() bool {
	m, ok := c.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// GetLog implements raft.LogStore.
func (c *logCache) GetLog(idx uint64, log *raft.Log) error {
	c.mu.RLock()
	if idx >= c.lo && idx <= c.hi {
		*log = *c.ring[idx%uint64(len(c.ring))]
		c.mu.RUnlock()
		return nil
	}
	c.mu.RUnlock()
	return c.store.GetLog(idx, log)
}

// StoreLog implements raft.LogStore.
func (c *logCache) StoreLog(log *raft.Log) error { return c.StoreLogs([]*raft.Log{log}) }

// StoreLogs implements raft.LogStore: it stores logs, then caches them.
func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return err
	}
	if len(logs) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	before := c.bytes
	defer func() { c.budget.held.Add(c.bytes - before) }() // once per call: the budget is shared by every log
	if first := logs[0].Index; c.lo > c.hi || first != c.hi+1 {
		// Not after the run cached (raft wrote past a snapshot, or over
		// entries a new leader replaced): start a new run.
		c.clearLocked()
		c.lo = first
		c.hi = first - 1
	}
	limit := c.budget.share()
	for _, l := range logs {
		if c.hi-c.lo+1 == uint64(len(c.ring)) {
			c.dropOldestLocked()
		}
		c.hi++
		c.ring[c.hi%uint64(len(c.ring))] = l
		c.bytes += entrySize(l)
	}
	for c.bytes > limit && c.lo < c.hi {
		c.dropOldestLocked()
	}
	return nil
}

// dropOldestLocked drops entry lo.
func (c *logCache) dropOldestLocked() {
	i := c.lo % uint64(len(c.ring))
	c.bytes -= entrySize(c.ring[i])
	c.ring[i] = nil
	c.lo++
}

// clearLocked drops every entry; the caller updates the budget.
func (c *logCache) clearLocked() {
	for ; c.lo <= c.hi; c.lo++ {
		c.ring[c.lo%uint64(len(c.ring))] = nil
	}
	c.bytes = 0
}

// releaseLocked drops every entry and takes their bytes off the budget.
func (c *logCache) releaseLocked() {
	c.budget.held.Add(-c.bytes)
	c.clearLocked()
}

// FirstIndex implements raft.LogStore.
func (c *logCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

// LastIndex implements raft.LogStore.
func (c *logCache) LastIndex() (uint64, error) { return c.store.LastIndex() }

// DeleteRange implements raft.LogStore: it drops every cached entry, then
// deletes from the store.
func (c *logCache) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	c.releaseLocked()
	c.mu.Unlock()
	return c.store.DeleteRange(min, max)
}

// close drops every entry and leaves the budget; the cache passes calls
// through to the store from then on. Idempotent.
func (c *logCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.releaseLocked()
	c.closed = true
	c.budget.caches.Add(-1)
}
