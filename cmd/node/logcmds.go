package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// logFlag defines --log on fs: the log a record command works on.
func logFlag(fs *flagSet, name *string, verb string) {
	fs.StringVar(name, "log", transport.DefaultLog, "the `name` of the log to "+verb+" (see 'node log list')")
}

// checkLogFlag reports an invalid --log as a usage error.
func checkLogFlag(name string) error {
	if err := transport.CheckLogName(name); err != nil {
		return usagef("--log: %s", logNameProblem(err))
	}
	return nil
}

// logNameProblem is what transport.CheckLogName's error says, without its
// code.
func logNameProblem(err error) string {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.Message
	}
	return err.Error()
}

// logCommands are the subcommands of "node log".
var logCommands = []command{
	{"create", "create a log: NAME [--replicas 3] [--retention-bytes N] [--retention-age D]", cmdLogCreate},
	{"list", "list the cluster's logs", cmdLogList},
	{"info", "describe a log: its members and their roles, leader, indexes and bytes", cmdLogInfo},
	{"delete", "delete a log and every record of it, on every node", cmdLogDelete},
}

// cmdLog is "node log": it runs its subcommand.
func cmdLog(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usagef("no subcommand: give one of create, list, info, delete")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printLogHelp(e.stdout)
		return errHelp
	}
	for _, c := range logCommands {
		if c.name == args[0] {
			if err := c.run(ctx, e, args[1:]); err != nil {
				return &subcommandError{name: "log " + c.name, err: err}
			}
			return nil
		}
	}
	return usagef("unknown subcommand %q: give one of create, list, info, delete", args[0])
}

// printLogHelp writes the subcommands of "node log" to w.
func printLogHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: node log <subcommand> [flags] [NAME]

Manages the cluster's logs. Every cluster has the log "default", which
append, read, tail and trim use unless given --log NAME. Each log is its own
raft group, replicated on --replicas of the nodes, with its own leader.

Subcommands:
`)
	for _, c := range logCommands {
		fmt.Fprintf(w, "  %-7s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'node log <subcommand> -h' for its flags. Clusters older than named
logs answer these with an error saying that they do not serve named logs.
`)
}

// oneName returns the single argument of a log subcommand: a log name.
func oneName(rest []string) (string, error) {
	switch {
	case len(rest) == 0:
		return "", usagef("no log name: give NAME")
	case len(rest) > 1:
		return "", usagef("unexpected argument %q: give one log name", rest[1])
	}
	if err := transport.CheckLogName(rest[0]); err != nil {
		return "", usagef("%s", logNameProblem(err))
	}
	return rest[0], nil
}

// cmdLogCreate is "node log create".
func cmdLogCreate(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var bytes int64
	var age time.Duration
	replicas := 3
	fs := newFlagSet(e, "log create", "NAME", `
Creates a log: 1 to 64 characters of A-Z, a-z, 0-9, _ and -, starting with
a letter or a digit. The cluster places its replicas on --replicas of its
nodes and starts its raft group there; append, read, tail and trim use it
when given --log NAME. A name in use (or being deleted) is refused.`)
	cf.define(fs)
	fs.IntVar(&replicas, "replicas", replicas, "how many `nodes` hold the log: 1, 3 or 5")
	fs.Var(sizeValue{&bytes}, "retention-bytes", "keep at most this many `bytes` of records (64KiB, 500MiB, 10GiB), trimming the oldest; 0: no limit")
	fs.Var(durationValue{&age}, "retention-age", "keep a record for this `duration` (36h, 7d), then trim it; 0: no limit")
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	name, err := oneName(rest)
	if err != nil {
		return err
	}
	switch {
	case name == transport.DefaultLog:
		return usagef("the log %q always exists", transport.DefaultLog)
	case replicas != 1 && replicas != 3 && replicas != 5:
		return usagef("--replicas %d: a log has 1, 3 or 5", replicas)
	}
	if err := cf.check(); err != nil {
		return err
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	info, err := c.CreateLog(ctx, name, client.CreateLogOptions{Replicas: replicas, RetentionBytes: uint64(bytes), RetentionAge: age})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "created log %s (id %d): %s, on %s; retention %s\n",
		info.Name, info.ID, plural(int(info.Replicas), "replica"), orDash(strings.Join(info.Members, ", ")), formatRetention(info.RetentionBytes, info.RetentionAge))
	return nil
}

