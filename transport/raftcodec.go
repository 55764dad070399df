package transport

// Hand-written encoders and decoders of hashicorp/raft's RPC messages, in
// the layout raftwire.go documents. Encoders append to a caller's buffer;
// decoders alias the body they are given (which the frame reader allocated
// for the message alone and never reuses), so a decoded AppendEntries costs
// three allocations whatever its number of entries: the entries, the
// pointers to them, and the request.

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/raft"
)

// Encoding primitives.

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendVarint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

func appendFlag(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendBytes(b, v []byte) []byte {
	if v == nil {
		return append(b, 0)
	}
	return append(binary.AppendUvarint(b, uint64(len(v))+1), v...)
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, 0)
	}
	return appendUvarint(appendVarint(append(b, 1), t.Unix()), uint64(t.Nanosecond()))
}

func appendRPCHeader(b []byte, h *raft.RPCHeader) []byte {
	b = appendVarint(b, int64(h.ProtocolVersion))
	return appendBytes(appendBytes(b, h.ID), h.Addr)
}

// raftDec decodes a body. The first error sticks: later calls return
// zero values, and err reports it.
type raftDec struct {
	b   []byte
	err error
	// what names the message, for errors.
	what string
}

func (d *raftDec) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s: %s", ErrMalformedBody, d.what, fmt.Sprintf(format, args...))
	}
}

func (d *raftDec) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	switch {
	case n <= 0:
		d.fail("bad varint")
		return 0
	case n > 1 && d.b[n-1] == 0:
		d.fail("varint not in its shortest form")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int decodes what appendVarint wrote: a zigzag-encoded uvarint, as
// binary.Varint reads it.
func (d *raftDec) int() int64 {
	ux := d.uint()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

func (d *raftDec) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *raftDec) bool() bool {
	switch v := d.byte(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("bool byte %d", v)
		return false
	}
}

// bytes returns a slice of the body, capacity clipped so that an append
// by its holder cannot overwrite the next field.
func (d *raftDec) bytes() []byte {
	n := d.uint()
	if d.err != nil || n == 0 {
		return nil
	}
	n--
	if n > uint64(len(d.b)) {
		d.fail("%d bytes announced, %d left", n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *raftDec) time() time.Time {
	switch tag := d.byte(); tag {
	case 0:
		return time.Time{}
	case 1:
		s, ns := d.int(), d.uint()
		if ns >= 1e9 {
			d.fail("nanoseconds %d", ns)
		}
		if d.err != nil {
			return time.Time{}
		}
		t := time.Unix(s, int64(ns))
		if t.IsZero() {
			d.fail("the zero time encoded as a time")
		}
		return t
	default:
		d.fail("time tag %d", tag)
		return time.Time{}
	}
}

func (d *raftDec) rpcHeader(h *raft.RPCHeader) {
	v := d.int()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("protocol version %d", v)
	}
	h.ProtocolVersion = raft.ProtocolVersion(v)
	h.ID = d.bytes()
	h.Addr = d.bytes()
}

// end fails on trailing bytes and returns the first error.
func (d *raftDec) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the last field", len(d.b))
	}
	return d.err
}

// Smallest encodings, which bound how many elements a length field may
// announce before anything is allocated for them.
const (
	// minLogSize is the smallest encoded raft.Log: index, term, type,
	// two nil byte strings and a zero time.
	minLogSize = 6
)

// uvarintLen is the encoded size of v.
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// bytesLen is the encoded size of v.
func bytesLen(v []byte) int {
	if v == nil {
		return 1
	}
	return uvarintLen(uint64(len(v))+1) + len(v)
}

// logLen is the encoded size of an entry.
func logLen(e *raft.Log) int {
	n := uvarintLen(e.Index) + uvarintLen(e.Term) + 1 + bytesLen(e.Data) + bytesLen(e.Extensions) + 1
	if !e.AppendedAt.IsZero() {
		s := e.AppendedAt.Unix()
		n += uvarintLen(uint64(s<<1)^uint64(s>>63)) + uvarintLen(uint64(e.AppendedAt.Nanosecond()))
	}
	return n
}

// appendLog appends the encoding of one entry.
func appendLog(b []byte, e *raft.Log) []byte { return appendLogAside(b, e, nil) }

// appendLogAside is appendLog that leaves data of at least asideMin bytes
// out of b when aside is not nil, noting where it goes instead.
func appendLogAside(b []byte, e *raft.Log, aside *dataAside) []byte {
	b = appendUvarint(appendUvarint(b, e.Index), e.Term)
	b = append(b, byte(e.Type))
	if aside != nil && len(e.Data) >= asideMin {
		b = binary.AppendUvarint(b, uint64(len(e.Data))+1)
		aside.add(len(b), e.Data)
	} else {
		b = appendBytes(b, e.Data)
	}
	b = appendBytes(b, e.Extensions)
	return appendTime(b, e.AppendedAt)
}

