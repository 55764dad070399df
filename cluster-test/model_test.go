package clustertest

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Histories for the checker's own tests. Times are in arbitrary units.
func appendOp(lane int, call, ret int64, rec string, index uint64) *operation {
	return &operation{Lane: lane, Kind: kindAppend, Call: call, Return: ret, OK: true, Record: rec, Index: index}
}

func unknownAppend(lane int, call, ret int64, rec string) *operation {
	return &operation{Lane: lane, Kind: kindAppend, Call: call, Return: ret, Record: rec, Err: "timed out"}
}

func readOp(lane int, call, ret int64, from uint64, max uint32, next uint64, recs ...entry) *operation {
	return &operation{Lane: lane, Kind: kindRead, Call: call, Return: ret, OK: true, From: from, Max: max, Records: recs, Next: next}
}

func e(i uint64, d string) entry { return entry{Index: i, Data: d} }

// TestLogModel checks the linearizability model on small histories, each
// judged with the final log given.
func TestLogModel(t *testing.T) {
	final := []entry{e(3, "a"), e(7, "b"), e(8, "c")}
	tests := []struct {
		name  string
		ops   []*operation
		final []entry
		want  porcupine.CheckResult
	}{
		{"sequential appends and a full read", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			readOp(1, 6, 7, 0, 10, 9, e(3, "a"), e(7, "b"), e(8, "c")),
		}, final, porcupine.Ok},
		{"a read may miss a concurrent append", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 10, "c", 8),
			readOp(1, 5, 6, 0, 10, 8, e(3, "a"), e(7, "b")),
		}, final, porcupine.Ok},
		{"a read must not miss an append that returned before it began", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			readOp(1, 6, 7, 0, 10, 8, e(3, "a"), e(7, "b")),
		}, final, porcupine.Illegal},
		{"a read must not skip a record below one it returns", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7),
			readOp(1, 4, 5, 0, 10, 8, e(7, "b")),
		}, final[:2], porcupine.Illegal},
		{"a full read returns the first max records", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			readOp(1, 6, 7, 0, 2, 8, e(3, "a"), e(7, "b")),
			readOp(1, 8, 9, 4, 1, 8, e(7, "b")),
		}, final, porcupine.Ok},
		{"a full read cannot return later records", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			readOp(1, 6, 7, 0, 2, 9, e(7, "b"), e(8, "c")),
		}, final, porcupine.Illegal},
		{"a short read is complete", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			readOp(1, 6, 7, 5, 3, 8, e(7, "b")),
		}, final, porcupine.Illegal},
		{"a read from past the end is empty", []*operation{
			appendOp(0, 0, 1, "a", 3), readOp(1, 2, 3, 4, 5, 4),
		}, final[:1], porcupine.Ok},
		{"indexes grow in real time", []*operation{
			appendOp(0, 0, 1, "b", 7), appendOp(1, 2, 3, "a", 3),
		}, []entry{e(3, "a"), e(7, "b")}, porcupine.Illegal},
		{"concurrent appends commit in either order", []*operation{
			appendOp(0, 0, 5, "b", 7), appendOp(1, 1, 4, "a", 3),
			readOp(2, 6, 7, 0, 5, 8, e(3, "a"), e(7, "b")),
		}, []entry{e(3, "a"), e(7, "b")}, porcupine.Ok},
		{"an unknown append found in the log took effect after its call", []*operation{
			appendOp(0, 0, 1, "a", 3), unknownAppend(1, 2, 3, "b"),
			readOp(2, 4, 5, 0, 5, 5, e(3, "a")),
			readOp(2, 6, 7, 0, 5, 8, e(3, "a"), e(7, "b")),
			appendOp(0, 8, 9, "c", 8),
		}, final, porcupine.Ok},
		{"an unknown append cannot take effect before its call", []*operation{
			appendOp(0, 0, 1, "a", 3),
			readOp(2, 2, 3, 0, 5, 8, e(3, "a"), e(7, "b")),
			unknownAppend(1, 4, 5, "b"),
		}, final[:2], porcupine.Illegal},
		{"an unknown append missing from the log took no effect", []*operation{
			appendOp(0, 0, 1, "a", 3), unknownAppend(1, 2, 3, "x"),
			readOp(2, 4, 5, 0, 5, 5, e(3, "a")),
		}, final[:1], porcupine.Ok},
		{"a read cannot return a record nobody appended", []*operation{
			appendOp(0, 0, 1, "a", 3), readOp(2, 4, 5, 0, 5, 6, e(3, "a"), e(5, "z")),
		}, final[:1], porcupine.Illegal},
		{"two appends cannot share an index", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(1, 0, 1, "b", 3),
		}, final[:1], porcupine.Illegal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := history{Ops: tt.ops}
			ops, m, _ := linearizabilityHistory(h, tt.final)
			got := porcupine.CheckOperationsTimeout(m.porcupine(), ops, 10*time.Second)
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// TestCheckRun checks the durability and read checks on small histories.
func TestCheckRun(t *testing.T) {
	logs := func(es ...entry) []nodeLog {
		return []nodeLog{{Node: "n1", Entries: es}, {Node: "n2", Entries: es}}
	}
	tests := []struct {
		name string
		h    history
		logs []nodeLog
		want string // a substring of a violation; "" for none
	}{
		{"clean", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), unknownAppend(1, 0, 2, "b")},
			Tail: []tailEvent{{At: 2, Record: &entry{3, "a"}}, {At: 3, Record: &entry{4, "b"}}}},
			logs(e(3, "a"), e(4, "b")), ""},
		{"lost", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 5)}},
			logs(e(3, "a")), "acknowledged append lost"},
		{"moved", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3)}},
			logs(e(4, "a")), "acknowledged append moved"},
		{"twice", history{Ops: []*operation{unknownAppend(0, 0, 1, "a")}},
			logs(e(3, "a"), e(4, "a")), "record stored twice"},
		{"invented", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3)}},
			logs(e(3, "a"), e(4, "q")), "record never appended"},
		{"divergent", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3)}},
			[]nodeLog{{Node: "n1", Entries: []entry{e(3, "a")}}, {Node: "n2"}}, "logs differ"},
		{"stale read with a hole", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 5),
			{Kind: kindStaleRead, OK: true, From: 0, Max: 10, Next: 6, Records: []entry{e(5, "b")}}}},
			logs(e(3, "a"), e(5, "b")), "read disagrees with the log"},
		{"read of a lost record", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), unknownAppend(0, 2, 3, "b"),
			readOp(1, 4, 5, 0, 10, 6, e(3, "a"), e(5, "b"))}},
			logs(e(3, "a")), "read a record later lost"},
		{"tail gap", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 5)},
			Tail: []tailEvent{{At: 4, Record: &entry{5, "b"}}}},
			logs(e(3, "a"), e(5, "b")), "tail skipped records"},
		{"batch order", history{Ops: []*operation{
			{Lane: 0, Kind: kindAppend, OK: true, Record: "x", Index: 5, Batch: 1},
			{Lane: 1, Kind: kindAppend, OK: true, Record: "y", Index: 4, Batch: 1}}},
			logs(e(4, "y"), e(5, "x")), "batch out of order"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := checkRun(tt.h, tt.logs, 10*time.Second)
			all := strings.Join(res.violations, "\n")
			switch {
			case tt.want == "" && len(res.violations) > 0:
				t.Errorf("violations:\n%s", all)
			case tt.want != "" && !strings.Contains(all, tt.want):
				t.Errorf("want a violation %q, got:\n%s", tt.want, all)
			}
		})
	}
}
