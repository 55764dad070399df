package clustertest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// nodeLog is one node's whole log, read with stale reads after healing.
type nodeLog struct {
	Node    string  `json:"node"`
	Entries []entry `json:"entries"`
	Err     string  `json:"error,omitempty"`
	// Floor is the node's first retained index, from its /status; 0
	// means 1 (no trim).
	Floor uint64 `json:"floor"`
}

// checkResult is the outcome of the checks of one run.
type checkResult struct {
	violations []string
	final      []entry // the log every node should hold
	floor      uint64  // the first retained index every node should report

	checkedOps   int // operations in the linearizability check
	linearizable porcupine.CheckResult
	checkTime    time.Duration
	model        porcupine.Model
	info         porcupine.LinearizationInfo
}

// violationLimit bounds how many violations of one kind are listed.
const violationLimit = 20

// violations collects violations, listing at most violationLimit of each
// kind and counting the rest.
type violations struct {
	list   []string
	counts map[string]int
}

func (v *violations) add(kind, format string, args ...any) {
	if v.counts == nil {
		v.counts = map[string]int{}
	}
	v.counts[kind]++
	if v.counts[kind] <= violationLimit {
		v.list = append(v.list, kind+": "+fmt.Sprintf(format, args...))
	}
}

func (v *violations) all() []string {
	out := v.list
	var kinds []string
	for k := range v.counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		if n := v.counts[k]; n > violationLimit {
			out = append(out, fmt.Sprintf("%s: ... and %d more", k, n-violationLimit))
		}
	}
	return out
}

