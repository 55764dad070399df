//go:build unix

package commitlog_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/raftlog/raftlog/commitlog"
)

// The kill test runs its appender in a child process: the test binary
// itself, re-executed to run only TestKillHelper, which finds its
// instructions in killEnv. Without killEnv, TestKillHelper does nothing.
const killEnv = "RAFTLOG_COMMITLOG_KILL_CHILD"

// Knobs of the kill test.
const (
	killRounds       = 3        // children killed per write path, all on one directory
	killMinAcks      = 200      // the parent kills after a random number of acknowledgements
	killMaxAcks      = 3000     // between these two
	killSegmentSize  = 64 << 10 // small, so that rounds cross many segments
	killWriters      = 4        // appending goroutines in a child
	killMaxBatch     = 4        // records per AppendBatch, 1 to this
	killMaxPayload   = 4000     // payload sizes run from killTagSize to this
	killChildRecords = 200000   // a child stops after this many records
	killChildTime    = 20 * time.Second
	killChildTimeout = "60s"     // -test.timeout of a child: a hung child dumps its goroutines
	killParentAppend = 32        // records the parent appends after each recovery
	killWriterStride = 10        // writer ids are round*killWriterStride + slot
	killParentSlot   = 9         // the slot of the parent's writer in a round
	killTagSize      = 4 + 8 + 4 // writer, sequence number, length
)

// TestKillAppend checks that SIGKILL in the middle of appending loses
// nothing that was acknowledged. A child process appends with SyncFlush from
// several goroutines and prints one line per record after AppendBatch has
// returned; the parent kills it after a random number of lines, then
// recovers the log and checks that every acknowledged record reads back
// exactly, that every record in the log is one some writer appended, each
// writer's records forming a gapless prefix of what it wrote, and that the
// recovered log accepts appends and closes cleanly. Three children are
// killed in turn on the same directory, so later rounds recover a log that
// already went through recovery.
//
// The kernel keeps the page cache when a process dies, so this tests
// crash safety against the death of the process and the recovery of a log
// whose abort marker was left behind, not against power loss or an
// operating-system crash: bytes that were written but never synced survive
// here. The faultfs crash tests cover lost unsynced bytes.
func TestKillAppend(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes; skipped with -short")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RAFTLOG_KILL_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("RAFTLOG_KILL_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed %d", seed)
	for _, c := range []struct {
		name string
		wp   commitlog.WritePath
	}{{"pwrite", commitlog.WritePwrite}, {"mmap", commitlog.WriteMmap}} {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("seed %d: rerun with RAFTLOG_KILL_SEED=%d", seed, seed)
				}
			})
			k := &killTest{
				dir:   t.TempDir(),
				wp:    c.wp,
				rng:   rand.New(rand.NewPCG(seed, uint64(c.wp))),
				acked: make(map[int64]killAck),
			}
			for round := range killRounds {
				k.round(t, round)
			}
		})
	}
}

// killAck is an acknowledged record: the child printed it after its append
// returned, or the parent appended it.
type killAck struct {
	pos    int64
	writer uint32
	seq    uint64
	n      int
}

// killTest is the state of one write path's rounds.
type killTest struct {
	dir   string
	wp    commitlog.WritePath
	rng   *rand.Rand
	acked map[int64]killAck // every acknowledged record of every round, by position
}

