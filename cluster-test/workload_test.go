package clustertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// workloadConfig sizes a workload. Every worker stops after opsPerWorker
// operations or duration, whichever comes first, and every operation is
// bounded by opTimeout. A workload runs on one log: log names it, ""
// for the default log.
type workloadConfig struct {
	log            string // the named log every operation goes to; "" for the default log
	duration       time.Duration
	retryAppenders int           // single-record appends through one shared default Client
	onceAppenders  int           // single-record appends, each worker with a Client that gives up after one short attempt
	batchAppenders int           // appends of batchSize records through a default Client each
	readers        int           // linearizable reads through one shared default Client
	staleReaders   int           // stale reads from chosen nodes
	tail           bool          // a tail from the start of the log
	opsPerWorker   int           // operation bound per worker
	think          time.Duration // mean pause between a worker's operations; 0: none
	trimEvery      time.Duration // mean pause between the trimmer's trims; 0: no trimmer
}

const (
	batchSize = 3
	opTimeout = 20 * time.Second // bounds one operation, retries included
	// trimKeep bounds how far below the highest index known to be
	// committed the trimmer trims: it keeps up to trimKeep indexes.
	trimKeep = 40
)

// Options of the Clients that do not retry (beyond following a leader
// redirect within the attempt): an append whose attempt fails stays
// unknown.
var onceOptions = &client.Options{RequestTimeout: time.Second, RetryTimeout: time.Second}

// Options of the stale readers' Client: a stale read goes to one node and
// should not wait long for a dead one.
var staleOptions = &client.Options{RequestTimeout: time.Second, RetryTimeout: 2 * time.Second}

// readMaxes are the MaxRecords bounds readers choose from.
var readMaxes = []uint32{1, 2, 5, 20, 100, 1000}

// workload runs clients against one log of a cluster and records their
// operations, each naming the log (cfg.log).
type workload struct {
	c        *cluster
	rec      *recorder
	cfg      workloadConfig
	seed     uint64
	deadline time.Time
	prefix   string // of every record appended: the log's name and "/", "" for the default log

	stopCh   chan struct{} // closed by stop
	stopOnce sync.Once

	maxIndex atomic.Uint64 // highest index acknowledged or read, to aim reads
	lanes    int           // lanes handed out; owned by startWorkload
	clients  []*client.Client
	wg       sync.WaitGroup

	probeClient *client.Log // immutable
	probeLane   int         // immutable
	probeMu     sync.Mutex  // serialises probe calls and guards probeN
	probeN      int
}

// startWorkload dials the clients and starts the workers; wait waits for
// them. Workers stop when ctx ends too.
func startWorkload(ctx context.Context, c *cluster, rec *recorder, cfg workloadConfig, seed uint64) (*workload, error) {
	w := &workload{c: c, rec: rec, cfg: cfg, seed: seed, deadline: time.Now().Add(cfg.duration), stopCh: make(chan struct{})}
	if cfg.log != "" {
		// Records name their log, so that one found in another log is
		// one never appended there.
		w.prefix = cfg.log + "/"
	}
	// dial returns a new Client's handle on the workload's log.
	dial := func(opts *client.Options) (*client.Log, error) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cl, err := client.Dial(dctx, c.clientAddrs(), opts)
		if err != nil {
			return nil, err
		}
		w.clients = append(w.clients, cl)
		return cl.Log(cfg.log), nil
	}
	fail := func(err error) (*workload, error) {
		for _, cl := range w.clients {
			cl.Close()
		}
		return nil, err
	}
	if cfg.retryAppenders > 0 {
		cl, err := dial(nil)
		if err != nil {
			return fail(err)
		}
		for range cfg.retryAppenders {
			w.spawn(ctx, 1, func(ctx context.Context, lane int, rng *rand.Rand, i int) { w.appendOne(ctx, cl, lane, i) })
		}
	}
	for range cfg.onceAppenders {
		cl, err := dial(onceOptions)
		if err != nil {
			return fail(err)
		}
		w.spawn(ctx, 1, func(ctx context.Context, lane int, rng *rand.Rand, i int) { w.appendOne(ctx, cl, lane, i) })
	}
	for range cfg.batchAppenders {
		cl, err := dial(nil)
		if err != nil {
			return fail(err)
		}
		w.spawn(ctx, batchSize, func(ctx context.Context, lane int, rng *rand.Rand, i int) { w.appendBatch(ctx, cl, lane, i) })
	}
	if cfg.readers > 0 {
		cl, err := dial(nil)
		if err != nil {
			return fail(err)
		}
		for range cfg.readers {
			w.spawn(ctx, 1, func(ctx context.Context, lane int, rng *rand.Rand, i int) { w.read(ctx, cl, lane, rng, "") })
		}
	}
	if cfg.staleReaders > 0 {
		cl, err := dial(staleOptions)
		if err != nil {
			return fail(err)
		}
		// A named log's stale reads go to its members: on 5 nodes, two do
		// not hold a log of 3 replicas.
		ms := c.members
		if cfg.log != "" {
			ms = c.logMembers(cfg.log)
		}
		for range cfg.staleReaders {
			w.spawn(ctx, 1, func(ctx context.Context, lane int, rng *rand.Rand, i int) {
				m := ms[rng.IntN(len(ms))]
				w.read(ctx, cl, lane, rng, m.clientAddr)
			})
		}
	}
	cl, err := dial(nil)
	if err != nil {
		return fail(err)
	}
	w.probeClient, w.probeLane = cl, w.lanes
	w.lanes++
	if cfg.tail {
		cl, err := dial(nil)
		if err != nil {
			return fail(err)
		}
		w.wg.Add(1)
		go w.runTail(ctx, cl)
	}
	if cfg.trimEvery > 0 {
		cl, err := dial(nil)
		if err != nil {
			return fail(err)
		}
		lane := w.lanes
		w.lanes++
		w.wg.Add(1)
		go w.runTrimmer(ctx, cl, lane)
	}
	return w, nil
}

