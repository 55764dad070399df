package commitlog

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// Tests of how the log meets I/O errors and a full disk, on faultfs. The
// helpers shared with flush_test.go are named flushTest*.

// faultTestIsFailure fails the test unless err is the latched failure of an
// injected EIO.
func faultTestIsFailure(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("%s: %v, want an error matching ErrFailed and syscall.EIO", what, err)
	}
}

// TestFaultIOErrorFailsLog injects EIO into the data sync or the pwrite
// while a sync is held open and eight appenders arrive: every one of them,
// and every later call, gets the latched failure; a reopen on the same file
// system (no crash) finds every acknowledged record and works again.
func TestFaultIOErrorFailsLog(t *testing.T) {
	for _, tc := range []struct {
		name string
		wp   WritePath
		op   faultfs.Op
		// after is how many matching calls succeed before the fault.
		after int
		// allWait is set when every appender waits for the failing sync;
		// otherwise some fail in their own write.
		allWait bool
	}{
		{name: "pwrite/fdatasync", wp: WritePwrite, op: faultfs.OpSync, allWait: true},
		{name: "mmap/msync", wp: WriteMmap, op: faultfs.OpMsync, allWait: true},
		{name: "pwrite/write", wp: WritePwrite, op: faultfs.OpWrite, after: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := faultfs.New(11)
			opts := Options{SegmentSize: 1 << 20, WritePath: tc.wp}
			l := flushTestOpen(t, fs, opts)
			p := newFlushTestProbe(t, fs)
			acked := flushTestAppend(t, l, 0, 5, 300)

			// Hold a sync that succeeds, and arm the fault behind it.
			release := p.hold()
			var heldReturned, returned atomic.Int64
			held := flushTestAppendAll(l, 1, func(int) []byte { return payloadFor(10, 40) }, &heldReturned)
			p.waitHeld()
			fs.Inject(faultfs.Fault{Op: tc.op, Path: flushTestSegPath, After: tc.after})
			const appenders = 8
			results := flushTestAppendAll(l, appenders, func(i int) []byte { return payloadFor(100+i, 100+50*i) }, &returned)
			flushTestWaitFor(t, "8 appenders to wait or fail", func() bool {
				return flushTestWaiters(l)+int(returned.Load()) == appenders
			})
			if tc.allWait && returned.Load() != 0 {
				t.Fatalf("%d appends returned before the failing sync ran", returned.Load())
			}
			release()

			if r := flushTestRecv(t, held, "the append of the held sync"); r.err != nil {
				t.Fatalf("append covered by the sync that succeeded: %v", r.err)
			} else {
				acked = append(acked, r.flushTestRecord)
			}
			for range appenders {
				r := flushTestRecv(t, results, "an append meeting the failure")
				faultTestIsFailure(t, "concurrent append", r.err)
			}
			failure := l.Err()
			faultTestIsFailure(t, "Err()", failure)
			if seg := filepath.Join(flushTestDir, segmentName(0)); !strings.Contains(failure.Error(), seg) {
				t.Errorf("failure %q does not name the segment %s", failure, seg)
			}

			_, err := l.Append([]byte("later"))
			faultTestIsFailure(t, "Append after the failure", err)
			_, err = l.AppendBatch([][]byte{[]byte("later"), []byte("batch")})
			faultTestIsFailure(t, "AppendBatch after the failure", err)
			_, _, err = l.Write([][]byte{[]byte("later")})
			faultTestIsFailure(t, "Write after the failure", err)
			faultTestIsFailure(t, "Sync after the failure", l.Sync())
			faultTestIsFailure(t, "Truncate after the failure", l.Truncate(acked[2].pos))
			if got := l.Err(); got != failure {
				t.Fatalf("Err() changed from %v to %v", failure, got)
			}
			if err := l.Close(); err == nil {
				t.Fatal("Close of a failed log returned nil")
			}

			// Reopen on the same file system: no crash, the failed calls
			// left the page cache as it was.
			l2 := flushTestOpen(t, fs, opts)
			flushTestVerify(t, l2, acked)
			if err := l2.Err(); err != nil {
				t.Fatalf("reopened log: %v", err)
			}
			acked = append(acked, flushTestAppend(t, l2, 200, 3, 200)...)
			flushTestVerify(t, l2, acked)
			if err := l2.Close(); err != nil {
				t.Fatalf("close after reopen: %v", err)
			}
		})
	}
}

