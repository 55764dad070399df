package backup

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// frameTarget is the payload size at which a Writer ends an entries frame.
const frameTarget = 1 << 20

// Writer writes a backup file. Use NewWriter, Add every entry, then Close.
type Writer struct {
	w    io.Writer
	hdr  Header
	sum  uint32  // CRC-32C of every byte written
	size int64   // bytes written
	buf  []byte  // the entries frame being filled
	last uint64  // index of the last entry added; 0 before the first
	s    Summary // entries added so far
	err  error   // the first error; every later call returns it
}

// NewWriter writes the header of a backup described by h (its Version is
// ignored: Version is written), the log frame and the state frame to w.
// h.Log names the log; an empty name means DefaultLog.
func NewWriter(w io.Writer, h Header, state []byte) (*Writer, error) {
	return newWriter(w, h, state, Version)
}

// newWriter writes a file of format version (tests write version 1).
func newWriter(w io.Writer, h Header, state []byte, version uint32) (*Writer, error) {
	if h.Log.Name == "" {
		h.Log.Name = DefaultLog
	}
	if err := h.check(); err != nil {
		return nil, fmt.Errorf("backup: header: %v", err)
	}
	if err := h.Log.check(); err != nil {
		return nil, fmt.Errorf("backup: header: %v", err)
	}
	if len(state) > MaxFramePayload {
		return nil, fmt.Errorf("backup: state of %d bytes, more than a frame holds (%d)", len(state), MaxFramePayload)
	}
	bw := &Writer{w: w, hdr: h}
	bw.write(appendHeader(nil, h, version))
	if version != version1 {
		bw.frame(frameLog, appendLog(nil, h.Log))
	}
	bw.frame(frameState, state)
	if bw.err != nil {
		return nil, bw.err
	}
	return bw, nil
}

// write writes b, keeping the file's checksum and size.
func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	if _, err := w.w.Write(b); err != nil {
		w.err = fmt.Errorf("backup: write: %w", err)
		return
	}
	w.sum = crc32.Update(w.sum, castagnoli, b)
	w.size += int64(len(b))
}

// frame writes a frame.
func (w *Writer) frame(typ byte, payload []byte) {
	var hdr [frameHeaderSize]byte
	w.write(appendFrameHeader(hdr[:0], typ, payload))
	w.write(payload)
}

// Add adds an entry. Entries must come in increasing index order, within
// [Floor, Index] of the header. Add keeps no reference to e.Data.
func (w *Writer) Add(e Entry) error {
	if w.err != nil {
		return w.err
	}
	switch {
	case e.Index <= w.last || e.Index < w.hdr.Floor || e.Index > w.hdr.Index:
		return fmt.Errorf("backup: entry at index %d after index %d, outside [%d, %d] or out of order", e.Index, w.last, w.hdr.Floor, w.hdr.Index)
	case e.Term == 0 || e.Term > w.hdr.Term:
		return fmt.Errorf("backup: entry at index %d has term %d, outside [1, %d]", e.Index, e.Term, w.hdr.Term)
	case entrySize(len(e.Data)) > MaxFramePayload:
		return fmt.Errorf("backup: entry at index %d of %d bytes is larger than a frame holds", e.Index, len(e.Data))
	}
	if len(w.buf) > 0 && len(w.buf)+entrySize(len(e.Data)) > MaxFramePayload {
		w.flush()
	}
	w.buf = appendEntry(w.buf, e)
	w.last = e.Index
	w.s.Entries++
	w.s.DataBytes += uint64(len(e.Data))
	if len(w.buf) >= frameTarget {
		w.flush()
	}
	return w.err
}

// flush writes the entries frame being filled, if any.
func (w *Writer) flush() {
	if len(w.buf) == 0 {
		return
	}
	w.frame(frameEntries, w.buf)
	w.buf = w.buf[:0]
}

// Close writes the last entries frame and the end frame, and returns what
// the file holds. It does not close the underlying writer.
func (w *Writer) Close() (Summary, error) {
	w.flush()
	if w.err != nil {
		return Summary{}, w.err
	}
	fileSum := w.sum
	w.frame(frameEnd, appendEnd(nil, w.s, fileSum))
	if w.err != nil {
		return Summary{}, w.err
	}
	w.err = errors.New("backup: writer closed")
	s := w.s
	s.Size = w.size
	s.Checksum = fileSum
	return s, nil
}

