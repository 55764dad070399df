package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// Kinds of operations in a history.
const (
	kindAppend    = "append"     // one record; a multi-record Append records one per record
	kindRead      = "read"       // linearizable Read
	kindStaleRead = "stale-read" // Read with Stale from one node
	kindTrim      = "trim"       // Trim: raise the first retained index on every node
)

// entry is one record of the log: its index and its data.
type entry struct {
	Index uint64 `json:"index"`
	Data  string `json:"data"`
}

func (e entry) String() string { return fmt.Sprintf("%d:%s", e.Index, e.Data) }

// entries converts records as the client returns them.
func entries(recs []transport.Record) []entry {
	out := make([]entry, len(recs))
	for i, r := range recs {
		out[i] = entry{Index: r.Index, Data: string(r.Data)}
	}
	return out
}

// operation is one client operation and its outcome. Times are
// nanoseconds on the monotonic clock since the recorder's epoch.
type operation struct {
	ID     int    `json:"id"`
	Log    string `json:"log,omitempty"` // the named log it went to; "" for the default log
	Lane   int    `json:"lane"`          // the worker (and record slot) that ran it, within its log: porcupine's client id
	Kind   string `json:"kind"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	OK     bool   `json:"ok"` // returned a result; false: an error, outcome unknown unless Trimmed
	Err    string `json:"error,omitempty"`

	// Appends.
	Record string `json:"record,omitempty"`
	Batch  int    `json:"batch,omitempty"` // the multi-record Append it was part of; 0 for none
	Index  uint64 `json:"index,omitempty"` // acknowledged index; trims: the raft index of the trim command

	// Reads.
	From    uint64  `json:"from,omitempty"`
	Max     uint32  `json:"max,omitempty"`
	Node    string  `json:"node,omitempty"` // stale reads: the node read from
	Records []entry `json:"records,omitempty"`
	Next    uint64  `json:"next,omitempty"`
	// Trimmed marks a read that failed with transport.CodeTrimmed: a
	// definite outcome (From was below the first retained index when the
	// node read), not an unknown one. OK is false.
	Trimmed bool `json:"trimmed,omitempty"`

	// Trims.
	Below uint64 `json:"below,omitempty"` // the first index to keep
}

func (op *operation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d ", op.ID)
	if op.Log != "" {
		fmt.Fprintf(&b, "log %s ", op.Log)
	}
	fmt.Fprintf(&b, "lane %d [%s, %s] ", op.Lane, fmtNanos(op.Call), fmtNanos(op.Return))
	switch op.Kind {
	case kindAppend:
		fmt.Fprintf(&b, "append(%s)", op.Record)
		if op.Batch != 0 {
			fmt.Fprintf(&b, " batch %d", op.Batch)
		}
		if op.OK {
			fmt.Fprintf(&b, " -> %d", op.Index)
		}
	case kindTrim:
		fmt.Fprintf(&b, "trim(below %d)", op.Below)
		if op.OK {
			fmt.Fprintf(&b, " -> committed at %d", op.Index)
		}
	default:
		fmt.Fprintf(&b, "%s(from %d, max %d", op.Kind, op.From, op.Max)
		if op.Node != "" {
			fmt.Fprintf(&b, ", node %s", op.Node)
		}
		b.WriteString(")")
		if op.OK {
			fmt.Fprintf(&b, " -> %v next %d", op.Records, op.Next)
		}
	}
	switch {
	case op.Trimmed:
		fmt.Fprintf(&b, " -> trimmed: %s", op.Err)
	case !op.OK:
		fmt.Fprintf(&b, " -> unknown: %s", op.Err)
	}
	return b.String()
}

// tailEvent is one record a tail delivered, or the error of a Next.
type tailEvent struct {
	Log    string `json:"log,omitempty"` // the named log tailed; "" for the default log
	At     int64  `json:"at"`
	Record *entry `json:"record,omitempty"`
	Err    string `json:"error,omitempty"`
	// Restart marks an error event after which the tail was reopened
	// from the first retained record, because its next record was
	// trimmed away (transport.CodeTrimmed); the records it skipped are
	// then checked against the trims (see checkRun).
	Restart bool `json:"restart,omitempty"`
}

// faultEvent is one fault the nemesis injected, from injection to heal.
type faultEvent struct {
	Kind   string `json:"kind"`
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	Detail string `json:"detail"`
	Err    string `json:"error,omitempty"`
}

// recorder collects a run's history. It is safe for concurrent use.
type recorder struct {
	epoch time.Time // immutable; its monotonic reading is the time base

	mu     sync.Mutex // guards the fields below
	ops    []*operation
	tail   []tailEvent
	faults []faultEvent
	acks   int           // acknowledged appends
	ackCh  chan struct{} // closed, and replaced, at every acknowledged append
}

func newRecorder() *recorder { return &recorder{epoch: time.Now(), ackCh: make(chan struct{})} }

// now returns the monotonic time since the epoch.
func (r *recorder) now() int64 { return int64(time.Since(r.epoch)) }

// add records a completed operation and gives it an id.
func (r *recorder) add(op *operation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.ID = len(r.ops)
	r.ops = append(r.ops, op)
	if op.Kind == kindAppend && op.OK {
		r.acks++
		close(r.ackCh)
		r.ackCh = make(chan struct{})
	}
}

// ackCount returns how many appends have been acknowledged.
func (r *recorder) ackCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acks
}

// waitAcks waits until n appends have been acknowledged, ctx ends or
// timeout passes.
func (r *recorder) waitAcks(ctx context.Context, n int, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		r.mu.Lock()
		have, ch := r.acks, r.ackCh
		r.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return fmt.Errorf("%d appends acknowledged, waited %v for %d", have, timeout, n)
		}
	}
}

// addTail records a tail event.
func (r *recorder) addTail(ev tailEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tail = append(r.tail, ev)
}

// addFault records a fault.
func (r *recorder) addFault(ev faultEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, ev)
}

// history is a snapshot of a recorder, for the checks.
type history struct {
	Ops    []*operation `json:"ops"`
	Tail   []tailEvent  `json:"tail"`
	Faults []faultEvent `json:"faults"`
}

// snapshot returns the history so far, operations ordered by call time.
func (r *recorder) snapshot() history {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := history{
		Ops:    append([]*operation(nil), r.ops...),
		Tail:   append([]tailEvent(nil), r.tail...),
		Faults: append([]faultEvent(nil), r.faults...),
	}
	sort.SliceStable(h.Ops, func(i, j int) bool { return h.Ops[i].Call < h.Ops[j].Call })
	return h
}

// forLog returns the part of h that concerns the log name ("" for the
// default log): its operations and tail events, and every fault.
func (h history) forLog(name string) history {
	out := history{Faults: h.Faults}
	for _, op := range h.Ops {
		if op.Log == name {
			out.Ops = append(out.Ops, op)
		}
	}
	for _, ev := range h.Tail {
		if ev.Log == name {
			out.Tail = append(out.Tail, ev)
		}
	}
	return out
}

// writeText writes h for people: faults and operations in call order.
func (h history) writeText(w io.Writer) {
	fmt.Fprintf(w, "faults (%d):\n", len(h.Faults))
	for _, f := range h.Faults {
		fmt.Fprintf(w, "  [%s, %s] %s: %s", fmtNanos(f.Start), fmtNanos(f.End), f.Kind, f.Detail)
		if f.Err != "" {
			fmt.Fprintf(w, " (error: %s)", f.Err)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\noperations (%d), in call order:\n", len(h.Ops))
	for _, op := range h.Ops {
		fmt.Fprintf(w, "  %s\n", op)
	}
	fmt.Fprintf(w, "\ntail (%d events):\n", len(h.Tail))
	for _, ev := range h.Tail {
		log := ""
		if ev.Log != "" {
			log = " log " + ev.Log
		}
		if ev.Record != nil {
			fmt.Fprintf(w, "  %s%s %s\n", fmtNanos(ev.At), log, ev.Record)
		} else {
			restart := ""
			if ev.Restart {
				restart = " (reopened from the first retained record)"
			}
			fmt.Fprintf(w, "  %s%s error: %s%s\n", fmtNanos(ev.At), log, ev.Err, restart)
		}
	}
}

// writeJSON writes h as JSON.
func (h history) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(h)
}

// fmtNanos formats a history time as seconds.
func fmtNanos(ns int64) string {
	return fmt.Sprintf("%.3fs", float64(ns)/1e9)
}
