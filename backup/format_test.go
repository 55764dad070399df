package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// testFile is a backup written by a Writer, with what went into it.
type testFile struct {
	hdr     Header
	state   []byte
	entries []Entry
	b       []byte
	s       Summary
}

// writeFile writes a backup of the entries (the header's index is the
// last one's, or floor-1 when there are none).
func writeFile(t testing.TB, floor uint64, state []byte, entries []Entry) testFile {
	t.Helper()
	f := testFile{hdr: Header{Index: floor - 1, Term: 1, Floor: floor, Created: time.Unix(0, 1_700_000_000_123_456_789)}, state: state, entries: entries}
	for _, e := range entries {
		f.hdr.Index = max(f.hdr.Index, e.Index)
		f.hdr.Term = max(f.hdr.Term, e.Term)
	}
	f.hdr.Index += 2 // raft's own entries after the last command
	var buf bytes.Buffer
	w, err := NewWriter(&buf, f.hdr, state)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := w.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	if f.s, err = w.Close(); err != nil {
		t.Fatal(err)
	}
	f.b = buf.Bytes()
	if f.s.Size != int64(len(f.b)) {
		t.Fatalf("Close says %d bytes, %d written", f.s.Size, len(f.b))
	}
	return f
}

// entriesOf returns n entries from index first, skipping every fifth index
// (raft's own entries), of sizes up to max bytes.
func entriesOf(rng *rand.Rand, first uint64, n, maxSize int) []Entry {
	var es []Entry
	idx, term := first, uint64(3)
	for len(es) < n {
		if idx%5 == 0 {
			idx++
			term++
		}
		data := make([]byte, rng.IntN(maxSize+1))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		es = append(es, Entry{Index: idx, Term: term, AppendedAt: int64(idx) * 1000, Data: data})
		idx++
	}
	return es
}

// readAll reads every entry of b.
func readAll(b []byte) (*Reader, []Entry, error) {
	r, err := NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	var es []Entry
	for {
		e, err := r.Next()
		if err == io.EOF {
			return r, es, nil
		}
		if err != nil {
			return r, es, err
		}
		es = append(es, e)
	}
}

func sameEntries(a, b []Entry) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d entries, want %d", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Index != y.Index || x.Term != y.Term || x.AppendedAt != y.AppendedAt || !bytes.Equal(x.Data, y.Data) {
			return fmt.Errorf("entry %d: index %d term %d at %d, %d bytes; want index %d term %d at %d, %d bytes",
				i, x.Index, x.Term, x.AppendedAt, len(x.Data), y.Index, y.Term, y.AppendedAt, len(y.Data))
		}
	}
	return nil
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name    string
		floor   uint64
		n, size int
	}{
		{"empty log", 1, 0, 0},
		{"small", 7, 50, 100},
		{"several frames", 1000, 40, 100 << 10}, // about 2 MiB: 2 or 3 entries frames
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := []byte("the state machine's state " + tc.name)
			f := writeFile(t, tc.floor, state, entriesOf(rng, tc.floor, tc.n, tc.size))
			r, got, err := readAll(f.b)
			if err != nil {
				t.Fatal(err)
			}
			h := r.Header()
			if h.Version != Version || h.Index != f.hdr.Index || h.Term != f.hdr.Term || h.Floor != f.hdr.Floor || !h.Created.Equal(f.hdr.Created) {
				t.Fatalf("header %+v, want %+v", h, f.hdr)
			}
			if !bytes.Equal(r.State(), state) {
				t.Fatalf("state %q, want %q", r.State(), state)
			}
			if err := sameEntries(got, f.entries); err != nil {
				t.Fatal(err)
			}
			if s := r.Summary(); s != f.s {
				t.Fatalf("summary %+v, want %+v", s, f.s)
			}
			// The checksum the end frame carries: of every byte before it.
			if want := crc32.Checksum(f.b[:len(f.b)-frameHeaderSize-endPayloadSize], castagnoli); f.s.Checksum != want {
				t.Fatalf("summary's checksum %#x, want %#x", f.s.Checksum, want)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Fatalf("Next after the end: %v, want io.EOF", err)
			}
			if h2, s, err := Verify(bytes.NewReader(f.b)); err != nil || h2.Index != h.Index || s != f.s {
				t.Fatalf("Verify: %+v %+v %v", h2, s, err)
			}
		})
	}
}