// round starts a child, kills it after a random number of acknowledgements
// and checks the recovered log.
func (k *killTest) round(t *testing.T, round int) {
	t.Helper()
	target := killMinAcks + k.rng.IntN(killMaxAcks-killMinAcks+1)
	// A short checkpoint interval makes recovery start from a watermark
	// inside the log and check the record the checkpoint names.
	cpInterval := []time.Duration{2 * time.Millisecond, 20 * time.Millisecond, time.Second}[k.rng.IntN(3)]
	warm := k.rng.IntN(2) == 0
	childSeed := k.rng.Uint64()

	acks, stderr := k.runChild(t, round, target, cpInterval, warm, childSeed)
	defer func() {
		if t.Failed() {
			t.Logf("round %d: target %d acks, checkpoint interval %v, warm %v; child stderr:\n%s",
				round, target, cpInterval, warm, stderr)
		}
	}()
	for _, a := range acks {
		if want := len(killPayload(a.writer, a.seq)); a.n != want {
			t.Fatalf("round %d: child acknowledged writer %d seq %d with length %d, want %d", round, a.writer, a.seq, a.n, want)
		}
		if prev, ok := k.acked[a.pos]; ok {
			t.Fatalf("round %d: position %d acknowledged twice: %+v and %+v", round, a.pos, prev, a)
		}
		k.acked[a.pos] = a
	}

	opts := &commitlog.Options{SegmentSize: killSegmentSize, WritePath: k.wp}
	l, err := commitlog.Open(k.dir, opts)
	if err != nil {
		t.Fatalf("round %d: open after kill: %v\n%s", round, err, killListDir(k.dir))
	}
	defer func() {
		if l != nil {
			l.Close()
		}
	}()
	info := l.Recovery()
	if !info.Crashed {
		t.Errorf("round %d: Recovery().Crashed is false after SIGKILL: %+v", round, info)
	}
	// Every acknowledged record was synced before its AppendBatch
	// returned, so the sync mark the child left covers it: damage to it
	// would be refused, not cut off as a torn write
	// (TestSyncMarkDamagePastCheckpoint).
	var ackedEnd int64
	for _, a := range acks {
		ackedEnd = max(ackedEnd, a.pos+commitlog.HeaderSize+int64(a.n))
	}
	if info.Synced < ackedEnd {
		t.Errorf("round %d: recovery knew the log synced up to %d, short of the acknowledged records' end %d: %+v", round, info.Synced, ackedEnd, info)
	}
	k.checkAcked(t, l, round)
	k.checkAll(t, l, round)
	if err := l.Verify(); err != nil {
		t.Fatalf("round %d: Verify after kill: %v", round, err)
	}

	// The recovered log takes appends, closes cleanly and reopens without
	// recovery.
	w := uint32(round*killWriterStride + killParentSlot)
	for seq := uint64(0); seq < killParentAppend; {
		n := min(1+k.rng.IntN(killMaxBatch), killParentAppend-int(seq))
		batch := make([][]byte, n)
		for i := range batch {
			batch[i] = killPayload(w, seq+uint64(i))
		}
		pos, err := l.AppendBatch(batch)
		if err != nil {
			t.Fatalf("round %d: append after recovery: %v", round, err)
		}
		for i, p := range pos {
			k.acked[p] = killAck{pos: p, writer: w, seq: seq + uint64(i), n: len(batch[i])}
		}
		seq += uint64(n)
	}
	end := l.End()
	err = l.Close()
	l = nil
	if err != nil {
		t.Fatalf("round %d: close after recovery: %v", round, err)
	}
	l, err = commitlog.Open(k.dir, opts)
	if err != nil {
		t.Fatalf("round %d: reopen after clean close: %v\n%s", round, err, killListDir(k.dir))
	}
	if got := l.Recovery(); got.Crashed || got.End != end {
		t.Errorf("round %d: reopen after clean close: %+v, want Crashed false and End %d", round, got, end)
	}
	k.checkAcked(t, l, round)
	k.checkAll(t, l, round)
	if err := l.Verify(); err != nil {
		t.Fatalf("round %d: Verify after reopen: %v", round, err)
	}
	err = l.Close()
	l = nil
	if err != nil {
		t.Fatalf("round %d: close after reopen: %v", round, err)
	}
	t.Logf("round %d: killed at %d acks, read %d, recovered from %d to %d (%d records scanned), checkpoint interval %v, warm %v",
		round, target, len(acks), info.ScannedFrom, info.End, info.Records, cpInterval, warm)
}

// runChild runs the appender of round in a child process and SIGKILLs it
// once it has acknowledged target records. It returns every
// acknowledgement read, including those the child printed before it died
// but the parent read after the kill, and the child's stderr.
func (k *killTest) runChild(t *testing.T, round, target int, cpInterval time.Duration, warm bool, seed uint64) ([]killAck, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillHelper$", "-test.count=1", "-test.timeout="+killChildTimeout)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %d %d %t %s", killEnv, k.wp, round, seed, cpInterval, warm, k.dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}

	var acks []killAck
	var other []string
	killed := false
	var killErr error
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		a, err := parseKillAck(sc.Text())
		if err != nil {
			other = append(other, sc.Text())
			continue
		}
		acks = append(acks, a)
		if !killed && len(acks) >= target {
			// Only this child's PID; it has no children of its own.
			killErr = cmd.Process.Kill()
			killed = true
		}
	}
	scanErr := sc.Err()
	if !killed {
		// The child ended by itself or its output failed: make sure it is
		// gone before looking at why.
		cmd.Process.Kill()
	}
	waitErr := cmd.Wait()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("round %d: %s\nchild stdout other than acks:\n%s\nchild stderr:\n%s",
			round, fmt.Sprintf(format, args...), strings.Join(other, "\n"), stderr.String())
	}
	switch {
	case scanErr != nil:
		fail("reading child output after %d acks: %v", len(acks), scanErr)
	case !killed:
		fail("child exited after %d acks, before the kill at %d: %v", len(acks), target, waitErr)
	case killErr != nil:
		fail("kill child: %v", killErr)
	case len(other) > 0:
		fail("child printed lines that are not acks")
	case strings.Contains(stderr.String(), "DATA RACE"):
		fail("race detector report in child")
	}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		fail("child wait: %v, want death by SIGKILL", waitErr)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		fail("child ended with %v, want death by SIGKILL", ee)
	}
	return acks, stderr.String()
}

