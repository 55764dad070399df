package transport

// The raft wire protocol: how RaftTransport carries hashicorp/raft's RPCs
// between nodes. Everything in this file is wire format: a constant here
// never changes meaning; a new layout gets a new RaftVersion. It is not
// hashicorp/raft's NetworkTransport protocol, and the two do not talk to
// each other: every node of a cluster must run the same raft transport.
//
// # Connections
//
// The dialling side opens every connection with a preamble of five bytes:
//
//	+------+------+------+------+-------------+
//	| 0xF2 | 'r'  | 'l'  | 't'  | RaftVersion |
//	+------+------+------+------+-------------+
//
// The first byte is not a letter, so the preamble cannot be mistaken for
// the node's probe protocol ("RLPROBE1"), and it is above hashicorp/raft's
// RPC type bytes (0 to 4), so a NetworkTransport on either end fails at
// once. An accepting side that does not speak the version writes its own
// preamble back and closes the connection: a dialler that reads 0xF2 where
// it expects a response frame learns the version the peer speaks.
//
// After the preamble, the dialler sends request frames and the acceptor
// answers each with one response frame, in order. A dialler may send
// several requests before reading a response (a pipeline); the acceptor
// hands them to raft in order and answers in the same order.
//
// # Frames
//
// Integers in the frame header are big-endian:
//
//	 0               1               2               3
//	 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	+---------------------------------------------------------------+
//	|          length: bytes that follow this field (>= 12)         |  0
//	+---------------+---------------+-------------------------------+
//	|     kind      |   flags = 0   |         reserved = 0          |  4
//	+---------------+---------------+-------------------------------+
//	|                                                               |  8
//	+                 group: the raft group's id                    +
//	|                                                               | 12
//	+---------------------------------------------------------------+
//	|                body: length - 12 bytes ...                    | 16
//	+---------------------------------------------------------------+
//
// The kind is the RPC (1 AppendEntries, 2 RequestVote, 3 RequestPreVote,
// 4 TimeoutNow, 5 InstallSnapshot); a response has the kind of its request
// with the high bit set (0x81 answers AppendEntries). Flags and reserved
// must be zero. The group names the raft group the RPC is for: one
// listener and one set of connections serve every raft group of a node
// (RaftMux), and a connection may carry requests of different groups one
// after another. A node of one group serves group 0. A response carries
// the group of its request. A request for a group the answering node does
// not serve (not, or no longer) gets a response whose Error names the
// group ("no such raft group: group N is not on this node"), and the
// connection stays usable. (Nodes built before RaftMux answer a request
// for any group but 0 with an error response for group 0; a caller reads
// that as a broken frame, closes the connection, and the call fails as it
// would anyway.) There is no checksum: TCP (and TLS) protect the bytes,
// and a frame that breaks a rule closes the connection. Each side bounds
// the length it accepts (MaxFrameSize) and allocates a body as its bytes
// arrive, so a peer that announces a large frame and stalls pins little
// memory.
//
// An InstallSnapshot request frame is followed by exactly Size bytes of
// snapshot data, unframed; its response comes after them, and both sides
// close the connection after it.
//
// # Bodies
//
// A body is a sequence of fields in a fixed order, with nothing after the
// last one. Field encodings:
//
//	uint    unsigned LEB128 varint (encoding/binary's Uvarint), shortest form
//	int     zig-zag varint (encoding/binary's Varint), shortest form
//	bool    one byte, 0 or 1
//	bytes   uint n, then: n = 0 is nil, else n-1 bytes follow
//	time    one byte: 0 is the zero time.Time; 1 is followed by int seconds
//	        and uint nanoseconds (< 1e9) since the Unix epoch
//	header  raft.RPCHeader: int ProtocolVersion, bytes ID, bytes Addr
//
// A decoder refuses anything but the shortest form of a varint, a bool
// other than 0 or 1, and trailing bytes, so that a body has one meaning:
// decoding and encoding again gives the same bytes.
//
// Request bodies, in field order (the raft.*Request types' fields):
//
//	AppendEntries    header, uint Term, bytes Leader, uint PrevLogEntry,
//	                 uint PrevLogTerm, uint LeaderCommitIndex, uint count
//	                 (0 is nil, else count-1 entries follow), then per
//	                 entry: uint Index, uint Term, one byte Type, bytes Data,
//	                 bytes Extensions, time AppendedAt
//	RequestVote      header, uint Term, bytes Candidate, uint LastLogIndex,
//	                 uint LastLogTerm, bool LeadershipTransfer
//	RequestPreVote   header, uint Term, uint LastLogIndex, uint LastLogTerm
//	TimeoutNow       header
//	InstallSnapshot  header, int SnapshotVersion, uint Term, bytes Leader,
//	                 uint LastLogIndex, uint LastLogTerm, bytes Peers,
//	                 bytes Configuration, uint ConfigurationIndex, uint Size
//
// A response body starts with bytes Error: nil when raft answered without
// an error, else its message (at most raftMaxErrorLen bytes). The
// response's fields follow, zero when raft gave none:
//
//	AppendEntries    header, uint Term, uint LastLog, bool Success,
//	                 bool NoRetryBackoff
//	RequestVote      header, uint Term, bytes Peers, bool Granted
//	RequestPreVote   header, uint Term, bool Granted
//	TimeoutNow       header
//	InstallSnapshot  header, uint Term, bool Success

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Raft wire format constants.
const (
	// RaftVersion is the raft protocol version this package speaks, the
	// last byte of the connection preamble.
	RaftVersion = 1
	// raftMagic starts the connection preamble.
	raftMagic = "\xf2rlt"
	// raftPreambleSize is the size of the connection preamble.
	raftPreambleSize = len(raftMagic) + 1
	// raftPrefixSize is the size of the length prefix of a frame.
	raftPrefixSize = 4
	// raftHeaderSize is the size of the frame header after the length
	// prefix: kind, flags, reserved and group. The length counts it.
	raftHeaderSize = 12
	// raftFrameOverhead is the size of a frame with an empty body.
	raftFrameOverhead = raftPrefixSize + raftHeaderSize
	// raftMaxErrorLen bounds the error message of a response; a longer
	// one is cut.
	raftMaxErrorLen = 4096
	// raftResponseBit marks a response kind.
	raftResponseBit = 0x80
)