// TestFaultNoSpace fills the disk so that the third segment cannot be
// created, by capacity or by ENOSPC from fallocate: the appends that need
// it fail with ErrNoSpace and write nothing, the log stays usable, appends
// succeed once there is space and every acknowledged record survives a
// crash.
func TestFaultNoSpace(t *testing.T) {
	const (
		seg  = 16 << 10
		size = 1000
	)
	n := recordSize(size)
	limit := int64(2 * seg) // the end of the second segment
	third := filepath.Join(flushTestDir, segmentName(limit))
	for _, wp := range flushTestPaths {
		for _, pre := range []Preallocation{PreallocateZeroes, PreallocateSparse} {
			for _, how := range []string{"capacity", "allocate"} {
				name := fmt.Sprintf("%s/prealloc=%d/%s", flushTestPathName(wp), pre, how)
				t.Run(name, func(t *testing.T) {
					fs := faultfs.New(12)
					if how == "capacity" {
						// The checkpoint's two slots, the sync mark, the
						// first segment and the one prepared after it, and
						// a little more.
						fs.SetCapacity(2*checkpointSlotSize + syncMarkSize + 2*seg + 1024)
					}
					opts := Options{SegmentSize: seg, WritePath: wp, Preallocate: pre}
					l := flushTestOpen(t, fs, opts)
					if how == "allocate" {
						// Only the third segment: the second is created on
						// demand once the first is half full.
						fs.Inject(faultfs.Fault{Op: faultfs.OpAllocate, Path: segmentName(limit), Err: syscall.ENOSPC, Sticky: true})
					}

					var acked []flushTestRecord
					i := 0
					appendOne := func() {
						t.Helper()
						acked = append(acked, flushTestAppend(t, l, i, 1, size)...)
						i++
					}
					isNoSpace := func(what string, err error) {
						t.Helper()
						if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
							t.Fatalf("%s: %v, want an error matching ErrNoSpace and syscall.ENOSPC", what, err)
						}
						if !strings.Contains(err.Error(), third) {
							t.Errorf("%s: %q does not name the segment %s", what, err, third)
						}
					}
					unchanged := func(what string, end int64) {
						t.Helper()
						if got := l.End(); got != end {
							t.Fatalf("%s: end moved from %d to %d", what, end, got)
						}
						if err := l.Err(); err != nil {
							t.Fatalf("%s failed the log: %v", what, err)
						}
						if _, err := l.Read(end); !errors.Is(err, ErrNotFound) {
							t.Fatalf("%s: read at the end %d: %v, want ErrNotFound", what, end, err)
						}
						flushTestVerifyExact(t, l, acked)
					}

					// A batch that would fill the first segment, take the
					// prepared second one and need a third.
					big := int(seg) * 5 / 8
					_, err := l.AppendBatch([][]byte{payloadFor(900, big), payloadFor(901, big), payloadFor(902, big)})
					isNoSpace("batch needing the second and a third segment", err)
					unchanged("failed batch over three segments", 0)

					// Into the second segment, until two more records do
					// not fit in it but one does.
					for l.End() < seg || l.End()+2*n <= limit {
						appendOne()
					}
					end := l.End()
					_, err = l.AppendBatch([][]byte{payloadFor(1000, size), payloadFor(1001, size)})
					isNoSpace("batch needing a third segment", err)
					unchanged("failed batch", end)

					for l.End()+n <= limit {
						appendOne()
					}
					end = l.End()
					_, err = l.Append(payloadFor(1002, size))
					isNoSpace("append needing a third segment", err)
					unchanged("failed append", end)
					_, _, err = l.Write([][]byte{payloadFor(1003, size)})
					isNoSpace("write needing a third segment", err)
					unchanged("failed write", end)

					// Space again.
					if how == "capacity" {
						fs.SetCapacity(0)
					} else {
						fs.ClearFaults()
					}
					appendOne()
					if got := acked[len(acked)-1].pos; got != limit {
						t.Fatalf("first append after space returned at %d, want the third segment at %d", got, limit)
					}
					for range 20 { // into a fourth segment
						appendOne()
					}
					flushTestVerifyExact(t, l, acked)

					flushTestSettle(t, l)
					nfs := fs.CrashDropAll()
					l.Close()
					l2 := flushTestOpen(t, nfs, opts)
					flushTestVerifyExact(t, l2, acked)
					flushTestAppend(t, l2, 2000, 1, size)
				})
			}
		}
	}
}

// TestFaultDirSyncOnNewSegment fails the directory sync that makes a new
// segment's name durable. When it keeps failing, the append needing the
// segment fails and writes nothing; when only the background preparation
// met it, the append creates the segment itself, durably.
func TestFaultDirSyncOnNewSegment(t *testing.T) {
	const (
		seg  = 16 << 10
		size = 1000
	)
	n := recordSize(size)
	limit := int64(2 * seg)
	for _, wp := range flushTestPaths {
		for _, sticky := range []bool{true, false} {
			name := fmt.Sprintf("%s/sticky=%v", flushTestPathName(wp), sticky)
			t.Run(name, func(t *testing.T) {
				fs := faultfs.New(13)
				opts := Options{SegmentSize: seg, WritePath: wp}
				l := flushTestOpen(t, fs, opts)

				// Fill two segments. The fault is armed once appends reach
				// the second segment, before it is half full, which is when
				// the background preparation of the third starts (and
				// fails).
				var acked []flushTestRecord
				i := 0
				armed := false
				for l.End() < seg || l.End()+n <= limit {
					acked = append(acked, flushTestAppend(t, l, i, 1, size)...)
					i++
					if !armed && l.End() >= seg {
						fs.Inject(faultfs.Fault{Op: faultfs.OpSyncDir, Path: flushTestDir, Sticky: sticky})
						armed = true
					}
				}
				end := l.End()
				p := payloadFor(i, size)
				pos, err := l.Append(p)
				if sticky {
					if err == nil {
						t.Fatalf("append into a segment whose name could not be made durable succeeded at %d", pos)
					}
					if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "sync directory") {
						t.Fatalf("append: %v, want a failed directory sync wrapping EIO", err)
					}
					if got := l.End(); got != end {
						t.Fatalf("end moved from %d to %d", end, got)
					}
					flushTestVerifyExact(t, l, acked)
					fs.ClearFaults()
					pos, err = l.Append(p)
				}
				if err != nil {
					t.Fatalf("append with the directory sync working: %v", err)
				}
				if pos != limit {
					t.Fatalf("append at %d, want the third segment at %d", pos, limit)
				}
				acked = append(acked, flushTestRecord{pos, p})
				acked = append(acked, flushTestAppend(t, l, i+1, 5, size)...)
				flushTestVerifyExact(t, l, acked)

				// The third segment's name must be durable.
				flushTestSettle(t, l)
				nfs := fs.CrashDropAll()
				l.Close()
				flushTestVerifyExact(t, flushTestOpen(t, nfs, opts), acked)
			})
		}
	}
}