// parseKillAck parses "ack <pos> <writer> <seq> <len>".
func parseKillAck(line string) (killAck, error) {
	f := strings.Fields(line)
	if len(f) != 5 || f[0] != "ack" {
		return killAck{}, fmt.Errorf("not an ack: %q", line)
	}
	var v [4]uint64
	for i := range v {
		var err error
		if v[i], err = strconv.ParseUint(f[i+1], 10, 63); err != nil {
			return killAck{}, fmt.Errorf("bad ack %q: %v", line, err)
		}
	}
	if v[1] > 1<<32-1 {
		return killAck{}, fmt.Errorf("bad ack %q: writer out of range", line)
	}
	return killAck{pos: int64(v[0]), writer: uint32(v[1]), seq: v[2], n: int(v[3])}, nil
}

// checkAcked checks that every record acknowledged so far, in any round,
// reads back exactly at its position.
func (k *killTest) checkAcked(t *testing.T, l *commitlog.Log, round int) {
	t.Helper()
	for pos, a := range k.acked {
		rec, err := l.Read(pos)
		if err != nil {
			t.Fatalf("round %d: acknowledged record (writer %d seq %d) at %d: %v", round, a.writer, a.seq, pos, err)
		}
		if want := killPayload(a.writer, a.seq); rec.Position != pos || !bytes.Equal(rec.Payload, want) {
			t.Fatalf("round %d: acknowledged record (writer %d seq %d) at %d reads back as %d bytes at %d (%s), want %d bytes",
				round, a.writer, a.seq, pos, len(rec.Payload), rec.Position, describeKillPayload(rec.Payload), len(want))
		}
	}
}

// checkAll iterates the whole log and checks that every record in it is
// one a writer appended, that each writer's records are sequence numbers
// 0, 1, 2, ... in log order with none missing (a writer appends a batch
// only after the previous one returned, so the log holds a prefix of each
// writer's records), and that the iteration meets every acknowledged
// record.
func (k *killTest) checkAll(t *testing.T, l *commitlog.Log, round int) {
	t.Helper()
	if first := l.First(); first != 0 {
		t.Fatalf("round %d: First() = %d, want 0: nothing deletes segments here", round, first)
	}
	next := make(map[uint32]uint64)
	met := 0
	it := l.NewIterator(0)
	defer it.Close()
	last := int64(-1)
	for {
		rec, err := it.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("round %d: iterate after %d: %v", round, last, err)
		}
		if rec.Position <= last {
			t.Fatalf("round %d: iterator went from %d back to %d", round, last, rec.Position)
		}
		last = rec.Position
		w, seq, ok := parseKillPayload(rec.Payload)
		if !ok {
			t.Fatalf("round %d: record at %d is no writer's: %s", round, rec.Position, describeKillPayload(rec.Payload))
		}
		if w%killWriterStride != killParentSlot && (w%killWriterStride >= killWriters || int(w/killWriterStride) > round) {
			t.Fatalf("round %d: record at %d names writer %d, which does not exist", round, rec.Position, w)
		}
		if seq != next[w] {
			t.Fatalf("round %d: record at %d is writer %d seq %d, want seq %d", round, rec.Position, w, seq, next[w])
		}
		next[w]++
		if a, ok := k.acked[rec.Position]; ok {
			if a.writer != w || a.seq != seq {
				t.Fatalf("round %d: record at %d is writer %d seq %d, but writer %d seq %d was acknowledged there",
					round, rec.Position, w, seq, a.writer, a.seq)
			}
			met++
		}
	}
	if it.Position() != l.End() {
		t.Fatalf("round %d: iteration ended at %d, End() = %d", round, it.Position(), l.End())
	}
	if met != len(k.acked) {
		t.Fatalf("round %d: iteration met %d of %d acknowledged records", round, met, len(k.acked))
	}
}

// killListDir lists the files of dir with their sizes, for failure
// messages.
func killListDir(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s holds:", dir)
	for _, e := range entries {
		size := int64(-1)
		if fi, err := e.Info(); err == nil {
			size = fi.Size()
		}
		fmt.Fprintf(&b, "\n\t%s %d", e.Name(), size)
	}
	return b.String()
}

