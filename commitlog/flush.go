package commitlog

import (
	"fmt"
	"sync"
	"time"
)

// waiter is an appender waiting for a sync to cover its bytes.
type waiter struct {
	end  int64
	done chan error // buffered: the flusher never blocks on it
}

var waiterPool = sync.Pool{New: func() any { return &waiter{done: make(chan error, 1)} }}

// WaitDurable blocks until every byte below end is durable, the log fails,
// or Options.SyncFlushTimeout passes (ErrSyncTimeout). It asks the flusher
// for a sync in either flush mode; concurrent callers share one sync.
// After Close it returns ErrClosed.
func (l *Log) WaitDurable(end int64) error {
	if err := l.closedErr(); err != nil {
		return err
	}
	if l.flushed.Load() >= end {
		return nil
	}
	if err := l.Err(); err != nil {
		return err
	}
	w := waiterPool.Get().(*waiter)
	w.end = end
	l.wmu.Lock()
	if l.shut {
		l.wmu.Unlock()
		if l.flushed.Load() >= end {
			return nil
		}
		return ErrClosed
	}
	l.waiters = append(l.waiters, w)
	n := int64(len(l.waiters))
	l.nwaiters.Store(n)
	l.wmu.Unlock()
	l.linger.registered(n)
	select {
	case l.kick <- struct{}{}:
	default: // a sync is already asked for; it will see this waiter
	}
	t := time.NewTimer(l.opts.SyncFlushTimeout)
	select {
	case err := <-w.done:
		t.Stop()
		waiterPool.Put(w)
		return err
	case <-t.C:
		// w stays with the flusher, which will complete it later; it is
		// not returned to the pool.
		return fmt.Errorf("%w after %v (durable %d, need %d)", ErrSyncTimeout, l.opts.SyncFlushTimeout, l.flushed.Load(), end)
	}
}

// Sync makes every record written so far durable, in either flush mode.
func (l *Log) Sync() error {
	return l.WaitDurable(l.wrote.Load())
}

// flushLoop is the one goroutine that syncs while the log is open. In sync
// mode it runs a group commit each time appenders ask; in async mode it
// also syncs on a timer.
func (l *Log) flushLoop() {
	defer l.wg.Done()
	var tick <-chan time.Time
	if l.opts.Flush == AsyncFlushUnsafe {
		t := time.NewTicker(l.opts.FlushInterval)
		defer t.Stop()
		tick = t.C
	}
	lastThorough := time.Now()
	for {
		select {
		case <-l.closing:
			return
		case <-l.kick:
			l.groupCommit()
		case <-tick:
			dirty := l.wrote.Load() - l.flushed.Load()
			if dirty <= 0 {
				continue
			}
			if dirty >= int64(l.opts.FlushLeastPages)*4096 || time.Since(lastThorough) >= l.opts.FlushThoroughInterval {
				l.syncAll()
				lastThorough = time.Now()
			}
		}
	}
}

// maxGroupCommitLinger caps the flusher's wait for appenders, whatever the
// last sync took: a sync the disk held for seconds must not make the next
// round wait a multiple of that, until appends time out (SyncFlushTimeout).
const maxGroupCommitLinger = 100 * time.Millisecond

// groupCommit takes every registered waiter, syncs once, and completes
// them all. Waiters registered after the swap wait for the next round.
//
// Before it swaps, it may wait a moment for more appenders to join (see
// linger.go): at most Options.GroupCommitWait times the last sync's
// duration (a quarter by default) and never more than
// maxGroupCommitLinger, never when the appenders it expects have
// registered already, and less and less often while its waits gain no
// appender.
func (l *Log) groupCommit() {
	if want := l.lastBatch; want > 1 && l.nwaiters.Load() < want {
		l.linger.wait(want, l.nwaiters.Load, l.lingerBound(), l.closing)
	}
	l.wmu.Lock()
	ws := l.waiters
	l.waiters = l.spareWaiters[:0]
	l.nwaiters.Store(0)
	l.wmu.Unlock()
	start := time.Now()
	err := l.syncAll()
	l.lastSync = time.Since(start)
	l.finishWaiters(ws, err)
	// The next round can expect the appenders it just released (most
	// come straight back) and those that registered during this sync.
	// Counting only the released ones lets two appenders fall into
	// alternating rounds of one each, forever.
	l.lastBatch = int64(len(ws)) + l.nwaiters.Load()
	clear(ws)
	l.spareWaiters = ws
}

// lingerBound is the longest the flusher waits for the appenders it
// expects before the next sync (see groupCommit).
func (l *Log) lingerBound() time.Duration {
	return min(time.Duration(float64(l.lastSync)*l.opts.GroupCommitWait), maxGroupCommitLinger)
}

// finishWaiters completes each of ws: with err if the sync failed, nil if
// its bytes are durable, and otherwise with the log's failure, ErrClosed,
// or ErrTruncated when a truncation removed them.
func (l *Log) finishWaiters(ws []*waiter, err error) {
	flushed := l.flushed.Load()
	for _, w := range ws {
		switch {
		case err != nil:
			w.done <- err
		case w.end <= flushed:
			w.done <- nil
		default:
			if ferr := l.Err(); ferr != nil {
				w.done <- ferr
			} else if l.isClosed.Load() {
				w.done <- ErrClosed
			} else {
				w.done <- fmt.Errorf("%w: waited for position %d, the log now ends at %d", ErrTruncated, w.end, l.End())
			}
		}
	}
}

