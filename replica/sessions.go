package replica

import (
	"errors"
	"fmt"
	"hash/fnv"
)

// Sessions and their limits.
//
// The state machine keeps up to maxSessions client sessions (least
// recently used forgotten first), each remembering the indexes of its
// last sessionWindow Appends (and at most sessionMaxIndexes indexes). That
// is what lets a retried Append be answered with the original indexes
// instead of being stored again.
//
// A session the state machine does not hold is the hard case: a retry of
// an Append stored under a session since evicted would otherwise be
// stored again. Two things let it decide:
//
//   - evicted sessions: the last maxEvicted evicted client ids (a 64-bit
//     FNV-1a hash of each) with the highest sequence number each had
//     stored. An Append from one of them is stored only if the client's
//     session base (transport.AppendRequest.Base) is above that number:
//     the client promises never to send again what lies below its base,
//     so it cannot be a retry of anything the evicted session saw.
//     The session then starts again with that base as its floor.
//   - unknown sessions: the client id is neither held nor among the
//     evicted ones, so no entry of it is in the log (the state machine
//     applies entries in log order, and a retry is applied after the
//     attempt it repeats), or it was evicted longer ago than the last
//     maxEvicted evictions. The first is by far the likelier, and the
//     usual case of a new Client whose first Appends met a leader change
//     (its base has moved past 1, since those may have been stored): the
//     session opens. Refusing it would turn every failover a new Client
//     meets into SessionExpired.
//
// Everything else is refused with errSessionExpired (the client sees
// SessionExpired) and stored as a void entry. What is left open: a client
// whose session was evicted and then forgotten (maxSessions + maxEvicted
// other sessions created meanwhile, 73,728) while one of its Appends was
// still being retried gets that one stored twice.
const (
	// maxEvicted bounds the evicted sessions remembered (24 bytes each in
	// memory, about 12 in a snapshot).
	maxEvicted = 1 << 16
)

// evictedSession is what the state machine keeps of an evicted session.
type evictedSession struct {
	maxSeq uint64 // the highest sequence number the session had stored
	pos    uint64 // its place in fsm.evictOrder, to tell it from a stale copy
}

// evictedRef is one entry of fsm.evictOrder.
type evictedRef struct{ hash, pos uint64 }

// sessionHash names a client id among the evicted sessions. It must be
// the same on every node and in every version: it is replicated state.
func sessionHash(client string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(client))
	return h.Sum64()
}

// ErrSessionExpired answers an Append whose session cannot tell whether it
// was stored before. Wrapped errors say why; the Append was not stored.
var ErrSessionExpired = errors.New("session expired")

// sessionErr is an errSessionExpired with the reason and what to do.
func sessionErr(client string, seq uint64, why string) error {
	return fmt.Errorf("%w: client %s, sequence number %d: %s; this attempt was not stored, and whether an earlier attempt "+
		"of it was is unknown: read the log to find out, and append under a new client id (a new Client)", ErrSessionExpired, client, seq, why)
}

// ErrOutOfOrder voids an Append that must follow one not stored yet
// (transport.AppendRequest.After).
var ErrOutOfOrder = errors.New("out of order")

// outOfOrderErr is an errOutOfOrder naming the two Appends.
func outOfOrderErr(client string, seq, after uint64) error {
	return fmt.Errorf("%w: client %s, sequence number %d must follow %d, which is not stored yet; nothing was stored, retry once %d completed",
		ErrOutOfOrder, client, seq, after, after)
}

// complete reports whether the session remembers the Append seq as
// stored whole.
func (s *session) complete(seq uint64) bool {
	r := s.reqs[seq]
	return r != nil && uint64(len(r.indexes)) == r.n
}

// evict forgets the least recently used session, remembering it among the
// evicted ones. Called with f.mu held.
func (f *FSM) evict() {
	old := f.lru.Back().Value.(*session)
	f.lru.Remove(old.elem)
	delete(f.sessions, old.id)
	maxSeq := old.floor - min(old.floor, 1)
	if k := len(old.order); k > 0 {
		maxSeq = max(maxSeq, old.order[k-1])
	}
	f.rememberEvicted(sessionHash(old.id), maxSeq)
}

// rememberEvicted adds an evicted session, forgetting the oldest beyond
// maxEvicted. Called with f.mu held.
func (f *FSM) rememberEvicted(hash, maxSeq uint64) {
	pos := f.evictNext
	f.evictNext++
	f.evicted[hash] = evictedSession{maxSeq: maxSeq, pos: pos}
	f.evictOrder = append(f.evictOrder, evictedRef{hash, pos})
	for len(f.evicted) > maxEvicted {
		ref := f.evictOrder[0]
		f.evictOrder = f.evictOrder[1:]
		if e, ok := f.evicted[ref.hash]; ok && e.pos == ref.pos {
			delete(f.evicted, ref.hash)
		}
	}
	if len(f.evictOrder) > 2*maxEvicted {
		// Drop the stale entries: those of sessions opened again.
		f.evictOrder = f.liveEvicted()
	}
}

// liveEvicted returns the entries of evictOrder that are not stale, oldest
// first. Called with f.mu held.
func (f *FSM) liveEvicted() []evictedRef {
	live := make([]evictedRef, 0, len(f.evicted))
	for _, ref := range f.evictOrder {
		if e, ok := f.evicted[ref.hash]; ok && e.pos == ref.pos {
			live = append(live, ref)
		}
	}
	return live
}

// openSession returns a new session for the first entry of an Append from
// a client the state machine holds no session of, or an error when it
// cannot vouch that the Append was not stored before. Called with f.mu
// held.
func (f *FSM) openSession(c recordCmd) (*session, error) {
	client := string(c.client)
	hash := sessionHash(client)
	floor := uint64(0)
	if e, ok := f.evicted[hash]; ok {
		switch {
		case c.base == 0:
			return nil, sessionErr(client, c.seq, fmt.Sprintf(
				"its session was evicted (a cluster keeps %d client sessions) and the client does not say which appends it has finished with (an older client)", MaxSessions))
		case c.base <= e.maxSeq:
			return nil, sessionErr(client, c.seq, fmt.Sprintf(
				"its session was evicted (a cluster keeps %d client sessions) while sequence numbers up to %d, which it had stored, may still be retried",
				MaxSessions, e.maxSeq))
		}
		delete(f.evicted, hash)
		floor = c.base
	}
	s := &session{id: client, floor: floor, reqs: map[uint64]*request{}}
	s.elem = f.lru.PushFront(s)
	f.sessions[client] = s
	for len(f.sessions) > MaxSessions {
		f.evict()
	}
	return s, nil
}
