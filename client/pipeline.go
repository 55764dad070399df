package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// Bounds of one request of appends (a batch). An append larger than these
// goes alone.
const (
	// maxBatchRecords bounds the records of a batch. With at most
	// MaxAppendRequestsLimit requests in flight, the records of the
	// requests a server may have to recognise as repeats stay below
	// what it remembers of a session (262,144 indexes).
	maxBatchRecords = 1024
	// maxBatchBytes bounds the record bytes of a batch, or half the frame
	// size if that is less.
	maxBatchBytes = 4 << 20
	// recordOverhead is what a record adds to a request besides its bytes.
	recordOverhead = 8
)

// pipeline sends the appends of one log of the Client; each log has its
// own, so one log's appends never wait for another's. Append, AppendAsync
// and TryAppendAsync submit them, each taking a ticket of the window win;
// one goroutine, the sender (run), packs the appends waiting into batches,
// one AppendRequest each with a sequence number of its own from
// Client.seqs, and sends them with transport.Conn.Go. Everything after
// that happens where it is noticed, under mu: replies in the read loop of
// the connection, attempt timeouts and the ends of backoffs in the
// function of the batch's timer, the end of an append's context in a
// context.AfterFunc. No goroutine waits for an append or a request: what
// an append costs is its future (and, for a context that can end, its
// AfterFunc registration); a request, its batch, its retrier and a timer.
//
// A batch is retried as a whole, with the same sequence number and the
// same records, until it succeeds or the retries give up, like Append; its
// appends complete together. The one exception is a batch that the server
// found too large before storing any of it (its limits may be lower than
// the batch bounds): its appends go again, each in a request of its own.
//
// At most Options.MaxAppendRequests batches exist at once (logState.seqs
// bounds their sequence numbers): a new batch is packed only when one
// ends. With one, the default, a batch is sent only once the one before it
// has completed; with more, each attempt names the latest batch packed
// before it that has not completed (afterLocked), which the server stores
// first. Either keeps appends in submission order.
type pipeline struct {
	c        *Client       // immutable
	l        *logState     // immutable: the log it appends to
	op       string        // immutable: the operation, as errors name it: "append", `append (log "orders")`
	win      *seqWindow    // immutable: tickets of appends submitted and not completed
	wake     chan struct{} // immutable; capacity 1: the sender may have work
	maxBytes int           // immutable: the most record bytes in a batch

	mu      sync.Mutex          // guards the fields below and those of futures and batches it names
	queue   []*AppendFuture     // submitted and not in a batch, in submission order; some may be done
	stale   int                 // futures in queue that are done
	ready   []*batch            // batches due for an attempt, oldest first; some may be done
	batches map[*batch]struct{} // every batch not done
	closed  bool                // Close has failed everything; nothing more is sent
}

// batch is one request of appends and its attempts.
type batch struct {
	futs  []*AppendFuture         // immutable: its appends, in submission order
	total int                     // immutable: records in req
	req   transport.AppendRequest // immutable but for Base and After, which the sender sets before each attempt

	// Guarded by pipeline.mu:
	live        int             // futures not done
	r           *retrier        // its retries
	state       batchState      // see batchState
	gen         uint64          // attempts begun; what belongs to an earlier one is stale
	addr        string          // the member of the current attempt
	conn        *transport.Conn // with batchWaiting: the connection of the attempt
	id          uint64          // with batchWaiting: the attempt's request id on conn; 0 until Go returns
	began       time.Time       // when the current attempt began
	due         time.Time       // when the timer is due: the attempt's deadline or the backoff's end
	timer       *time.Timer     // fires at due; nil until first needed
	mayBeStored bool            // an attempt may have stored it (or did)
}

// batchState is where a batch is.
type batchState uint8

const (
	batchReady   batchState = iota // due for an attempt: in pipeline.ready, or just packed
	batchSending                   // the sender is making an attempt: dialling, or in Go
	batchWaiting                   // waiting for the reply of attempt gen, or its deadline
	batchBackoff                   // waiting for a backoff to end
	batchDone                      // completed, or given up
)

func newPipeline(l *logState) *pipeline {
	c := l.c
	frame := c.opts.Conn.MaxFrameSize
	if frame == 0 {
		frame = transport.DefaultMaxFrameSize
	}
	return &pipeline{
		c:        c,
		l:        l,
		op:       opName("append", l.name),
		win:      newSeqWindow(c.opts.MaxInFlightAppends),
		wake:     make(chan struct{}, 1),
		maxBytes: min(maxBatchBytes, frame/2),
		batches:  make(map[*batch]struct{}),
	}
}

