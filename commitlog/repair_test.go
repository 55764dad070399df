package commitlog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// repairLog writes n records of 300 bytes into a new log with 4 KiB
// segments (13 records a segment), closes it and returns its directory
// and the records' positions.
func repairLog(t *testing.T, n int) (string, []int64) {
	t.Helper()
	dir := t.TempDir()
	l, err := Open(dir, &Options{SegmentSize: MinSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	var pos []int64
	for i := range n {
		p, err := l.Append(payloadFor(i, 300))
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, pos
}

// flipPayloadByte flips a byte in the payload of the record at pos and
// returns the segment file and the record's offset in it.
func flipPayloadByte(t *testing.T, dir string, pos int64) (string, int64) {
	t.Helper()
	base := pos - pos%MinSegmentSize
	path := filepath.Join(dir, segmentName(base))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[pos-base+HeaderSize+100] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, pos - base
}

// dirDigest hashes the names and contents of the files in dir.
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// scanAll scans dir and returns what it found and the positions of the
// records it reported.
func scanAll(t *testing.T, dir string) (*ScanInfo, []int64) {
	t.Helper()
	sc, err := NewScanner(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	var got []int64
	info, err := sc.Scan(func(r Record, damage error) error {
		if damage == nil {
			got = append(got, r.Position)
		} else if !errors.Is(damage, ErrCorrupt) || r.Payload != nil {
			t.Errorf("damage at %d reported as %v with %d bytes", r.Position, damage, len(r.Payload))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return info, got
}

// A damaged record below the durable watermark is found, named by file and
// offset, and skipped; the records after it are still reported; nothing
// in the directory changes.
func TestScanFindsDamage(t *testing.T) {
	dir, pos := repairLog(t, 40)
	info, got := scanAll(t, dir)
	if info.Damage != nil || len(got) != len(pos) || info.End != pos[39]+recordSize(300) {
		t.Fatalf("clean log: damage %v, %d records, end %d", info.Damage, len(got), info.End)
	}

	path, off := flipPayloadByte(t, dir, pos[20])
	before := dirDigest(t, dir)
	info, got = scanAll(t, dir)
	if dirDigest(t, dir) != before {
		t.Fatal("Scan changed the directory")
	}
	d := info.Damage
	if d == nil || d.Position != pos[20] || d.Path != path || d.Offset != off || info.Damaged != 1 {
		t.Fatalf("damage %+v (%d places), want record %d at %s offset %d", d, info.Damaged, pos[20], path, off)
	}
	crashWantCorrupt(t, "damage", d.Err, path, off)
	want := append(append([]int64(nil), pos[:20]...), pos[21:]...)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("scan reported %v, want every record but the damaged one: %v", got, want)
	}
	if p, o := info.Locate(pos[20]); p != path || o != off {
		t.Fatalf("Locate(%d) = %s, %d", pos[20], p, o)
	}

	// The log opens (recovery reads only the tail) but a read of the
	// record fails, naming the file and offset.
	l, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Read(pos[20])
	crashWantCorrupt(t, "read", err, path, off)
	// An open log cannot be scanned.
	if _, err := NewScanner(dir, nil); err == nil {
		t.Fatal("NewScanner of an open log succeeded")
	}
	if err := Cut(dir, nil, pos[20], nil); err == nil {
		t.Fatal("Cut of an open log succeeded")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// Cut at a damaged record leaves the records before it, removes the rest
// durably (a reopen does not bring them back, the segments past it are
// gone) and the log takes appends at the cut.
func TestCutAtDamage(t *testing.T) {
	dir, pos := repairLog(t, 40)
	flipPayloadByte(t, dir, pos[20])
	meta := []byte("layer above")
	if err := Cut(dir, nil, pos[20], meta); err != nil {
		t.Fatal(err)
	}
	info, got := scanAll(t, dir)
	if info.Damage != nil || fmt.Sprint(got) != fmt.Sprint(pos[:20]) || info.End != pos[20] {
		t.Fatalf("after the cut: damage %v, records %v, end %d; want %v, end %d", info.Damage, got, info.End, pos[:20], pos[20])
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "0*"))
	if last := segs[len(segs)-1]; filepath.Base(last) != segmentName(pos[20]-pos[20]%MinSegmentSize) {
		t.Fatalf("segments %v: the last should hold the cut at %d", segs, pos[20])
	}

	l, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.End() != pos[20] || !bytes.Equal(l.Meta(), meta) {
		t.Fatalf("reopened: end %d meta %q, want %d %q", l.End(), l.Meta(), pos[20], meta)
	}
	if err := l.Verify(); err != nil {
		t.Fatal(err)
	}
	p, err := l.Append([]byte("after the cut"))
	if err != nil || p != pos[20] {
		t.Fatalf("append after the cut: %d, %v; want position %d", p, err, pos[20])
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recs := readAll(t, l, l.First())
	if len(recs) != 21 || string(recs[20].Payload) != "after the cut" {
		t.Fatalf("after reopening: %d records", len(recs))
	}
	for i := range 20 {
		if !bytes.Equal(recs[i].Payload, payloadFor(i, 300)) {
			t.Fatalf("record %d changed", i)
		}
	}
}

// The record the checkpoint names as the newest durable one is checked by
// Open, which refuses the log when it is damaged; Cut before it lets the
// log open again.
func TestCutLastDurableRecord(t *testing.T) {
	dir, pos := repairLog(t, 10)
	path, off := flipPayloadByte(t, dir, pos[9])
	_, err := Open(dir, nil)
	crashWantCorrupt(t, "open", err, path, off)
	sc, err := NewScanner(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sc.LastDurable() != pos[9] {
		t.Errorf("LastDurable %d, want %d", sc.LastDurable(), pos[9])
	}
	sc.Close()
	if err := Cut(dir, nil, pos[9], nil); err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := readAll(t, l, l.First()); len(got) != 9 {
		t.Fatalf("%d records after the cut, want 9", len(got))
	}
}

// Cut at the first position empties the log.
func TestCutEverything(t *testing.T) {
	dir, _ := repairLog(t, 30)
	if err := Cut(dir, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.End() != 0 || len(l.Segments()) != 1 {
		t.Fatalf("end %d, %d segments; want an empty log", l.End(), len(l.Segments()))
	}
	if _, err := l.Append([]byte("x")); err != nil {
		t.Fatal(err)
	}
}

// Cut refuses positions that are not a record's start below the durable
// end, and changes nothing then.
func TestCutRefuses(t *testing.T) {
	dir, pos := repairLog(t, 30)
	before := dirDigest(t, dir)
	end := pos[29] + recordSize(300)
	for _, c := range []struct {
		at   int64
		want error
	}{
		{pos[5] + 1, ErrInvalidPosition},
		{end, ErrNotFound},
		{end + 1000, ErrNotFound},
		{-1, ErrNotFound},
	} {
		if err := Cut(dir, nil, c.at, nil); !errors.Is(err, c.want) {
			t.Errorf("Cut at %d: %v, want %v", c.at, err, c.want)
		}
	}
	if dirDigest(t, dir) != before {
		t.Fatal("a refused Cut changed the directory")
	}
	// A damaged record before the cut is refused too.
	path, off := flipPayloadByte(t, dir, pos[3])
	err := Cut(dir, nil, pos[10], nil)
	crashWantCorrupt(t, "cut past damage", err, path, off)
}

// Records past the durable watermark that fail their checks are the torn
// tail recovery cuts, not damage: after a cut, the old records past it
// stay in the file with an older epoch and end the scan.
func TestScanTornTailIsNotDamage(t *testing.T) {
	dir, pos := repairLog(t, 20)
	if err := Cut(dir, nil, pos[15], nil); err != nil {
		t.Fatal(err)
	}
	info, got := scanAll(t, dir)
	if info.Damage != nil || len(got) != 15 || info.End != pos[15] || info.Durable != pos[15] {
		t.Fatalf("damage %v, %d records, end %d, durable %d", info.Damage, len(got), info.End, info.Durable)
	}
}
