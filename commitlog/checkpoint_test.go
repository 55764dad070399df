package commitlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlog/raftlog/commitlog/faultfs"
	"github.com/raftlog/raftlog/commitlog/vfs"
)

// checkpointTestSlot encodes c or fails the test.
func checkpointTestSlot(t testing.TB, c checkpoint) []byte {
	t.Helper()
	b, err := encodeCheckpoint(c)
	if err != nil {
		t.Fatalf("encodeCheckpoint(%+v): %v", c, err)
	}
	return b
}

// checkpointTestReseal recomputes the CRC of the slot in b, whose meta is
// metaLen bytes long, after a test edited a field.
func checkpointTestReseal(b []byte, metaLen int) []byte {
	end := checkpointFixedSize + metaLen
	binary.LittleEndian.PutUint32(b[end:end+4], crc32.Checksum(b[:end], castagnoli))
	return b
}

// checkpointTestEqual fails the test unless got and want have the same
// fields; a nil and an empty meta are equal.
func checkpointTestEqual(t *testing.T, got, want checkpoint) {
	t.Helper()
	if got.seq != want.seq || got.flushed != want.flushed || got.lastRecord != want.lastRecord ||
		got.timestamp != want.timestamp || got.epoch != want.epoch || got.epochStart != want.epochStart ||
		!bytes.Equal(got.meta, want.meta) {
		t.Fatalf("checkpoint %+v, want %+v", got, want)
	}
}

// checkpointTestOpen opens the checkpoint at path or fails the test, and
// closes it when the test ends.
func checkpointTestOpen(t *testing.T, fs vfs.FS, path string) (*checkpointFile, checkpoint, bool) {
	t.Helper()
	f, c, found, err := openCheckpoint(fs, path)
	if err != nil {
		t.Fatalf("openCheckpoint: %v", err)
	}
	t.Cleanup(func() { f.close() })
	return f, c, found
}

// checkpointTestSample returns a checkpoint with seq and a meta of metaLen
// bytes.
func checkpointTestSample(seq uint64, metaLen int) checkpoint {
	return checkpoint{
		seq:        seq,
		flushed:    int64(seq) * 1000,
		lastRecord: int64(seq)*1000 - 200,
		timestamp:  1_700_000_000_000_000_000 + int64(seq),
		epoch:      uint32(seq/2 + 1),
		epochStart: int64(seq/2) * 1000,
		meta:       bytes.Repeat([]byte{byte(seq) | 1}, metaLen),
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		c    checkpoint
	}{
		{"empty log", checkpoint{seq: 1, flushed: 0, lastRecord: -1, epoch: 1}},
		{"records, no meta", checkpoint{seq: 2, flushed: 1 << 30, lastRecord: 1<<30 - 4096, timestamp: 1_700_000_000_000_000_000, epoch: 1}},
		{"last record ends at flushed", checkpoint{seq: 3, flushed: 96, lastRecord: 64, timestamp: 5, epoch: 2, epochStart: 64}},
		{"nothing durable past a prefix", checkpoint{seq: 4, flushed: 1 << 20, lastRecord: -1, epoch: 7, epochStart: 1 << 20}},
		{"largest values", checkpoint{seq: ^uint64(0), flushed: 1 << 62, lastRecord: 1 << 61, timestamp: -1, epoch: ^uint32(0), epochStart: 1 << 62}},
		{"small meta", checkpoint{seq: 5, flushed: 100, lastRecord: 0, epoch: 1, meta: []byte("applied=42")}},
		{"meta of the maximum size", checkpointTestSample(6, maxCheckpointMeta)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := checkpointTestSlot(t, tt.c)
			if len(b) != checkpointSlotSize {
				t.Fatalf("slot is %d bytes, want %d", len(b), checkpointSlotSize)
			}
			got, err := decodeCheckpoint(b)
			if err != nil {
				t.Fatalf("decodeCheckpoint: %v", err)
			}
			checkpointTestEqual(t, got, tt.c)
			// The decoded meta is a copy, not a view of the slot.
			for i := range b {
				b[i] = 0
			}
			checkpointTestEqual(t, got, tt.c)
			// Bytes past the slot are not part of it.
			b = append(checkpointTestSlot(t, tt.c), 0xFF)
			if got, err := decodeCheckpoint(b); err != nil {
				t.Fatalf("decodeCheckpoint of a slot and a trailing byte: %v", err)
			} else {
				checkpointTestEqual(t, got, tt.c)
			}
		})
	}
}