// signal wakes the sender.
func (p *pipeline) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// submit queues an append of records, waiting for room in the window if
// wait is set and failing with ErrWindowFull otherwise, and returns its
// future. Unless watch is false (Append watches its context itself), the
// append fails when ctx ends. Every failure but ErrWindowFull is returned
// as a future that failed.
func (p *pipeline) submit(ctx context.Context, records [][]byte, wait, watch bool) (*AppendFuture, error) {
	if len(records) == 0 {
		return failedFuture(fmt.Errorf("client: %s: %w", p.op, errNoRecords)), nil
	}
	p.l.startSender()
	f := &AppendFuture{done: make(chan struct{}), records: records}
	if wait {
		t, err := p.win.acquire(ctx, p.c.done)
		if err != nil {
			return failedFuture(fmt.Errorf("client: %s: %w", p.op, err)), nil
		}
		f.ticket = t
	} else {
		t, ok := p.win.tryAcquire()
		if !ok {
			return nil, ErrWindowFull
		}
		f.ticket = t
	}
	for _, r := range records {
		f.size += len(r) + recordOverhead
	}
	p.mu.Lock()
	switch {
	case p.closed:
		p.completeLocked(f, nil, fmt.Errorf("client: %s: %w", p.op, ErrClosed))
	case ctx.Err() != nil:
		p.completeLocked(f, nil, fmt.Errorf("client: %s: %w", p.op, ctx.Err()))
	default:
		f.state = futureQueued
		p.queue = append(p.queue, f)
		if watch && ctx.Done() != nil {
			// Runs in a goroutine of its own once ctx ends, so it may
			// take mu, which is held here.
			f.stop = context.AfterFunc(ctx, func() { p.cancel(f, ctx.Err()) })
		}
	}
	p.mu.Unlock()
	p.signal()
	return f, nil
}

// cancel fails f, whose context ended with ctxErr, unless it is done. A
// batch left with no live append is given up.
func (p *pipeline) cancel(f *AppendFuture, ctxErr error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch f.state {
	case futureQueued:
		p.completeLocked(f, nil, fmt.Errorf("client: %s: %w", p.op, ctxErr)) // never sent
		if p.stale > 64 && p.stale > len(p.queue)/2 {
			live := p.queue[:0]
			for _, q := range p.queue {
				if q.state != futureDone {
					live = append(live, q)
				}
			}
			clear(p.queue[len(live):])
			p.queue, p.stale = live, 0
		}
	case futureSent:
		b := f.batch
		p.completeLocked(f, nil, b.r.giveUp(ctxErr))
		if b.live == 0 {
			p.finishLocked(b, nil, nil)
		}
	}
}

// completeLocked completes f with indexes or err and releases its ticket.
func (p *pipeline) completeLocked(f *AppendFuture, indexes []uint64, err error) {
	switch f.state {
	case futureDone:
		return
	case futureQueued:
		p.stale++
	case futureSent:
		f.batch.live--
	}
	f.state = futureDone
	f.indexes, f.err = indexes, err
	if f.stop != nil {
		f.stop()
		f.stop = nil
	}
	close(f.done)
	p.win.release(f.ticket)
}

// close fails every append in flight with ErrClosed; nothing is sent after
// it. Called by Client.Close after closing c.done.
func (p *pipeline) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	err := fmt.Errorf("client: %s: %w", p.op, ErrClosed)
	for b := range p.batches {
		p.finishLocked(b, nil, err)
	}
	for _, f := range p.queue {
		p.completeLocked(f, nil, err)
	}
	p.queue, p.ready, p.stale = nil, nil, 0
}

// run is the sender: it makes every attempt, until Close.
func (p *pipeline) run() {
	defer p.c.wg.Done()
	for {
		select {
		case <-p.wake:
		case <-p.c.done:
			return
		}
		// Let the goroutines that the completions just woke submit
		// their next appends first, so that they go in this round's
		// request rather than wait a whole round for the next. In
		// BenchmarkAppendAsync (cmd/node), 64 appenders sharing one
		// request in flight got 33 to 36 appends a request without it,
		// 47 to 62 with it.
		runtime.Gosched()
		for {
			b, gen, deadline := p.take()
			if b == nil {
				break
			}
			p.send(b, gen, deadline)
		}
	}
}

