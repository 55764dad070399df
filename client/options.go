package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// Defaults of Options.
const (
	DefaultRequestTimeout     = 10 * time.Second
	DefaultRetryTimeout       = 30 * time.Second
	DefaultMinBackoff         = 10 * time.Millisecond
	DefaultMaxBackoff         = 250 * time.Millisecond
	DefaultMaxInFlightAppends = 512
	DefaultMaxAppendRequests  = 1
)

// Bounds of Options.
const (
	// MaxAppendWindow is the largest MaxInFlightAppends.
	MaxAppendWindow = 1 << 16
	// MaxAppendRequestsLimit is the largest MaxAppendRequests: the
	// server's default limit of requests in flight on a connection.
	MaxAppendRequestsLimit = transport.DefaultMaxInFlight
)

// SeqWindow is how many of a session's most recent sequence numbers the
// server remembers for duplicate suppression. It is the server's contract:
// an append request is recognised as a repeat only while its sequence
// number is within SeqWindow of the newest one the server has seen from
// the session. The client keeps every sequence number it has in flight
// within MaxAppendRequests (less than SeqWindow) of the oldest one still
// in flight, so a retry is always recognised.
const SeqWindow = 1024

// Options configure a Client. The zero value of each field, or nil Options,
// means its default; negative values are invalid.
type Options struct {
	// ClientID names the session the server uses to suppress duplicate
	// appends; default a random 128-bit hex string. Sequence numbers restart
	// at 1 with every Client, so an id must never be shared by two Clients,
	// at once or one after the other: the server would take the second
	// one's appends for repeats of the first one's and not store them. Set
	// it only to correlate server logs, with an id unique to this Client.
	// It is the session id of the default log's appends; a named log's
	// appends use ClientID/name (see "Named logs" in the package
	// documentation).
	ClientID string
	// Dial opens a connection to a member's client address (host:port);
	// default a net.Dialer over TCP. Set it to dial TLS. Its context carries
	// the RequestTimeout deadline and is cancelled by Close.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Conn configures every connection (see transport.ConnOptions).
	Conn transport.ConnOptions
	// RequestTimeout bounds one attempt of a request, dialling included;
	// default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// RetryTimeout bounds how long an operation keeps retrying, all attempts
	// and backoffs included; default DefaultRetryTimeout. The context passed
	// to the operation can end it earlier.
	RetryTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts, which
	// doubles from MinBackoff up to MaxBackoff with random jitter; defaults
	// DefaultMinBackoff and DefaultMaxBackoff. MinBackoff may not exceed
	// MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// MaxInFlightAppends is the window of appends of each log: the most
	// appends to one log, Append calls and AppendAsync futures alike,
	// submitted and not yet completed. When it is full, Append and AppendAsync wait for room and
	// TryAppendAsync fails with ErrWindowFull. More precisely, every append
	// in flight lies within this many submissions of the oldest one still
	// in flight, so one append retrying for long holds the window back.
	// Default DefaultMaxInFlightAppends, at most MaxAppendWindow.
	MaxInFlightAppends int
	// MaxAppendRequests bounds the append requests to one log in flight
	// at once:
	// appends submitted while that many are in flight wait, and go
	// together in the next request (up to 1,024 records and 4 MiB, or
	// half of Conn.MaxFrameSize; an append larger than that goes alone).
	// Default DefaultMaxAppendRequests, 1: a request starts only once the
	// one before it has completed. More overlap requests, for throughput
	// where the round trip to the leader, not the cluster, bounds it; the
	// appends that succeed are stored in the order they were submitted
	// either way (see "Order" in the package documentation). At most
	// MaxAppendRequestsLimit.
	MaxAppendRequests int
}

// withDefaults returns a copy of o with defaults filled in, or an error for
// invalid values.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.ClientID == "" {
		var b [16]byte
		rand.Read(b[:]) // never fails (crypto/rand documents it)
		c.ClientID = hex.EncodeToString(b[:])
	}
	if len(c.ClientID) > transport.MaxIDLength {
		return c, fmt.Errorf("client: client id of %d bytes, limit %d", len(c.ClientID), transport.MaxIDLength)
	}
	if c.Dial == nil {
		c.Dial = dialTCP
	}
	if c.Conn.MaxFrameSize < 0 || c.Conn.MaxInFlight < 0 || c.Conn.WriteTimeout < 0 {
		return c, fmt.Errorf("client: negative connection option in %+v", c.Conn)
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
		n   string
	}{
		{&c.RequestTimeout, DefaultRequestTimeout, "request timeout"},
		{&c.RetryTimeout, DefaultRetryTimeout, "retry timeout"},
		{&c.MinBackoff, DefaultMinBackoff, "minimum backoff"},
		{&c.MaxBackoff, DefaultMaxBackoff, "maximum backoff"},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return c, fmt.Errorf("client: negative %s %v", d.n, *d.v)
		}
	}
	if c.MinBackoff > c.MaxBackoff {
		return c, fmt.Errorf("client: minimum backoff %v exceeds maximum backoff %v", c.MinBackoff, c.MaxBackoff)
	}
	if c.MaxInFlightAppends == 0 {
		c.MaxInFlightAppends = DefaultMaxInFlightAppends
	}
	if c.MaxInFlightAppends < 0 || c.MaxInFlightAppends > MaxAppendWindow {
		return c, fmt.Errorf("client: MaxInFlightAppends %d is outside [1, %d]", c.MaxInFlightAppends, MaxAppendWindow)
	}
	if c.MaxAppendRequests == 0 {
		c.MaxAppendRequests = DefaultMaxAppendRequests
	}
	if c.MaxAppendRequests < 0 || c.MaxAppendRequests > MaxAppendRequestsLimit {
		return c, fmt.Errorf("client: MaxAppendRequests %d is outside [1, %d]", c.MaxAppendRequests, MaxAppendRequestsLimit)
	}
	return c, nil
}

// dialTCP is the default Options.Dial.
func dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}
