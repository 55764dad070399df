package commitlog

import (
	"bytes"
	"fmt"
	"testing"
)

// TestWriteParts writes records given in parts, small parts (copied) and
// large ones (written from where they are with the pwrite path) mixed in
// every order, in batches that cross segment boundaries, then checks that
// every record reads back as the concatenation of its parts, before and
// after the log is reopened (which checks the CRCs of what recovery scans),
// and that changing the parts after WriteParts returned changes nothing.
func TestWriteParts(t *testing.T) {
	for _, wp := range []WritePath{WritePwrite, WriteMmap} {
		t.Run(fmt.Sprint("writepath=", wp), func(t *testing.T) {
			dir := t.TempDir()
			opts := &Options{SegmentSize: 64 << 10, WritePath: wp}
			l, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			shapes := [][]int{
				{20, GatherMin + 100, 3},   // header, large data, tail
				{GatherMin, GatherMin * 2}, // two large, back to back
				{17},                       // one small
				{0, GatherMin - 1, 0},      // just below the threshold, empty parts
				{GatherMin * 3},            // one large alone
				{5, 6, GatherMin + 1},      // large at the end
				{},                         // no parts: an empty payload
			}
			var positions []int64
			var want [][]byte
			var written [][][]byte
			n := 0
			for batch := range 12 {
				var parts [][][]byte
				for k := range 1 + batch%5 {
					shape := shapes[(batch+k)%len(shapes)]
					var rec [][]byte
					var whole []byte
					for _, size := range shape {
						p := payloadFor(n, size)
						n++
						rec = append(rec, p)
						whole = append(whole, p...)
					}
					parts = append(parts, rec)
					want = append(want, whole)
				}
				pos, end, err := l.WriteParts(parts)
				if err != nil {
					t.Fatalf("batch %d: %v", batch, err)
				}
				if err := l.WaitDurable(end); err != nil {
					t.Fatal(err)
				}
				positions = append(positions, pos...)
				written = append(written, parts...)
			}
			for _, rec := range written {
				for _, p := range rec {
					clear(p) // the log must not have kept them
				}
			}
			check := func(when string) {
				t.Helper()
				for i, pos := range positions {
					r, err := l.Read(pos)
					if err != nil {
						t.Fatalf("%s: read record %d at %d: %v", when, i, pos, err)
					}
					if !bytes.Equal(r.Payload, want[i]) {
						t.Fatalf("%s: record %d at %d: %d bytes, want %d, or different bytes", when, i, pos, len(r.Payload), len(want[i]))
					}
				}
				if got := readAll(t, l, 0); len(got) != len(want) {
					t.Fatalf("%s: iterating finds %d records, want %d", when, len(got), len(want))
				}
			}
			check("written")
			if len(l.Segments()) < 3 {
				t.Fatalf("%d segments: the batches did not cross segment boundaries", len(l.Segments()))
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if l, err = Open(dir, opts); err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			check("reopened")
		})
	}
}