// take returns the batch to attempt next, its attempt number and the
// attempt's deadline: a batch due for another attempt, or a new one, or
// nil when there is nothing to send or no room for another batch.
func (p *pipeline) take() (*batch, uint64, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, 0, time.Time{}
	}
	var b *batch
	for b == nil && len(p.ready) > 0 {
		if p.ready[0].state == batchReady {
			b = p.ready[0]
		}
		p.ready[0] = nil
		p.ready = p.ready[1:]
	}
	if b == nil {
		if b = p.packLocked(); b == nil {
			return nil, 0, time.Time{}
		}
	}
	b.addr = b.r.addr()
	b.r.begin(b.addr)
	b.gen++
	b.state = batchSending
	b.began = time.Now()
	return b, b.gen, b.r.attemptDeadline()
}

// packLocked makes a batch of the appends at the head of the queue, nil
// when none waits or no sequence number is free (a batch ending frees one
// and wakes the sender).
func (p *pipeline) packLocked() *batch {
	for len(p.queue) > 0 && p.queue[0].state == futureDone {
		p.queue[0] = nil
		p.queue = p.queue[1:]
		p.stale--
	}
	if len(p.queue) == 0 {
		return nil
	}
	seq, ok := p.l.seqs.tryAcquire()
	if !ok {
		return nil
	}
	var futs []*AppendFuture
	records, size, i := 0, 0, 0
	for ; i < len(p.queue); i++ {
		f := p.queue[i]
		if f.state == futureDone {
			p.stale--
			continue
		}
		if len(futs) > 0 && (f.alone || records+len(f.records) > maxBatchRecords || size+f.size > p.maxBytes) {
			break
		}
		futs = append(futs, f)
		records += len(f.records)
		size += f.size
		if f.alone {
			i++
			break
		}
	}
	clear(p.queue[:i])
	p.queue = p.queue[i:]
	recs := futs[0].records
	if len(futs) > 1 {
		recs = make([][]byte, 0, records)
		for _, f := range futs {
			recs = append(recs, f.records...)
		}
	}
	b := &batch{
		futs:  futs,
		total: records,
		req:   transport.AppendRequest{Log: p.l.name, ClientID: p.l.clientID, Seq: seq, Records: recs},
		live:  len(futs),
		r:     p.l.retrier("append", toLeader, "", true),
	}
	for _, f := range futs {
		f.state, f.batch = futureSent, b
	}
	p.batches[b] = struct{}{}
	return b
}

// send makes attempt gen of b, which take returned: it connects to the
// member and sends the request, leaving the reply to replied and the
// deadline to the timer.
func (p *pipeline) send(b *batch, gen uint64, deadline time.Time) {
	c := p.c
	// The context bounds the dial and the wait for a slot on the
	// connection; the timer bounds the wait for the reply.
	ctx, cancel := context.WithDeadline(c.ctx, deadline)
	defer cancel()
	conn, err := c.conn(ctx, b.addr)
	p.mu.Lock()
	if b.state != batchSending || b.gen != gen {
		p.mu.Unlock() // given up meanwhile
		return
	}
	if err != nil {
		p.failedLocked(b, err, false)
		p.mu.Unlock()
		return
	}
	b.req.Base = p.l.sessionBase()
	b.req.After = p.afterLocked(b)
	b.state, b.conn, b.id = batchWaiting, conn, 0
	p.armLocked(b, deadline)
	p.mu.Unlock()

	resp := new(transport.AppendResponse)
	id, err := conn.Go(ctx, transport.OpAppend, &b.req, resp, func(err error) { p.replied(b, gen, resp, err) })

	p.mu.Lock()
	defer p.mu.Unlock()
	current := b.state == batchWaiting && b.gen == gen
	switch {
	case err != nil && current: // nothing was sent
		if errors.Is(err, context.DeadlineExceeded) {
			err = p.noReply(b, err)
		}
		p.failedLocked(b, err, false)
	case err != nil:
	case current:
		b.id = id
	default:
		// The attempt ended while Go ran (its deadline, the end of every
		// append's context, Close, or its reply): tell the server, in
		// case it still works on it.
		conn.Abandon(transport.OpAppend, id)
	}
}

// afterLocked returns the sequence number of the batch b must be stored
// after: the latest one packed before it that has not completed, 0 for
// none. The server stores b only once that one is stored
// (transport.AppendRequest.After), so batches that overlap are still
// stored in the order they were packed. With one request in flight at a
// time there is never such a batch.
func (p *pipeline) afterLocked(b *batch) uint64 {
	var after uint64
	for o := range p.batches {
		if s := o.req.Seq; s < b.req.Seq && s > after {
			after = s
		}
	}
	return after
}

// noReply is the error of an attempt of b that got no reply in time.
func (p *pipeline) noReply(b *batch, err error) error {
	return fmt.Errorf("no reply within %v: %w", roundDuration(time.Since(b.began)), err)
}

