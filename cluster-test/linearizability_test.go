package clustertest

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// logModel is the sequential specification that histories are checked
// against with porcupine: an append-only log of unique records whose
// indexes increase but are not contiguous (raft's own entries, control
// commands and suppressed duplicates take indexes that reads skip).
//
// # The model
//
// The state is the log: the sequence of (index, record) pairs of the
// appends linearized so far. Append(r) returning index i is legal when i
// is greater than every index in the log (and r is not in it); it adds
// (i, r). Read(from, max) returning records R is legal when R is exactly
// the log's records with index >= from, cut to the first max of them:
// a read that returns fewer than max records must have returned every
// record at or after from that the log holds at its linearization point,
// and one that returns max records must have returned the first max.
//
// # Unknown outcomes
//
// An append that returned an error may or may not have taken effect, and
// if it did, its index is not known from the history. After the test
// heals the cluster it reads the final log, which says: an unknown append
// whose record is in the final log took effect at the index the log holds
// it at; one whose record is nowhere took no effect. So an unknown append
// in the log becomes an operation with that index as output whose return
// time is the end of the history (it may linearize at any point after its
// call, as porcupine treats operations that never returned), and one that
// is not in the log is left out: an operation without effect, linearized
// at the very end, changes nothing. If a record was seen by a read but is
// not in the final log, the read's index is used, so that porcupine still
// checks the history, and the durability checks report the loss. Reads
// that failed constrain nothing and are left out.
//
// # A compact state
//
// Every append in the checked history has a known index and must be
// linearized, in increasing index order. So in any complete linearization
// the log after some steps is exactly the history's appends with index up
// to the last one appended: the state is just that last index, and the
// records a read may see are looked up in the table of all appends. A
// partial linearization that skipped an append cannot complete, because
// the skipped append's index is then too small. The check is therefore the
// same as with the whole log as state, and porcupine compares and caches
// states as plain integers.
type logModel struct {
	idx  []uint64 // the index of every append in the checked history, ascending
	data []string // data[i] is the record appended at idx[i]
}

// Inputs and outputs of logModel operations.
type (
	appendInput struct{ Record string }
	// appendOutput is an append's index. Unknown marks an append whose
	// client never learned the outcome; its index comes from the final log.
	appendOutput struct {
		Index   uint64
		Unknown bool
	}
	readInput struct {
		From uint64
		Max  uint32
	}
	readOutput struct {
		Records []entry
		Next    uint64
	}
)

// span returns the positions in the table of the records with index in
// [from, last]: m.idx[lo:hi].
func (m *logModel) span(from, last uint64) (lo, hi int) {
	from = max(from, 1) // 0 reads from the first record
	lo = sort.Search(len(m.idx), func(i int) bool { return m.idx[i] >= from })
	hi = sort.Search(len(m.idx), func(i int) bool { return m.idx[i] > last })
	return lo, max(lo, hi)
}

// readLegal reports whether a read could return out from a log whose last
// record has index last.
func (m *logModel) readLegal(last uint64, in readInput, out readOutput) bool {
	lo, hi := m.span(in.From, last)
	n := len(out.Records)
	switch {
	case n > int(in.Max):
		return false
	case n < int(in.Max) && n != hi-lo:
		return false // a short read must be complete
	case n == int(in.Max) && hi-lo < n:
		return false // a full read must see at least max records
	}
	for k, r := range out.Records {
		if r.Index != m.idx[lo+k] || r.Data != m.data[lo+k] {
			return false
		}
	}
	return true
}

