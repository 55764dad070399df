package transport

import (
	"fmt"
	"time"
)

// Defaults for Limits. Sizes derived from the frame size shrink with it
// when only MaxFrameSize is set.
const (
	// DefaultMaxRecordSize is the default largest record (1 MiB), like
	// Kafka's message.max.bytes.
	DefaultMaxRecordSize = 1 << 20
	// DefaultMaxAppendRecords is the default most records in one Append.
	DefaultMaxAppendRecords = 4096
	// DefaultMaxReadRecords is the default most records in one Read reply
	// or Tail item.
	DefaultMaxReadRecords = 4096
	// DefaultMaxReadBytes is the default most record bytes in one Read reply
	// or Tail item.
	DefaultMaxReadBytes = 8 << 20
	// DefaultMaxInFlight is the default most requests, streams included, in
	// flight on one connection.
	DefaultMaxInFlight = 128
	// DefaultMaxInFlightBytes is the default most request body bytes in
	// flight on one connection, or MaxFrameSize if that is larger.
	DefaultMaxInFlightBytes = 64 << 20
	// DefaultIdleTimeout is how long a server waits for a frame on a
	// connection with nothing in flight before closing it.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultFrameTimeout is how long a frame may take to arrive once its
	// first byte has.
	DefaultFrameTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds the write of one frame.
	DefaultWriteTimeout = 30 * time.Second

	// minFrameSize is the smallest MaxFrameSize accepted.
	minFrameSize = 4096
	// bodyOverhead is room, in a frame, for everything of a body except
	// record payloads and per-record fields: the map, ids, sequence number,
	// array and bin headers.
	bodyOverhead = 1024
	// recordOverhead bounds the encoded size of a Record's fields other
	// than its data: the map header, three keys, two integers, a bin header.
	recordOverhead = 64
)

// Limits bound what one connection may ask of a server. The zero value of
// each field means its default; negative values are invalid. Both Serve and
// the Validate methods of requests apply the defaults to a copy.
type Limits struct {
	// MaxFrameSize is the largest frame length (see FrameLength) accepted;
	// default DefaultMaxFrameSize, at least 4096. A longer frame gets a
	// TooLarge reply and the connection is closed.
	MaxFrameSize int
	// MaxRecordSize is the largest record an Append may carry; default
	// DefaultMaxRecordSize, or MaxReadBytes if that is smaller.
	MaxRecordSize int
	// MaxAppendRecords is the most records in one Append; default
	// DefaultMaxAppendRecords, at most MaxBodyElements.
	MaxAppendRecords int
	// MaxReadRecords is the most records in a Read reply or Tail item;
	// default DefaultMaxReadRecords, or fewer so that they fit a frame.
	MaxReadRecords int
	// MaxReadBytes is the most record data in a Read reply or Tail item;
	// default DefaultMaxReadBytes or half of MaxFrameSize, whichever is
	// smaller. It must be at least MaxRecordSize, so that any record can be
	// read, and it must leave room in a frame for MaxReadRecords records.
	MaxReadBytes int
	// MaxInFlight is the most requests a connection may have in flight,
	// streams included; default DefaultMaxInFlight. More get a Busy reply.
	MaxInFlight int
	// MaxInFlightBytes is the most request body bytes a connection may have
	// in flight; default DefaultMaxInFlightBytes or MaxFrameSize, whichever
	// is larger, and at least MaxFrameSize. A request that would exceed it
	// gets a Busy reply, unless nothing else is in flight. Together with
	// MaxInFlight it bounds the memory one connection's requests pin.
	MaxInFlightBytes int
	// IdleTimeout closes a connection that sends no frame for this long
	// while nothing is in flight; default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// FrameTimeout closes a connection whose frame takes longer than this to
	// arrive once its first byte has; default DefaultFrameTimeout.
	FrameTimeout time.Duration
	// WriteTimeout closes a connection on which writing one frame takes
	// longer than this, a client that does not read; default
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
}

// WithDefaults returns a copy of l with defaults in place of zero fields,
// or an error naming the first invalid field.
func (l Limits) WithDefaults() (Limits, error) {
	l = l.fill()
	return l, l.check()
}

// fill replaces zero fields by their defaults.
func (l Limits) fill() Limits {
	if l.MaxFrameSize == 0 {
		l.MaxFrameSize = DefaultMaxFrameSize
	}
	if l.MaxReadBytes == 0 {
		l.MaxReadBytes = min(DefaultMaxReadBytes, l.MaxFrameSize/2)
	}
	if l.MaxRecordSize == 0 {
		l.MaxRecordSize = min(DefaultMaxRecordSize, l.MaxReadBytes)
	}
	if l.MaxAppendRecords == 0 {
		l.MaxAppendRecords = DefaultMaxAppendRecords
	}
	if l.MaxReadRecords == 0 {
		l.MaxReadRecords = max(1, min(DefaultMaxReadRecords, l.MaxFrameSize/(8*recordOverhead)))
	}
	if l.MaxInFlight == 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	if l.MaxInFlightBytes == 0 {
		l.MaxInFlightBytes = max(DefaultMaxInFlightBytes, l.MaxFrameSize)
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.FrameTimeout == 0 {
		l.FrameTimeout = DefaultFrameTimeout
	}
	if l.WriteTimeout == 0 {
		l.WriteTimeout = DefaultWriteTimeout
	}
	return l
}

// check validates filled limits.
func (l Limits) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("transport: invalid limits: "+format, args...)
	}
	switch {
	case l.MaxFrameSize < minFrameSize || uint64(l.MaxFrameSize) > MaxFrameLength:
		return bad("MaxFrameSize %d is outside [%d, %d]", l.MaxFrameSize, minFrameSize, uint64(MaxFrameLength))
	case l.MaxRecordSize < 1 || l.MaxRecordSize > l.MaxFrameSize-HeaderSize-bodyOverhead:
		return bad("MaxRecordSize %d does not fit a frame of %d", l.MaxRecordSize, l.MaxFrameSize)
	case l.MaxAppendRecords < 1 || l.MaxAppendRecords > MaxBodyElements:
		return bad("MaxAppendRecords %d is outside [1, %d]", l.MaxAppendRecords, MaxBodyElements)
	case l.MaxReadRecords < 1 || l.MaxReadRecords > MaxBodyElements:
		return bad("MaxReadRecords %d is outside [1, %d]", l.MaxReadRecords, MaxBodyElements)
	case l.MaxReadBytes < l.MaxRecordSize:
		return bad("MaxReadBytes %d is below MaxRecordSize %d", l.MaxReadBytes, l.MaxRecordSize)
	case int64(l.MaxReadBytes)+int64(l.MaxReadRecords)*recordOverhead+HeaderSize+bodyOverhead > int64(l.MaxFrameSize):
		return bad("MaxReadBytes %d and MaxReadRecords %d do not fit a frame of %d",
			l.MaxReadBytes, l.MaxReadRecords, l.MaxFrameSize)
	case l.MaxInFlight < 1:
		return bad("MaxInFlight %d", l.MaxInFlight)
	case l.MaxInFlightBytes < l.MaxFrameSize:
		return bad("MaxInFlightBytes %d is below MaxFrameSize %d", l.MaxInFlightBytes, l.MaxFrameSize)
	case l.IdleTimeout < 0, l.FrameTimeout < 0, l.WriteTimeout < 0:
		return bad("negative timeout")
	}
	return nil
}
