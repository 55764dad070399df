package commitlog

import (
	"bytes"
	"math/rand"
	"strings"
	"testing"

	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// TestSyncMarkDamagePastCheckpoint: a record synced (acknowledged) after
// the last checkpoint and damaged later fails its checksum like a write a
// crash tore. Recovery must not cut it off with every record after it: Open
// fails naming the file and offset, Scan reports the damage, and Cut at it
// keeps every record before it. The log stops without a checkpoint after
// the damaged record: killed, or a power loss that kept the page cache (the
// sync mark is never synced; what a power loss leaves of it is tested by
// TestCrashRandomized, where it must never make recovery refuse a log).
func TestSyncMarkDamagePastCheckpoint(t *testing.T) {
	for _, v := range crashVariants {
		for _, stop := range []string{"kill", "power loss keeping the page cache"} {
			t.Run(v.name+"/"+stop, func(t *testing.T) {
				fs := faultfs.New(5)
				opts := crashOptions(fs, 4096, SyncFlush, v.wp)
				opts.Preallocate = v.prealloc
				l, err := Open(crashTestDir, &opts)
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewSource(5))
				m := &crashModel{}
				for range 4 {
					crashAppend(t, l, m, rng, true, 1, 500)
				}
				if err := l.Checkpoint(); err != nil {
					t.Fatal(err)
				}
				for range 10 {
					crashAppend(t, l, m, rng, true, 1, 500) // each synced before it returns
				}
				if stop == "kill" {
					crashKill(l)
				} else {
					crashSettle(l)
					fs = fs.CrashKeepAll()
					opts.FS = fs
				}
				defer l.Close()

				bad := m.recs[7] // past the checkpoint, with six synced records after it
				base := bad.pos / 4096 * 4096
				path, off := crashSegmentPath(base), bad.pos-base
				crashFlipByte(t, fs, path, off+HeaderSize+100)

				if l2, err := Open(crashTestDir, &opts); err == nil {
					got := l2.Recovery()
					l2.Close()
					t.Fatalf("Open succeeded with a synced record damaged: recovery ended the log at %d (stop %q), cutting %d acknowledged records", got.End, got.Stop, len(m.recs)-7)
				} else {
					crashWantCorrupt(t, "Open", err, path, off)
					if !strings.Contains(err.Error(), "not a write torn by a crash") {
						t.Fatalf("Open: %v, want it to say the damage is not a torn write", err)
					}
				}

				sc, err := NewScanner(crashTestDir, &opts)
				if err != nil {
					t.Fatal(err)
				}
				info, err := sc.Scan(nil)
				sc.Close()
				if err != nil {
					t.Fatal(err)
				}
				if info.Damage == nil || info.Damage.Position != bad.pos {
					t.Fatalf("Scan: damage %+v, want the record at %d", info.Damage, bad.pos)
				}
				if want := m.recs[len(m.recs)-1].end(); info.Durable != want || info.End != want {
					t.Fatalf("Scan: durable %d, end %d; want both at the last synced record's end %d", info.Durable, info.End, want)
				}
				if err := Cut(crashTestDir, &opts, bad.pos, nil); err != nil {
					t.Fatal(err)
				}
				l3, err := Open(crashTestDir, &opts)
				if err != nil {
					t.Fatalf("Open after Cut: %v", err)
				}
				defer l3.Close()
				got, err := crashReadAll(l3)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != 7 {
					t.Fatalf("after Cut at record 7: %d records, want 7", len(got))
				}
				for i, r := range got {
					if r.Position != m.recs[i].pos || !bytes.Equal(r.Payload, m.recs[i].payload) {
						t.Fatalf("record %d after Cut: position %d, want %d, or payload differs", i, r.Position, m.recs[i].pos)
					}
				}
				// The cut started a new epoch: appends go on, and a kill
				// after them recovers without taking the old mark for its.
				m.truncate(bad.pos)
				crashAppend(t, l3, m, rng, true, 1, 500)
				crashKill(l3)
				l4, err := Open(crashTestDir, &opts)
				if err != nil {
					t.Fatalf("Open after an append past the cut and a kill: %v", err)
				}
				l4.Close()
			})
		}
	}
}