// raftKind is the kind byte of a frame. Its values are wire format.
type raftKind uint8

// Request kinds.
const (
	raftAppendEntries   raftKind = 1
	raftRequestVote     raftKind = 2
	raftRequestPreVote  raftKind = 3
	raftTimeoutNow      raftKind = 4
	raftInstallSnapshot raftKind = 5
)

var raftKindNames = [...]string{
	raftAppendEntries:   "AppendEntries",
	raftRequestVote:     "RequestVote",
	raftRequestPreVote:  "RequestPreVote",
	raftTimeoutNow:      "TimeoutNow",
	raftInstallSnapshot: "InstallSnapshot",
}

// valid reports whether k is a request kind.
func (k raftKind) valid() bool { return k >= raftAppendEntries && k <= raftInstallSnapshot }

func (k raftKind) String() string {
	if k.valid() {
		return raftKindNames[k]
	}
	if r := k &^ raftResponseBit; k&raftResponseBit != 0 && r.valid() {
		return raftKindNames[r] + " response"
	}
	return fmt.Sprintf("kind(%#x)", uint8(k))
}

// ErrRaftPeerVersion reports a peer that refused this node's raft protocol
// version, or a connection that does not speak the raft protocol at all
// (for example hashicorp/raft's NetworkTransport: every node of a cluster
// must run the same raft transport).
var ErrRaftPeerVersion = errors.New("transport: the peer does not speak this raft protocol version")

// raftFrame is a decoded frame header and its body.
type raftFrame struct {
	kind  raftKind
	group uint64
	// body is a fresh slice the reader owns: decoded messages alias it.
	body []byte
}

