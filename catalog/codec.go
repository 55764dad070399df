package catalog

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// The primitives of the catalog's encodings (commands, command.go;
// snapshots, snapshot.go). Every value is written one way only, so equal
// values encode to equal bytes:
//
//	uint       unsigned varint (encoding/binary's Uvarint)
//	int        signed varint (encoding/binary's Varint, zigzag)
//	string     uint length | bytes
//	strings    uint count | string*
//	settings   uint replicas | int retention bytes | int retention age (ns)
//	node       string id | string raft addr | string client addr | uint state
//	cluster id 16 bytes, as they are (no length: the size is fixed)
//
// A reader checks every length against the bytes left before it
// allocates, so a short input cannot make it allocate much.

// writer appends values to a byte slice. A writer belongs to the
// goroutine that made it.
type writer struct {
	// b is the encoding so far; owned by the writer's goroutine.
	b []byte
}

func (w *writer) uint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *writer) int(v int64)   { w.b = binary.AppendVarint(w.b, v) }

func (w *writer) string(s string) {
	w.uint(uint64(len(s)))
	w.b = append(w.b, s...)
}

func (w *writer) strings(ss []string) {
	w.uint(uint64(len(ss)))
	for _, s := range ss {
		w.string(s)
	}
}

func (w *writer) settings(s Settings) {
	w.uint(uint64(max(s.Replicas, 0)))
	w.int(s.RetentionBytes)
	w.int(int64(s.RetentionAge))
}

func (w *writer) node(n *Node) {
	w.string(n.ID)
	w.string(n.RaftAddr)
	w.string(n.ClientAddr)
	w.uint(uint64(n.State))
}

func (w *writer) clusterID(id ClusterID) { w.b = append(w.b, id[:]...) }

// reader decodes values from a byte slice. The first failure is kept in
// err; later reads return zero values. A reader belongs to the goroutine
// that made it, which owns its fields.
type reader struct {
	b   []byte // the input, never modified
	off int    // the offset of the next byte to read
	err error  // the first failure, nil while every read succeeded
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %s", ErrMalformed, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) uint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad unsigned varint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) int() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad signed varint")
		return 0
	}
	r.off += n
	return v
}

// string reads a string of at most limit bytes.
func (r *reader) string(limit int) string {
	n := r.uint()
	if r.err != nil {
		return ""
	}
	if n > uint64(limit) {
		r.fail("string of %d bytes, the most is %d", n, limit)
		return ""
	}
	if n > uint64(len(r.b)-r.off) {
		r.fail("string of %d bytes runs past the end", n)
		return ""
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s
}

// count reads a count of items of at least minSize bytes each, checked
// against the bytes left.
func (r *reader) count(minSize int) int {
	n := r.uint()
	if r.err != nil {
		return 0
	}
	if n > uint64((len(r.b)-r.off)/minSize) {
		r.fail("count %d runs past the end", n)
		return 0
	}
	return int(n)
}

// strings reads a list of strings of at most limit bytes each; nil for an
// empty list.
func (r *reader) strings(limit int) []string {
	n := r.count(1)
	if n == 0 {
		return nil
	}
	ss := make([]string, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		ss = append(ss, r.string(limit))
	}
	return ss
}

func (r *reader) settings() Settings {
	rep := r.uint()
	if rep > math.MaxInt32 {
		r.fail("replicas %d out of range", rep)
	}
	return Settings{Replicas: int(rep), RetentionBytes: r.int(), RetentionAge: time.Duration(r.int())}
}

func (r *reader) node() *Node {
	n := &Node{ID: r.string(MaxNodeIDLen), RaftAddr: r.string(MaxAddrLen), ClientAddr: r.string(MaxAddrLen)}
	st := r.uint()
	if st > math.MaxUint8 {
		r.fail("node state %d out of range", st)
	}
	n.State = NodeState(st)
	return n
}

func (r *reader) clusterID() ClusterID {
	var id ClusterID
	if r.err != nil {
		return id
	}
	if len(r.b)-r.off < len(id) {
		r.fail("cluster id of %d bytes runs past the end (%d bytes left)", len(id), len(r.b)-r.off)
		return id
	}
	r.off += copy(id[:], r.b[r.off:])
	return id
}

// end fails unless every byte has been read.
func (r *reader) end() {
	if r.err == nil && r.off != len(r.b) {
		r.fail("%d trailing bytes", len(r.b)-r.off)
	}
}
