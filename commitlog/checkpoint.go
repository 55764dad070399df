package commitlog

// The checkpoint file. The slot layout below is wire format: it outlives the
// program that wrote it, so its constants never change meaning; a new layout
// gets a new version.
//
// The checkpoint records the durable watermark of the log so that recovery
// scans only the tail written after it. The file holds exactly two slots of
// checkpointSlotSize bytes. A write goes to slot seq%2, so it only ever
// overwrites the older of the two: a write torn by a crash leaves the other
// slot intact, and recovery falls back to it. Every slot, integers
// little-endian:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+---------------------------------------------------------------+
//	|                    magic 0x4B434C52 "RLCK"                    |  0
//	+-------------------------------+-------------------------------+
//	|          version = 1          |    reserved, must be zero     |  4
//	+-------------------------------+-------------------------------+
//	|                                                               |  8
//	+          sequence (uint64), one more on every write           +
//	|                                                               | 12
//	+---------------------------------------------------------------+
//	|                                                               | 16
//	+     flushed (int64): log offset below which all is synced     +
//	|                                                               | 20
//	+---------------------------------------------------------------+
//	|                                                               | 24
//	+   last record (int64): position of the last record ending at  +
//	|               or before flushed, or -1 when none              | 28
//	+---------------------------------------------------------------+
//	|                                                               | 32
//	+   timestamp (int64): that record's store time, Unix ns, or 0  +
//	|                                                               | 36
//	+---------------------------------------------------------------+
//	|                                                               | 40
//	+  epoch start (int64): position where the current epoch began  +
//	|                                                               | 44
//	+---------------------------------------------------------------+
//	|      epoch (uint32): the log's current epoch, at least 1      | 48
//	+---------------------------------------------------------------+
//	|                 metaLen: length of meta (uint32)              | 52
//	+---------------------------------------------------------------+
//	|      meta: metaLen opaque bytes from the layer above ...      | 56
//	+---------------------------------------------------------------+
//	|       CRC-32C of bytes [0, 56+metaLen), at 56+metaLen         |
//	+---------------------------------------------------------------+
//	|              zero up to the end of the slot ...               |
//	+---------------------------------------------------------------+
//
// The epoch fields are those of the record format (format.go): recovery
// accepts at and past epoch start only records of this epoch.
//
// A slot is valid when its magic, version, reserved field, length, CRC and
// zero padding all check out, its values are in range and its sequence
// belongs in it (seq%2 is the slot's index); the valid slot with the
// highest sequence is the checkpoint. A fresh file is all zeroes,
// so neither slot is valid until the first write.

import (
	"bytes"
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
	// checkpointSlotSize is the size of one of the two slots of the
	// checkpoint file. Wire format.
	checkpointSlotSize = 64 << 10
	// checkpointVersion is the version of the slot layout. Wire format.
	checkpointVersion uint16 = 1
	// checkpointMagic starts every valid slot: "RLCK" little-endian.
	// Wire format.
	checkpointMagic uint32 = 0x4B434C52
	// checkpointFixedSize is the size of the fields before meta. Wire
	// format.
	checkpointFixedSize = 56
	// maxCheckpointMeta is the longest meta a slot holds: what is left
	// after the fixed fields and the CRC.
	maxCheckpointMeta = checkpointSlotSize - checkpointFixedSize - 4
)

// checkpoint is the content of one checkpoint slot.
type checkpoint struct {
	// seq orders the slots; the higher valid one wins. write sets it.
	seq uint64
	// flushed is the durable watermark: every byte of the log below it
	// was synced.
	flushed int64
	// lastRecord is the position of the last record that ends at or
	// before flushed, or -1 when there is none.
	lastRecord int64
	// timestamp is physicMsgTimestamp: the store time, in Unix
	// nanoseconds, of the newest durable record; 0 when there is none.
	timestamp int64
	// epoch is the log's current epoch, at least 1 (see format.go).
	epoch uint32
	// epochStart is the position where epoch began: recovery accepts at
	// and past it only records of epoch.
	epochStart int64
	// meta is an opaque blob from the layer above, at most
	// maxCheckpointMeta bytes.
	meta []byte
}