// appendAppendEntriesRequest appends the body of r with its first n
// entries (n = len(r.Entries) for all of them).
func appendAppendEntriesRequest(b []byte, r *raft.AppendEntriesRequest, n int) ([]byte, error) {
	return appendAppendEntriesRequestAside(b, r, n, nil)
}

// appendAppendEntriesRequestAside is appendAppendEntriesRequest that
// leaves large entry data aside (appendLogAside).
func appendAppendEntriesRequestAside(b []byte, r *raft.AppendEntriesRequest, n int, aside *dataAside) ([]byte, error) {
	b = appendRPCHeader(b, &r.RPCHeader)
	//lint:ignore SA1019 raft v1.8.0 still sets and reads Leader
	b = appendBytes(appendUvarint(b, r.Term), r.Leader)
	b = appendUvarint(appendUvarint(appendUvarint(b, r.PrevLogEntry), r.PrevLogTerm), r.LeaderCommitIndex)
	if r.Entries == nil {
		return append(b, 0), nil
	}
	b = appendUvarint(b, uint64(n)+1)
	for i, e := range r.Entries[:n] {
		if e == nil {
			return b, fmt.Errorf("transport: AppendEntries entry %d is nil", i)
		}
		b = appendLogAside(b, e, aside)
	}
	return b, nil
}

func decodeAppendEntriesRequest(body []byte, r *raft.AppendEntriesRequest) error {
	d := raftDec{b: body, what: "AppendEntries request"}
	d.rpcHeader(&r.RPCHeader)
	r.Term = d.uint()
	//lint:ignore SA1019 raft v1.8.0 still sets and reads Leader
	r.Leader = d.bytes()
	r.PrevLogEntry, r.PrevLogTerm, r.LeaderCommitIndex = d.uint(), d.uint(), d.uint()
	count := d.uint()
	if d.err != nil || count == 0 {
		return d.end()
	}
	count--
	if count > uint64(len(d.b)/minLogSize) {
		d.fail("%d entries announced in %d bytes", count, len(d.b))
		return d.err
	}
	logs := make([]raft.Log, count)
	r.Entries = make([]*raft.Log, count)
	for i := range logs {
		e := &logs[i]
		e.Index, e.Term = d.uint(), d.uint()
		e.Type = raft.LogType(d.byte())
		e.Data, e.Extensions = d.bytes(), d.bytes()
		e.AppendedAt = d.time()
		r.Entries[i] = e
	}
	return d.end()
}

func appendAppendEntriesResponse(b []byte, r *raft.AppendEntriesResponse) []byte {
	b = appendUvarint(appendUvarint(appendRPCHeader(b, &r.RPCHeader), r.Term), r.LastLog)
	return appendFlag(appendFlag(b, r.Success), r.NoRetryBackoff)
}

func decodeAppendEntriesResponse(d *raftDec, r *raft.AppendEntriesResponse) {
	d.rpcHeader(&r.RPCHeader)
	r.Term, r.LastLog = d.uint(), d.uint()
	r.Success, r.NoRetryBackoff = d.bool(), d.bool()
}

func appendRequestVoteRequest(b []byte, r *raft.RequestVoteRequest) []byte {
	//lint:ignore SA1019 raft v1.8.0 still sets and reads Candidate
	b = appendBytes(appendUvarint(appendRPCHeader(b, &r.RPCHeader), r.Term), r.Candidate)
	return appendFlag(appendUvarint(appendUvarint(b, r.LastLogIndex), r.LastLogTerm), r.LeadershipTransfer)
}

func decodeRequestVoteRequest(body []byte, r *raft.RequestVoteRequest) error {
	d := raftDec{b: body, what: "RequestVote request"}
	d.rpcHeader(&r.RPCHeader)
	//lint:ignore SA1019 raft v1.8.0 still sets and reads Candidate
	r.Term, r.Candidate = d.uint(), d.bytes()
	r.LastLogIndex, r.LastLogTerm = d.uint(), d.uint()
	r.LeadershipTransfer = d.bool()
	return d.end()
}

func appendRequestVoteResponse(b []byte, r *raft.RequestVoteResponse) []byte {
	b = appendBytes(appendUvarint(appendRPCHeader(b, &r.RPCHeader), r.Term), r.Peers)
	return appendFlag(b, r.Granted)
}