// spawn starts a worker that owns lanes lanes and calls op for each of
// its operations.
func (w *workload) spawn(ctx context.Context, lanes int, op func(ctx context.Context, lane int, rng *rand.Rand, i int)) {
	lane := w.lanes
	w.lanes += lanes
	rng := rand.New(rand.NewPCG(w.seed, uint64(lane)))
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for i := 0; i < w.cfg.opsPerWorker; i++ {
			if !w.pause(ctx, rng) {
				return
			}
			octx, cancel := context.WithTimeout(ctx, opTimeout)
			op(octx, lane, rng, i)
			cancel()
		}
	}()
}

// pause waits a random think time; false when the worker should stop.
func (w *workload) pause(ctx context.Context, rng *rand.Rand) bool {
	return w.sleepFor(ctx, rng, w.cfg.think)
}

// sleepFor sleeps for a random time averaging mean (none when mean is not
// positive) and reports whether the worker should go on: false once the
// run is over, stopped or cancelled.
func (w *workload) sleepFor(ctx context.Context, rng *rand.Rand, mean time.Duration) bool {
	if ctx.Err() != nil || !time.Now().Before(w.deadline) || w.stopped() {
		return false
	}
	if mean <= 0 {
		return true
	}
	t := time.NewTimer(time.Duration(rng.Int64N(int64(2 * mean))))
	defer t.Stop()
	select {
	case <-t.C:
		return time.Now().Before(w.deadline) && !w.stopped()
	case <-ctx.Done():
		return false
	case <-w.stopCh:
		return false
	}
}

// stop makes the workers stop before the deadline: each finishes the
// operation it runs and starts no other.
func (w *workload) stop() { w.stopOnce.Do(func() { close(w.stopCh) }) }

func (w *workload) stopped() bool {
	select {
	case <-w.stopCh:
		return true
	default:
		return false
	}
}

// probe appends one record on the probe lane, for nemeses that need the
// nodes to write. Calls are serialised.
func (w *workload) probe(ctx context.Context) {
	w.probeMu.Lock()
	defer w.probeMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	w.appendOne(ctx, w.probeClient, w.probeLane, w.probeN)
	w.probeN++
}

// wait waits for every worker and closes the clients.
func (w *workload) wait() {
	w.wg.Wait()
	for _, cl := range w.clients {
		cl.Close()
	}
}

func (w *workload) noteIndex(i uint64) {
	for {
		cur := w.maxIndex.Load()
		if i <= cur || w.maxIndex.CompareAndSwap(cur, i) {
			return
		}
	}
}

// appendOne appends one record.
func (w *workload) appendOne(ctx context.Context, cl *client.Log, lane, i int) {
	if idx, err := appendRecordedLog(ctx, cl, w.rec, w.cfg.log, lane, fmt.Sprintf("%sw%d-%d", w.prefix, lane, i)); err == nil {
		w.noteIndex(idx)
	}
}

// appendBatch appends batchSize records in one Append; each is recorded
// as an operation of its own lane, since each record is a raft entry of
// its own that other appends may come between.
func (w *workload) appendBatch(ctx context.Context, cl *client.Log, lane, i int) {
	recs := make([][]byte, batchSize)
	ops := make([]*operation, batchSize)
	for k := range recs {
		ops[k] = &operation{Log: w.cfg.log, Lane: lane + k, Kind: kindAppend, Record: fmt.Sprintf("%sw%d-%d.%d", w.prefix, lane, i, k), Batch: lane*1_000_000 + i + 1}
		recs[k] = []byte(ops[k].Record)
	}
	call := w.rec.now()
	idx, err := cl.Append(ctx, recs...)
	ret := w.rec.now()
	for k, op := range ops {
		op.Call, op.Return = call, ret
		if err != nil {
			op.Err = err.Error()
		} else {
			op.OK, op.Index = true, idx[k]
			w.noteIndex(op.Index)
		}
		w.rec.add(op)
	}
}

