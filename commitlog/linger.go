package commitlog

import (
	"sync/atomic"
	"time"
)

// Group commit's linger. Before a round swaps out its waiters, the flusher
// may wait a moment for more appenders to register, so that one sync
// completes them all: when fewer have registered than the last round
// released (plus those that registered during its sync), the released
// appenders are likely writing their next records right now. In a process
// whose appenders are goroutines that append back to back, that wait
// doubles the records per sync.
//
// It pays only when appenders do come back within it. A raft node's
// appenders are its groups' leaders and followers, which come back after a
// network round trip and the other nodes' syncs, mostly later than the
// bound. Measured with 8 named logs on three node processes, waiting every
// round by spinning cost 15% of a node's CPU and 20-30% of the records/s
// that not waiting at all gave. So the wait blocks instead of spinning (the
// appender whose registration brings the waiters to the number waited
// for wakes the flusher), and it backs off: a wait that runs to its bound
// with no appender having joined during it makes the next rounds sync at
// once, for a number of rounds that doubles with each such wait (up to
// maxLingerBackoff) and halves with each wait that gained an appender.

// maxLingerBackoff is the most rounds a linger that ran to its bound makes
// the flusher sync without lingering.
const maxLingerBackoff = 64

// linger is the flusher's state for group commit's wait.
type linger struct {
	want    atomic.Int64  // waiters the flusher waits for; 0 when it is not waiting
	joined  chan struct{} // cap 1: the waiters reached want
	timer   *time.Timer
	skip    int // rounds left to sync without lingering
	backoff int // rounds the next wait that runs to its bound skips

	waits, idle uint64 // waits begun, and those that ran to their bound with no one joining (tests read them)
}

func newLinger() *linger {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &linger{joined: make(chan struct{}, 1), timer: t}
}

// registered is called by an appender after it registered as the n-th
// waiter; it wakes the flusher if it waits for n waiters.
func (g *linger) registered(n int64) {
	if w := g.want.Load(); w > 0 && n >= w {
		select {
		case g.joined <- struct{}{}:
		default:
		}
	}
}

// wait waits until want appenders have registered (count reports how many
// have), at most bound, unless the backoff says to sync at once. It returns
// early when closing is closed. A wait gained if the waiters reached want
// or grew in number while it lasted. Only the flusher calls it.
func (g *linger) wait(want int64, count func() int64, bound time.Duration, closing <-chan struct{}) {
	if g.skip > 0 {
		g.skip--
		return
	}
	g.waits++
	select { // a wake-up left over from an earlier wait
	case <-g.joined:
	default:
	}
	g.want.Store(want)
	// An appender that registered before want was stored sent no
	// wake-up; count sees it.
	had := count()
	gained := had >= want
	if !gained {
		g.timer.Reset(bound)
		select {
		case <-g.joined:
			gained = true
			g.timer.Stop()
		case <-g.timer.C:
			gained = count() > had
		case <-closing:
			g.timer.Stop()
		}
	}
	g.want.Store(0)
	if gained {
		g.backoff /= 2
		return
	}
	g.idle++
	g.backoff = min(max(1, 2*g.backoff), maxLingerBackoff)
	g.skip = g.backoff
}
