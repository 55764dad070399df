package transport

// The client wire protocol. Everything in this file is wire format: clients
// in other languages are written against it, so a constant here never
// changes meaning; a new layout gets a new Version.
//
// # Frames
//
// A connection carries a sequence of frames in each direction. Integers in
// the header are big-endian (network byte order):
//
//	 0               1               2               3
//	 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	+---------------------------------------------------------------+
//	|           length: bytes that follow this field (>= 12)        |  0
//	+---------------+---------------+-------------------------------+
//	|  version = 1  |  frame type   |              op               |  4
//	+---------------+---------------+-------------------------------+
//	|                                                               |  8
//	+                          request id                           +
//	|                                                               | 12
//	+---------------------------------------------------------------+
//	|               body: length - 12 bytes of msgpack ...          | 16
//	+---------------------------------------------------------------+
//
// Why the layout is what it is:
//
//   - The length excludes itself, so a reader reads 4 bytes and then exactly
//     length bytes; there is no "minus four" to get wrong. It includes the
//     rest of the header, so a later version may grow the header without
//     moving the length. The length and the version byte right after it are
//     the only bytes every version agrees on.
//   - The version is checked before anything after it is trusted. A peer that
//     receives a version it does not speak answers with an Error frame for
//     request id 0, code UnsupportedVersion, whose Version field names the
//     version it speaks, and closes the connection. No negotiation: a client
//     that speaks several versions reconnects with the one offered.
//   - The op lives in the header, not in the body, so a server can refuse an
//     unknown op, or count a request against its limits, without decoding
//     the body. Replies echo the op of their request.
//   - The request id is chosen by the client and must be unique among its
//     requests in flight on the connection; replies carry it, so one
//     connection pipelines many requests and replies may come back in any
//     order. Id 0 is reserved: an Error frame for id 0 reports a fault of the
//     whole connection, which the server closes right after sending it.
//   - There is no checksum: TCP (and TLS when used) protect the bytes. A
//     frame that breaks the rules is a bug or an attack, and the answer is
//     to close the connection, not to resynchronise.
//   - The default maximum frame size (the largest length accepted) is
//     16 MiB: an Append of many records of up to the 1 MiB default record
//     size fits, and with Limits.MaxInFlightBytes (64 MiB) a connection pins
//     a predictable amount of server memory. The field can express up to
//     4 GiB - 1; both sides configure their own maximum and enforce it.
//
// # Frame types and their bodies
//
//	type         direction          body
//	1 Request    client -> server   the op's request (AppendRequest, ...)
//	2 Response   server -> client   the op's response; ends the request
//	3 Error      server -> client   an Error; ends the request
//	4 StreamItem server -> client   one item of a stream (TailItem, BackupItem)
//	5 Credit     client -> server   a Credit: the stream may send N more items
//	6 Cancel     client -> server   empty: stop the request with this id
//
// While the connection lives, every Request gets exactly one final frame,
// Response or Error, even when it was cancelled; its id may be reused only
// after that frame (the client in this package never reuses ids). A
// streaming op (Tail, Backup) answers with any number of StreamItem frames
// before its final frame; a stream that ends without an error ends with a
// Response whose body is an empty map.
//
// Flow control is by credit, counted in items: a stream starts with none, the
// client sends Credit frames, and the server sends an item only while it holds
// a credit. A client therefore buffers at most the credits it granted, and a
// server that sends more is broken. Credit and Cancel frames carry the op of
// their request, which servers ignore; for an id that is no longer in flight
// they are ignored, since they may cross the final frame.
//
// Bodies are msgpack (github.com/hashicorp/go-msgpack/v2, the new spec: str
// and bin are distinct). Every body but a Cancel's is exactly one value, a
// map from field names (the msgpack tags in messages.go) to values, as
// written by EncodeBody; see DecodeBody for what a reader rejects.
//
// # Logs
//
// A cluster serves many logs, each its own raft group with its own leader.
// Every record operation (Append, Read, Tail, Trim) names its log in the
// string field "log" of its body: 1 to 64 characters of A-Z, a-z, 0-9,
// '_' and '-', starting with a letter or a digit, case-sensitive (logs.go,
// CheckLogName). A body without the field means the log named "default",
// which always exists: it is the single log of the versions before named
// logs, so their requests keep their meaning. A body may also name
// "default"; clients leave the field out for it instead.
//
// Compatibility rule: a reader refuses a body with a field it does not
// know (see DecodeBody), so a field that old peers do not know is only
// ever sent to peers that asked for it. Requests for the default log carry
// no log field: they are byte for byte the requests of the version before,
// and a server of that version serves them. A request naming another log
// is refused by such a server with BadRequest (the message ends "with key
// log"), and the log operations below with UnknownOp: that server does not
// serve named logs, and it never takes such a request for one of the
// default log. A server likewise puts Error.MemberID and Error.MemberAddr
// only in answers to requests that name a log and to the log operations,
// which older clients never send.
//
// Operations on logs (logs.go):
//
//	op  name         request             response
//	10  CreateLog    CreateLogRequest    CreateLogResponse    at the catalog's leader
//	11  ListLogs     ListLogsRequest     ListLogsResponse     at any node
//	12  DescribeLog  DescribeLogRequest  DescribeLogResponse  at the log's leader
//	13  DeleteLog    DeleteLogRequest    DeleteLogResponse    at the catalog's leader
//	14  RestoreLog   RestoreLogRequest   RestoreLogResponse   at the log's leader
//
// BackupRequest carries the log field too: a backup of a named log. A
// RestoreLog uploads a backup file in parts (Offset, Data, Done) to the
// leader of a new, empty named log, which marks the log as being restored
// at the first part and restores the file at the last (restorelog.go).
//
// Errors of named logs:
//
//   - NotFound, the message naming the log (log "orders" does not
//     exist): a record operation, DescribeLog or DeleteLog names a log
//     that does not exist, or one being deleted.
//   - FailedPrecondition, the message naming the log (log "orders"
//     exists already): CreateLog of a name that exists, deleting or not.
//   - BadRequest: an invalid name, or a CreateLog or DeleteLog of
//     "default", which always exists.
//   - NotLeader: the node does not lead the log the request names (it may
//     not even hold it), or, for CreateLog and DeleteLog, the catalog.
//     Error.LeaderID and Error.LeaderAddr name that log's (or the
//     catalog's) leader when the node knows it; otherwise Error.MemberID
//     and Error.MemberAddr may name a member of the log, which hosts it and
//     may know its leader, to ask next. The hint is always about the log
//     the request names: a client keeps a leader per log, and one log's
//     NotLeader says nothing of another's.
//
// Sessions (AppendRequest.ClientID and Seq) are per log: each log's state
// machine keeps its own, so a client numbers the appends of each log
// apart, from 1 (the Go client also gives each named log a client id of
// its own, see package client).
//
// # Limits and faults
//
// A server never stops reading a connection while it has requests in flight
// (credits and cancels must get through), unless the client stops reading
// its replies: a server buffers a bounded amount of replies, then waits, and
// closes the connection once a write has stalled for its write timeout. So
// it enforces its in-flight limits by refusing, not by backpressure: a
// request beyond
// Limits.MaxInFlight requests, or Limits.MaxInFlightBytes of request bodies,
// is answered at once with an Error of code Busy, and the connection stays
// open. So does a request that cannot be decoded or validated, or names an
// op the server does not know: it gets an Error reply (BadRequest, TooLarge
// or UnknownOp). A frame whose length exceeds the maximum gets an Error
// reply of code TooLarge for its request id; a frame with an unknown version
// gets the UnsupportedVersion reply above; a malformed frame (a length below
// 12, an unknown frame type, request id 0, a frame type the server does not
// accept, a request id still in flight, a Credit body that is not a Credit,
// a Cancel with a body) gets an Error reply of code BadRequest for id 0. In
// those cases the server then closes the connection, because it can no
// longer trust where the next frame starts. Error codes are listed in
// errors.go; they are wire format too.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
)