func decodeRequestVoteResponse(d *raftDec, r *raft.RequestVoteResponse) {
	d.rpcHeader(&r.RPCHeader)
	r.Term, r.Peers, r.Granted = d.uint(), d.bytes(), d.bool()
}

func appendRequestPreVoteRequest(b []byte, r *raft.RequestPreVoteRequest) []byte {
	b = appendUvarint(appendRPCHeader(b, &r.RPCHeader), r.Term)
	return appendUvarint(appendUvarint(b, r.LastLogIndex), r.LastLogTerm)
}

func decodeRequestPreVoteRequest(body []byte, r *raft.RequestPreVoteRequest) error {
	d := raftDec{b: body, what: "RequestPreVote request"}
	d.rpcHeader(&r.RPCHeader)
	r.Term, r.LastLogIndex, r.LastLogTerm = d.uint(), d.uint(), d.uint()
	return d.end()
}

func appendRequestPreVoteResponse(b []byte, r *raft.RequestPreVoteResponse) []byte {
	return appendFlag(appendUvarint(appendRPCHeader(b, &r.RPCHeader), r.Term), r.Granted)
}

func decodeRequestPreVoteResponse(d *raftDec, r *raft.RequestPreVoteResponse) {
	d.rpcHeader(&r.RPCHeader)
	r.Term, r.Granted = d.uint(), d.bool()
}

func decodeTimeoutNowRequest(body []byte, r *raft.TimeoutNowRequest) error {
	d := raftDec{b: body, what: "TimeoutNow request"}
	d.rpcHeader(&r.RPCHeader)
	return d.end()
}

func appendInstallSnapshotRequest(b []byte, r *raft.InstallSnapshotRequest) ([]byte, error) {
	if r.Size < 0 {
		return b, fmt.Errorf("transport: InstallSnapshot of size %d", r.Size)
	}
	b = appendVarint(appendRPCHeader(b, &r.RPCHeader), int64(r.SnapshotVersion))
	b = appendBytes(appendUvarint(b, r.Term), r.Leader)
	b = appendBytes(appendUvarint(appendUvarint(b, r.LastLogIndex), r.LastLogTerm), r.Peers)
	b = appendUvarint(appendBytes(b, r.Configuration), r.ConfigurationIndex)
	return appendUvarint(b, uint64(r.Size)), nil
}

func decodeInstallSnapshotRequest(body []byte, r *raft.InstallSnapshotRequest) error {
	d := raftDec{b: body, what: "InstallSnapshot request"}
	d.rpcHeader(&r.RPCHeader)
	v := d.int()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("snapshot version %d", v)
	}
	r.SnapshotVersion = raft.SnapshotVersion(v)
	r.Term, r.Leader = d.uint(), d.bytes()
	r.LastLogIndex, r.LastLogTerm = d.uint(), d.uint()
	r.Peers, r.Configuration = d.bytes(), d.bytes()
	r.ConfigurationIndex = d.uint()
	size := d.uint()
	if size > math.MaxInt64 {
		d.fail("size %d", size)
	}
	r.Size = int64(size)
	return d.end()
}

func appendInstallSnapshotResponse(b []byte, r *raft.InstallSnapshotResponse) []byte {
	return appendFlag(appendUvarint(appendRPCHeader(b, &r.RPCHeader), r.Term), r.Success)
}

func decodeInstallSnapshotResponse(d *raftDec, r *raft.InstallSnapshotResponse) {
	d.rpcHeader(&r.RPCHeader)
	r.Term, r.Success = d.uint(), d.bool()
}

// appendRequest appends the body of a request of kind k (not
// AppendEntries, which appendAppendEntriesRequest encodes).
func appendRequest(b []byte, k raftKind, args any) ([]byte, error) {
	switch a := args.(type) {
	case *raft.RequestVoteRequest:
		return appendRequestVoteRequest(b, a), nil
	case *raft.RequestPreVoteRequest:
		return appendRequestPreVoteRequest(b, a), nil
	case *raft.TimeoutNowRequest:
		return appendRPCHeader(b, &a.RPCHeader), nil
	case *raft.InstallSnapshotRequest:
		return appendInstallSnapshotRequest(b, a)
	case *raft.AppendEntriesRequest:
		return appendAppendEntriesRequest(b, a, len(a.Entries))
	}
	return b, fmt.Errorf("transport: no raft %v request of type %T", k, args)
}