// Every prefix of a file fails with ErrTruncated, and says where.
func TestTruncated(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	small := writeFile(t, 1, []byte("state"), entriesOf(rng, 1, 20, 40))
	for n := 0; n < len(small.b); n++ {
		_, _, err := readAll(small.b[:n])
		if !errors.Is(err, ErrTruncated) {
			t.Fatalf("the first %d of %d bytes: %v, want ErrTruncated", n, len(small.b), err)
		}
	}
	// A file of several frames, cut at and around every frame boundary.
	big := writeFile(t, 1, []byte("state"), entriesOf(rng, 1, 30, 100<<10))
	var cuts []int
	for _, off := range frameOffsets(t, big.b) {
		cuts = append(cuts, off-1, off, off+1, off+frameHeaderSize, off+frameHeaderSize+1)
	}
	for _, n := range cuts {
		if n <= 0 || n >= len(big.b) {
			continue
		}
		_, _, err := readAll(big.b[:n])
		if !errors.Is(err, ErrTruncated) {
			t.Fatalf("the first %d of %d bytes: %v, want ErrTruncated", n, len(big.b), err)
		}
		if !strings.Contains(err.Error(), "byte") {
			t.Fatalf("the error does not say where: %v", err)
		}
	}
}

// frameOffsets returns the offset of every frame of a valid file.
func frameOffsets(t *testing.T, b []byte) []int {
	t.Helper()
	var offs []int
	for off := HeaderSize; off < len(b); {
		offs = append(offs, off)
		off += frameHeaderSize + int(binary.BigEndian.Uint32(b[off+1:]))
	}
	if len(offs) < 5 {
		t.Fatalf("%d frames, want several entries frames", len(offs))
	}
	return offs
}

// A flipped bit anywhere makes the file fail, never read as good and never
// as merely truncated.
func TestBitFlips(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	f := writeFile(t, 3, []byte("a state"), entriesOf(rng, 3, 12, 30))
	for i := range len(f.b) * 8 {
		b := bytes.Clone(f.b)
		b[i/8] ^= 1 << (i % 8)
		_, _, err := readAll(b)
		if err == nil {
			t.Fatalf("bit %d of byte %d flipped: the file reads as good", i%8, i/8)
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotBackup) && !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("bit %d of byte %d flipped: %v, want ErrCorrupt, ErrNotBackup or ErrUnsupportedVersion", i%8, i/8, err)
		}
	}
}