func TestEncodeCheckpointErrors(t *testing.T) {
	tests := []struct {
		name string
		c    checkpoint
		want error
	}{
		{"meta one byte too long", checkpoint{flushed: 0, lastRecord: -1, epoch: 1, meta: make([]byte, maxCheckpointMeta+1)}, errCheckpointMetaSize},
		{"meta far too long", checkpoint{flushed: 0, lastRecord: -1, epoch: 1, meta: make([]byte, 1<<20)}, errCheckpointMetaSize},
		{"negative flushed", checkpoint{flushed: -1, lastRecord: -1, epoch: 1}, errCheckpointValues},
		{"last record below -1", checkpoint{flushed: 100, lastRecord: -2, epoch: 1}, errCheckpointValues},
		{"last record header past flushed", checkpoint{flushed: 100, lastRecord: 100 - HeaderSize + 1, epoch: 1}, errCheckpointValues},
		{"last record with nothing flushed", checkpoint{flushed: 0, lastRecord: 0, epoch: 1}, errCheckpointValues},
		{"epoch 0", checkpoint{flushed: 0, lastRecord: -1}, errCheckpointValues},
		{"negative epoch start", checkpoint{flushed: 0, lastRecord: -1, epoch: 1, epochStart: -1}, errCheckpointValues},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := encodeCheckpoint(tt.c)
			if !errors.Is(err, tt.want) {
				t.Fatalf("encodeCheckpoint: error %v, want %v", err, tt.want)
			}
			if b != nil {
				t.Errorf("encodeCheckpoint failed but returned %d bytes", len(b))
			}
		})
	}
}

func TestDecodeCheckpointErrors(t *testing.T) {
	const metaLen = 10
	slot := func() []byte { return checkpointTestSlot(t, checkpointTestSample(7, metaLen)) }
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"no bytes", nil, errCheckpointShort},
		{"one byte short", slot()[:checkpointSlotSize-1], errCheckpointShort},
		{"zeroed slot", make([]byte, checkpointSlotSize), errCheckpointMagic},
		{"wrong magic", func() []byte {
			b := slot()
			b[3] = 'X'
			return checkpointTestReseal(b, metaLen)
		}(), errCheckpointMagic},
		{"version 0", func() []byte {
			b := slot()
			b[4] = 0
			return checkpointTestReseal(b, metaLen)
		}(), errCheckpointVersion},
		{"version 2", func() []byte {
			b := slot()
			b[4] = 2
			return checkpointTestReseal(b, metaLen)
		}(), errCheckpointVersion},
		{"reserved not zero", func() []byte {
			b := slot()
			b[7] = 1
			return checkpointTestReseal(b, metaLen)
		}(), errCheckpointReserved},
		{"meta length one past the maximum", func() []byte {
			b := slot()
			binary.LittleEndian.PutUint32(b[52:56], maxCheckpointMeta+1)
			return b
		}(), errCheckpointLength},
		{"meta length huge", func() []byte {
			b := slot()
			binary.LittleEndian.PutUint32(b[52:56], ^uint32(0))
			return b
		}(), errCheckpointLength},
		{"meta byte changed", func() []byte {
			b := slot()
			b[checkpointFixedSize+3]++
			return b
		}(), errCheckpointChecksum},
		{"flushed changed", func() []byte {
			b := slot()
			b[16]++
			return b
		}(), errCheckpointChecksum},
		{"stored CRC changed", func() []byte {
			b := slot()
			b[checkpointFixedSize+metaLen]++
			return b
		}(), errCheckpointChecksum},
		{"meta length shortened", func() []byte {
			b := slot()
			binary.LittleEndian.PutUint32(b[52:56], metaLen-1)
			return b
		}(), errCheckpointChecksum},
		{"padding not zero", func() []byte {
			b := slot()
			b[checkpointSlotSize-1] = 1
			return b
		}(), errCheckpointPadding},
		{"padding right after the CRC not zero", func() []byte {
			b := slot()
			b[checkpointFixedSize+metaLen+4] = 1
			return b
		}(), errCheckpointPadding},
		{"negative flushed", func() []byte {
			b := slot()
			binary.LittleEndian.PutUint64(b[16:24], uint64(1)<<63)
			return checkpointTestReseal(b, metaLen)
		}(), errCheckpointValues},
		{"last record past flushed", func() []byte {
			b := slot()
			binary.LittleEndian.PutUint64(b[24:32], 7000)
			return checkpointTestReseal(b, metaLen)
		}(), errCheckpointValues},
		{"negative epoch start", func() []byte {
			b := slot()
			binary.LittleEndian.PutUint64(b[40:48], ^uint64(0))
			return checkpointTestReseal(b, metaLen)
		}(), errCheckpointValues},
		{"epoch 0", func() []byte {
			b := slot()
			binary.LittleEndian.PutUint32(b[48:52], 0)
			return checkpointTestReseal(b, metaLen)
		}(), errCheckpointValues},
		{"epoch changed", func() []byte {
			b := slot()
			b[48]++
			return b
		}(), errCheckpointChecksum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := decodeCheckpoint(tt.b)
			if !errors.Is(err, tt.want) {
				t.Fatalf("decodeCheckpoint: error %v, want %v", err, tt.want)
			}
			checkpointTestEqual(t, c, checkpoint{})
		})
	}
}

