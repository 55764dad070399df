package commitlog

// The sync mark file. The slot layout below is wire format: it outlives the
// program that wrote it, so its constants never change meaning; a new layout
// gets a new version.
//
// The checkpoint is written every CheckpointInterval, so the records synced
// since the last one (acknowledged, many of them) lie past its durable
// watermark, where recovery cannot tell damage to them from a torn write:
// both fail their checksum. The sync mark tells them apart. After every sync
// the log writes the new durable position, with its epoch, into the file:
// one small write, never synced. A process that dies leaves it in the page
// cache, exact; a power loss leaves whatever the kernel last wrote
// back, or a slot that does not check out. Either way a valid slot of the
// current epoch names a position the log was synced up to, a lower bound of
// the truth: a record before it that fails its checks was synced and is
// damaged, not torn. The epoch ties the mark to the checkpoint: a
// truncation or a recovery starts a new epoch with a synced checkpoint
// before anything is appended, so a mark of an older epoch, whose
// positions may since have been cut and written again, is ignored.
//
// The file is syncMarkSize bytes; slot i starts at i*syncMarkStride, each
// in a sector of its own. A write goes to slot seq%2, so the slot it may
// tear is never the only one. Every slot, integers little-endian:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+---------------------------------------------------------------+
//	|                    magic 0x4D534C52 "RLSM"                    |  0
//	+-------------------------------+-------------------------------+
//	|          version = 1          |    reserved, must be zero     |  4
//	+-------------------------------+-------------------------------+
//	|                                                               |  8
//	+          sequence (uint64), one more on every write           +
//	|                                                               | 12
//	+---------------------------------------------------------------+
//	|                                                               | 16
//	+   synced (int64): log offset below which all was synced       +
//	|                                                               | 20
//	+---------------------------------------------------------------+
//	|            epoch (uint32): the log's epoch at the sync         | 24
//	+---------------------------------------------------------------+
//	|                   CRC-32C of bytes [0, 28)                    | 28
//	+---------------------------------------------------------------+
//
// A log without the file (written by an older version, or after a power
// loss took the file's name) recovers as before: past the checkpoint, the
// first record that fails its checks ends the log.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/raftlog/raftlog/commitlog/vfs"
)

const (
	// syncMarkName is the sync mark file's name in the log's directory.
	syncMarkName = "syncmark"
	// syncMarkSize is the file's size: one page. Wire format.
	syncMarkSize = 4096
	// syncMarkStride is the distance between the two slots. Wire format.
	syncMarkStride = 512
	// syncMarkLen is the length of a slot's fields and CRC. Wire format.
	syncMarkLen = 32
	// syncMarkVersion is the version of the slot layout. Wire format.
	syncMarkVersion uint16 = 1
	// syncMarkMagic starts every valid slot: "RLSM" little-endian. Wire
	// format.
	syncMarkMagic uint32 = 0x4D534C52
)

// syncMarkSlot is the content of one slot.
type syncMarkSlot struct {
	seq    uint64
	synced int64
	epoch  uint32
}

// syncMark is the open sync mark file. write is called with the log's syncMu
// held; nothing else touches it once Open returns.
type syncMark struct {
	file vfs.File
	b    [syncMarkLen]byte // the slot being written
	seq  uint64            // sequence of the last slot written or read
}

// openSyncMark opens (creating it) the sync mark file in dir and returns it
// with its valid slots. The file is never synced: see the top of the file.
func openSyncMark(fs vfs.FS, dir string) (_ *syncMark, slots []syncMarkSlot, err error) {
	path := filepath.Join(dir, syncMarkName)
	f, err := fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("commitlog: open sync mark %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	size, err := f.Size()
	if err != nil {
		return nil, nil, fmt.Errorf("commitlog: open sync mark %s: %w", path, err)
	}
	if size < syncMarkSize {
		if err := f.Allocate(syncMarkSize); err != nil {
			return nil, nil, fmt.Errorf("commitlog: allocate sync mark %s: %w", path, err)
		}
	}
	b := make([]byte, syncMarkSize)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("commitlog: read sync mark %s: %w", path, err)
	}
	sm := &syncMark{file: f}
	slots = decodeSyncMarks(b)
	for _, s := range slots {
		sm.seq = max(sm.seq, s.seq)
	}
	return sm, slots, nil
}