func TestRefusals(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	f := writeFile(t, 1, []byte("state"), entriesOf(rng, 1, 3000, 700)) // about 1 MiB: two entries frames
	offs := frameOffsets(t, f.b)
	resum := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[48:], crc32.Checksum(b[:48], castagnoli))
		return b
	}
	version2 := bytes.Clone(f.b)
	binary.BigEndian.PutUint32(version2[8:], 3)
	flags := bytes.Clone(f.b)
	binary.BigEndian.PutUint32(flags[12:], 1)
	badFloor := bytes.Clone(f.b)
	binary.BigEndian.PutUint64(badFloor[32:], binary.BigEndian.Uint64(badFloor[16:])+2)
	// offs[0] is the log frame, offs[1] the state, offs[2] and offs[3]
	// entries. The first entries frame twice: entries out of order.
	dup := append(append(bytes.Clone(f.b[:offs[3]]), f.b[offs[2]:offs[3]]...), f.b[offs[3]:]...)
	// The first entries frame left out: the end frame's counts differ.
	missing := append(bytes.Clone(f.b[:offs[2]]), f.b[offs[3]:]...)
	// The state frame where an entries frame should be.
	twoStates := append(append(bytes.Clone(f.b[:offs[2]]), f.b[offs[1]:offs[2]]...), f.b[offs[2]:]...)
	// The log frame again after the state.
	twoLogs := append(append(bytes.Clone(f.b[:offs[2]]), f.b[offs[0]:offs[1]]...), f.b[offs[2]:]...)
	// No log frame: the state comes first in a version 2 file.
	noLog := append(bytes.Clone(f.b[:offs[0]]), f.b[offs[1]:]...)
	// Two files in one: the first one's end frame is followed by bytes.
	trailing := append(bytes.Clone(f.b), 0)
	// The end frame's file checksum is wrong, and its frame checksums
	// are made right again.
	badSum := bytes.Clone(f.b)
	end := offs[len(offs)-1]
	binary.BigEndian.PutUint32(badSum[end+frameHeaderSize+16:], 12345)
	payload := badSum[end+frameHeaderSize:]
	binary.BigEndian.PutUint32(badSum[end+5:], crc32.Checksum(payload, castagnoli))
	binary.BigEndian.PutUint32(badSum[end+9:], crc32.Checksum(badSum[end:end+9], castagnoli))
	for _, tc := range []struct {
		name string
		b    []byte
		want error
		msg  string
	}{
		{"text", []byte("hello, this is not a backup at all, but it is long enough to be one"), ErrNotBackup, `does not start with "RLBACKUP"`},
		{"short text", []byte("hi"), ErrNotBackup, "RLBACKUP"},
		{"empty", nil, ErrTruncated, "empty"},
		{"version 3", resum(version2), ErrUnsupportedVersion, "format version 3"},
		{"version 3, checksum not updated", version2, ErrUnsupportedVersion, "version 3"},
		{"unknown flags", resum(flags), ErrUnsupportedVersion, "flags 0x1"},
		{"floor past index", resum(badFloor), ErrCorrupt, "floor"},
		{"frame twice", dup, ErrCorrupt, "follows index"},
		{"frame missing", missing, ErrCorrupt, "the end frame counts"},
		{"second state", twoStates, ErrCorrupt, "a second state frame"},
		{"log frame after the state", twoLogs, ErrCorrupt, "a log frame after the state"},
		{"no log frame", noLog, ErrCorrupt, "not the log"},
		{"trailing byte", trailing, ErrCorrupt, "bytes follow the end frame"},
		{"file checksum", badSum, ErrCorrupt, "fails its checksum"},
	} {
		_, _, err := readAll(tc.b)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %v saying %q", tc.name, err, tc.want, tc.msg)
		}
	}
}