// Wire format constants.
const (
	// Version is the protocol version this package speaks. It is the fifth
	// byte of every frame.
	Version = 1
	// PrefixSize is the size of the length prefix that starts every frame.
	PrefixSize = 4
	// HeaderSize is the size of the header after the length prefix:
	// version, frame type, op and request id. The length field counts it.
	HeaderSize = 12
	// MaxFrameLength is the largest length field the format can express.
	MaxFrameLength = math.MaxUint32
	// DefaultMaxFrameSize is the largest length field accepted by default.
	DefaultMaxFrameSize = 16 << 20
)

// FrameType says what a frame carries. Its values are wire format.
type FrameType uint8

// Frame types.
const (
	// FrameRequest carries a request from client to server.
	FrameRequest FrameType = 1
	// FrameResponse carries a successful reply and ends its request.
	FrameResponse FrameType = 2
	// FrameError carries an Error and ends its request; for request id 0 it
	// reports a fault of the whole connection.
	FrameError FrameType = 3
	// FrameStreamItem carries one item of a stream.
	FrameStreamItem FrameType = 4
	// FrameCredit grants a stream more items; its body is a Credit.
	FrameCredit FrameType = 5
	// FrameCancel asks the server to stop a request; its body is empty.
	FrameCancel FrameType = 6
)