// readSyncMarks returns the valid slots of the sync mark file in dir, for a
// log that is not open; none when there is no file.
func readSyncMarks(fs vfs.FS, dir string) ([]syncMarkSlot, error) {
	path := filepath.Join(dir, syncMarkName)
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("commitlog: open sync mark %s: %w", path, err)
	}
	defer f.Close()
	b := make([]byte, syncMarkSize)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("commitlog: read sync mark %s: %w", path, err)
	}
	return decodeSyncMarks(b), nil
}

// write records that the log was synced up to synced in epoch. A failed
// write is not an error of the log: it only leaves the mark behind, which
// recovery reads as a lower bound.
func (sm *syncMark) write(synced int64, epoch uint32) {
	sm.seq++
	encodeSyncMark(sm.b[:], syncMarkSlot{seq: sm.seq, synced: synced, epoch: epoch})
	sm.file.WriteAt(sm.b[:], int64(sm.seq%2)*syncMarkStride)
}

// close closes the file; the mark stays in the page cache.
func (sm *syncMark) close() error { return sm.file.Close() }

// syncedUpTo returns the highest position a valid slot of epoch names, or
// -1 when none does.
func syncedUpTo(slots []syncMarkSlot, epoch uint32) int64 {
	best := int64(-1)
	for _, s := range slots {
		if s.epoch == epoch {
			best = max(best, s.synced)
		}
	}
	return best
}

// encodeSyncMark writes s into b[:syncMarkLen].
func encodeSyncMark(b []byte, s syncMarkSlot) {
	binary.LittleEndian.PutUint32(b[0:4], syncMarkMagic)
	binary.LittleEndian.PutUint16(b[4:6], syncMarkVersion)
	binary.LittleEndian.PutUint16(b[6:8], 0)
	binary.LittleEndian.PutUint64(b[8:16], s.seq)
	binary.LittleEndian.PutUint64(b[16:24], uint64(s.synced))
	binary.LittleEndian.PutUint32(b[24:28], s.epoch)
	binary.LittleEndian.PutUint32(b[28:32], crc32.Checksum(b[0:28], castagnoli))
}

// decodeSyncMarks returns the slots of b, a sync mark file's bytes, that
// check out: magic, version, reserved field, CRC, a sequence that belongs
// in the slot, and values in range.
func decodeSyncMarks(b []byte) []syncMarkSlot {
	var out []syncMarkSlot
	for i := range 2 {
		off := i * syncMarkStride
		if len(b) < off+syncMarkLen {
			break
		}
		p := b[off : off+syncMarkLen]
		s := syncMarkSlot{
			seq:    binary.LittleEndian.Uint64(p[8:16]),
			synced: int64(binary.LittleEndian.Uint64(p[16:24])),
			epoch:  binary.LittleEndian.Uint32(p[24:28]),
		}
		if binary.LittleEndian.Uint32(p[0:4]) != syncMarkMagic ||
			binary.LittleEndian.Uint16(p[4:6]) != syncMarkVersion ||
			binary.LittleEndian.Uint16(p[6:8]) != 0 ||
			binary.LittleEndian.Uint32(p[28:32]) != crc32.Checksum(p[0:28], castagnoli) ||
			s.seq%2 != uint64(i) || s.synced < 0 || s.epoch == 0 {
			continue
		}
		out = append(out, s)
	}
	return out
}

// reset clears both slots durably, for a log that starts afresh in a
// directory where an older log left its mark.
func (sm *syncMark) reset() error {
	sm.seq = 0
	if _, err := sm.file.WriteAt(make([]byte, syncMarkSize), 0); err != nil {
		return fmt.Errorf("commitlog: clear sync mark %s: %w", sm.file.Name(), err)
	}
	if err := sm.file.Sync(); err != nil {
		return fmt.Errorf("commitlog: sync mark %s: %w", sm.file.Name(), err)
	}
	return nil
}
