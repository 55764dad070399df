package commitlog

import (
	"fmt"
	"time"

	"github.com/raftlog/raftlog/commitlog/vfs"
)

// FlushMode says when an append is acknowledged.
type FlushMode int

const (
	// SyncFlush acknowledges an append only after a sync covering it has
	// completed (group commit). This is the default.
	SyncFlush FlushMode = iota
	// AsyncFlushUnsafe acknowledges an append as soon as its bytes are in
	// memory and syncs in the background. Acknowledged records survive a
	// crash of the process, but up to FlushThoroughInterval of them can be
	// lost on power loss or an operating-system crash.
	AsyncFlushUnsafe
)

// WritePath says how appended bytes reach the file. Reads go through the
// memory mapping either way.
type WritePath int

const (
	// WritePwrite writes records with pwrite(2) and makes them durable with
	// fdatasync(2). This is the default: see the package documentation for
	// the measurements behind the choice.
	WritePwrite WritePath = iota
	// WriteMmap stores records through the mapping and makes them durable
	// with msync(2) of the dirty range.
	WriteMmap
)

// Preallocation says how a new segment's disk blocks are reserved.
type Preallocation int

const (
	// PreallocateZeroes reserves the blocks and then writes zeroes over the
	// whole segment in the background, before the segment is used. Syncs
	// then only overwrite blocks the file system already considers written,
	// and need no journal commit for extent conversion: on ext4 an
	// fdatasync of a 64 KiB append costs about as much as one of 1 KiB.
	// Zero-filling writes every segment twice, so it is done only while the
	// log fills segments slowly (the active one took at least 2 s to fill
	// its second quarter), and a MiB at a time, spread over the time the
	// segment is expected to take, so that the appends' syncs never wait
	// behind more than a MiB of zeroes; an append that needs the segment sooner stops
	// the zero-filling, and the rest of the segment is only reserved. When
	// appends run faster, the next segment is only reserved, as with
	// PreallocateSparse. It is the default.
	PreallocateZeroes Preallocation = iota
	// PreallocateSparse only reserves the blocks (fallocate). It halves the
	// bytes written, but the first sync of each new block must also commit
	// the file system's journal, so syncs covering several new blocks cost
	// up to twice as much.
	PreallocateSparse
)

// Defaults of Options.
const (
	DefaultSegmentSize           = 64 << 20
	DefaultSyncFlushTimeout      = 5 * time.Second
	DefaultFlushInterval         = 500 * time.Millisecond
	DefaultFlushLeastPages       = 4
	DefaultFlushThoroughInterval = 10 * time.Second
	DefaultCheckpointInterval    = time.Second
	// DefaultGroupCommitWait is Options.GroupCommitWait's default.
	DefaultGroupCommitWait = 0.25
	// MinSegmentSize is the smallest segment size Open accepts.
	MinSegmentSize = 4096
	// MaxCheckpointMeta is the most bytes of meta a checkpoint can hold.
	MaxCheckpointMeta = maxCheckpointMeta
)

// maxGroupCommitWait is the largest GroupCommitWait Open accepts.
const maxGroupCommitWait = 64