// porcupine returns the porcupine model.
func (m *logModel) porcupine() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return uint64(0) },
		Step: func(state, input, output any) (bool, any) {
			last := state.(uint64)
			switch in := input.(type) {
			case appendInput:
				out := output.(appendOutput)
				if out.Index <= last {
					return false, state
				}
				return true, out.Index
			case readInput:
				return m.readLegal(last, in, output.(readOutput)), state
			}
			panic(fmt.Sprintf("logModel: unknown input %T", input))
		},
		Equal: func(a, b any) bool { return a.(uint64) == b.(uint64) },
		Hash:  func(s any) uint64 { return s.(uint64) },
		DescribeOperation: func(input, output any) string {
			switch in := input.(type) {
			case appendInput:
				out := output.(appendOutput)
				if out.Unknown {
					return fmt.Sprintf("append(%s) -> ? (in the log at %d)", in.Record, out.Index)
				}
				return fmt.Sprintf("append(%s) -> %d", in.Record, out.Index)
			case readInput:
				out := output.(readOutput)
				return fmt.Sprintf("read(from %d, max %d) -> %s next %d", in.From, in.Max, describeEntries(out.Records), out.Next)
			}
			return fmt.Sprintf("%v -> %v", input, output)
		},
		DescribeState: func(state any) string {
			last := state.(uint64)
			lo, hi := m.span(0, last)
			var es []entry
			for i := max(lo, hi-4); i < hi; i++ {
				es = append(es, entry{Index: m.idx[i], Data: m.data[i]})
			}
			return fmt.Sprintf("%d records, last index %d, ending %s", hi-lo, last, describeEntries(es))
		},
	}
}

// describeEntries formats records for the visualisation, eliding the
// middle of long lists.
func describeEntries(es []entry) string {
	const keep = 3
	var parts []string
	for i, e := range es {
		if len(es) > 2*keep && i == keep {
			parts = append(parts, fmt.Sprintf("...%d more...", len(es)-2*keep))
		}
		if len(es) > 2*keep && i >= keep && i < len(es)-keep {
			continue
		}
		parts = append(parts, e.String())
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// linearizabilityHistory turns a history into porcupine operations and
// the model's table, resolving unknown appends with the final log (see
// logModel). It returns problems the table shows on its own: two records
// claiming one index.
func linearizabilityHistory(h history, final []entry) ([]porcupine.Operation, *logModel, []string) {
	inLog := make(map[string]uint64, len(final))
	for _, e := range final {
		if _, dup := inLog[e.Data]; !dup {
			inLog[e.Data] = e.Index
		}
	}
	seen := map[string]uint64{} // records reads returned, at the index they returned
	for _, op := range h.Ops {
		if op.OK && (op.Kind == kindRead || op.Kind == kindStaleRead) {
			for _, e := range op.Records {
				seen[e.Data] = e.Index
			}
		}
	}
	for _, ev := range h.Tail {
		if ev.Record != nil {
			seen[ev.Record.Data] = ev.Record.Index
		}
	}
	var end int64
	for _, op := range h.Ops {
		end = max(end, op.Return, op.Call)
	}
	end++

	var ops []porcupine.Operation
	byIndex := map[uint64]string{}
	var problems []string
	claim := func(i uint64, rec string) {
		if have, ok := byIndex[i]; ok && have != rec {
			problems = append(problems, fmt.Sprintf("index %d claimed by two records: %q and %q", i, have, rec))
			return
		}
		byIndex[i] = rec
	}
	for _, op := range h.Ops {
		switch {
		case op.Kind == kindAppend && op.OK:
			claim(op.Index, op.Record)
			ops = append(ops, porcupine.Operation{ClientId: op.Lane, Call: op.Call, Return: op.Return,
				Input: appendInput{op.Record}, Output: appendOutput{Index: op.Index}, Metadata: op.ID})
		case op.Kind == kindAppend:
			i, ok := inLog[op.Record]
			if !ok {
				i, ok = seen[op.Record]
			}
			if !ok {
				continue // took no effect
			}
			claim(i, op.Record)
			ops = append(ops, porcupine.Operation{ClientId: op.Lane, Call: op.Call, Return: end,
				Input: appendInput{op.Record}, Output: appendOutput{Index: i, Unknown: true}, Metadata: op.ID})
		case op.Kind == kindRead && op.OK:
			ops = append(ops, porcupine.Operation{ClientId: op.Lane, Call: op.Call, Return: op.Return,
				Input: readInput{From: op.From, Max: op.Max}, Output: readOutput{Records: op.Records, Next: op.Next}, Metadata: op.ID})
		}
	}
	m := &logModel{}
	for i := range byIndex {
		m.idx = append(m.idx, i)
	}
	sort.Slice(m.idx, func(a, b int) bool { return m.idx[a] < m.idx[b] })
	for _, i := range m.idx {
		m.data = append(m.data, byIndex[i])
	}
	return ops, m, problems
}