// Reasons a checkpoint slot fails to encode or decode. They are not wrapped
// into ErrCorrupt: an invalid slot is expected after a torn write, and the
// caller decides what an invalid checkpoint means.
var (
	errCheckpointShort    = errors.New("fewer bytes than a checkpoint slot")
	errCheckpointMagic    = errors.New("no checkpoint magic")
	errCheckpointVersion  = errors.New("unknown checkpoint format version")
	errCheckpointReserved = errors.New("reserved checkpoint bytes are not zero")
	errCheckpointLength   = errors.New("checkpoint meta length exceeds the slot")
	errCheckpointChecksum = errors.New("checkpoint checksum mismatch")
	errCheckpointPadding  = errors.New("checkpoint slot padding is not zero")
	errCheckpointValues   = errors.New("checkpoint values are out of range")
	errCheckpointMetaSize = errors.New("checkpoint meta too long")
)

// checkValues reports whether the fields of c make sense: flushed and the
// epoch start are not negative, the epoch is not 0, and the last record, if
// any, has its header below flushed.
func (c checkpoint) checkValues() error {
	if c.flushed < 0 {
		return fmt.Errorf("%w: flushed %d", errCheckpointValues, c.flushed)
	}
	if c.epoch == 0 || c.epochStart < 0 {
		return fmt.Errorf("%w: epoch %d starting at %d", errCheckpointValues, c.epoch, c.epochStart)
	}
	if c.lastRecord < -1 || (c.lastRecord >= 0 && c.lastRecord > c.flushed-HeaderSize) {
		return fmt.Errorf("%w: last record %d, flushed %d", errCheckpointValues, c.lastRecord, c.flushed)
	}
	return nil
}

// encodeCheckpoint returns the full slot for c. It fails when meta is longer
// than maxCheckpointMeta or a value is out of range (see checkValues).
func encodeCheckpoint(c checkpoint) ([]byte, error) {
	if len(c.meta) > maxCheckpointMeta {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", errCheckpointMetaSize, len(c.meta), maxCheckpointMeta)
	}
	if err := c.checkValues(); err != nil {
		return nil, err
	}
	b := make([]byte, checkpointSlotSize)
	binary.LittleEndian.PutUint32(b[0:4], checkpointMagic)
	binary.LittleEndian.PutUint16(b[4:6], checkpointVersion)
	binary.LittleEndian.PutUint16(b[6:8], 0)
	binary.LittleEndian.PutUint64(b[8:16], c.seq)
	binary.LittleEndian.PutUint64(b[16:24], uint64(c.flushed))
	binary.LittleEndian.PutUint64(b[24:32], uint64(c.lastRecord))
	binary.LittleEndian.PutUint64(b[32:40], uint64(c.timestamp))
	binary.LittleEndian.PutUint64(b[40:48], uint64(c.epochStart))
	binary.LittleEndian.PutUint32(b[48:52], c.epoch)
	binary.LittleEndian.PutUint32(b[52:56], uint32(len(c.meta)))
	end := checkpointFixedSize + len(c.meta)
	copy(b[checkpointFixedSize:end], c.meta)
	binary.LittleEndian.PutUint32(b[end:end+4], crc32.Checksum(b[:end], castagnoli))
	return b, nil
}

// decodeCheckpoint decodes and verifies the slot at the start of b. The
// returned meta is a copy, nil when empty.
func decodeCheckpoint(b []byte) (checkpoint, error) {
	if len(b) < checkpointSlotSize {
		return checkpoint{}, errCheckpointShort
	}
	b = b[:checkpointSlotSize]
	if binary.LittleEndian.Uint32(b[0:4]) != checkpointMagic {
		return checkpoint{}, errCheckpointMagic
	}
	if v := binary.LittleEndian.Uint16(b[4:6]); v != checkpointVersion {
		return checkpoint{}, fmt.Errorf("%w %d", errCheckpointVersion, v)
	}
	if binary.LittleEndian.Uint16(b[6:8]) != 0 {
		return checkpoint{}, errCheckpointReserved
	}
	metaLen := binary.LittleEndian.Uint32(b[52:56])
	if metaLen > maxCheckpointMeta {
		return checkpoint{}, fmt.Errorf("%w: %d", errCheckpointLength, metaLen)
	}
	end := checkpointFixedSize + int(metaLen)
	if crc32.Checksum(b[:end], castagnoli) != binary.LittleEndian.Uint32(b[end:end+4]) {
		return checkpoint{}, errCheckpointChecksum
	}
	for _, x := range b[end+4:] {
		if x != 0 {
			return checkpoint{}, errCheckpointPadding
		}
	}
	c := checkpoint{
		seq:        binary.LittleEndian.Uint64(b[8:16]),
		flushed:    int64(binary.LittleEndian.Uint64(b[16:24])),
		lastRecord: int64(binary.LittleEndian.Uint64(b[24:32])),
		timestamp:  int64(binary.LittleEndian.Uint64(b[32:40])),
		epochStart: int64(binary.LittleEndian.Uint64(b[40:48])),
		epoch:      binary.LittleEndian.Uint32(b[48:52]),
	}
	if err := c.checkValues(); err != nil {
		return checkpoint{}, err
	}
	if metaLen > 0 {
		c.meta = bytes.Clone(b[checkpointFixedSize:end])
	}
	return c, nil
}

