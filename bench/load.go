package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The load of the cluster comparison: workloads, the phases of a cell, and
// what each appender records.

// clusterWorkload is one row of the cluster comparison: clients, each
// keeping window appends of one record of size bytes in flight.
type clusterWorkload struct {
	key     string // name in -only
	title   string
	clients int
	window  int
	size    int
}

// clusterWorkloads are the workloads of issue #13, in report order.
var clusterWorkloads = []clusterWorkload{
	{"1x1", "1 client, 1 in flight", 1, 1, 1 << 10},
	{"16x1", "16 clients, 1 in flight each", 16, 1, 1 << 10},
	{"1x64", "1 client, 64 in flight", 1, 64, 1 << 10},
	{"1x64-16k", "1 client, 64 in flight, 16 KiB", 1, 64, 16 << 10},
	{"1x1024", "1 client, 1,024 in flight", 1, 1024, 1 << 10},
}

// Phases of a cell. An ack counts toward the figures only if it arrives
// while the phase is measuring; every ack is recorded for the read-back.
const (
	phaseWarmup int32 = iota
	phaseMeasuring
	phaseDone
)

// ack is one acknowledged record: where the system put it and the stamp it
// carries.
type ack struct {
	pos   uint64 // raftlog: raft index; NATS: stream sequence
	stamp uint64
}

// tally is what one appender saw. One goroutine owns it, or callers hold
// its owner's lock (see natsAppender).
type tally struct {
	lats     []time.Duration // latency of every ack in the measured window
	acks     []ack           // every ack, warm-up and drain included
	errs     int             // failed appends
	firstErr error           // the first of them
}

// add records an ack that took lat, counting it if the phase is measuring.
func (t *tally) add(phase *atomic.Int32, a ack, lat time.Duration) {
	if phase.Load() == phaseMeasuring {
		t.lats = append(t.lats, lat)
	}
	t.acks = append(t.acks, a)
}

// fail records a failed append.
func (t *tally) fail(err error) {
	if t.errs == 0 {
		t.firstErr = err
	}
	t.errs++
}

// merge returns one tally holding all of ts.
func merge(ts []*tally) *tally {
	out := &tally{}
	for _, t := range ts {
		out.lats = append(out.lats, t.lats...)
		out.acks = append(out.acks, t.acks...)
		if t.errs > 0 && out.errs == 0 {
			out.firstErr = t.firstErr
		}
		out.errs += t.errs
	}
	return out
}

// latencyPercentiles returns the nearest-rank percentiles ps of lats in
// seconds (NaN when empty); it sorts lats.
func latencyPercentiles(lats []time.Duration, ps ...float64) []float64 {
	slices.Sort(lats)
	s := &sampler{buf: lats}
	return s.percentiles(ps...)
}

// records makes the records of a cell: each is a copy of one random
// template whose first 8 bytes hold a stamp unique in the cell, the
// appender's number and its own count, so that the read-back can tell
// every record from every other.
type records struct {
	template []byte
	next     atomic.Uint64 // appender numbers handed out
}

// newRecords returns the records of size bytes (at least 8) of a cell.
func newRecords(size int, seed uint64) *records {
	r := &records{template: make([]byte, max(size, 8))}
	rng := rand.New(rand.NewPCG(seed, 0xc1a55))
	for i := range r.template {
		r.template[i] = byte(rng.Uint32())
	}
	return r
}

// appenderStamps returns the stamp source of a new appender: stamps
// appender<<40 | n, n from 1.
func (r *records) appenderStamps() *stamps {
	return &stamps{base: r.next.Add(1) << 40}
}

// stamps hands out the stamps of one appender; one goroutine owns it.
type stamps struct {
	base, n uint64
}

// fill writes the next stamp and the template into buf (len(template))
// and returns the stamp.
func (s *stamps) fill(r *records, buf []byte) uint64 {
	s.n++
	st := s.base | s.n
	copy(buf, r.template)
	binary.LittleEndian.PutUint64(buf, st)
	return st
}

