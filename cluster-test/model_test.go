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

// trimOp is an acknowledged trim below below.
func trimOp(lane int, call, ret int64, below uint64) *operation {
	return &operation{Lane: lane, Kind: kindTrim, Call: call, Return: ret, OK: true, Below: below, Index: 100 + below}
}

// unknownTrim is a trim below below whose outcome is unknown.
func unknownTrim(lane int, call, ret int64, below uint64) *operation {
	return &operation{Lane: lane, Kind: kindTrim, Call: call, Return: ret, Below: below, Err: "timed out"}
}

// trimmedRead is a read from from that failed with Trimmed.
func trimmedRead(lane int, call, ret int64, from uint64) *operation {
	return &operation{Lane: lane, Kind: kindRead, Call: call, Return: ret, From: from, Max: 10, Trimmed: true, Err: "Trimmed: index is trimmed"}
}

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

		// Trims. The final log holds what is at or above the floor.
		{"a read below the floor after a trim is trimmed", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			trimOp(2, 6, 7, 7), trimmedRead(1, 8, 9, 3),
		}, final[1:], porcupine.Ok},
		{"a read at or above the floor is not trimmed", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			trimOp(2, 6, 7, 7), trimmedRead(1, 8, 9, 7),
		}, final[1:], porcupine.Illegal},
		{"a read before any trim is not trimmed", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7),
			trimmedRead(1, 4, 5, 3), trimOp(2, 6, 7, 7),
		}, final[1:2], porcupine.Illegal},
		{"a read concurrent with a trim may be trimmed", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7),
			trimOp(2, 4, 7, 7), trimmedRead(1, 5, 6, 3),
		}, final[1:2], porcupine.Ok},
		{"a read concurrent with a trim may see the records", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7),
			trimOp(2, 4, 7, 7), readOp(1, 5, 6, 3, 10, 8, e(3, "a"), e(7, "b")),
		}, final[1:2], porcupine.Ok},
		{"a read below the floor must not return records", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7),
			trimOp(2, 4, 5, 7), readOp(1, 6, 7, 3, 10, 8, e(3, "a"), e(7, "b")),
		}, final[1:2], porcupine.Illegal},
		{"a read from 0 starts at the floor", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			trimOp(2, 6, 7, 5), readOp(1, 8, 9, 0, 10, 9, e(7, "b"), e(8, "c")),
		}, final[1:], porcupine.Ok},
		{"a read from 0 must not return trimmed records", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			trimOp(2, 6, 7, 5), readOp(1, 8, 9, 0, 10, 9, e(3, "a"), e(7, "b"), e(8, "c")),
		}, final[1:], porcupine.Illegal},
		{"a read from 0 must not miss a record at the floor", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			trimOp(2, 6, 7, 7), readOp(1, 8, 9, 0, 10, 9, e(8, "c")),
		}, final[1:], porcupine.Illegal},
		{"a read above the floor must not miss a record", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			trimOp(2, 6, 7, 5), readOp(1, 8, 9, 6, 10, 9, e(8, "c")),
		}, final[1:], porcupine.Illegal},
		{"a read above the floor must not return wrong data", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			trimOp(2, 6, 7, 5), readOp(1, 8, 9, 6, 10, 9, e(7, "b"), e(8, "a")),
		}, final[1:], porcupine.Illegal},
		{"a read from 0 is trimmed only while a trim runs", []*operation{
			appendOp(0, 0, 1, "a", 3), trimOp(2, 2, 3, 3), trimmedRead(1, 4, 5, 0),
		}, final[:1], porcupine.Illegal},
		{"a read from 0 may be trimmed while a trim runs", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), trimOp(2, 4, 7, 7), trimmedRead(1, 5, 6, 0),
		}, final[1:2], porcupine.Ok},
		{"a short read may stop where a concurrent trim cut it", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			trimOp(2, 6, 9, 8), readOp(1, 7, 8, 3, 10, 4, e(3, "a")),
		}, final[2:], porcupine.Ok},
		{"a short read must not stop early without a trim", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			readOp(1, 7, 8, 3, 10, 4, e(3, "a")), trimOp(2, 9, 10, 8),
		}, final[2:], porcupine.Illegal},
		{"a short read cut by a trim must not skip a record", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), appendOp(0, 4, 5, "c", 8),
			trimOp(2, 6, 9, 9), readOp(1, 7, 8, 3, 10, 8, e(3, "a")),
		}, nil, porcupine.Illegal},
		{"an unknown trim may take effect late", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), unknownTrim(2, 4, 5, 7),
			readOp(1, 6, 7, 3, 10, 8, e(3, "a"), e(7, "b")), trimmedRead(1, 8, 9, 3),
		}, final[1:2], porcupine.Ok},
		{"an unknown trim cannot take effect before its call", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), trimmedRead(1, 4, 5, 3),
			unknownTrim(2, 6, 7, 7),
		}, final[1:2], porcupine.Illegal},
		{"a trim cannot be undone", []*operation{
			appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 7), trimOp(2, 4, 5, 7),
			trimmedRead(1, 6, 7, 3), readOp(1, 8, 9, 3, 10, 8, e(3, "a"), e(7, "b")),
		}, final[1:2], porcupine.Illegal},
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
	floorLogs := func(floor uint64, es ...entry) []nodeLog {
		return []nodeLog{{Node: "n1", Floor: floor, Entries: es}, {Node: "n2", Floor: floor, Entries: es}}
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
		{"trimmed and clean", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 5),
			trimOp(1, 4, 5, 5), readOp(2, 0, 1, 0, 10, 4, e(3, "a")), readOp(2, 6, 7, 0, 10, 6, e(5, "b"))},
			Tail: []tailEvent{{At: 2, Record: &entry{3, "a"}}, {At: 6, Record: &entry{5, "b"}}}},
			floorLogs(5, e(5, "b")), ""},
		{"lost above the floor", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 5),
			appendOp(0, 4, 5, "c", 7), trimOp(1, 6, 7, 5)}},
			floorLogs(5, e(7, "c")), "acknowledged append lost"},
		{"floors differ", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 5), trimOp(1, 4, 5, 5)}},
			[]nodeLog{{Node: "n1", Floor: 5, Entries: []entry{e(5, "b")}}, {Node: "n2", Floor: 4, Entries: []entry{e(5, "b")}}}, "floors differ"},
		{"floor without a trim", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 5)}},
			floorLogs(5, e(5, "b")), "floor without a trim"},
		{"record below the floor", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 5), trimOp(1, 4, 5, 5)}},
			floorLogs(5, e(3, "a"), e(5, "b")), "record below the floor"},
		{"trimmed read of a wrong record", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 5),
			{Kind: kindStaleRead, OK: true, From: 0, Max: 10, Next: 4, Records: []entry{e(3, "x")}}, trimOp(1, 4, 5, 5)}},
			floorLogs(5, e(5, "b")), "trimmed records disagree"},
		{"stale read with a trimmed hole", history{Ops: []*operation{appendOp(0, 0, 1, "a", 2), appendOp(0, 2, 3, "b", 3),
			{Kind: kindStaleRead, OK: true, From: 0, Max: 10, Next: 4, Records: []entry{e(3, "b")}}, trimOp(1, 4, 5, 4)}},
			floorLogs(4), "read disagrees with the log"},
		{"tail reopened after a trim", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 5),
			appendOp(0, 2, 3, "c", 7), trimOp(1, 4, 5, 7)},
			Tail: []tailEvent{{At: 2, Record: &entry{3, "a"}}, {At: 6, Err: "Trimmed", Restart: true}, {At: 7, Record: &entry{7, "c"}}}},
			floorLogs(7, e(7, "c")), ""},
		{"tail skipped records above the trim", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 5),
			appendOp(0, 2, 3, "c", 7), trimOp(1, 4, 5, 4)},
			Tail: []tailEvent{{At: 2, Record: &entry{3, "a"}}, {At: 6, Err: "Trimmed", Restart: true}, {At: 7, Record: &entry{7, "c"}}}},
			floorLogs(4, e(5, "b"), e(7, "c")), "tail skipped records"},
		{"tail skipped records without a restart", history{Ops: []*operation{appendOp(0, 0, 1, "a", 3), appendOp(0, 2, 3, "b", 5),
			appendOp(0, 2, 3, "c", 7), trimOp(1, 4, 5, 7)},
			Tail: []tailEvent{{At: 2, Record: &entry{3, "a"}}, {At: 7, Record: &entry{7, "c"}}}},
			floorLogs(7, e(7, "c")), "tail skipped records"},
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