// TestSyncMarkTornTailStillCut: a record torn by a power loss that took the
// sync mark's latest write with it is still a torn tail, cut silently, and
// an unsynced record is never counted synced. The sync after the third
// append is the last one: the fourth record, written without a sync, is
// damaged; the mark says the log was synced only up to the third.
func TestSyncMarkTornTailStillCut(t *testing.T) {
	for _, v := range crashVariants {
		t.Run(v.name, func(t *testing.T) {
			fs := faultfs.New(7)
			opts := crashOptions(fs, 8192, SyncFlush, v.wp)
			opts.Preallocate = v.prealloc
			l, err := Open(crashTestDir, &opts)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewSource(7))
			m := &crashModel{}
			for range 3 {
				crashAppend(t, l, m, rng, true, 1, 300)
			}
			crashAppend(t, l, m, rng, false, 1, 300) // written, not synced
			crashSettle(l)
			fs = fs.CrashKeepAll()
			l.Close()
			opts.FS = fs
			torn := m.recs[3]
			base := torn.pos / 8192 * 8192
			crashFlipByte(t, fs, crashSegmentPath(base), torn.pos-base+HeaderSize+7)

			l2, err := Open(crashTestDir, &opts)
			if err != nil {
				t.Fatalf("Open with the unsynced last record torn: %v", err)
			}
			defer l2.Close()
			info := l2.Recovery()
			if info.End != torn.pos || !info.Torn || info.Synced != torn.pos {
				t.Fatalf("recovery: end %d, torn %v, synced %d; want the log to end at the torn record %d, synced up to it", info.End, info.Torn, info.Synced, torn.pos)
			}
			got, err := crashReadAll(l2)
			if err != nil || len(got) != 3 {
				t.Fatalf("records after recovery: %d (%v), want the 3 synced ones", len(got), err)
			}
		})
	}
}

// TestSyncMarkFreshLogForgetsOldMark: a log started afresh in a directory
// where an older log left a sync mark (its segments and checkpoint gone)
// must not take that mark for its own, since both begin at epoch 1.
func TestSyncMarkFreshLogForgetsOldMark(t *testing.T) {
	fs := faultfs.New(9)
	opts := crashOptions(fs, 4096, SyncFlush, WriteMmap)
	l, err := Open(crashTestDir, &opts)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(9))
	m := &crashModel{}
	for range 6 {
		crashAppend(t, l, m, rng, true, 1, 500)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := fs.ReadDir(crashTestDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if name != syncMarkName && name != lockName {
			if err := fs.Remove(crashTestDir + "/" + name); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := fs.SyncDir(crashTestDir); err != nil {
		t.Fatal(err)
	}

	l, err = Open(crashTestDir, &opts)
	if err != nil {
		t.Fatal(err)
	}
	m = &crashModel{}
	crashAppend(t, l, m, rng, true, 1, 100)
	crashAppend(t, l, m, rng, false, 1, 100) // written, not synced
	crashSettle(l)
	fs = fs.CrashKeepAll()
	l.Close()
	opts.FS = fs
	torn := m.recs[1]
	crashFlipByte(t, fs, crashSegmentPath(0), torn.pos+HeaderSize+3)
	l, err = Open(crashTestDir, &opts)
	if err != nil {
		t.Fatalf("Open with an unsynced record torn, below the old log's mark: %v", err)
	}
	defer l.Close()
	if info := l.Recovery(); info.End != torn.pos {
		t.Fatalf("recovery ended the log at %d, want %d", info.End, torn.pos)
	}
}

// TestSyncMarkSlots checks the slot encoding: a slot decodes only whole and
// in its place, and the highest position of the wanted epoch wins.
func TestSyncMarkSlots(t *testing.T) {
	b := make([]byte, syncMarkSize)
	encodeSyncMark(b[syncMarkStride:], syncMarkSlot{seq: 7, synced: 900, epoch: 3})
	encodeSyncMark(b[0:], syncMarkSlot{seq: 8, synced: 1200, epoch: 4})
	got := decodeSyncMarks(b)
	if len(got) != 2 {
		t.Fatalf("decoded %d slots, want 2", len(got))
	}
	for _, tt := range []struct {
		epoch uint32
		want  int64
	}{{3, 900}, {4, 1200}, {5, -1}} {
		if s := syncedUpTo(got, tt.epoch); s != tt.want {
			t.Errorf("epoch %d: synced up to %d, want %d", tt.epoch, s, tt.want)
		}
	}
	for i := range syncMarkLen {
		c := bytes.Clone(b)
		c[i] ^= 1
		if n := len(decodeSyncMarks(c)); n != 1 {
			t.Fatalf("byte %d of slot 0 flipped: %d slots decode, want 1", i, n)
		}
	}
	misplaced := make([]byte, syncMarkSize)
	encodeSyncMark(misplaced, syncMarkSlot{seq: 7, synced: 900, epoch: 3})
	if n := len(decodeSyncMarks(misplaced)); n != 0 {
		t.Fatalf("an odd sequence in slot 0 decodes (%d slots)", n)
	}
}