var frameTypeNames = [...]string{
	FrameRequest:    "Request",
	FrameResponse:   "Response",
	FrameError:      "Error",
	FrameStreamItem: "StreamItem",
	FrameCredit:     "Credit",
	FrameCancel:     "Cancel",
}

// Valid reports whether t is a frame type of this version.
func (t FrameType) Valid() bool { return t >= FrameRequest && t <= FrameCancel }

// String returns the name of t.
func (t FrameType) String() string {
	if t.Valid() {
		return frameTypeNames[t]
	}
	return fmt.Sprintf("FrameType(%d)", uint8(t))
}

// Sentinel errors of the framing layer; test them with errors.Is.
var (
	// ErrFrameTooLarge reports a frame longer than the maximum in force, on
	// either side. After a read returns it the stream is mid-frame.
	ErrFrameTooLarge = errors.New("transport: frame too large")
	// ErrUnsupportedVersion reports a frame with a version other than
	// Version. After a read returns it the stream is mid-frame.
	ErrUnsupportedVersion = errors.New("transport: unsupported protocol version")
	// ErrMalformedFrame reports a frame that breaks the framing rules: a
	// length too short for the header or an unknown frame type.
	ErrMalformedFrame = errors.New("transport: malformed frame")
	// ErrMalformedBody reports a body that DecodeBody refuses.
	ErrMalformedBody = errors.New("transport: malformed body")
	// ErrProtocol reports a peer that broke the protocol with well-formed
	// frames: a reply to an unknown request id, more stream items than
	// credits, a frame type not allowed in that direction.
	ErrProtocol = errors.New("transport: protocol violation")
	// ErrClosed is returned, possibly wrapping the cause, by calls on a
	// connection that is closed or failed.
	ErrClosed = errors.New("transport: connection closed")
)

// Frame is one decoded frame. The version is implicit: ReadFrame accepts
// and WriteFrame writes only Version.
type Frame struct {
	// Type says what the frame carries.
	Type FrameType
	// Op is the operation the frame belongs to.
	Op Op
	// ID is the request id the frame belongs to; 0 only for connection faults.
	ID uint64
	// Body is the msgpack body, possibly empty. ReadFrame returns a fresh
	// slice the caller owns.
	Body []byte
}

// putHeader writes the prefix and header of f into b[:PrefixSize+HeaderSize].
func putHeader(b []byte, f Frame) error {
	if !f.Type.Valid() {
		return fmt.Errorf("%w: frame type %d", ErrMalformedFrame, uint8(f.Type))
	}
	if uint64(len(f.Body)) > MaxFrameLength-HeaderSize {
		return fmt.Errorf("%w: body of %d bytes", ErrFrameTooLarge, len(f.Body))
	}
	binary.BigEndian.PutUint32(b[0:4], uint32(HeaderSize+len(f.Body)))
	b[4] = Version
	b[5] = byte(f.Type)
	binary.BigEndian.PutUint16(b[6:8], uint16(f.Op))
	binary.BigEndian.PutUint64(b[8:16], f.ID)
	return nil
}

// AppendFrame appends the encoding of f to dst. It fails with
// ErrMalformedFrame for an unknown frame type and ErrFrameTooLarge for a body
// the length field cannot express; callers enforce their own maximum.
func AppendFrame(dst []byte, f Frame) ([]byte, error) {
	var hdr [PrefixSize + HeaderSize]byte
	if err := putHeader(hdr[:], f); err != nil {
		return dst, err
	}
	dst = append(dst, hdr[:]...)
	return append(dst, f.Body...), nil
}

// WriteFrame writes f to w without copying its body. It is not safe to call
// concurrently on one writer; callers serialise frames themselves.
func WriteFrame(w io.Writer, f Frame) error {
	var hdr [PrefixSize + HeaderSize]byte
	if err := putHeader(hdr[:], f); err != nil {
		return err
	}
	bufs := net.Buffers{hdr[:], f.Body}
	_, err := bufs.WriteTo(w)
	return err
}