// TestDecodeCheckpointDetectsBitFlips flips every bit of a slot, one at a
// time, and checks that each result is rejected.
func TestDecodeCheckpointDetectsBitFlips(t *testing.T) {
	b := checkpointTestSlot(t, checkpointTestSample(9, 100))
	for bit := 0; bit < 8*len(b); bit++ {
		b[bit/8] ^= 1 << (bit % 8)
		if c, err := decodeCheckpoint(b); err == nil {
			t.Errorf("flipped bit %d (byte %d) decodes as %+v", bit, bit/8, c)
		}
		b[bit/8] ^= 1 << (bit % 8)
	}
}

func TestOpenCheckpointFresh(t *testing.T) {
	fs := &checkpointFaultFS{FS: vfs.Default}
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint")
	_, c, found := checkpointTestOpen(t, fs, path)
	if found {
		t.Fatalf("fresh checkpoint file: found %+v", c)
	}
	checkpointTestEqual(t, c, checkpoint{})
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, make([]byte, 2*checkpointSlotSize)) {
		t.Errorf("fresh file is %d bytes, not %d zero bytes", len(raw), 2*checkpointSlotSize)
	}
	if fs.syncs == 0 {
		t.Error("the new file was not synced")
	}
	if len(fs.syncedDirs) != 1 || fs.syncedDirs[0] != dir {
		t.Errorf("synced directories %q, want [%q]", fs.syncedDirs, dir)
	}
}

func TestCheckpointWriteAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint")
	f, _, _ := checkpointTestOpen(t, vfs.Default, path)
	for seq := uint64(1); seq <= 5; seq++ {
		want := checkpointTestSample(seq, int(seq)*3)
		// write assigns the sequence, whatever the caller put there.
		in := want
		in.seq = 1000
		if err := f.write(in); err != nil {
			t.Fatalf("write %d: %v", seq, err)
		}
		_, got, found := checkpointTestOpen(t, vfs.Default, path)
		if !found {
			t.Fatalf("after write %d: no checkpoint found", seq)
		}
		checkpointTestEqual(t, got, want)
	}
	if err := f.close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	// A reopened file continues the sequence.
	f2, got, found := checkpointTestOpen(t, vfs.Default, path)
	if !found || got.seq != 5 {
		t.Fatalf("reopen: found %v, seq %d, want seq 5", found, got.seq)
	}
	if err := f2.write(checkpointTestSample(6, 0)); err != nil {
		t.Fatalf("write after reopen: %v", err)
	}
	_, got, _ = checkpointTestOpen(t, vfs.Default, path)
	checkpointTestEqual(t, got, checkpointTestSample(6, 0))
}

