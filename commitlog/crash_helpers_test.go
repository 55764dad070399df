package commitlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// Helpers of the crash tests (crash_test.go). They run the log on a
// faultfs.FS in the directory crashTestDir and keep a model of what the log
// must and may hold.

// crashTestDir is the log directory inside every faultfs.FS of the tests.
const crashTestDir = "/db"

// crashClock returns a deterministic clock for Options.Now, so that the
// bytes written, and so the outcome of a seeded crash, depend only on the
// seed.
func crashClock() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return time.Unix(1_700_000_000, n.Add(1000)) }
}

// crashOptions returns options for a crash test on fs: timers that never
// fire during a test, so that only the test's calls sync and checkpoint,
// and a deterministic clock.
func crashOptions(fs *faultfs.FS, segSize int64, flush FlushMode, wp WritePath) Options {
	return Options{
		SegmentSize:           segSize,
		Flush:                 flush,
		WritePath:             wp,
		SyncFlushTimeout:      time.Minute,
		FlushInterval:         time.Hour,
		FlushThoroughInterval: time.Hour,
		CheckpointInterval:    time.Hour,
		FS:                    fs,
		Now:                   crashClock(),
	}
}

// crashVariants are the write paths and preallocations the table tests
// run with.
var crashVariants = []struct {
	name     string
	wp       WritePath
	prealloc Preallocation
}{
	{"pwrite", WritePwrite, PreallocateZeroes},
	{"mmap", WriteMmap, PreallocateZeroes},
	{"pwrite-sparse", WritePwrite, PreallocateSparse},
	{"mmap-sparse", WriteMmap, PreallocateSparse},
}

// crashSegmentPath returns the path of the segment file starting at base,
// named as the package documentation says.
func crashSegmentPath(base int64) string {
	return fmt.Sprintf("%s/%020d", crashTestDir, base)
}

// crashSettle waits until the segment the log prepares in the background
// exists, so that a crash right after finds the same files on every run of
// a seed. It reads the log's private state: the crash outcome depends on
// which files exist, and nothing public says when that one is done.
func crashSettle(l *Log) {
	l.mu.Lock()
	p := l.pending
	l.mu.Unlock()
	if p != nil {
		<-p.done
	}
}

// crashPayload returns a payload of n bytes starting with id when it has
// room, so that no two records of a test have the same bytes.
func crashPayload(rng *rand.Rand, id uint64, n int) []byte {
	b := make([]byte, n)
	rng.Read(b)
	if n >= 8 {
		binary.LittleEndian.PutUint64(b, id)
	}
	return b
}

// crashRecord is a record the test wrote.
type crashRecord struct {
	pos     int64
	payload []byte
	// acked is set once the log has promised that the record is durable:
	// a synchronous append or a Sync covering it returned nil, a
	// Truncate past it returned nil, or a recovery found it.
	acked bool
}

func (r crashRecord) end() int64 { return r.pos + recordSize(len(r.payload)) }

// crashModel is what the test knows the log holds: every record written
// and neither truncated nor deleted, in position order. Acknowledged
// records form a prefix of recs, since the log makes everything below a
// position durable at once.
type crashModel struct {
	recs  []crashRecord
	first int64 // First() of the log
}

// add records a write that returned these positions.
func (m *crashModel) add(pos []int64, payloads [][]byte) {
	for i, p := range pos {
		if n := len(m.recs); n > 0 && p < m.recs[n-1].end() {
			panic(fmt.Sprintf("position %d overlaps the record at %d", p, m.recs[n-1].pos))
		}
		m.recs = append(m.recs, crashRecord{pos: p, payload: payloads[i]})
	}
}

// ackAll marks every record written so far acknowledged.
func (m *crashModel) ackAll() {
	for i := range m.recs {
		m.recs[i].acked = true
	}
}

// acked returns the number of acknowledged records.
func (m *crashModel) acked() int {
	n := 0
	for n < len(m.recs) && m.recs[n].acked {
		n++
	}
	return n
}

// truncate applies a Truncate(to) that returned nil: records from to on are
// gone, and everything before to is durable.
func (m *crashModel) truncate(to int64) {
	n := 0
	for n < len(m.recs) && m.recs[n].pos < to {
		m.recs[n].acked = true
		n++
	}
	m.recs = m.recs[:n]
}

