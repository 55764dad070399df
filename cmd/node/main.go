// Command node runs and talks to a raftlog cluster: a Raft-replicated,
// append-only log of records.
//
//	node serve --id n1 --data-dir /var/lib/raftlog --bootstrap n1=10.0.0.1:7001,n2=10.0.0.2:7001,n3=10.0.0.3:7001
//	node append --addrs 10.0.0.1:7000 hello world
//	node read --addrs 10.0.0.1:7000 --from 1
//	node status --addrs 10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000
//	node log create --addrs 10.0.0.1:7000 orders --replicas 3
//	node append --addrs 10.0.0.1:7000 --log orders "order 1234 shipped"
//	node backup --addrs 10.0.0.1:7000 --out raftlog.backup
//	node restore --in raftlog.backup --id n1 --data-dir /var/lib/raftlog --bootstrap n1=10.0.0.1:7001,...
//	node demo --once
//	node version
//
// serve runs one node (package node); the client commands use package
// client; demo and bench can start a 3-node cluster in-process. Run
// "node help" for the commands and "node <command> -h" for their flags,
// most of which fall back to RAFTLOG_<FLAG> environment variables.
//
// The exit status is 0 on success, 1 when the command failed, 2 for a
// mistake in the command line or a RAFTLOG_* variable, and 130 for an
// append --stdin that SIGINT or SIGTERM stopped before stdin ended.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// defaultGCPercent replaces Go's default GOGC of 100 unless GOGC is set. A
// node's live heap is small (tens of MiB: the log is in the page cache, not
// the heap) and it allocates for every request, so collecting less often
// buys throughput for little memory: async appends from 64 clients went from
// 38,084 to 41,881 records/s (medians of 5) on the project's machine.
const defaultGCPercent = 400

func main() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, let a second one kill the process at once.
	go func() { <-ctx.Done(); stop() }()
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, lookup: os.LookupEnv}
	os.Exit(run(ctx, e, os.Args[1:]))
}

// errInterrupted is the error of a command that SIGINT or SIGTERM stopped
// before it was done, where that is a failure (append --stdin): the exit
// status is exitInterrupted.
var errInterrupted = errors.New("interrupted")

// exitInterrupted is the exit status of a command interrupted before it
// was done: 128 + SIGINT, as shells report a process SIGINT killed.
const exitInterrupted = 130

// command is one subcommand.
type command struct {
	name    string
	summary string // one line, for the command list
	run     func(ctx context.Context, e *env, args []string) error
}

// commands lists the subcommands in the order "node help" shows them.
var commands = []command{
	{"serve", "run one node of a cluster until SIGINT or SIGTERM", cmdServe},
	{"append", "append records and print their indexes", cmdAppend},
	{"read", "print records: index<TAB>data, or JSON lines", cmdRead},
	{"tail", "print records as they commit, until Ctrl-C", cmdTail},
	{"status", "show a status row for every node and every log", cmdStatus},
	{"join", "add a node to the cluster", cmdJoin},
	{"remove", "remove a node from the cluster", cmdRemove},
	{"transfer", "hand leadership over to another node", cmdTransfer},
	{"trim", "drop every record below an index", cmdTrim},
	{"log", "create, list, describe and delete logs (node log help)", cmdLog},
	{"repair", "cut a stopped node's log back before a damaged record", cmdRepair},
	{"backup", "write a backup of the log and state of a running cluster to a file", cmdBackup},
	{"restore", "write a new member's data dir from a backup", cmdRestore},
	{"demo", "run a local 3-node cluster and show what it does", cmdDemo},
	{"bench", "measure append throughput and latency", cmdBench},
	{"version", "print the version, commit and Go version of this binary", cmdVersion},
}

// run runs the command line args (without the program name) and returns
// the exit status.
func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		printHelp(e.stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			printHelp(e.stdout)
			return 0
		}
		name, rest = rest[0], []string{"-h"}
	case "--version", "-version":
		name = "version"
	}
	for _, c := range commands {
		if c.name == name {
			return exitStatus(e, name, c.run(ctx, e, rest))
		}
	}
	fmt.Fprintf(e.stderr, "node: unknown command %q (run 'node help' for the list)\n", name)
	return 2
}

// exitStatus reports err, the outcome of command name, and returns the
// exit status.
func exitStatus(e *env, name string, err error) int {
	if se := (*subcommandError)(nil); errors.As(err, &se) {
		name, err = se.name, se.err
	}
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "node %s: %v (run 'node %s -h' for usage)\n", name, ue, name)
		return 2
	case errors.Is(err, errInterrupted):
		fmt.Fprintf(e.stderr, "node %s: %v\n", name, err)
		return exitInterrupted
	}
	fmt.Fprintf(e.stderr, "node %s: %v\n", name, err)
	return 1
}

// subcommandError is the error of a subcommand (of "node log"), which
// its report names: "node log create: ...".
type subcommandError struct {
	name string // "log create"
	err  error
}

func (e *subcommandError) Error() string { return e.err.Error() }
func (e *subcommandError) Unwrap() error { return e.err }

// printHelp writes the list of commands to w.
func printHelp(w io.Writer) {
	fmt.Fprint(w, `node runs and talks to a raftlog cluster: a Raft-replicated, append-only log.

Usage: node <command> [flags] [arguments]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'node help <command>' or 'node <command> -h' for a command's flags.
Most flags fall back to an environment variable: --addrs to RAFTLOG_ADDRS,
--data-dir to RAFTLOG_DATA_DIR; the help of each command shows which.

Try it: 'go run ./cmd/node demo' starts a 3-node cluster on 127.0.0.1.
Exit status: 0 on success, 1 on failure, 2 for a bad command line, 130
for an append --stdin interrupted (SIGINT, SIGTERM) before stdin ended.
`)
}