// replied handles the reply to attempt gen of b, or the failure of its
// connection; it runs in the connection's read loop.
func (p *pipeline) replied(b *batch, gen uint64, resp *transport.AppendResponse, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.state != batchWaiting || b.gen != gen {
		return // stale: the attempt timed out or the batch ended
	}
	if err != nil {
		p.failedLocked(b, err, true)
		return
	}
	p.l.stored.Store(true)
	p.c.confirm(&p.l.route, b.addr)
	b.conn = nil
	if len(resp.Indexes) != b.total {
		p.finishLocked(b, nil, fmt.Errorf("client: %s: %w: %d indexes for %d records", p.op, transport.ErrProtocol, len(resp.Indexes), b.total))
		return
	}
	p.finishLocked(b, resp.Indexes, nil)
}

// fire handles b's timer: the deadline of an attempt, or the end of a
// backoff.
func (p *pipeline) fire(b *batch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(b.due) {
		return // stale: the timer was set again since
	}
	switch b.state {
	case batchWaiting:
		if b.id != 0 {
			b.conn.Abandon(transport.OpAppend, b.id)
		}
		p.failedLocked(b, p.noReply(b, context.DeadlineExceeded), true)
	case batchBackoff:
		if err := b.r.expired(); err != nil {
			p.finishLocked(b, nil, err)
			return
		}
		p.readyLocked(b)
	}
}

// armLocked sets b's timer to fire at due.
func (p *pipeline) armLocked(b *batch, due time.Time) {
	b.due = due
	if b.timer == nil {
		b.timer = time.AfterFunc(time.Until(due), func() { p.fire(b) })
	} else {
		b.timer.Reset(time.Until(due))
	}
}

// readyLocked makes b due for its next attempt.
func (p *pipeline) readyLocked(b *batch) {
	b.state = batchReady
	p.ready = append(p.ready, b)
	p.signal()
}

// failedLocked decides what follows the current attempt of b, which failed
// with err; sent says whether the request may have reached the member.
func (p *pipeline) failedLocked(b *batch, err error, sent bool) {
	if b.timer != nil {
		b.timer.Stop()
	}
	b.conn, b.id = nil, 0
	if sent && !refusedBeforeStoring(err) {
		b.mayBeStored = true
		p.l.stored.Store(true)
	}
	if p.closed || errors.Is(err, ErrClosed) {
		p.finishLocked(b, nil, fmt.Errorf("client: %s: %w", p.op, ErrClosed))
		return
	}
	d, now, ferr := b.r.next(b.addr, err)
	switch {
	case ferr != nil && len(b.futs) > 1 && !b.mayBeStored && tooLarge(err):
		p.splitLocked(b)
	case ferr != nil:
		p.finishLocked(b, nil, ferr)
	case now:
		p.readyLocked(b)
	default:
		b.state = batchBackoff
		p.armLocked(b, time.Now().Add(d))
	}
}

// tooLarge reports whether err says that a request was too large for the
// connection or the member: refused before anything was stored.
func tooLarge(err error) bool {
	return transport.ErrorCode(err) == transport.CodeTooLarge || errors.Is(err, transport.ErrFrameTooLarge)
}

// splitLocked gives up b, which no attempt stored, and queues its live
// appends again, first, each to go in a request of its own: together they
// were too large, and one of them may be too large alone, which is then
// its own failure.
func (p *pipeline) splitLocked(b *batch) {
	var again []*AppendFuture
	for _, f := range b.futs {
		if f.state == futureSent {
			f.state, f.batch, f.alone = futureQueued, nil, true
			again = append(again, f)
		}
	}
	b.live = 0
	p.finishLocked(b, nil, nil)
	p.queue = append(again, p.queue...)
}

// finishLocked ends b: its live appends complete with their share of
// indexes, or with err; its sequence number is released and the sender
// woken for the next batch. An attempt still in flight is abandoned.
func (p *pipeline) finishLocked(b *batch, indexes []uint64, err error) {
	if b.state == batchDone {
		return
	}
	b.state = batchDone
	if b.timer != nil {
		b.timer.Stop()
	}
	if b.conn != nil && b.id != 0 && !p.closed {
		b.conn.Abandon(transport.OpAppend, b.id)
	}
	b.conn = nil
	delete(p.batches, b)
	p.l.seqs.release(b.req.Seq)
	off := 0
	for _, f := range b.futs {
		n := len(f.records)
		if f.state == futureSent {
			if err != nil || indexes == nil {
				p.completeLocked(f, nil, err)
			} else {
				p.completeLocked(f, indexes[off:off+n:off+n], nil)
			}
		}
		off += n
	}
	p.signal()
}