// deleteBefore applies a DeleteBefore after which the log starts at first.
func (m *crashModel) deleteBefore(first int64) {
	n := 0
	for n < len(m.recs) && m.recs[n].pos < first {
		n++
	}
	m.recs = append([]crashRecord(nil), m.recs[n:]...)
	m.first = first
}

// crashReadAll returns every record from First to the end.
func crashReadAll(l *Log) ([]Record, error) {
	it := l.NewIterator(l.First())
	defer it.Close()
	var out []Record
	for {
		r, err := it.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
}

// check compares the log with the model. With exact, the log must hold
// every record of the model; otherwise (after a crash) it must hold a
// prefix of the model's records that contains every acknowledged one. The
// model is then cut to what the log holds, all of it acknowledged: recovery
// makes what it keeps durable. check also verifies the log and reads every
// record by position.
func (m *crashModel) check(t *testing.T, l *Log, exact bool, format string, args ...any) {
	t.Helper()
	m.checkEither(t, l, exact, nil, format, args...)
}

// checkEither is check where the log may also match alt, the model after
// an operation whose outcome is in doubt; m becomes the model that matched.
func (m *crashModel) checkEither(t *testing.T, l *Log, exact bool, alt *crashModel, format string, args ...any) {
	t.Helper()
	where := fmt.Sprintf(format, args...)
	got, err := crashReadAll(l)
	if err != nil {
		t.Fatalf("%s: iterating after %d records: %v", where, len(got), err)
	}
	if err := m.match(l, got, exact); err != nil {
		if alt == nil {
			t.Fatalf("%s: %v", where, err)
		}
		if aerr := alt.match(l, got, exact); aerr != nil {
			t.Fatalf("%s: %v; and if the operation in doubt took effect: %v", where, err, aerr)
		}
		*m = *alt
	}
	m.recs = m.recs[:len(got)]
	m.ackAll()

	lastEnd := m.first
	if n := len(m.recs); n > 0 {
		lastEnd = m.recs[n-1].end()
	}
	if end := l.End(); end < lastEnd {
		t.Fatalf("%s: End() = %d, before the end %d of the last record", where, end, lastEnd)
	}
	if err := l.Verify(); err != nil {
		t.Fatalf("%s: Verify: %v", where, err)
	}
	for _, want := range m.recs {
		r, err := l.Read(want.pos)
		if err != nil || !bytes.Equal(r.Payload, want.payload) {
			t.Fatalf("%s: Read(%d): %d bytes, %v; want the %d bytes written", where, want.pos, len(r.Payload), err, len(want.payload))
		}
	}
}

// match reports how got, the records of l from First on, differ from what
// the model allows.
func (m *crashModel) match(l *Log, got []Record, exact bool) error {
	if first := l.First(); first != m.first {
		return fmt.Errorf("First() = %d, want %d", first, m.first)
	}
	if len(got) > len(m.recs) {
		r := got[len(m.recs)]
		return fmt.Errorf("the log holds %d records but only %d were written; record %d at %d (%d bytes) was never written there",
			len(got), len(m.recs), len(m.recs), r.Position, len(r.Payload))
	}
	for i, r := range got {
		want := m.recs[i]
		if r.Position != want.pos || !bytes.Equal(r.Payload, want.payload) {
			return fmt.Errorf("record %d is %d bytes at %d, want the %d bytes written at %d (acknowledged %v)",
				i, len(r.Payload), r.Position, len(want.payload), want.pos, want.acked)
		}
	}
	if n := m.acked(); len(got) < n {
		return fmt.Errorf("the log holds %d records, but %d were acknowledged; lost the one at %d (end %d, durable %d)",
			len(got), n, m.recs[len(got)].pos, l.End(), l.Durable())
	}
	if exact && len(got) != len(m.recs) {
		return fmt.Errorf("the log holds %d records, want all %d written", len(got), len(m.recs))
	}
	return nil
}

// clone returns a copy of m that shares no slice with it.
func (m *crashModel) clone() *crashModel {
	return &crashModel{recs: append([]crashRecord(nil), m.recs...), first: m.first}
}

// crashMode names a way to crash a faultfs.FS.
type crashMode struct {
	name  string
	crash func(*faultfs.FS) *faultfs.FS
	// keepsAll is set when every unsynced byte survives the crash.
	keepsAll bool
}

var (
	crashRandom  = crashMode{"random", (*faultfs.FS).Crash, false}
	crashDropAll = crashMode{"drop-all", (*faultfs.FS).CrashDropAll, false}
	crashKeepAll = crashMode{"keep-all", (*faultfs.FS).CrashKeepAll, true}
)

// crashKill simulates the death of the process that has l open, with no
// call of l in flight: l is abandoned as it is and its directory lock
// released, as the kernel would. The file system, page cache included, is
// untouched, so the directory can be opened again at once. Close the
// abandoned log only after its file system has crashed, so that its Close
// changes nothing. crashKill reads the log's private lock, for want of a
// process to kill.
func crashKill(l *Log) *Log {
	crashSettle(l)
	l.lock.Close()
	return l
}

// crashClose closes l, if any, ignoring the error: for deferred calls,
// which may find a log that is closed already or runs on a crashed file
// system.
func crashClose(l *Log) {
	if l != nil {
		l.Close()
	}
}

// crashAndReopen crashes fs under l, closes l (which fails, as the file
// system is gone) and opens the log again on what the crash left. The
// caller must have no call of l in flight.
func crashAndReopen(t *testing.T, l *Log, fs *faultfs.FS, mode crashMode, opts Options, where string) (*Log, *faultfs.FS) {
	t.Helper()
	crashSettle(l)
	nfs := mode.crash(fs)
	l.Close() // fails: every call on the crashed file system does
	opts.FS = nfs
	nl, err := Open(crashTestDir, &opts)
	if err != nil {
		t.Fatalf("%s: Open after a %s crash: %v", where, mode.name, err)
	}
	if !nl.Recovery().Crashed {
		t.Errorf("%s: Recovery().Crashed is false after a %s crash", where, mode.name)
	}
	return nl, nfs
}

// crashAppend appends n payloads of size bytes in one batch, through
// AppendBatch when wait is set (with SyncFlush: acknowledged when it
// returns) or else through Write, and adds them to m.
func crashAppend(t *testing.T, l *Log, m *crashModel, rng *rand.Rand, wait bool, n, size int) {
	t.Helper()
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = crashPayload(rng, uint64(rng.Int63()), size)
	}
	var pos []int64
	var err error
	if wait {
		pos, err = l.AppendBatch(ps)
	} else {
		pos, _, err = l.Write(ps)
	}
	if err != nil {
		t.Fatal(err)
	}
	m.add(pos, ps)
	if wait {
		m.ackAll()
	}
}