// decodeRequest decodes the body of a request of kind k into a new
// raft request, which aliases body.
func decodeRequest(k raftKind, body []byte) (any, error) {
	switch k {
	case raftAppendEntries:
		r := new(raft.AppendEntriesRequest)
		return r, decodeAppendEntriesRequest(body, r)
	case raftRequestVote:
		r := new(raft.RequestVoteRequest)
		return r, decodeRequestVoteRequest(body, r)
	case raftRequestPreVote:
		r := new(raft.RequestPreVoteRequest)
		return r, decodeRequestPreVoteRequest(body, r)
	case raftTimeoutNow:
		r := new(raft.TimeoutNowRequest)
		return r, decodeTimeoutNowRequest(body, r)
	case raftInstallSnapshot:
		r := new(raft.InstallSnapshotRequest)
		return r, decodeInstallSnapshotRequest(body, r)
	}
	return nil, fmt.Errorf("%w: unknown raft request kind %#x", ErrMalformedFrame, uint8(k))
}

// appendResponse appends the body of the response of kind k that raft
// gave: its error message, then resp's fields. A resp that is nil or not
// of k's type encodes as the zero response (raft answers some errors with
// no response); one of another type also sets the error.
func appendResponse(b []byte, k raftKind, resp any, rpcErr error) []byte {
	var (
		ae *raft.AppendEntriesResponse
		rv *raft.RequestVoteResponse
		pv *raft.RequestPreVoteResponse
		tn *raft.TimeoutNowResponse
		is *raft.InstallSnapshotResponse
		ok bool
	)
	switch k {
	case raftAppendEntries:
		if ae, ok = resp.(*raft.AppendEntriesResponse); !ok || ae == nil {
			ae = new(raft.AppendEntriesResponse)
		}
	case raftRequestVote:
		if rv, ok = resp.(*raft.RequestVoteResponse); !ok || rv == nil {
			rv = new(raft.RequestVoteResponse)
		}
	case raftRequestPreVote:
		if pv, ok = resp.(*raft.RequestPreVoteResponse); !ok || pv == nil {
			pv = new(raft.RequestPreVoteResponse)
		}
	case raftTimeoutNow:
		if tn, ok = resp.(*raft.TimeoutNowResponse); !ok || tn == nil {
			tn = new(raft.TimeoutNowResponse)
		}
	case raftInstallSnapshot:
		if is, ok = resp.(*raft.InstallSnapshotResponse); !ok || is == nil {
			is = new(raft.InstallSnapshotResponse)
		}
	}
	var msg string
	switch {
	case rpcErr != nil:
		if msg = rpcErr.Error(); msg == "" {
			msg = "error"
		}
	case !ok && resp != nil:
		msg = fmt.Sprintf("transport: raft answered %v with a %T", k, resp)
	}
	if len(msg) > raftMaxErrorLen {
		msg = msg[:raftMaxErrorLen]
	}
	if msg == "" {
		b = append(b, 0)
	} else {
		b = append(appendUvarint(b, uint64(len(msg))+1), msg...)
	}
	switch k {
	case raftAppendEntries:
		return appendAppendEntriesResponse(b, ae)
	case raftRequestVote:
		return appendRequestVoteResponse(b, rv)
	case raftRequestPreVote:
		return appendRequestPreVoteResponse(b, pv)
	case raftTimeoutNow:
		return appendRPCHeader(b, &tn.RPCHeader)
	case raftInstallSnapshot:
		return appendInstallSnapshotResponse(b, is)
	}
	return b
}

// decodeResponse decodes the body of a response of kind k into resp,
// which must be the pointer type raft gives for k. It returns the error
// message raft answered with ("" for none); err reports a body that does
// not decode.
func decodeResponse(k raftKind, body []byte, resp any) (rpcErr string, err error) {
	d := raftDec{b: body, what: k.String() + " response"}
	msg := d.bytes()
	if len(msg) > raftMaxErrorLen {
		d.fail("error message of %d bytes", len(msg))
	}
	if msg != nil && len(msg) == 0 {
		d.fail("empty error message")
	}
	switch r := resp.(type) {
	case *raft.AppendEntriesResponse:
		decodeAppendEntriesResponse(&d, r)
	case *raft.RequestVoteResponse:
		decodeRequestVoteResponse(&d, r)
	case *raft.RequestPreVoteResponse:
		decodeRequestPreVoteResponse(&d, r)
	case *raft.TimeoutNowResponse:
		d.rpcHeader(&r.RPCHeader)
	case *raft.InstallSnapshotResponse:
		decodeInstallSnapshotResponse(&d, r)
	default:
		return "", fmt.Errorf("transport: no raft %v response of type %T", k, resp)
	}
	if err := d.end(); err != nil {
		return "", err
	}
	return string(msg), nil
}
