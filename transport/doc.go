// Package transport owns raftlog's client wire protocol: framing,
// versioning, message types, limits, a pipelining client (Conn) and a
// per-connection server loop (Serve). It also owns the native raft
// transport, RaftTransport (see "The raft transport" below). The node package implements Handler
// and wires Serve to a listener; the protocol code knows nothing of Raft
// state or storage.
//
// # Wire format
//
// protocol.go documents the format in one place: length-prefixed frames
// carrying a version, a frame type, an op and a request id, with msgpack
// bodies. messages.go defines the body of every op, logs.go those of the
// named-log ops and the log field of the record ops (protocol.go's "Logs"
// says how requests name a log and stay compatible with older peers).
//
// # Guarantees
//
// Framing: ReadFrame returns io.EOF only at a frame boundary and
// io.ErrUnexpectedEOF inside a frame; it never allocates more than the
// length a frame announces, and refuses lengths above its maximum before
// allocating. DecodeBody accepts exactly one msgpack map with known fields
// and nothing after it, so a body has one meaning.
//
// Limits: a server bounds the frame size, the records per Append and their
// size, the records and bytes per Read reply and Tail item, the requests and
// request bytes in flight per connection, and how long a connection may idle,
// dribble a frame or stall a write (see Limits). A request beyond a limit
// gets an Error reply and the connection stays usable; a frame that breaks
// the framing gets an Error reply and the connection is closed. A Handler
// that implements RefusalObserver hears of each such refusal, to count
// them. One connection's faults, a panic in a handler call included, never
// affect another.
//
// Concurrency: a Conn may be used by any number of goroutines; each call
// gets its own request id and replies are matched by id. Serve reads a
// connection in one goroutine and hands each request to a worker
// goroutine, which runs the Handler and queues the reply; a worker serves
// one request at a time and waits for the next, and exits after a few
// seconds without one, so requests run concurrently up to
// Limits.MaxInFlight without paying for a goroutine each. Replies are
// coalesced: frames queued while the connection is being written, and
// those whose goroutines are ready to run when a write starts (the
// replies of a committed batch), go out in one write call. Replies waiting
// to be written are bounded: once Limits.MaxFrameSize bytes of them wait,
// workers wait too, with their requests still counted in flight.
// A Tail stream sends no more items than the client has granted credits
// for.
//
// Codecs: the bodies of Append, Read and Tail, their replies and items,
// and Credit have hand-written msgpack codecs (fastcodec.go) that write
// exactly what go-msgpack writes and read it without reflection; other
// bodies, and bodies the hand-written decoders do not expect, take
// go-msgpack. Decoded records share memory with the frame they came in.
//
// # The raft transport
//
// RaftTransport is a hashicorp/raft Transport over any raft.StreamLayer
// (TCP, TLS, or layers over them), speaking its own protocol, documented
// in raftwire.go: a versioned connection preamble, length-prefixed frames
// with a raft group id, and bodies encoded by hand, without
// reflection, decoded in place (an AppendEntries of any number of entries
// costs a fixed number of allocations, and entries alias a buffer raft
// may keep). Replication is pipelined (raftpipe.go) in a way that cannot
// deadlock when a follower answers Success=false, as hashicorp/raft
// v1.8.0's own pipeline can. Every RPC in progress has a connection of its
// own, so heartbeats never wait behind a large AppendEntries; idle
// connections are pooled per peer, and one the peer closed is replaced
// once, at the first RPC that finds it dead (raft's RPCs may be repeated).
// Frames are bounded (MaxFrameSize) and allocated as they arrive. It holds
// no durable state: durability is the LogStore's. Every method is safe for
// concurrent use; the Close of a mux (or of NewRaftTransport's transport,
// which owns its mux) returns once every connection and goroutine is
// done.
//
// A RaftMux serves many raft groups over one listener and one pool of
// connections per peer: each group gets its own RaftTransport (its own
// Consumer, heartbeat handler and pipelines), added and removed while the
// others run. Since a connection carries one call at a time, a group whose
// raft stalls holds up only its own calls, never another group's; a
// request for a group not registered is answered with an error, as an
// unreachable peer would be. NewRaftTransport is a mux of group 0 alone.
//
// # What it does not do
//
// It does not retry, follow leaders or reconnect: a NotLeader error carries
// the leader's address and the caller decides. It does not set up TLS; a
// caller hands Serve and NewConn a net.Conn that may be a *tls.Conn. Nor
// does it decide who may do what: Serve hands each request the TLS state
// of its connection (ConnectionState), and the Handler decides.
package transport