// FrameLength returns the length field of a frame with a body of n bytes,
// the figure a maximum frame size is compared with.
func FrameLength(n int) int { return HeaderSize + n }

// ReadFrame reads one frame from r. maxSize bounds the length field; zero
// or less means DefaultMaxFrameSize.
//
// It returns io.EOF, unwrapped, when r ends exactly at a frame boundary and
// io.ErrUnexpectedEOF when it ends inside a frame. A length below HeaderSize
// or an unknown frame type is ErrMalformedFrame, a version other than Version
// is ErrUnsupportedVersion, and a length above maxSize is ErrFrameTooLarge.
// With ErrFrameTooLarge the returned Frame carries the header fields (not
// the body), so that a server can address its reply. After any error other
// than io.EOF the reader is mid-frame and the connection must be closed.
//
// ReadFrame never allocates more than the length announced, which is at most
// maxSize, and it allocates the body as its bytes arrive, so a peer that
// announces a large frame and stalls pins little memory.
func ReadFrame(r io.Reader, maxSize int) (Frame, error) {
	var hdr [PrefixSize + HeaderSize]byte
	return readFrame(r, hdr[:], maxSize)
}

// readFrame is ReadFrame with the caller's scratch space for the header,
// hdr of PrefixSize+HeaderSize bytes, so that a loop reading frames does
// not allocate it for each.
func readFrame(r io.Reader, hdr []byte, maxSize int) (Frame, error) {
	return readFrameFrom(r, hdr, maxSize, nil)
}

// readFrameFrom is readFrame that reads the body of an Append request into
// a buffer of bodies, when not nil.
func readFrameFrom(r io.Reader, hdr []byte, maxSize int, bodies *bodyPool) (Frame, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxFrameSize
	}
	if _, err := io.ReadFull(r, hdr[:PrefixSize]); err != nil {
		return Frame{}, err // io.EOF at a boundary, io.ErrUnexpectedEOF inside
	}
	n := binary.BigEndian.Uint32(hdr[:PrefixSize])
	if n == 0 {
		return Frame{}, fmt.Errorf("%w: zero length", ErrMalformedFrame)
	}
	if _, err := io.ReadFull(r, hdr[4:5]); err != nil {
		return Frame{}, inFrame(err)
	}
	if hdr[4] != Version {
		return Frame{}, fmt.Errorf("%w: version %d, want %d", ErrUnsupportedVersion, hdr[4], Version)
	}
	if n < HeaderSize {
		return Frame{}, fmt.Errorf("%w: length %d is shorter than the header", ErrMalformedFrame, n)
	}
	if _, err := io.ReadFull(r, hdr[5:]); err != nil {
		return Frame{}, inFrame(err)
	}
	f := Frame{
		Type: FrameType(hdr[5]),
		Op:   Op(binary.BigEndian.Uint16(hdr[6:8])),
		ID:   binary.BigEndian.Uint64(hdr[8:16]),
	}
	if !f.Type.Valid() {
		return Frame{}, fmt.Errorf("%w: frame type %d", ErrMalformedFrame, hdr[5])
	}
	if uint64(n) > uint64(maxSize) {
		return f, fmt.Errorf("%w: length %d, limit %d", ErrFrameTooLarge, n, maxSize)
	}
	var body []byte
	var err error
	if bodies != nil && f.Type == FrameRequest && f.Op == OpAppend {
		body, err = bodies.read(r, int(n-HeaderSize))
	} else {
		body, err = readBody(r, int(n-HeaderSize))
	}
	if err != nil {
		return Frame{}, err
	}
	f.Body = body
	return f, nil
}

// readChunk is the first allocation for a body and the most a body may
// outgrow the bytes actually received.
const readChunk = 64 << 10

// readBody reads exactly n bytes, growing its buffer as they arrive.
func readBody(r io.Reader, n int) ([]byte, error) { return readGrowing(r, n, readChunk) }

// readGrowing reads exactly n bytes into a fresh slice, first allocating
// at most chunk bytes and doubling as the bytes arrive, so that a peer
// that announces a large body and sends little costs little memory.
func readGrowing(r io.Reader, n, chunk int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	b := make([]byte, 0, min(n, chunk))
	for len(b) < n {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(2*cap(b), n))
			copy(nb, b)
			b = nb
		}
		m, err := io.ReadFull(r, b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil {
			return nil, inFrame(err)
		}
	}
	return b, nil
}

// inFrame turns io.EOF into io.ErrUnexpectedEOF for reads inside a frame.
func inFrame(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