func TestWriterChecks(t *testing.T) {
	var buf bytes.Buffer
	if _, err := NewWriter(&buf, Header{Index: 5, Term: 1, Floor: 7}, nil); err == nil {
		t.Fatal("a header whose floor is past index+1 was written")
	}
	w, err := NewWriter(&buf, Header{Index: 10, Term: 2, Floor: 3}, []byte("s"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []Entry{{Index: 2, Term: 1}, {Index: 11, Term: 1}, {Index: 4, Term: 3}, {Index: 4, Term: 0}} {
		if err := w.Add(e); err == nil {
			t.Errorf("entry %+v accepted in [3, 10] with term at most 2", e)
		}
	}
	if err := w.Add(Entry{Index: 4, Term: 2}); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(Entry{Index: 4, Term: 2}); err == nil {
		t.Error("index 4 accepted twice")
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Verify(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
}

// A writer whose destination fails reports the failure, and keeps doing so.
func TestWriterError(t *testing.T) {
	fail := errors.New("disk on fire")
	w, err := NewWriter(&failAfter{n: 200, err: fail}, Header{Index: 100, Term: 1, Floor: 1}, []byte("s"))
	if err != nil {
		t.Fatal(err)
	}
	var addErr error
	for i := uint64(1); i <= 100 && addErr == nil; i++ {
		addErr = w.Add(Entry{Index: i, Term: 1, Data: make([]byte, 20<<10)})
	}
	if !errors.Is(addErr, fail) {
		t.Fatalf("Add: %v, want %v", addErr, fail)
	}
	if _, err := w.Close(); !errors.Is(err, fail) {
		t.Fatalf("Close: %v, want %v", err, fail)
	}
}

type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, f.err
	}
	f.n -= len(p)
	return len(p), nil
}

// FuzzReader: no input makes the reader panic or allocate wildly, and
// whatever it accepts, a Writer writes back byte for byte.
func FuzzReader(f *testing.F) {
	rng := rand.New(rand.NewPCG(9, 10))
	good := writeFile(f, 4, []byte("state"), entriesOf(rng, 4, 6, 20)).b
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add(writeFile(f, 1, nil, nil).b)
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, entries, err := readAll(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotBackup) && !errors.Is(err, ErrUnsupportedVersion) && !errors.Is(err, ErrTruncated) {
				t.Fatalf("error wrapping no sentinel: %v", err)
			}
			return
		}
		var buf bytes.Buffer
		w, err := NewWriter(&buf, r.Header(), r.State())
		if err != nil {
			t.Fatal(err)
		}
		// The writer packs entries into frames its own way: compare the
		// entries, and the bytes when the input was packed the same way.
		for _, e := range entries {
			if err := w.Add(e); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Close(); err != nil {
			t.Fatal(err)
		}
		_, again, err := readAll(buf.Bytes())
		if err != nil {
			t.Fatalf("a file written from an accepted one does not read: %v", err)
		}
		if err := sameEntries(again, entries); err != nil {
			t.Fatal(err)
		}
		if len(b) < frameTarget && len(entries) > 0 && frameCount(b) == 4 && !bytes.Equal(buf.Bytes(), b) {
			t.Fatal("an accepted file of one entries frame is not what a Writer writes")
		}
	})
}

// frameCount counts the frames of a valid file.
func frameCount(b []byte) int {
	n := 0
	for off := HeaderSize; off < len(b); n++ {
		off += frameHeaderSize + int(binary.BigEndian.Uint32(b[off+1:]))
	}
	return n
}

// The log frame carries the log's name and settings; a file of format
// version 1, written before it existed, still reads, as a backup of the
// default log.
func TestLogSource(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	entries := entriesOf(rng, 5, 40, 50)
	src := Source{Name: "orders", Replicas: 3, RetentionBytes: 1 << 30, RetentionAge: 168 * time.Hour}
	for _, tc := range []struct {
		name    string
		version uint32
		src     Source
		want    Source
	}{
		{"named log", Version, src, src},
		{"default log", Version, Source{}, Source{Name: DefaultLog}},
		{"version 1", version1, src, Source{Name: DefaultLog}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			hdr := Header{Index: 100, Term: 50, Floor: 5, Created: time.Unix(0, 1_700_000_000_000_000_000), Log: tc.src}
			w, err := newWriter(&buf, hdr, []byte("state"), tc.version)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if err := w.Add(e); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := w.Close(); err != nil {
				t.Fatal(err)
			}
			r, got, err := readAll(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if h := r.Header(); h.Version != tc.version || h.Log != tc.want || h.Index != 100 || h.Floor != 5 {
				t.Fatalf("header %+v, want version %d, log %+v", h, tc.version, tc.want)
			}
			if string(r.State()) != "state" {
				t.Fatalf("state %q", r.State())
			}
			if err := sameEntries(got, entries); err != nil {
				t.Fatal(err)
			}
		})
	}
	var buf bytes.Buffer
	for _, bad := range []Source{{Name: strings.Repeat("x", 65)}, {Name: "a", RetentionAge: -1}} {
		if _, err := NewWriter(&buf, Header{Index: 1, Term: 1, Floor: 1, Log: bad}, nil); err == nil {
			t.Errorf("log %+v written", bad)
		}
	}
}
