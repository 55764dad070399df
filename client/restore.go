package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// restorePart is the size of the parts a restore uploads.
const restorePart = 1 << 20

// restoreRestarts bounds how often a restore's upload starts again from
// the first byte at another member (the log's leadership moved).
const restoreRestarts = 3

// restoreFinal bounds the last part of a restore, which the leader
// answers once the log's raft group has committed the restore.
const restoreFinal = 10 * time.Minute

// RestoreResult is what a restore into a log did.
type RestoreResult struct {
	// Bytes is the size of the backup file uploaded.
	Bytes int64
	// BackupIndex is the backup's index; Index the restore's in the log,
	// past it: the log's next append goes after Index.
	BackupIndex, Index uint64
	// Replicas is how many of the log's members held the restore when its
	// leader answered: at least a majority; the others catch up.
	Replicas int
}

// Restore restores a backup file (see package
// github.com/raftlog/raftlog/backup and Log.Backup) read from src into
// the log, which must be a named log that holds no record: create it
// first with CreateLog (the backup's header has the settings it was
// taken with). Afterwards the log holds the backup's records at their
// original indexes and its client sessions (a retried append of a session
// stored in the backup gets its original indexes), on every replica, and
// appends go after RestoreResult.Index. The backup may be of another log
// (the default log's included) or of a log of another cluster.
//
// Restore uploads the file to the log's leader in parts, then asks it to
// restore it. It follows the leader as a read does; if the leadership
// moves during the upload, it uploads again from the start of src (so src
// must be seekable), a few times at most. While the restore runs, and for
// good if it is cut short, the log refuses record operations with
// FailedPrecondition: delete the log and restore again. The last part's
// failure leaves the outcome unknown (the log either refuses record
// operations so, or holds the backup). With TLS, only admins may
// restore.
func (g *Log) Restore(ctx context.Context, src io.ReadSeeker) (RestoreResult, error) {
	if g.err != nil {
		return RestoreResult{}, g.err
	}
	if !g.l.named() {
		return RestoreResult{}, fmt.Errorf("client: restore: %w", &transport.Error{Code: transport.CodeBadRequest,
			Message: "a backup is restored into a named log, not the default log (node restore seeds a new cluster's)"})
	}
	return g.l.restore(ctx, src)
}

func (l *logState) restore(ctx context.Context, src io.ReadSeeker) (RestoreResult, error) {
	c := l.c
	r := l.retrier("restore", toLeader, "", true)
	restarts := 0
	for {
		addr := r.addr()
		r.begin(addr)
		res, started, final, err := c.restoreAttempt(ctx, addr, l.name, src)
		if err == nil {
			c.confirm(&l.route, addr)
			return res, nil
		}
		if final {
			return res, fmt.Errorf("client: %s: the restore of %d uploaded bytes: %w", r.name(), res.Bytes, atAddr(addr, err))
		}
		if started {
			if restarts++; restarts > restoreRestarts || errors.Is(err, errUpload) {
				return res, fmt.Errorf("client: %s: after %d bytes: %w", r.name(), res.Bytes, atAddr(addr, err))
			}
		}
		if err = r.failed(ctx, addr, err); err != nil {
			return res, err
		}
	}
}

// errUpload marks a failure to read the backup file.
var errUpload = errors.New("read the backup")

// restorePart sends one part of a restore to addr.
func (c *Client) restorePart(ctx context.Context, addr string, req *transport.RestoreLogRequest) (*transport.RestoreLogResponse, error) {
	timeout := c.opts.RequestTimeout
	if req.Done {
		timeout = restoreFinal
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := c.conn(ctx, addr)
	if err != nil {
		return nil, err
	}
	var resp transport.RestoreLogResponse
	if err := conn.Call(ctx, transport.OpRestoreLog, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// restoreAttempt uploads src to addr and asks it to restore it. started
// reports that the member accepted the first part (the log is marked as
// being restored); final that the last part was sent, so the outcome is
// the member's answer, or unknown.
func (c *Client) restoreAttempt(ctx context.Context, addr, log string, src io.ReadSeeker) (res RestoreResult, started, final bool, err error) {
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return res, false, false, fmt.Errorf("%w: %w", errUpload, err)
	}
	buf := make([]byte, restorePart)
	var off uint64
	for {
		n, rerr := io.ReadFull(src, buf)
		last := rerr == io.EOF || rerr == io.ErrUnexpectedEOF
		if rerr != nil && !last {
			return res, started, false, fmt.Errorf("%w: %w", errUpload, rerr)
		}
		parts := []*transport.RestoreLogRequest{{Log: log, Offset: off, Data: buf[:n], Done: last}}
		if last && off == 0 {
			// The first part begins the restore, the last runs it: apart,
			// so that a refusal to begin is retried as any request is.
			parts = []*transport.RestoreLogRequest{{Log: log, Data: buf[:n]}, {Log: log, Offset: uint64(n), Done: true}}
		}
		for _, req := range parts {
			resp, err := c.restorePart(ctx, addr, req)
			if err != nil {
				// NotLeader and Unavailable come before the member did
				// anything (RestoreLogRequest).
				code := transport.ErrorCode(err)
				refused := code == transport.CodeNotLeader || code == transport.CodeUnavailable
				return res, started, req.Done && !refused, err
			}
			started = true
			off += uint64(len(req.Data))
			res.Bytes = int64(off)
			if resp.Received != off {
				return res, started, req.Done, fmt.Errorf("%w: the leader holds %d bytes of the upload, %d were sent", transport.ErrProtocol, resp.Received, off)
			}
			if req.Done {
				res.BackupIndex, res.Index, res.Replicas = resp.BackupIndex, resp.Index, int(resp.Replicas)
				return res, true, true, nil
			}
		}
	}
}
