package transport

import (
	"io"
	"sync"
)

// For a Handler that copies what it keeps (AppendCopier), Append requests'
// bodies are read into buffers kept for reuse. A body is read into a
// fresh slice otherwise, grown as its bytes arrive (readBody), and a
// request of 64 records of 16 KiB then cost the leader more in
// allocating, clearing and copying its buffer than in reading it (15% of
// its CPU). The node's handler copies each record into its raft command
// before it proposes it, and Serve returns the body for reuse once Handle
// has returned.

// bodyPoolMax is the largest body buffer kept for reuse.
const bodyPoolMax = 8 << 20

// bodyPool keeps body buffers for reuse.
type bodyPool struct{ p sync.Pool }

// appendBodies keeps the buffers of Append requests' bodies.
var appendBodies bodyPool

// read reads a body of n bytes into a kept buffer when one large enough
// comes to hand, and as readBody does otherwise (a buffer that grows with
// the bytes received, so that a peer cannot make the server allocate
// more than it sends). A kept buffer is memory already held, which a
// peer's claimed length does not enlarge.
func (bp *bodyPool) read(r io.Reader, n int) ([]byte, error) {
	if v, ok := bp.p.Get().(*[]byte); ok {
		if cap(*v) >= n {
			b := (*v)[:n]
			if _, err := io.ReadFull(r, b); err != nil {
				bp.p.Put(v)
				return nil, inFrame(err)
			}
			return b, nil
		}
		bp.p.Put(v)
	}
	return readBody(r, n)
}

// put keeps b for a later body. Nothing may use b afterwards.
func (bp *bodyPool) put(b []byte) {
	if cap(b) == 0 || cap(b) > bodyPoolMax {
		return
	}
	b = b[:0]
	bp.p.Put(&b)
}