// check reports whether data is the record stamped st.
func (r *records) check(data []byte, st uint64) error {
	if len(data) != len(r.template) {
		return fmt.Errorf("%d bytes, want %d", len(data), len(r.template))
	}
	if got := binary.LittleEndian.Uint64(data); got != st {
		return fmt.Errorf("stamp %#x, want %#x", got, st)
	}
	if string(data[8:]) != string(r.template[8:]) {
		return fmt.Errorf("payload differs from what was appended")
	}
	return nil
}

// loadClient is one client of a system under test: one connection (or
// session) to the cluster.
type loadClient interface {
	// run keeps window appends of records in flight until stop is closed,
	// then waits for the ones in flight and returns what it saw. An
	// appender whose append fails stops.
	// ctx ends appends early (an interrupt).
	run(ctx context.Context, stop <-chan struct{}, phase *atomic.Int32, window int, recs *records) *tally
	// close closes the client.
	close() error
}

// runClients runs every client at once with window appends each in
// flight and returns a channel that yields their merged tally once stop is
// closed and all have returned.
func runClients(ctx context.Context, clients []loadClient, stop <-chan struct{}, phase *atomic.Int32, window int, recs *records) <-chan *tally {
	out := make(chan *tally, 1)
	ts := make([]*tally, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts[i] = c.run(ctx, stop, phase, window, recs)
		}()
	}
	go func() {
		wg.Wait()
		out <- merge(ts)
	}()
	return out
}

// readBack is the result of reading a log back after a cell.
type readBack struct {
	acked   int // acknowledged records found with their data
	others  int // records read that no ack names (a failed or repeated append)
	scanned int // records read
}

// matcher checks a log read back in order of position against the acks
// of a cell. One goroutine owns it.
type matcher struct {
	acks []ack // sorted by position
	j    int   // next ack to find
	recs *records
	rb   readBack
}

// newMatcher returns a matcher of acks, or an error if two acks name one
// position.
func newMatcher(acks []ack, recs *records) (*matcher, error) {
	acks = slices.Clone(acks)
	slices.SortFunc(acks, func(a, b ack) int { return cmpUint64(a.pos, b.pos) })
	for i := 1; i < len(acks); i++ {
		if acks[i].pos == acks[i-1].pos {
			return nil, fmt.Errorf("two acknowledged records got position %d (stamps %#x, %#x)", acks[i].pos, acks[i-1].stamp, acks[i].stamp)
		}
	}
	return &matcher{acks: acks, recs: recs}, nil
}

// last returns the highest acknowledged position, 0 without acks.
func (m *matcher) last() uint64 {
	if len(m.acks) == 0 {
		return 0
	}
	return m.acks[len(m.acks)-1].pos
}

// see checks the record read at pos, positions rising from call to call:
// an ack below pos that was not seen is a lost record.
func (m *matcher) see(pos uint64, data []byte) error {
	m.rb.scanned++
	if m.j < len(m.acks) && m.acks[m.j].pos < pos {
		return fmt.Errorf("acknowledged record %d (stamp %#x) is missing: the log goes on at %d", m.acks[m.j].pos, m.acks[m.j].stamp, pos)
	}
	if m.j < len(m.acks) && m.acks[m.j].pos == pos {
		if err := m.recs.check(data, m.acks[m.j].stamp); err != nil {
			return fmt.Errorf("acknowledged record %d: %w", pos, err)
		}
		m.rb.acked++
		m.j++
		return nil
	}
	m.rb.others++
	return nil
}

// result returns what was read, and an error if acks remain unseen.
func (m *matcher) result() (readBack, error) {
	if m.j < len(m.acks) {
		return m.rb, fmt.Errorf("%d acknowledged records missing from %d on: the log ends before", len(m.acks)-m.j, m.acks[m.j].pos)
	}
	return m.rb, nil
}