// checkRun checks a healed run's history against the nodes' final logs:
// the durability, agreement and read checks of the package documentation,
// then linearizability with porcupine, given up after timeout.
func checkRun(h history, logs []nodeLog, timeout time.Duration) *checkResult {
	var v violations
	r := &checkResult{}

	// Every node holds the same log.
	ref := -1
	for i, l := range logs {
		if l.Err != "" {
			v.add("unreadable log", "node %s: %s", l.Node, l.Err)
		} else if ref < 0 {
			ref = i
		}
	}
	if ref < 0 {
		r.violations = v.all()
		return r
	}
	r.final = logs[ref].Entries
	r.floor = max(logs[ref].Floor, 1)
	for _, l := range logs {
		if l.Err == "" {
			if d := diffLogs(logs[ref].Entries, l.Entries); d != "" {
				v.add("logs differ", "%s and %s: %s", logs[ref].Node, l.Node, d)
			}
			if f := max(l.Floor, 1); f != r.floor {
				v.add("floors differ", "%s retains from %d, %s from %d", logs[ref].Node, r.floor, l.Node, f)
			}
		}
	}

	// The floor is one a trim asked for.
	attempted := map[string]bool{}
	var trimmedTo uint64 = 1 // the highest below any trim asked for
	for _, op := range h.Ops {
		switch op.Kind {
		case kindAppend:
			attempted[op.Record] = true
		case kindTrim:
			trimmedTo = max(trimmedTo, op.Below)
		}
	}
	if r.floor > trimmedTo {
		v.add("floor without a trim", "the nodes retain from %d, but no trim asked for more than %d", r.floor, trimmedTo)
	}

	// The final log holds appended records, each once, in index order,
	// none below the floor.
	inLog := map[string]uint64{}
	var lastIndex uint64
	for _, e := range r.final {
		if e.Index <= lastIndex {
			v.add("log out of order", "index %d after index %d", e.Index, lastIndex)
		}
		lastIndex = e.Index
		if e.Index < r.floor {
			v.add("record below the floor", "the log holds %s below its floor %d", e, r.floor)
		}
		if !attempted[e.Data] {
			v.add("record never appended", "the log holds %s", e)
		}
		if i, dup := inLog[e.Data]; dup {
			v.add("record stored twice", "%q at %d and %d", e.Data, i, e.Index)
			continue
		}
		inLog[e.Data] = e.Index
	}

	// Every acknowledged append at or above the floor is in the log at
	// its index; one below it was trimmed away, unless the log holds it
	// elsewhere.
	batches := map[int][]*operation{}
	for _, op := range h.Ops {
		if op.Kind != kindAppend || !op.OK {
			continue
		}
		i, ok := inLog[op.Record]
		switch {
		case !ok && op.Index >= r.floor:
			v.add("acknowledged append lost", "%s", op)
		case ok && i != op.Index:
			v.add("acknowledged append moved", "%s, but the log holds it at %d", op, i)
		}
		if op.Batch != 0 {
			batches[op.Batch] = append(batches[op.Batch], op)
		}
	}
	for _, ops := range batches {
		sort.Slice(ops, func(i, j int) bool { return ops[i].Lane < ops[j].Lane })
		for k := 1; k < len(ops); k++ {
			if ops[k].Index <= ops[k-1].Index {
				v.add("batch out of order", "%s then %s", ops[k-1], ops[k])
			}
		}
	}

	// Below the floor the final log says nothing, so the log the reads
	// and the tail are checked against (known) is the final log from the
	// floor on, and below it the records that acknowledged appends,
	// reads and the tail place there, which must agree with each other.
	// (A record below the floor that every node lost cannot be told
	// from one that was trimmed.)
	// by describes what placed a record, only for a violation: a read's
	// description lists all its records, so making it for each record
	// made this check quadratic in the records a read returns.
	trimmed := map[uint64]string{}
	place := func(e entry, by fmt.Stringer) {
		if e.Index >= r.floor {
			return
		}
		if have, ok := trimmed[e.Index]; ok && have != e.Data {
			v.add("trimmed records disagree", "%s places %s, but %q was placed there before", by, e, have)
			return
		}
		trimmed[e.Index] = e.Data
	}
	for _, op := range h.Ops {
		if op.Kind == kindAppend && op.OK {
			place(entry{Index: op.Index, Data: op.Record}, op)
		}
	}
	for _, op := range h.Ops {
		if (op.Kind == kindRead || op.Kind == kindStaleRead) && op.OK {
			for _, e := range op.Records {
				place(e, op)
			}
		}
	}
	for _, ev := range h.Tail {
		if ev.Record != nil {
			place(*ev.Record, tailAt(ev.At))
		}
	}
	known := make([]entry, 0, len(trimmed)+len(r.final))
	for i, d := range trimmed {
		known = append(known, entry{Index: i, Data: d})
	}
	sort.Slice(known, func(i, j int) bool { return known[i].Index < known[j].Index })
	known = append(known, r.final...)
	knownAt := make(map[uint64]string, len(known))
	for _, e := range known {
		knownAt[e.Index] = e.Data
	}

	// Every read returned exactly known's records in the range it
	// covered.
	for _, op := range h.Ops {
		if (op.Kind != kindRead && op.Kind != kindStaleRead) || !op.OK {
			continue
		}
		for _, e := range op.Records {
			if !attempted[e.Data] {
				v.add("read a record never appended", "%s", op)
			} else if _, ok := inLog[e.Data]; !ok && e.Index >= r.floor {
				v.add("read a record later lost", "%s returned %s, which is not in the final log", op, e)
			}
		}
		from := op.From
		if from == 0 {
			// From the node's floor then: not above the highest floor a
			// trim called before the read returned asked for.
			from = trimmedBefore(h, op.Return)
			if len(op.Records) > 0 {
				from = min(from, op.Records[0].Index)
			}
		}
		want := logRange(known, from, op.Next)
		if len(op.Records) > int(op.Max) || !equalEntries(want, op.Records) {
			v.add("read disagrees with the log", "%s; the log holds %s in [%d, %d)", op, describeEntries(want), max(from, 1), op.Next)
		}
	}

	// The tail delivered known in order, without gaps or
	// repeats, except that where it started or was reopened after a
	// Trimmed error it may skip records below the highest floor a trim
	// called before then asked for.
	var prev *entry
	restarted := true // the tail opens from the first retained record
	for _, ev := range h.Tail {
		e := ev.Record
		if e == nil {
			restarted = restarted || ev.Restart
			continue
		}
		switch {
		case !attempted[e.Data]:
			v.add("tail delivered a record never appended", "%s at %s", e, fmtNanos(ev.At))
		case knownAt[e.Index] != e.Data:
			v.add("tail disagrees with the log", "tail delivered %s at %s; the log holds %q there", e, fmtNanos(ev.At), knownAt[e.Index])
		case prev != nil && e.Index <= prev.Index:
			v.add("tail out of order", "%s after %s", e, prev)
		default:
			from := uint64(1)
			if prev != nil {
				from = prev.Index + 1
			}
			skipped := logRange(known, from, e.Index)
			if restarted {
				skipped = logRange(skipped, trimmedBefore(h, ev.At), e.Index)
			}
			if len(skipped) > 0 {
				v.add("tail skipped records", "%s before %s at %s", describeEntries(skipped), e, fmtNanos(ev.At))
			}
		}
		prev, restarted = e, false
	}

	// Linearizability.
	ops, model, problems := linearizabilityHistory(h, r.final)
	for _, p := range problems {
		v.add("conflicting appends", "%s", p)
	}
	r.model = model.porcupine()
	r.checkedOps = len(ops)
	start := time.Now()
	r.linearizable, r.info = porcupine.CheckOperationsVerbose(r.model, ops, timeout)
	r.checkTime = time.Since(start)
	if r.linearizable == porcupine.Illegal {
		v.add("not linearizable", "porcupine found no linearization of the %d operations (see the visualisation)", len(ops))
	}
	r.violations = v.all()
	return r
}