// killPayload returns the payload of record seq of writer w: a tag naming
// both and the length, then pseudo-random bytes; the length too is a
// function of w and seq.
func killPayload(w uint32, seq uint64) []byte {
	r := rand.New(rand.NewPCG(uint64(w)|0x6b696c6c<<32, seq))
	n := killTagSize + r.IntN(killMaxPayload-killTagSize+1)
	p := make([]byte, n)
	binary.LittleEndian.PutUint32(p[0:], w)
	binary.LittleEndian.PutUint64(p[4:], seq)
	binary.LittleEndian.PutUint32(p[12:], uint32(n))
	for i := killTagSize; i < n; i += 8 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], r.Uint64())
		copy(p[i:], b[:])
	}
	return p
}

// parseKillPayload returns the writer and sequence number p's tag names if
// p is exactly the payload killPayload gives for them.
func parseKillPayload(p []byte) (w uint32, seq uint64, ok bool) {
	if len(p) < killTagSize {
		return 0, 0, false
	}
	w, seq = binary.LittleEndian.Uint32(p), binary.LittleEndian.Uint64(p[4:])
	if int(binary.LittleEndian.Uint32(p[12:])) != len(p) {
		return 0, 0, false
	}
	return w, seq, bytes.Equal(p, killPayload(w, seq))
}

// describeKillPayload says what a payload's tag claims, for failure messages.
func describeKillPayload(p []byte) string {
	if len(p) < killTagSize {
		return fmt.Sprintf("%d bytes, too short for a tag", len(p))
	}
	return fmt.Sprintf("%d bytes tagged writer %d seq %d length %d", len(p),
		binary.LittleEndian.Uint32(p), binary.LittleEndian.Uint64(p[4:]), binary.LittleEndian.Uint32(p[12:]))
}

// TestKillHelper is the child process of TestKillAppend. It opens the log
// on the operating system's file system and appends from several goroutines
// with SyncFlush, printing "ack <pos> <writer> <seq> <len>" for each record
// once its AppendBatch has returned nil, until it is killed or reaches its
// bounds. Without killEnv it does nothing.
func TestKillHelper(t *testing.T) {
	v, ok := os.LookupEnv(killEnv)
	if !ok {
		return
	}
	// "<write path> <round> <seed> <checkpoint interval ns> <warm> <dir>";
	// the directory comes last as it may hold spaces.
	f := strings.SplitN(v, " ", 6)
	if len(f) != 6 {
		t.Fatalf("%s=%q: want 6 fields", killEnv, v)
	}
	var n [4]uint64
	for i := range n {
		var err error
		if n[i], err = strconv.ParseUint(f[i], 10, 64); err != nil {
			t.Fatalf("%s=%q: field %d: %v", killEnv, v, i, err)
		}
	}
	warm, err := strconv.ParseBool(f[4])
	if err != nil {
		t.Fatalf("%s=%q: %v", killEnv, v, err)
	}
	wp, round, seed, cpInterval, dir := commitlog.WritePath(n[0]), int(n[1]), n[2], time.Duration(n[3]), f[5]

	l, err := commitlog.Open(dir, &commitlog.Options{
		SegmentSize:        killSegmentSize,
		Flush:              commitlog.SyncFlush,
		WritePath:          wp,
		WarmSegments:       warm,
		CheckpointInterval: cpInterval,
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	deadline := time.Now().Add(killChildTime)
	var budget atomic.Int64
	budget.Store(killChildRecords)
	var stop atomic.Bool
	var outMu sync.Mutex // serialises writes to stdout
	var wg sync.WaitGroup
	for slot := range killWriters {
		wg.Go(func() {
			w := uint32(round*killWriterStride + slot)
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			var line []byte
			for seq := uint64(0); !stop.Load() && time.Now().Before(deadline); {
				n := 1 + r.IntN(killMaxBatch)
				if budget.Add(-int64(n)) < 0 {
					return
				}
				batch := make([][]byte, n)
				for i := range batch {
					batch[i] = killPayload(w, seq+uint64(i))
				}
				pos, err := l.AppendBatch(batch)
				if err != nil {
					stop.Store(true)
					t.Errorf("writer %d: append seq %d..%d: %v", w, seq, seq+uint64(n)-1, err)
					return
				}
				// One write per batch: at most a few hundred bytes, well
				// under PIPE_BUF, so the parent never reads half a line.
				line = line[:0]
				for i, p := range pos {
					line = fmt.Appendf(line, "ack %d %d %d %d\n", p, w, seq+uint64(i), len(batch[i]))
				}
				outMu.Lock()
				_, err = os.Stdout.Write(line)
				outMu.Unlock()
				if err != nil {
					stop.Store(true)
					t.Errorf("writer %d: write ack: %v", w, err)
					return
				}
				seq += uint64(n)
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}
