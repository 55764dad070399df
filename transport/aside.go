package transport

import "net"

// asideMin is the size from which an entry's data is written to a raft
// connection from where raft has it (writev) rather than copied into the
// frame's buffer first. Below it a copy costs less than another buffer
// for the kernel to walk.
const asideMin = 4096

// dataAside is the entry data an encoded frame leaves out of its buffer:
// data[i] belongs at offset at[i] of the buffer. The frame on the wire is
// the buffer with each of them inserted in its place.
type dataAside struct {
	at    []int
	data  [][]byte
	bytes int // the sum of the data's lengths
	iov   net.Buffers
}

// add notes that d belongs at offset at of the buffer.
func (a *dataAside) add(at int, d []byte) {
	a.at = append(a.at, at)
	a.data = append(a.data, d)
	a.bytes += len(d)
}

// buffers returns the frame as buffers to write in order: b's pieces and
// the data aside between them.
func (a *dataAside) buffers(b []byte) net.Buffers {
	a.iov = a.iov[:0]
	from := 0
	for i, at := range a.at {
		a.iov = append(a.iov, b[from:at], a.data[i])
		from = at
	}
	return append(a.iov, b[from:])
}

// reset empties a for the next frame, keeping no entry's data alive.
func (a *dataAside) reset() {
	clear(a.data)
	clear(a.iov)
	a.at, a.data, a.bytes, a.iov = a.at[:0], a.data[:0], 0, a.iov[:0]
}