// logJSON is a log as log list --json prints it.
type logJSON struct {
	Name           string   `json:"name"`
	ID             uint64   `json:"id"`
	Replicas       uint32   `json:"replicas"`
	RetentionBytes uint64   `json:"retention_bytes"`
	RetentionAge   string   `json:"retention_age"` // a Go duration, "0s" for none
	State          string   `json:"state"`
	LeaderID       string   `json:"leader_id,omitempty"`
	Members        []string `json:"members"`
}

func toLogJSON(l transport.LogInfo) logJSON {
	return logJSON{
		Name: l.Name, ID: l.ID, Replicas: l.Replicas, RetentionBytes: l.RetentionBytes, RetentionAge: l.RetentionAge.String(),
		State: l.State, LeaderID: l.LeaderID, Members: append([]string{}, l.Members...),
	}
}

// cmdLogList is "node log list".
func cmdLogList(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var asJSON bool
	fs := newFlagSet(e, "log list", "", `
Lists the cluster's logs, the default log and those being deleted included,
as the answering node's copy of the catalog has them: name, id, replicas,
retention, state, leader and members. The leader of a log the answering
node holds no replica of is asked for (a log whose leader does not answer
within 5s shows none: -).`)
	cf.define(fs)
	fs.BoolVar(&asJSON, "json", false, "print a JSON array of logs instead of a table")
	if err := parseClusterCmd(fs, &cf, args); err != nil {
		return err
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	logs, err := c.ListLogs(ctx)
	if err != nil {
		return err
	}
	addLeaders(ctx, c, logs, cf.timeout)
	if asJSON {
		out := make([]logJSON, len(logs))
		for i, l := range logs {
			out[i] = toLogJSON(l)
		}
		return writeJSON(e.stdout, out)
	}
	return writeLogTable(e.stdout, logs)
}

// writeLogTable writes logs as an aligned table with a header.
func writeLogTable(w io.Writer, logs []transport.LogInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tREPLICAS\tRETENTION\tSTATE\tLEADER\tMEMBERS")
	for _, l := range logs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", l.Name, l.ID, l.Replicas, formatRetention(l.RetentionBytes, l.RetentionAge),
			l.State, orDash(l.LeaderID), orDash(strings.Join(l.Members, ",")))
	}
	return tw.Flush()
}

// infoJSON is a log as log info --json prints it.
type infoJSON struct {
	logJSON
	LeaderAddr   string                `json:"leader_addr,omitempty"`
	FirstIndex   uint64                `json:"first_index"`
	LastIndex    uint64                `json:"last_index"`
	CommitIndex  uint64                `json:"commit_index"`
	Bytes        uint64                `json:"bytes"`
	MemberStates []transport.LogMember `json:"member_states"`
}