// trimmedBefore returns the highest below of the trims in h called
// before t, at least 1: no floor set before t can be higher.
func trimmedBefore(h history, t int64) uint64 {
	below := uint64(1)
	for _, op := range h.Ops {
		if op.Kind == kindTrim && op.Call < t {
			below = max(below, op.Below)
		}
	}
	return below
}

// logRange returns the records of log with index in [from, to); from 0
// means 1.
func logRange(log []entry, from, to uint64) []entry {
	from = max(from, 1)
	lo := sort.Search(len(log), func(i int) bool { return log[i].Index >= from })
	hi := sort.Search(len(log), func(i int) bool { return log[i].Index >= to })
	if hi < lo {
		return nil
	}
	return log[lo:hi]
}

func equalEntries(a, b []entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// diffLogs describes the first difference of two logs, "" when equal.
func diffLogs(a, b []entry) string {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return fmt.Sprintf("record %d is %s in one and %s in the other", i, a[i], b[i])
		}
	}
	if len(a) != len(b) {
		return fmt.Sprintf("%d records against %d", len(a), len(b))
	}
	return ""
}

// artefactDir creates the directory a failing run writes to: under
// os.TempDir(), so that it outlives the test.
func artefactDir(seed uint64) (string, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("raftlog-cluster-test-%d-%s", seed, time.Now().Format("20060102-150405.000")))
	return dir, os.MkdirAll(dir, 0o755)
}

// writeArtefacts writes a run's report of violations, history, and for
// each log checked its final logs and porcupine visualisation, into dir;
// the node logs too. The default log's files are final-logs.txt and
// linearizability.html, a named log's carry its name (final-logs-NAME.txt).
func writeArtefacts(dir string, c *cluster, h history, checks []logCheck, report string) error {
	write := func(name string, fill func(w *bufio.Writer) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		w := bufio.NewWriter(f)
		if err := fill(w); err != nil {
			f.Close()
			return err
		}
		if err := w.Flush(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	err := write("violations.txt", func(w *bufio.Writer) error {
		fmt.Fprintln(w, report)
		return nil
	})
	if err == nil {
		err = write("history.txt", func(w *bufio.Writer) error { h.writeText(w); return nil })
	}
	if err == nil {
		err = write("history.json", func(w *bufio.Writer) error { return h.writeJSON(w) })
	}
	for _, lc := range checks {
		suffix := ""
		if lc.name != "" {
			suffix = "-" + lc.name
		}
		if err == nil {
			err = write("final-logs"+suffix+".txt", func(w *bufio.Writer) error {
				for _, l := range lc.logs {
					fmt.Fprintf(w, "node %s (%d records, floor %d) %s\n", l.Node, len(l.Entries), l.Floor, l.Err)
					for _, e := range l.Entries {
						fmt.Fprintf(w, "  %s\n", e)
					}
				}
				return nil
			})
		}
		if res := lc.res; err == nil && res != nil && res.model.Step != nil {
			var anns []porcupine.Annotation
			for _, f := range h.Faults {
				anns = append(anns, porcupine.Annotation{Tag: "nemesis", Start: f.Start, End: f.End,
					Description: f.Kind, Details: f.Detail, BackgroundColor: "#fbd5d5"})
			}
			res.info.AddAnnotations(anns)
			err = porcupine.VisualizePath(res.model, res.info, filepath.Join(dir, "linearizability"+suffix+".html"))
		}
	}
	if c != nil {
		c.copyLogs(dir)
	}
	return err
}

// tailAt describes the tail's delivery at a time, for a violation.
type tailAt int64

func (t tailAt) String() string { return "the tail at " + fmtNanos(int64(t)) }