// read reads a range: linearizable when addr is "", stale from addr
// otherwise.
func (w *workload) read(ctx context.Context, cl *client.Log, lane int, rng *rand.Rand, addr string) {
	hi := w.maxIndex.Load()
	var from uint64
	switch r := rng.IntN(10); {
	case r < 4: // the recent past
		from = hi - min(hi, rng.Uint64N(40))
	case r < 7: // anywhere
		from = rng.Uint64N(hi + 1)
	case r < 8: // the whole log
		from = 0
	default: // at or past the end
		from = hi + 1 + rng.Uint64N(3)
	}
	op := &operation{Log: w.cfg.log, Lane: lane, Kind: kindRead, From: from, Max: readMaxes[rng.IntN(len(readMaxes))]}
	opts := client.ReadOptions{MaxRecords: op.Max}
	if addr != "" {
		op.Kind, op.Node = kindStaleRead, w.nodeOf(addr)
		opts.Stale, opts.Addr = true, addr
	}
	op.Call = w.rec.now()
	recs, next, err := cl.Read(ctx, from, opts)
	op.Return = w.rec.now()
	if err != nil {
		op.Err = err.Error()
		op.Trimmed = transport.ErrorCode(err) == transport.CodeTrimmed
	} else {
		op.OK, op.Records, op.Next = true, entries(recs), next
		if n := len(recs); n > 0 {
			w.noteIndex(recs[n-1].Index)
		}
	}
	w.rec.add(op)
}

func (w *workload) nodeOf(addr string) string {
	for _, m := range w.c.members {
		if m.clientAddr == addr {
			return m.id
		}
	}
	return addr
}

// runTrimmer trims the log every trimEvery or so, on its own lane, until
// the deadline: below an index at most trimKeep under the highest index
// known to be committed (acknowledged or read), so that a trim never
// asks for a floor past the committed log. Each trim is recorded.
func (w *workload) runTrimmer(ctx context.Context, cl *client.Log, lane int) {
	defer w.wg.Done()
	rng := rand.New(rand.NewPCG(w.seed, uint64(lane)))
	pause := func() bool { return w.sleepFor(ctx, rng, w.cfg.trimEvery) }
	for pause() {
		hi := w.maxIndex.Load()
		below := hi - min(hi, rng.Uint64N(trimKeep))
		if below <= 1 {
			continue // nothing to trim yet
		}
		op := &operation{Log: w.cfg.log, Lane: lane, Kind: kindTrim, Below: below}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		op.Call = w.rec.now()
		idx, err := cl.Trim(octx, below)
		op.Return = w.rec.now()
		cancel()
		if err != nil {
			op.Err = err.Error()
		} else {
			op.OK, op.Index = true, idx
		}
		w.rec.add(op)
	}
}

// runTail follows the log from its start until the deadline. When its
// next record was trimmed away it reopens from the first retained record
// and records that it did.
func (w *workload) runTail(ctx context.Context, cl *client.Log) {
	defer w.wg.Done()
	tctx, cancel := context.WithDeadline(ctx, w.deadline)
	defer cancel()
	go func() {
		select {
		case <-w.stopCh:
			cancel()
		case <-tctx.Done():
		}
	}()
	tail := cl.Tail(tctx, 0, client.TailOptions{MaxRecords: 50})
	defer func() { tail.Close() }()
	for errs := 0; tctx.Err() == nil && errs < 100; {
		rec, err := tail.Next()
		at := w.rec.now()
		if err != nil {
			if tctx.Err() != nil {
				return
			}
			// Next retries for RetryTimeout before it fails; an error
			// that retrying cannot help comes at once, so wait a little.
			ev := tailEvent{Log: w.cfg.log, At: at, Err: err.Error()}
			if transport.ErrorCode(err) == transport.CodeTrimmed {
				tail.Close()
				tail = cl.Tail(tctx, 0, client.TailOptions{MaxRecords: 50})
				ev.Restart = true
			} else {
				errs++
			}
			w.rec.addTail(ev)
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-t.C:
			case <-tctx.Done():
			}
			t.Stop()
			continue
		}
		e := entry{Index: rec.Index, Data: string(rec.Data)}
		w.rec.addTail(tailEvent{Log: w.cfg.log, At: at, Record: &e})
	}
}