// Reader reads a backup file, checking it as it goes (see the package
// documentation for what it promises).
type Reader struct {
	r   io.Reader
	off int64  // bytes read
	sum uint32 // CRC-32C of the bytes read
	// sumBefore is the CRC-32C of the bytes before the current frame: for
	// the end frame, the file's checksum.
	sumBefore uint32
	hdr       Header
	state     []byte
	frame     int     // frames read, the header not counted
	payload   []byte  // what is left of the current entries frame
	last      uint64  // index of the last entry returned
	s         Summary // entries returned so far
	err       error   // sticky: io.EOF at the end, or the failure
}

// NewReader reads the header and the state frame of a backup file from r.
func NewReader(r io.Reader) (*Reader, error) {
	br := &Reader{r: r}
	b, err := br.read(HeaderSize)
	if err != nil {
		n := min(len(b), len(Magic))
		switch {
		case string(b[:n]) != Magic[:n]:
			return nil, fmt.Errorf("%w: it does not start with %q", ErrNotBackup, Magic)
		case !errors.Is(err, io.ErrUnexpectedEOF):
			return nil, err
		case len(b) == 0:
			return nil, fmt.Errorf("%w: the file is empty", ErrTruncated)
		}
		return nil, fmt.Errorf("%w: the file ends inside its %d-byte header, after %d bytes", ErrTruncated, HeaderSize, len(b))
	}
	if br.hdr, err = decodeHeader(b); err != nil {
		return nil, err
	}
	br.hdr.Log = Source{Name: DefaultLog}
	typ, payload, err := br.nextFrame()
	if err != nil {
		return nil, err
	}
	if br.hdr.Version != version1 {
		if typ != frameLog {
			return nil, br.corrupt(br.off-int64(len(payload))-frameHeaderSize, "the first frame is of type %d, not the log", typ)
		}
		if br.hdr.Log, err = decodeLog(payload); err != nil {
			return nil, br.corrupt(br.off-int64(len(payload))-frameHeaderSize, "%v", err)
		}
		if typ, payload, err = br.nextFrame(); err != nil {
			return nil, err
		}
	}
	if typ != frameState {
		return nil, br.corrupt(br.off-int64(len(payload))-frameHeaderSize, "frame %d is of type %d, not the state", br.frame, typ)
	}
	br.state = payload
	return br, nil
}

// Header returns the file's header.
func (r *Reader) Header() Header { return r.hdr }

// State returns the state machine's state the file holds.
func (r *Reader) State() []byte { return r.state }

// Summary returns what the end frame counted and the file's checksum,
// once Next returned io.EOF; before, what was read so far (Checksum 0).
func (r *Reader) Summary() Summary {
	s := r.s
	s.Size = r.off
	return s
}

// Next returns the next entry, or io.EOF once the end frame has been read
// and the whole file checked out. Its Data is its own: later calls do not
// overwrite it. After an error every call returns the same error.
func (r *Reader) Next() (Entry, error) {
	if r.err != nil {
		return Entry{}, r.err
	}
	e, err := r.next()
	if err != nil {
		r.err = err
		return Entry{}, err
	}
	return e, nil
}

func (r *Reader) next() (Entry, error) {
	for len(r.payload) == 0 {
		start := r.off
		typ, payload, err := r.nextFrame()
		if err != nil {
			return Entry{}, err
		}
		switch typ {
		case frameState:
			return Entry{}, r.corrupt(start, "a second state frame")
		case frameLog:
			return Entry{}, r.corrupt(start, "a log frame after the state")
		case frameEnd:
			return Entry{}, r.end(start, payload)
		}
		r.payload = payload
	}
	start := r.off - int64(len(r.payload))
	e, rest, err := decodeEntry(r.payload)
	if err != nil {
		return Entry{}, fmt.Errorf("%w (frame %d, at byte %d)", err, r.frame, start)
	}
	switch {
	case e.Index <= r.last:
		return Entry{}, r.corrupt(start, "entry at index %d follows index %d", e.Index, r.last)
	case e.Index < r.hdr.Floor || e.Index > r.hdr.Index:
		return Entry{}, r.corrupt(start, "entry at index %d is outside the backup's [%d, %d]", e.Index, r.hdr.Floor, r.hdr.Index)
	case e.Term == 0 || e.Term > r.hdr.Term:
		return Entry{}, r.corrupt(start, "entry at index %d has term %d, outside [1, %d]", e.Index, e.Term, r.hdr.Term)
	}
	r.payload = rest
	r.last = e.Index
	r.s.Entries++
	r.s.DataBytes += uint64(len(e.Data))
	return e, nil
}

