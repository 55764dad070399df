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
// commands and suppressed duplicates take indexes that reads skip), with a
// floor below which records are trimmed away.
//
// # The model
//
// The state is the log, the sequence of (index, record) pairs of the
// appends linearized so far, and the floor, the first retained index
// (initially 1). Append(r) returning index i is legal when i is greater
// than every index in the log (and r is not in it); it adds (i, r).
// Trim(below) is always legal and raises the floor to below if below is
// higher. Read(from, max) reads from the floor when from is 0. Returning
// records R is legal when from is not below the floor and R is exactly
// the log's records with index >= from, cut to the first max of them: a
// read that returns fewer than max records must have returned every
// record at or after from that the log holds at its linearization point,
// and one that returns max records must have returned the first max.
// Failing with Trimmed (transport.CodeTrimmed) is legal when from is not 0
// and is below the floor. A read that succeeds from below the floor, or
// fails with Trimmed from at or above it, is illegal.
//
// # Trims during a read
//
// A node reads record by record; when a trim raises the floor past the
// record it is about to read, it returns what it has read (a short read
// that stops early, at Next) or, when it has read nothing, fails with
// Trimmed even though from was retained when it began. Neither happens at
// one point in time, so the history gives each read the highest floor
// that a trim which may have taken effect while the read ran asks for
// (cutBelow: trims, acknowledged or not, called before the read returned
// and not returned before it began). A short read is then also legal if
// it returns exactly the log's records in [from, Next) and Next is below
// cutBelow; a read from 0 that fails with Trimmed is legal if the floor
// at its linearization point is below cutBelow. Without such a trim
// neither is legal.
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
// not in the final log (lost, or trimmed away), the read's index is used,
// so that porcupine still checks the history, and the durability checks
// report a loss. An unknown append that was trimmed away unseen is left
// out too: no read returned it, so none depends on it. A trim that
// returned an error may have taken effect at any point after its call,
// so it returns at the end of the history. Reads that failed with an
// error other than Trimmed constrain nothing and are left out.
//
// # A compact state
//
// Every append in the checked history has a known index and must be
// linearized, in increasing index order. So in any complete linearization
// the log after some steps is exactly the history's appends with index up
// to the last one appended: the state is just that last index and the
// floor, and the records a read may see are looked up in the table of all
// appends. A partial linearization that skipped an append cannot
// complete, because the skipped append's index is then too small. The
// check is therefore the same as with the whole log as state, and
// porcupine compares and caches states as pairs of integers.
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
		// CutBelow is the highest below of the trims that may have
		// taken effect while the read ran; 0 for none.
		CutBelow uint64
	}
	// readOutput is a read's result; Trimmed marks one that failed with
	// transport.CodeTrimmed and has no records.
	readOutput struct {
		Records []entry
		Next    uint64
		Trimmed bool
	}
	// trimInput asks for every record below Below to be dropped.
	trimInput struct{ Below uint64 }
	// trimOutput is a trim's raft index. Unknown marks a trim whose
	// client never learned the outcome.
	trimOutput struct {
		Index   uint64
		Unknown bool
	}
)

// logState is logModel's state: the index of the last append linearized
// and the first retained index.
type logState struct {
	last, floor uint64
}

// span returns the positions in the table of the records with index in
// [from, last]: m.idx[lo:hi].
func (m *logModel) span(from, last uint64) (lo, hi int) {
	from = max(from, 1) // 0 reads from the first record
	lo = sort.Search(len(m.idx), func(i int) bool { return m.idx[i] >= from })
	hi = sort.Search(len(m.idx), func(i int) bool { return m.idx[i] > last })
	return lo, max(lo, hi)
}

// readLegal reports whether a read could return out from the log of st.
func (m *logModel) readLegal(st logState, in readInput, out readOutput) bool {
	from := in.From
	switch {
	case out.Trimmed && from == 0:
		return st.floor < in.CutBelow // the floor rose past it while it read
	case out.Trimmed:
		return from < st.floor
	case from == 0:
		from = st.floor
	case from < st.floor:
		return false // it should have failed with Trimmed
	}
	lo, hi := m.span(from, st.last)
	n := len(out.Records)
	switch {
	case n > int(in.Max) || n > hi-lo:
		return false
	case n < int(in.Max) && n != hi-lo && !m.cutShort(from, in, out):
		return false // a short read must be complete
	}
	for k, r := range out.Records {
		if r.Index != m.idx[lo+k] || r.Data != m.data[lo+k] {
			return false
		}
	}
	return true
}