// checkpointFile is an open checkpoint file. It is not safe for concurrent
// use: the log serialises calls to write and close.
type checkpointFile struct {
	// path names the file in errors. Immutable.
	path string
	// file is the open file. Immutable until close.
	file vfs.File
	// seq is the sequence of the newest slot known to be durable, 0 when
	// none. Owned by the caller of write, which the log serialises.
	seq uint64
}

// openCheckpoint opens the checkpoint file at path, creating it if needed,
// and returns it with the valid slot of highest sequence. found is false
// when neither slot is valid: a fresh file, or both slots torn or garbled;
// that is not an error here, the caller decides what it means. A file shorter than
// two slots is extended with zeroes, synced, and its directory synced; its
// slots are judged as they read after that, so a slot missing from the file
// is invalid and one cut short counts only if all it lost was zero padding.
func openCheckpoint(fs vfs.FS, path string) (f *checkpointFile, c checkpoint, found bool, err error) {
	file, err := fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, checkpoint{}, false, fmt.Errorf("commitlog: open checkpoint %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			file.Close()
		}
	}()
	size, err := file.Size()
	if err != nil {
		return nil, checkpoint{}, false, fmt.Errorf("commitlog: open checkpoint %s: %w", path, err)
	}
	// Bytes past the end of a short file read as the zeroes the file is
	// extended with below.
	buf := make([]byte, 2*checkpointSlotSize)
	if _, err := file.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, checkpoint{}, false, fmt.Errorf("commitlog: read checkpoint %s: %w", path, err)
	}
	for slot := 0; slot < 2; slot++ {
		start := slot * checkpointSlotSize
		got, err := decodeCheckpoint(buf[start : start+checkpointSlotSize])
		if err != nil || got.seq%2 != uint64(slot) {
			continue // torn, garbled or misplaced
		}
		if !found || got.seq > c.seq {
			c, found = got, true
		}
	}
	if size < 2*checkpointSlotSize {
		// New, or cut short by a crash: give both slots their blocks and
		// make the file's size and name durable before anyone relies on
		// a write into it.
		if err := file.Allocate(2 * checkpointSlotSize); err != nil {
			return nil, checkpoint{}, false, fmt.Errorf("commitlog: allocate checkpoint %s: %w", path, err)
		}
		if err := file.Sync(); err != nil {
			return nil, checkpoint{}, false, fmt.Errorf("commitlog: sync checkpoint %s: %w", path, err)
		}
		if err := fs.SyncDir(filepath.Dir(path)); err != nil {
			return nil, checkpoint{}, false, fmt.Errorf("commitlog: sync directory of checkpoint %s: %w", path, err)
		}
	}
	return &checkpointFile{path: path, file: file, seq: c.seq}, c, found, nil
}

// write makes c the durable checkpoint: it sets c.seq to one more than the
// last durable sequence, writes the slot seq%2, the older one, and syncs the
// file. On error nothing in memory changes, so the next write reuses the
// same sequence and slot and the other slot still holds the previous
// checkpoint. Not safe for concurrent use.
func (f *checkpointFile) write(c checkpoint) error {
	c.seq = f.seq + 1
	b, err := encodeCheckpoint(c)
	if err != nil {
		return fmt.Errorf("commitlog: write checkpoint %s: %w", f.path, err)
	}
	if _, err := f.file.WriteAt(b, int64(c.seq%2)*checkpointSlotSize); err != nil {
		return fmt.Errorf("commitlog: write checkpoint %s: %w", f.path, err)
	}
	if err := f.file.Sync(); err != nil {
		return fmt.Errorf("commitlog: write checkpoint %s: %w", f.path, err)
	}
	f.seq = c.seq
	return nil
}

// close closes the file. The checkpointFile must not be used after.
func (f *checkpointFile) close() error {
	if err := f.file.Close(); err != nil {
		return fmt.Errorf("commitlog: close checkpoint %s: %w", f.path, err)
	}
	return nil
}