// TestOpenCheckpointSlots opens files laid out by hand and checks which
// slot wins, then that a write after open keeps the sequence going and is
// found on the next open.
func TestOpenCheckpointSlots(t *testing.T) {
	enc := func(seq uint64) []byte { return checkpointTestSlot(t, checkpointTestSample(seq, 50)) }
	zero := make([]byte, checkpointSlotSize)
	// torn is a write of the slot for seq cut after n bytes over old.
	torn := func(seq uint64, n int, old []byte) []byte {
		return append(enc(seq)[:n:n], old[n:]...)
	}
	garble := func(b []byte, at int) []byte {
		b = bytes.Clone(b)
		b[at] ^= 0x10
		return b
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name      string
		raw       []byte // the file's content; nil for no file
		wantFound bool
		wantSeq   uint64
	}{
		{"no file", nil, false, 0},
		{"empty file", []byte{}, false, 0},
		{"both slots zero", cat(zero, zero), false, 0},
		{"only slot 1 written", cat(zero, enc(1)), true, 1},
		{"newer in slot 0", cat(enc(2), enc(1)), true, 2},
		{"newer in slot 1", cat(enc(4), enc(5)), true, 5},
		{"newer slot 1 torn inside its sequence", cat(enc(4), torn(5, 12, enc(3))), true, 4},
		{"newer slot 1 torn in meta", cat(enc(4), torn(5, 60, enc(3))), true, 4},
		{"newer slot 0 torn after the CRC", cat(torn(6, 200, garble(enc(4), 300)), enc(5)), true, 5},
		{"newer slot 0 torn before its meta length", cat(torn(2, 40, zero), enc(1)), true, 1},
		{"newer slot 0 torn only in its zero padding", cat(torn(2, checkpointSlotSize/2, zero), enc(1)), true, 2},
		{"newer slot 1 garbled", cat(enc(4), garble(enc(5), 20)), true, 4},
		{"older slot garbled", cat(enc(4), garble(enc(3), 20)), true, 4},
		{"both slots garbled", cat(garble(enc(4), 20), garble(enc(5), 45)), false, 0},
		{"both slots garbage", bytes.Repeat([]byte{0xA5}, 2*checkpointSlotSize), false, 0},
		{"slot 0 holds an odd sequence", cat(enc(3), zero), false, 0},
		{"file holds only slot 0", enc(2), true, 2},
		{"file cut inside slot 1's meta", cat(enc(2), enc(3)[:60]), true, 2},
		{"file cut inside slot 1's padding", cat(enc(2), enc(3)[:1000]), true, 3},
		{"file cut inside slot 0's header", enc(2)[:20], false, 0},
		{"file cut inside slot 0's padding", enc(2)[:checkpointSlotSize-1], true, 2},
		{"file longer than two slots", cat(enc(2), enc(3), enc(4)), true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint")
			if tt.raw != nil {
				if err := os.WriteFile(path, tt.raw, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			f, c, found := checkpointTestOpen(t, vfs.Default, path)
			if found != tt.wantFound {
				t.Fatalf("found %v, want %v (checkpoint %+v)", found, tt.wantFound, c)
			}
			if found {
				checkpointTestEqual(t, c, checkpointTestSample(tt.wantSeq, 50))
			} else {
				checkpointTestEqual(t, c, checkpoint{})
			}
			if fi, err := os.Stat(path); err != nil {
				t.Fatal(err)
			} else if fi.Size() < 2*checkpointSlotSize {
				t.Errorf("after open the file is %d bytes, want at least %d", fi.Size(), 2*checkpointSlotSize)
			}

			next := checkpointTestSample(tt.wantSeq+1, 7)
			if err := f.write(next); err != nil {
				t.Fatalf("write: %v", err)
			}
			_, c, found = checkpointTestOpen(t, vfs.Default, path)
			if !found {
				t.Fatal("the checkpoint written after open is not found")
			}
			checkpointTestEqual(t, c, next)
		})
	}
}

func TestCheckpointMetaLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint")
	f, _, _ := checkpointTestOpen(t, vfs.Default, path)
	largest := checkpointTestSample(1, maxCheckpointMeta)
	if err := f.write(largest); err != nil {
		t.Fatalf("write with %d bytes of meta: %v", maxCheckpointMeta, err)
	}
	err := f.write(checkpointTestSample(2, maxCheckpointMeta+1))
	if !errors.Is(err, errCheckpointMetaSize) {
		t.Fatalf("write with %d bytes of meta: error %v, want %v", maxCheckpointMeta+1, err, errCheckpointMetaSize)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
	_, got, found := checkpointTestOpen(t, vfs.Default, path)
	if !found {
		t.Fatal("no checkpoint found")
	}
	checkpointTestEqual(t, got, largest)
	// The failed write did not use up a sequence.
	if err := f.write(checkpointTestSample(2, 1)); err != nil {
		t.Fatal(err)
	}
	_, got, _ = checkpointTestOpen(t, vfs.Default, path)
	checkpointTestEqual(t, got, checkpointTestSample(2, 1))
}

// errCheckpointTestInjected is the error checkpointFaultFS injects.
var errCheckpointTestInjected = errors.New("injected checkpoint test fault")

// checkpointFaultFS wraps an FS to count syncs and fail them, or writes,
// on demand. Tests set its fields between calls, from one goroutine.
type checkpointFaultFS struct {
	vfs.FS
	failWrite  bool     // WriteAt writes at most 20 bytes, then fails
	failSync   bool     // File.Sync fails
	failDir    bool     // SyncDir fails
	syncs      int      // successful File.Sync calls
	syncedDirs []string // successful SyncDir calls
}

func (fs *checkpointFaultFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &checkpointFaultFile{File: f, fs: fs}, nil
}

func (fs *checkpointFaultFS) SyncDir(dir string) error {
	if fs.failDir {
		return errCheckpointTestInjected
	}
	if err := fs.FS.SyncDir(dir); err != nil {
		return err
	}
	fs.syncedDirs = append(fs.syncedDirs, dir)
	return nil
}

// checkpointFaultFile is a file of a checkpointFaultFS.
type checkpointFaultFile struct {
	vfs.File
	fs *checkpointFaultFS
}

func (f *checkpointFaultFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.failWrite {
		n, err := f.File.WriteAt(p[:min(len(p), 20)], off)
		if err != nil {
			return n, err
		}
		return n, errCheckpointTestInjected
	}
	return f.File.WriteAt(p, off)
}

func (f *checkpointFaultFile) Sync() error {
	if f.fs.failSync {
		return errCheckpointTestInjected
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.fs.syncs++
	return nil
}

func TestCheckpointWriteErrors(t *testing.T) {
	tests := []struct {
		name string
		set  func(fs *checkpointFaultFS)
		torn bool // the failed write leaves its slot torn
	}{
		{"write torn", func(fs *checkpointFaultFS) { fs.failWrite = true }, true},
		{"sync fails", func(fs *checkpointFaultFS) { fs.failSync = true }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := &checkpointFaultFS{FS: vfs.Default}
			path := filepath.Join(t.TempDir(), "checkpoint")
			f, _, _ := checkpointTestOpen(t, fs, path)
			for seq := uint64(1); seq <= 3; seq++ {
				if err := f.write(checkpointTestSample(seq, 20)); err != nil {
					t.Fatal(err)
				}
			}
			syncs := fs.syncs

			tt.set(fs)
			err := f.write(checkpointTestSample(4, 20))
			if !errors.Is(err, errCheckpointTestInjected) {
				t.Fatalf("write: error %v, want %v", err, errCheckpointTestInjected)
			}
			if !strings.Contains(err.Error(), "write checkpoint "+path) {
				t.Errorf("error %q does not name the write of %s", err, path)
			}
			if tt.torn && fs.syncs != syncs {
				t.Error("a failed write was synced")
			}
			*fs = checkpointFaultFS{FS: vfs.Default}

			if tt.torn {
				_, got, found := checkpointTestOpen(t, fs, path)
				if !found {
					t.Fatal("a torn write lost the previous checkpoint")
				}
				checkpointTestEqual(t, got, checkpointTestSample(3, 20))
			}
			// The failed write did not advance the sequence: the retry
			// takes sequence 4 and the same slot.
			if err := f.write(checkpointTestSample(4, 30)); err != nil {
				t.Fatalf("write after the fault: %v", err)
			}
			_, got, found := checkpointTestOpen(t, fs, path)
			if !found {
				t.Fatal("no checkpoint after the retried write")
			}
			checkpointTestEqual(t, got, checkpointTestSample(4, 30))
		})
	}
}

func TestOpenCheckpointErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		fs   *checkpointFaultFS
		path string
		want error
	}{
		{"missing directory", &checkpointFaultFS{FS: vfs.Default}, filepath.Join(dir, "missing", "checkpoint"), os.ErrNotExist},
		{"sync of the new file fails", &checkpointFaultFS{FS: vfs.Default, failSync: true}, filepath.Join(dir, "sync"), errCheckpointTestInjected},
		{"directory sync fails", &checkpointFaultFS{FS: vfs.Default, failDir: true}, filepath.Join(dir, "dir"), errCheckpointTestInjected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _, found, err := openCheckpoint(tt.fs, tt.path)
			if !errors.Is(err, tt.want) {
				t.Fatalf("openCheckpoint: error %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.path) {
				t.Errorf("error %q does not name %s", err, tt.path)
			}
			if f != nil || found {
				t.Errorf("openCheckpoint failed but returned file %v, found %v", f, found)
			}
		})
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	for _, c := range []checkpoint{
		{seq: 1, flushed: 0, lastRecord: -1, epoch: 1},
		{seq: 2, flushed: 4096, lastRecord: 1024, timestamp: 1_700_000_000_000_000_000, epoch: 3, epochStart: 2048, meta: []byte("applied=7")},
		checkpointTestSample(3, maxCheckpointMeta),
		checkpointTestSample(4, 1),
	} {
		f.Add(checkpointTestSlot(f, c))
	}
	f.Add(make([]byte, checkpointSlotSize))
	f.Add([]byte("RLCK"))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		c, err := decodeCheckpoint(b)
		if !bytes.Equal(in, b) {
			t.Fatal("decodeCheckpoint modified its input")
		}
		if err != nil {
			return
		}
		out, err := encodeCheckpoint(c)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", c, err)
		}
		if !bytes.Equal(out, b[:checkpointSlotSize]) {
			t.Fatalf("re-encoded slot differs from the input for %+v", c)
		}
	})
}

// TestCheckpointOlderMetaNeverReplacesNewer takes two checkpoints at once:
// the first one's meta hook runs first but is held until the second has
// written its checkpoint. The first must then write nothing: the newest
// meta taken stays the one a reopen reads, as a caller that acted on it
// (raftstore forgets a dropped group) relies on.
func TestCheckpointOlderMetaNeverReplacesNewer(t *testing.T) {
	fs := faultfs.New(1)
	var calls atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	opts := &Options{
		FS:                 fs,
		CheckpointInterval: time.Hour,
		CheckpointMeta: func() ([]byte, error) {
			switch calls.Add(1) {
			case 1:
				close(entered)
				<-release
				return []byte("older"), nil
			case 2:
				return []byte("newer"), nil
			}
			return []byte("later"), nil
		},
	}
	l, err := Open("/log", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append([]byte("x")); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- l.Checkpoint() }()
	<-entered
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	fs = fs.CrashKeepAll()
	l.Close() // fails: the old file system is gone
	opts.FS = fs
	l, err = Open("/log", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := string(l.Meta()); got != "newer" {
		t.Fatalf("checkpoint meta after reopen = %q, want %q (the meta taken last)", got, "newer")
	}
}
