package main

// The logs' part of "node status": a row per log of the cluster, from the
// catalog (ListLogs) and from each log's leader (DescribeLog).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// logRow is one row of status's table of logs: a log's catalog record
// and how its leader describes it, or why its leader did not.
type logRow struct {
	info transport.LogInfo
	d    *transport.DescribeLogResponse // nil when err is set, or the log is being deleted
	err  error
}

const (
	// describeTimeout bounds how long status waits for one log's leader
	// to describe it (after a leader's failure a log has a new leader
	// within a couple of seconds), so that one log without a leader does
	// not hold up the others' rows for the whole --timeout.
	describeTimeout = 5 * time.Second
	// describeParallel bounds the DescribeLog requests in flight at once.
	describeParallel = 8
)

// queryLogs lists the cluster's logs and asks each active log's leader to
// describe it (describeLogs). The error is ListLogs's; a log whose leader
// did not answer gets a row with the error.
func queryLogs(ctx context.Context, c *client.Client, timeout time.Duration) ([]logRow, error) {
	logs, err := c.ListLogs(ctx)
	if err != nil {
		return nil, err
	}
	rows := make([]logRow, len(logs))
	for i, l := range logs {
		rows[i].info = l
	}
	describeLogs(ctx, c, rows, timeout, func(l transport.LogInfo) bool { return l.State == transport.LogActive })
	return rows, nil
}

// describeLogs asks the leader of each log of rows that want selects to
// describe it, describeParallel at a time, each within describeTimeout (or
// timeout, when shorter), and sets the row's description or error.
func describeLogs(ctx context.Context, c *client.Client, rows []logRow, timeout time.Duration, want func(transport.LogInfo) bool) {
	sem := make(chan struct{}, describeParallel)
	var wg sync.WaitGroup
	for i := range rows {
		if !want(rows[i].info) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			dctx, cancel := context.WithTimeout(ctx, min(timeout, describeTimeout))
			defer cancel()
			rows[i].d, rows[i].err = c.DescribeLog(dctx, rows[i].info.Name)
		}()
	}
	wg.Wait()
}

// addLeaders names the leader of each active log of logs that the node
// answering ListLogs did not name (it holds no replica of the log), as
// the log's leader describes itself; a log whose leader does not answer
// within describeTimeout keeps none.
func addLeaders(ctx context.Context, c *client.Client, logs []transport.LogInfo, timeout time.Duration) {
	rows := make([]logRow, len(logs))
	for i, l := range logs {
		rows[i].info = l
	}
	describeLogs(ctx, c, rows, timeout, func(l transport.LogInfo) bool { return l.State == transport.LogActive && l.LeaderID == "" })
	for i, r := range rows {
		if r.d != nil && r.err == nil {
			logs[i].LeaderID = r.d.Log.LeaderID
		}
	}
}

// inConfig counts the members of d that are voters the catalog has the
// log on: its leader and followers.
func inConfig(d *transport.DescribeLogResponse) int {
	n := 0
	for _, m := range d.Members {
		if m.Role == transport.RoleLeader || m.Role == transport.RoleFollower {
			n++
		}
	}
	return n
}

// membersCell lists a log's members for the table: its leader and
// followers by id, the others with their role ("n4(Nonvoter)").
func membersCell(r logRow) string {
	if r.d == nil {
		return orDash(strings.Join(r.info.Members, ","))
	}
	var ids []string
	for _, m := range r.d.Members {
		if m.Role == transport.RoleLeader || m.Role == transport.RoleFollower {
			ids = append(ids, m.NodeID)
		} else {
			ids = append(ids, m.NodeID+"("+m.Role+")")
		}
	}
	return orDash(strings.Join(ids, ","))
}

// writeLogsTable writes rows as an aligned table with a header:
// REPLICAS is the voters in the log's raft group that the catalog places
// it on, of the replicas it asks for. A row with an error shows it after
// the name.
func writeLogsTable(w io.Writer, rows []logRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LOG\tSTATE\tLEADER\tREPLICAS\tMEMBERS\tFIRST\tLAST\tCOMMIT\tBYTES")
	for _, r := range rows {
		l := r.info
		switch {
		case r.err != nil:
			// The error is not a cell: it must not widen the columns.
			fmt.Fprintf(tw, "%s\terror: %v\n", l.Name, r.err)
		case r.d == nil:
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t%s\t-\t-\t-\t-\n", l.Name, l.State, membersCell(r))
		default:
			d := r.d
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%d\t%d\t%d\t%s\n", l.Name, d.Log.State, orDash(d.Log.LeaderID),
				inConfig(d), d.Log.Replicas, membersCell(r), d.FirstIndex, d.LastIndex, d.CommitIndex, formatSize(int64(min(d.Bytes, 1<<62))))
		}
	}
	return tw.Flush()
}

// writeMemberTable writes the members of d, with their address, role and
// whether each has caught up, as an aligned table with a header. CAUGHT UP
// is "yes" or "unknown", never "no": a description's CaughtUp is false
// also when the answering node does not know (raftlog's nodes know it of
// the leader only).
func writeMemberTable(w io.Writer, d *transport.DescribeLogResponse) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tROLE\tCAUGHT UP")
	for _, m := range d.Members {
		caught := "unknown"
		if m.CaughtUp {
			caught = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.NodeID, orDash(m.ClientAddr), m.Role, caught)
	}
	return tw.Flush()
}

// statusOfLog is "node status --log NAME": the row of one log, then its
// members. With asJSON it prints the object log info --json prints. It
// reports errNoLogView when the cluster is older than named logs and name
// is the default log: the caller shows the nodes' table instead.
func statusOfLog(ctx context.Context, w io.Writer, c *client.Client, name string, asJSON bool) error {
	d, err := c.DescribeLog(ctx, name)
	if err != nil {
		if errors.Is(err, client.ErrNoNamedLogs) && name == transport.DefaultLog {
			return errNoLogView
		}
		return err
	}
	if asJSON {
		return writeJSON(w, infoJSON{
			logJSON: toLogJSON(d.Log), LeaderAddr: d.LeaderAddr, FirstIndex: d.FirstIndex, LastIndex: d.LastIndex,
			CommitIndex: d.CommitIndex, Bytes: d.Bytes, MemberStates: append([]transport.LogMember{}, d.Members...),
		})
	}
	if err := writeLogsTable(w, []logRow{{info: d.Log, d: d}}); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return writeMemberTable(w, d)
}

// errNoLogView: the cluster is older than named logs and cannot describe
// a log; its nodes' status is all there is.
var errNoLogView = errors.New("the cluster does not describe logs")

// logFailures counts the rows of logs whose leader did not answer.
func logFailures(rows []logRow) int {
	n := 0
	for _, r := range rows {
		if r.err != nil {
			n++
		}
	}
	return n
}