// cmdLogInfo is "node log info".
func cmdLogInfo(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var asJSON bool
	fs := newFlagSet(e, "log info", "NAME", `
Describes a log, as its leader sees it: id, replicas, retention, state,
leader, first/last/commit index and bytes, and a table of its members with
their role (Leader, Follower; Nonvoter while a new replica catches up;
Pending while the catalog names a member the group does not hold yet;
Leaving while a replica moved away is removed) and whether each has caught
up with the leader: CAUGHT UP is yes for the leader and unknown for the
others (the leader's node does not learn a follower's progress; with
--json, caught_up is false when unknown).`)
	cf.define(fs)
	fs.BoolVar(&asJSON, "json", false, "print a JSON object instead of tables")
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	name, err := oneName(rest)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	d, err := c.DescribeLog(ctx, name)
	if err != nil {
		return err
	}
	if asJSON {
		members := append([]transport.LogMember{}, d.Members...)
		return writeJSON(e.stdout, infoJSON{
			logJSON: toLogJSON(d.Log), LeaderAddr: d.LeaderAddr,
			FirstIndex: d.FirstIndex, LastIndex: d.LastIndex, CommitIndex: d.CommitIndex, Bytes: d.Bytes, MemberStates: members,
		})
	}
	return writeLogInfo(e.stdout, d)
}

// writeLogInfo writes d as a table of properties, then a table of its
// members.
func writeLogInfo(w io.Writer, d *transport.DescribeLogResponse) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	l := d.Log
	leader := orDash(l.LeaderID)
	if d.LeaderAddr != "" {
		leader += " at " + d.LeaderAddr
	}
	for _, kv := range [][2]string{
		{"log", l.Name},
		{"id", strconv.FormatUint(l.ID, 10)},
		{"replicas", strconv.FormatUint(uint64(l.Replicas), 10)},
		{"retention", formatRetention(l.RetentionBytes, l.RetentionAge)},
		{"state", l.State},
		{"leader", leader},
		{"first index", strconv.FormatUint(d.FirstIndex, 10)},
		{"last index", strconv.FormatUint(d.LastIndex, 10)},
		{"commit index", strconv.FormatUint(d.CommitIndex, 10)},
		{"bytes", formatSize(int64(min(d.Bytes, 1<<62)))},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return writeMemberTable(w, d)
}

// cmdLogDelete is "node log delete".
func cmdLogDelete(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var yes bool
	fs := newFlagSet(e, "log delete", "NAME", `
Deletes a log and every record of it, on every node that holds it. It
cannot be undone. It asks for a confirmation (type yes) unless given --yes;
without a terminal to ask on it refuses. The log leaves the list at once;
every node that holds it drops its data, one that is down when it comes
back. The default log cannot be deleted.`)
	cf.define(fs)
	fs.BoolVar(&yes, "yes", false, "delete without asking for a confirmation; needed when stdin is not a terminal")
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	name, err := oneName(rest)
	if err != nil {
		return err
	}
	if name == transport.DefaultLog {
		return usagef("the log %q cannot be deleted", transport.DefaultLog)
	}
	if err := cf.check(); err != nil {
		return err
	}
	if !yes {
		if !isTerminal(e.stdin) {
			return errors.New("stdin is not a terminal to confirm on: give --yes to delete without a confirmation; nothing changed")
		}
		fmt.Fprintf(e.stdout, "Delete log %s and every record of it, on every node? This cannot be undone. Type yes to go on: ", name)
		line, err := bufio.NewReader(e.stdin).ReadString('\n')
		if err != nil {
			fmt.Fprintln(e.stdout)
		}
		if strings.TrimSpace(line) != "yes" {
			return errors.New("not confirmed; nothing changed")
		}
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	info, err := c.DeleteLog(ctx, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deleted log %s (id %d): its nodes drop its records now\n", info.Name, info.ID)
	return nil
}

// formatRetention writes a log's retention for people: "1GiB, 7d",
// "none".
func formatRetention(bytes uint64, age time.Duration) string {
	var parts []string
	if bytes > 0 {
		parts = append(parts, formatSize(int64(min(bytes, 1<<62))))
	}
	if age > 0 {
		parts = append(parts, formatDays(age))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// formatDays writes d in days when it is whole days ("7d"), as
// time.Duration does otherwise ("36h0m0s").
func formatDays(d time.Duration) string {
	const day = 24 * time.Hour
	if d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

// plural writes n and noun, with an s unless n is 1: "1 replica", "3
// replicas".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// orDash returns s, or "-" for "".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