// end checks the end frame, which began at byte start, and that nothing
// follows it.
func (r *Reader) end(start int64, payload []byte) error {
	s, fileSum := decodeEnd(payload)
	switch {
	case s.Entries != r.s.Entries || s.DataBytes != r.s.DataBytes:
		return r.corrupt(start, "the end frame counts %d entries of %d bytes, the file holds %d of %d",
			s.Entries, s.DataBytes, r.s.Entries, r.s.DataBytes)
	case fileSum != r.sumBefore:
		return r.corrupt(start, "the file fails its checksum")
	}
	var extra [1]byte
	if n, _ := io.ReadFull(r.r, extra[:]); n != 0 {
		return r.corrupt(r.off, "bytes follow the end frame")
	}
	r.s.Checksum = fileSum
	return io.EOF
}

// nextFrame reads and checks a frame, and returns its type and payload.
func (r *Reader) nextFrame() (byte, []byte, error) {
	start := r.off
	r.sumBefore = r.sum
	b, err := r.read(frameHeaderSize)
	switch {
	case err == nil:
	case !errors.Is(err, io.ErrUnexpectedEOF):
		return 0, nil, err
	case len(b) == 0:
		return 0, nil, fmt.Errorf("%w: the file ends at byte %d, after %d entries, without its end frame", ErrTruncated, start, r.s.Entries)
	default:
		return 0, nil, fmt.Errorf("%w: the file ends inside the header of frame %d at byte %d", ErrTruncated, r.frame+1, start)
	}
	r.frame++
	f, err := decodeFrameHeader(b)
	if err != nil {
		return 0, nil, fmt.Errorf("%w (frame %d, at byte %d)", err, r.frame, start)
	}
	payload, err := r.read(int(f.length))
	switch {
	case err == nil:
	case !errors.Is(err, io.ErrUnexpectedEOF):
		return 0, nil, err
	default:
		return 0, nil, fmt.Errorf("%w: frame %d at byte %d holds %d bytes, the file ends after %d of them", ErrTruncated, r.frame, start, f.length, len(payload))
	}
	if crc32.Checksum(payload, castagnoli) != f.sum {
		return 0, nil, r.corrupt(start, "frame %d fails its checksum", r.frame)
	}
	return f.typ, payload, nil
}

// corrupt returns an ErrCorrupt naming the byte offset at.
func (r *Reader) corrupt(at int64, format string, args ...any) error {
	return fmt.Errorf("%w: %s (at byte %d)", ErrCorrupt, fmt.Sprintf(format, args...), at)
}

// readChunk is the most read allocates ahead of the bytes that arrived.
const readChunk = 64 << 10

// read reads n bytes, growing its buffer as they arrive, and returns
// them. It keeps the file's offset and checksum. When the file ends first
// it returns the bytes that did arrive and io.ErrUnexpectedEOF; another
// failure to read is returned wrapped, with the offset.
func (r *Reader) read(n int) ([]byte, error) {
	b := make([]byte, 0, min(n, readChunk))
	for len(b) < n {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(2*cap(b), n))
			copy(nb, b)
			b = nb
		}
		m, err := io.ReadFull(r.r, b[len(b):cap(b)])
		r.sum = crc32.Update(r.sum, castagnoli, b[len(b):len(b)+m])
		b = b[:len(b)+m]
		r.off += int64(m)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return b, io.ErrUnexpectedEOF
		}
		if err != nil {
			return b, fmt.Errorf("backup: read at byte %d: %w", r.off, err)
		}
	}
	return b, nil
}

// Verify reads a whole backup file from r and checks it, returning its
// header and what it holds.
func Verify(r io.Reader) (Header, Summary, error) {
	br, err := NewReader(r)
	if err != nil {
		return Header{}, Summary{}, err
	}
	err = br.Verify()
	return br.Header(), br.Summary(), err
}

// Verify reads the rest of the backup, checking every entry and the
// trailer, and discards the entries: Summary and State then describe the
// whole file.
func (r *Reader) Verify() error {
	for {
		if _, err := r.Next(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}