// cutShort reports whether out, a short read of records from from on,
// may have stopped early because a trim raised the floor past Next while
// it read: Next is below in.CutBelow, and out holds every record of the
// table in [from, Next). That the records are the right ones readLegal
// checks.
func (m *logModel) cutShort(from uint64, in readInput, out readOutput) bool {
	if len(out.Records) == 0 || out.Next == 0 || out.Next >= in.CutBelow {
		return false
	}
	lo, hi := m.span(from, out.Next-1)
	return hi-lo == len(out.Records)
}

// porcupine returns the porcupine model.
func (m *logModel) porcupine() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return logState{floor: 1} },
		Step: func(state, input, output any) (bool, any) {
			st := state.(logState)
			switch in := input.(type) {
			case appendInput:
				out := output.(appendOutput)
				if out.Index <= st.last {
					return false, state
				}
				st.last = out.Index
				return true, st
			case readInput:
				return m.readLegal(st, in, output.(readOutput)), state
			case trimInput:
				st.floor = max(st.floor, in.Below)
				return true, st
			}
			panic(fmt.Sprintf("logModel: unknown input %T", input))
		},
		Equal: func(a, b any) bool { return a.(logState) == b.(logState) },
		Hash: func(s any) uint64 {
			st := s.(logState)
			return st.last*0x9e3779b97f4a7c15 ^ st.floor
		},
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
				cut := ""
				if in.CutBelow != 0 {
					cut = fmt.Sprintf(", trims to %d concurrent", in.CutBelow)
				}
				if out.Trimmed {
					return fmt.Sprintf("read(from %d, max %d%s) -> trimmed", in.From, in.Max, cut)
				}
				return fmt.Sprintf("read(from %d, max %d%s) -> %s next %d", in.From, in.Max, cut, describeEntries(out.Records), out.Next)
			case trimInput:
				out := output.(trimOutput)
				if out.Unknown {
					return fmt.Sprintf("trim(below %d) -> ?", in.Below)
				}
				return fmt.Sprintf("trim(below %d) -> %d", in.Below, out.Index)
			}
			return fmt.Sprintf("%v -> %v", input, output)
		},
		DescribeState: func(state any) string {
			st := state.(logState)
			lo, hi := m.span(st.floor, st.last)
			var es []entry
			for i := max(lo, hi-4); i < hi; i++ {
				es = append(es, entry{Index: m.idx[i], Data: m.data[i]})
			}
			return fmt.Sprintf("floor %d, %d records retained, last index %d, ending %s", st.floor, hi-lo, st.last, describeEntries(es))
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
		case op.Kind == kindRead && (op.OK || op.Trimmed):
			ops = append(ops, porcupine.Operation{ClientId: op.Lane, Call: op.Call, Return: op.Return,
				Input:    readInput{From: op.From, Max: op.Max, CutBelow: cutBelow(h, op)},
				Output:   readOutput{Records: op.Records, Next: op.Next, Trimmed: op.Trimmed},
				Metadata: op.ID})
		case op.Kind == kindTrim:
			ret, out := op.Return, trimOutput{Index: op.Index}
			if !op.OK {
				ret, out = end, trimOutput{Unknown: true}
			}
			ops = append(ops, porcupine.Operation{ClientId: op.Lane, Call: op.Call, Return: ret,
				Input: trimInput{Below: op.Below}, Output: out, Metadata: op.ID})
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

// cutBelow returns the highest below of the trims in h that may have
// taken effect while op ran: called before op returned, and not returned
// before op was called (a trim whose outcome is unknown never returned).
// 0 when there is none.
func cutBelow(h history, op *operation) uint64 {
	var cut uint64
	for _, t := range h.Ops {
		if t.Kind == kindTrim && t.Call < op.Return && (!t.OK || t.Return > op.Call) {
			cut = max(cut, t.Below)
		}
	}
	return cut
}
