package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// backupWindow is how many items (of up to 1 MiB) a backup stream may send
// ahead of what was written.
const backupWindow = 4

// errStalled ends a backup stream that sent nothing for a RequestTimeout.
var errStalled = errors.New("the backup stream stalled")

// Backup writes a backup of the cluster to w and returns the number of
// bytes written: a consistent copy of the retained log and of the state
// machine's state as of one committed index, at least the commit index
// when Backup began, so that it holds every append acknowledged before.
// The bytes are a backup file (see package
// github.com/raftlog/raftlog/backup, whose Reader checks one, and
// node.Restore, which seeds a new cluster from one).
//
// Backup goes to the leader and retries, as a read does, until the leader
// sends the first bytes; from then on a failure ends it, and w holds an
// incomplete file that a backup.Reader refuses. It also fails when no
// bytes arrive for Options.RequestTimeout. With TLS the cluster serves
// backups only to admins.
//
// Backup backs up the default log; Log.Backup backs up any log.
func (c *Client) Backup(ctx context.Context, w io.Writer) (int64, error) {
	return c.def.backup(ctx, w)
}

// Backup writes a backup of the log to w, as Client.Backup does for the
// default log; the file names the log and its settings (replicas,
// retention). Its leader sends it. A server older than named-log backups
// refuses a named log's with BadRequest.
func (g *Log) Backup(ctx context.Context, w io.Writer) (int64, error) {
	if g.err != nil {
		return 0, g.err
	}
	return g.l.backup(ctx, w)
}

func (l *logState) backup(ctx context.Context, w io.Writer) (int64, error) {
	c := l.c
	r := l.retrier("backup", toLeader, "", true)
	for {
		addr := r.addr()
		r.begin(addr)
		n, started, err := c.backupAttempt(ctx, r, addr, l.name, w)
		if err == nil {
			c.confirm(&l.route, addr)
			return n, nil
		}
		if started {
			if c.isClosed() {
				err = ErrClosed
			}
			return n, fmt.Errorf("client: backup: after %d bytes: %w", n, atAddr(addr, err))
		}
		if err = r.failed(ctx, addr, err); err != nil {
			return 0, err
		}
	}
}

// backupAttempt streams a backup from addr into w. started reports that
// w was written to (or a write to it failed): the attempt cannot be
// repeated.
func (c *Client) backupAttempt(ctx context.Context, r *retrier, addr, log string, w io.Writer) (n int64, started bool, err error) {
	actx, cancel := context.WithDeadline(ctx, r.attemptDeadline())
	conn, err := c.conn(actx, addr)
	cancel()
	if err != nil {
		return 0, false, err
	}
	sctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	timeout := c.opts.RequestTimeout
	idle := time.AfterFunc(timeout, func() { stop(errStalled) })
	defer idle.Stop()
	st, err := conn.OpenStream(sctx, transport.OpBackup, &transport.BackupRequest{Log: log}, backupWindow)
	if err != nil {
		return 0, false, err
	}
	defer st.Close()
	for {
		var item transport.BackupItem
		err := st.Recv(&item)
		switch {
		case err == io.EOF && n > 0:
			return n, true, nil
		case err == io.EOF:
			return 0, false, fmt.Errorf("%w: the backup stream ended without a byte", transport.ErrProtocol)
		case err != nil && errors.Is(context.Cause(sctx), errStalled):
			return n, n > 0, fmt.Errorf("%w for %v: %w", errStalled, timeout, context.DeadlineExceeded)
		case err != nil:
			return n, n > 0, err
		}
		idle.Reset(timeout)
		m, err := w.Write(item.Data)
		n += int64(m)
		if err != nil {
			return n, true, fmt.Errorf("write: %w", err)
		}
	}
}