// appendRaftHeader appends a frame header with a zero length to b; the
// length is set by finishRaftFrame once the body is appended.
func appendRaftHeader(b []byte, kind raftKind, group uint64) []byte {
	var h [raftFrameOverhead]byte
	h[4] = byte(kind)
	binary.BigEndian.PutUint64(h[8:16], group)
	return append(b, h[:]...)
}

// finishRaftFrame sets the length of the frame that starts at b[start:]
// and ends at len(b), with aside more bytes of it left out of b (entry
// data written from where it is). It fails with ErrFrameTooLarge when the
// frame is longer than maxSize.
func finishRaftFrame(b []byte, start, aside, maxSize int) error {
	n := len(b) + aside - start - raftPrefixSize
	if n > maxSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, maxSize)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return nil
}

// readRaftFrame reads one frame of at most maxSize bytes (the length
// field) from r. It returns io.EOF, unwrapped, only at a frame boundary,
// and ErrRaftPeerVersion when the peer wrote a preamble where a frame
// belongs (it refused our version). started, when not nil, is called once
// the first byte of the frame has arrived, before the rest is read: the
// caller arms its deadline for the frame there.
func readRaftFrame(r *bufio.Reader, maxSize int, started func(length int)) (raftFrame, error) {
	var h [raftFrameOverhead]byte
	if _, err := io.ReadFull(r, h[:1]); err != nil {
		return raftFrame{}, err
	}
	if h[0] == raftMagic[0] {
		p := make([]byte, raftPreambleSize-1)
		if _, err := io.ReadFull(r, p); err == nil && string(p[:len(raftMagic)-1]) == raftMagic[1:] {
			return raftFrame{}, fmt.Errorf("%w: it speaks version %d, this node %d", ErrRaftPeerVersion, p[len(p)-1], RaftVersion)
		}
		return raftFrame{}, fmt.Errorf("%w: a length of more than %d", ErrFrameTooLarge, maxSize)
	}
	if _, err := io.ReadFull(r, h[1:]); err != nil {
		return raftFrame{}, inFrame(err)
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n < raftHeaderSize {
		return raftFrame{}, fmt.Errorf("%w: length %d is shorter than the header", ErrMalformedFrame, n)
	}
	if uint64(n) > uint64(maxSize) {
		return raftFrame{}, fmt.Errorf("%w: length %d, limit %d", ErrFrameTooLarge, n, maxSize)
	}
	f := raftFrame{kind: raftKind(h[4]), group: binary.BigEndian.Uint64(h[8:16])}
	if h[5] != 0 || h[6] != 0 || h[7] != 0 {
		return raftFrame{}, fmt.Errorf("%w: flags %#x, reserved %#x", ErrMalformedFrame, h[5], binary.BigEndian.Uint16(h[6:8]))
	}
	if started != nil {
		started(int(n))
	}
	body, err := readRaftBody(r, int(n)-raftHeaderSize)
	if err != nil {
		return raftFrame{}, err
	}
	f.body = body
	return f, nil
}

// raftReadChunk is the first allocation for a body, and the most a body's
// buffer may outgrow the bytes actually received.
const raftReadChunk = 1 << 20

// readRaftBody reads exactly n bytes into a fresh slice, growing it as
// the bytes arrive.
func readRaftBody(r io.Reader, n int) ([]byte, error) { return readGrowing(r, n, raftReadChunk) }

// appendRaftPreamble appends the connection preamble.
func appendRaftPreamble(b []byte) []byte {
	return append(append(b, raftMagic...), RaftVersion)
}

// checkRaftPreamble checks a connection's preamble.
func checkRaftPreamble(p []byte) error {
	if len(p) != raftPreambleSize || string(p[:len(raftMagic)]) != raftMagic {
		hint := ""
		if len(p) > 0 && p[0] <= 4 {
			hint = " (hashicorp/raft's NetworkTransport? every node must run the same raft transport)"
		}
		return fmt.Errorf("%w: the connection starts with %q%s", ErrRaftPeerVersion, p, hint)
	}
	if v := p[len(raftMagic)]; v != RaftVersion {
		return fmt.Errorf("%w: it speaks version %d, this node %d", ErrRaftPeerVersion, v, RaftVersion)
	}
	return nil
}