// crashFlipByte flips one byte of a file of fs through the file system, as a
// disk might.
func crashFlipByte(t *testing.T, fs *faultfs.FS, path string, off int64) {
	t.Helper()
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// crashWantCorrupt fails unless err is an ErrCorrupt naming path and the
// offset.
func crashWantCorrupt(t *testing.T, what string, err error, path string, off int64) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s: %v, want ErrCorrupt", what, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, path) || !strings.Contains(msg, fmt.Sprintf("offset %d", off)) {
		t.Fatalf("%s: %q does not name %s and offset %d", what, msg, path, off)
	}
}

// crashTrigger crashes a faultfs.FS from its OnSync hook.
type crashTrigger struct {
	mu      sync.Mutex
	after   *faultfs.FS // mu: what the crash left; nil until it happens
	crashAt int         // mu: the sync that crashes
	syncs   int         // mu: syncs seen since armed
}

// arm makes the k-th successful data sync of fs from now on crash it.
func (c *crashTrigger) arm(fs *faultfs.FS, k int) {
	c.mu.Lock()
	c.crashAt, c.syncs = k, 0
	c.mu.Unlock()
	fs.OnSync(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.syncs++
		if c.syncs == c.crashAt && c.after == nil {
			c.after = fs.Crash()
		}
	})
}

// crash crashes fs now, unless the hook has just done so.
func (c *crashTrigger) crash(fs *faultfs.FS) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.after == nil {
		c.after = fs.Crash()
	}
}

// take returns what the crash left, or nil if there was none since the
// last take.
func (c *crashTrigger) take() *faultfs.FS {
	c.mu.Lock()
	defer c.mu.Unlock()
	fs := c.after
	c.after = nil
	return fs
}