// syncAll makes everything written so far durable.
func (l *Log) syncAll() error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return l.syncLocked(l.writtenLocked())
}

// writtenLocked returns the mark of the end of what is written: the tail,
// or, while a Write has published its tail and not yet its wrote, the
// tail before it, which wrote still names (see Write), so that a sync
// then covers those bytes and counts their records. syncMu must be held:
// wrote moves back only under it (Truncate), so the mark returned never
// ends past wrote while the caller holds syncMu.
func (l *Log) writtenLocked() tailMark {
	t := l.tail.Load()
	if t.end > l.wrote.Load() {
		return t.before
	}
	return t.tailMark
}

// syncLocked syncs [flushed, at.end) and advances the durable state to
// at. A failed sync fails the log. syncMu must be held, and at must come
// from writtenLocked under it: flushed never passes wrote, so no append
// below flushed can ever be acknowledged without a sync.
func (l *Log) syncLocked(at tailMark) error {
	if err := l.Err(); err != nil {
		return err
	}
	from := l.flushed.Load()
	if at.end <= from {
		return nil
	}
	start := time.Now()
	for _, s := range *l.segs.Load() {
		lo, hi := max(from, s.base), min(at.end, s.end())
		if lo >= hi {
			continue
		}
		if !s.hold() {
			continue // removed by prefix deletion: nothing left to sync
		}
		var err error
		if l.opts.WritePath == WriteMmap {
			err = s.m.Sync(int(lo-s.base), int(hi-lo))
		} else {
			err = s.file.Sync()
		}
		s.release()
		if err != nil {
			return l.fail(fmt.Errorf("sync %s: %w", s.path, err))
		}
	}
	l.flushed.Store(at.end)
	l.mark.write(at.end, l.epoch)
	if at.lastRecord >= 0 {
		l.durableRecord, l.durableTS = at.lastRecord, at.lastTS
	}
	m := l.opts.Metrics
	m.IncCounter(MetricSyncs, 1)
	m.Observe(MetricSyncSeconds, since(start))
	m.Observe(MetricFlushLagBytes, float64(at.end-from))
	if at.records >= l.syncedRecords {
		m.Observe(MetricRecordsPerSync, float64(at.records-l.syncedRecords))
		l.syncedRecords = at.records
	}
	return nil
}

// housekeeping writes periodic checkpoints and applies retention.
func (l *Log) housekeeping() {
	defer l.wg.Done()
	t := time.NewTicker(l.opts.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-l.closing:
			return
		case <-t.C:
			if l.Err() != nil {
				continue
			}
			l.writeCheckpoint()
			if l.opts.RetentionAge > 0 || l.opts.RetentionBytes > 0 {
				l.applyRetention()
			}
		}
	}
}

// Checkpoint writes the checkpoint file now, with fresh meta from
// Options.CheckpointMeta (or, when a checkpoint whose meta was taken
// after this one's is written first, leaves that one in place). The
// checkpoint records the durable position, so call Sync first to make it
// cover everything written.
func (l *Log) Checkpoint() error {
	if err := l.closedErr(); err != nil {
		return err
	}
	if err := l.Err(); err != nil {
		return err
	}
	return l.writeCheckpoint()
}

// writeCheckpoint writes the durable state to the checkpoint file. The meta
// hook runs with no lock of the log held, so two checkpoints (the
// background one, and one a caller asked for) may take their meta in one
// order and reach the file in the other: the one whose meta is older then
// writes nothing, since the newer meta covers what it would say and a
// caller may rely on what it no longer says (raftstore forgets a dropped
// group once a checkpoint without it is written).
func (l *Log) writeCheckpoint() error {
	truncations := l.truncations.Load()
	turn := l.cpTurns.Add(1)
	var meta []byte
	hooked := l.opts.CheckpointMeta != nil
	if hooked {
		var err error
		if meta, err = l.opts.CheckpointMeta(); err != nil {
			return fmt.Errorf("commitlog: checkpoint meta: %w", err)
		}
	}
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	if hooked && l.truncations.Load() != truncations {
		// The meta may describe records a truncation removed; the next
		// checkpoint will carry fresh meta.
		return nil
	}
	if hooked && turn < l.cpWritten {
		return nil // a checkpoint with newer meta is written
	}
	if !hooked {
		meta = l.lastMeta
	}
	if err := l.writeCheckpointLocked(meta); err != nil {
		return err
	}
	l.cpWritten = max(l.cpWritten, turn)
	return nil
}

// writeCheckpointLocked writes a checkpoint with meta. cpMu must be held.
func (l *Log) writeCheckpointLocked(meta []byte) error {
	l.syncMu.Lock()
	c := checkpoint{
		flushed:    l.flushed.Load(),
		lastRecord: l.durableRecord,
		timestamp:  l.durableTS,
		epoch:      l.epoch,
		epochStart: l.epochStart,
		meta:       meta,
	}
	l.syncMu.Unlock()
	if err := l.cp.write(c); err != nil {
		return err
	}
	l.lastMeta = meta
	return nil
}