// Options configure a Log. The zero value, or nil, gives the defaults.
type Options struct {
	// SegmentSize is the size of new segment files in bytes, a multiple of
	// 4096 and at least MinSegmentSize (default 64 MiB). Existing segments
	// keep the size they were created with. A record, with its 32-byte
	// header, must fit in one segment.
	SegmentSize int64

	// Flush chooses synchronous group commit (default) or unsafe
	// asynchronous flushing.
	Flush FlushMode
	// SyncFlushTimeout bounds how long a synchronous append waits for its
	// sync (default 5 s); it then fails with ErrSyncTimeout.
	SyncFlushTimeout time.Duration
	// GroupCommitWait bounds how long the flusher waits, before a sync,
	// for the appenders it expects (those the last round released and
	// those that registered during its sync), as a multiple of the last
	// sync's duration (default DefaultGroupCommitWait, a quarter), and
	// never more than 100 ms (it never waits when they have registered
	// already). In-process
	// appenders come back within microseconds and want the default: a
	// longer wait leaves the disk idle while a straggler is late. Raft
	// groups replicated over a network come back only after a round trip
	// several syncs long; there a wait of a few syncs lets one sync
	// complete more of them, for fewer fdatasyncs and no fewer records.
	// Only used with SyncFlush.
	GroupCommitWait float64
	// FlushInterval is how often the asynchronous flusher wakes (default
	// 500 ms). Only used with AsyncFlushUnsafe.
	FlushInterval time.Duration
	// FlushLeastPages is how many dirty 4 KiB pages the asynchronous flusher
	// waits for before it syncs (default 4). Only used with AsyncFlushUnsafe.
	FlushLeastPages int
	// FlushThoroughInterval is the longest the asynchronous flusher lets
	// written bytes stay unsynced, however few (default 10 s). It bounds
	// what AsyncFlushUnsafe can lose on power loss.
	FlushThoroughInterval time.Duration

	// WritePath chooses pwrite+fdatasync (default) or stores through the
	// mapping plus msync.
	WritePath WritePath
	// Preallocate chooses how new segments reserve their blocks (default
	// PreallocateZeroes). Segments are prepared in the background, except
	// the first one of a new log, which Open zero-fills itself (about
	// 130 ms for 64 MiB on a disk writing 500 MiB/s).
	Preallocate Preallocation
	// WarmSegments pre-faults every page of a new segment's mapping while
	// it is prepared in the background, so the first appends into it take
	// no page faults. Off by default.
	WarmSegments bool
	// LockActiveSegment mlocks the segment being appended to, so its pages
	// are never paged out. It needs RLIMIT_MEMLOCK of at least one segment;
	// a refused mlock is ignored. Off by default.
	LockActiveSegment bool

	// CheckpointInterval is how often the checkpoint file is rewritten
	// (default 1 s). After a crash, recovery scans what was written since
	// the last checkpoint, so this bounds the work of Open.
	CheckpointInterval time.Duration
	// CheckpointMeta, when set, is called before each checkpoint is written
	// and its result is stored in the checkpoint (at most
	// MaxCheckpointMeta bytes); Meta returns it after the next Open. The
	// layer above stores its own watermarks there; the meta of a checkpoint
	// can lag the log, so it must check it against the records. The hook
	// runs with no lock of the log held and may call Sync, WaitDurable and
	// the read methods, but must not append, truncate or close. An error
	// skips that checkpoint.
	CheckpointMeta func() ([]byte, error)

	// RetentionAge removes whole segments whose records are all older than
	// this. Zero keeps them forever.
	RetentionAge time.Duration
	// RetentionBytes removes the oldest whole segments while the segment
	// files take more than this many bytes. Zero means no limit.
	RetentionBytes int64

	// FS is the file system (default vfs.Default, the operating system's).
	FS vfs.FS
	// Metrics receives measurements (default: none).
	Metrics Metrics
	// Now is the clock for store timestamps (default time.Now).
	Now func() time.Time
}

// withDefaults returns a copy of o with defaults filled in, or an error for
// invalid values.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.SegmentSize == 0 {
		c.SegmentSize = DefaultSegmentSize
	}
	if c.SegmentSize < MinSegmentSize || c.SegmentSize%4096 != 0 || c.SegmentSize > 1<<32 {
		return c, fmt.Errorf("commitlog: segment size %d must be a multiple of 4096 between %d and 4 GiB", c.SegmentSize, MinSegmentSize)
	}
	if c.Flush != SyncFlush && c.Flush != AsyncFlushUnsafe {
		return c, fmt.Errorf("commitlog: unknown flush mode %d", c.Flush)
	}
	if c.Preallocate != PreallocateZeroes && c.Preallocate != PreallocateSparse {
		return c, fmt.Errorf("commitlog: unknown preallocation %d", c.Preallocate)
	}
	if c.WritePath != WritePwrite && c.WritePath != WriteMmap {
		return c, fmt.Errorf("commitlog: unknown write path %d", c.WritePath)
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
		n   string
	}{
		{&c.SyncFlushTimeout, DefaultSyncFlushTimeout, "sync flush timeout"},
		{&c.FlushInterval, DefaultFlushInterval, "flush interval"},
		{&c.FlushThoroughInterval, DefaultFlushThoroughInterval, "thorough flush interval"},
		{&c.CheckpointInterval, DefaultCheckpointInterval, "checkpoint interval"},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return c, fmt.Errorf("commitlog: negative %s %v", d.n, *d.v)
		}
	}
	if c.GroupCommitWait == 0 {
		c.GroupCommitWait = DefaultGroupCommitWait
	}
	if !(c.GroupCommitWait > 0 && c.GroupCommitWait <= maxGroupCommitWait) {
		return c, fmt.Errorf("commitlog: group commit wait %v is not a multiple of the last sync between 0 and %d", c.GroupCommitWait, maxGroupCommitWait)
	}
	if c.FlushLeastPages == 0 {
		c.FlushLeastPages = DefaultFlushLeastPages
	}
	if c.FlushLeastPages < 0 || c.RetentionAge < 0 || c.RetentionBytes < 0 {
		return c, fmt.Errorf("commitlog: negative flush pages or retention")
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}
