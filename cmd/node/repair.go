package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/raftlog/raftlog/node"
)

const repairSummary = `
Repairs the data dir of a stopped node whose log holds a damaged record (a
record that fails its checksum below what the node had made durable: a
disk or a copy went bad). Such a node refuses to start, naming the file
and offset. repair reads every record, reports what it found and what it
would do, asks for a confirmation (type yes), then cuts the node's log
back before the damage, durably, as if the node had stopped just before
writing that record. It keeps the node's term and vote. The node then
starts as a follower that lost the end of its log, and the leader sends it
what it lacks.

Safe only while a quorum of the OTHER nodes holds every record the node
loses: stop the node, check that the rest of the cluster elects a leader
and commits an append without it, and repair one node at a time, never a
majority of the nodes. On a single-node cluster, and for a named log with
one replica on this node, the records after the damage are lost for good
(and new appends take their indexes): repair refuses unless given
--accept-loss. The cut reaches every log of the node, the default log and
each named log, and the report lists each log it changes. A node running
on the data dir is refused. See the README's Repair section.

Exit status: 0 when repaired or nothing needed repair, 1 when refused, not
confirmed or failed (nothing changed unless it says otherwise).`

// cmdRepair is "node repair".
func cmdRepair(_ context.Context, e *env, args []string) error {
	var dir string
	var yes, acceptLoss bool
	fs := newFlagSet(e, "repair", "", repairSummary)
	fs.StringVar(&dir, "data-dir", "", "the stopped node's data `directory` (required; never taken from the environment)")
	fs.BoolVar(&yes, "yes", false, "repair without asking for a confirmation; needed when stdin is not a terminal")
	fs.BoolVar(&acceptLoss, "accept-loss", false, "repair the only voter of a single-node cluster or of a one-replica named log, losing for good the records after the damage")
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(rest); err != nil {
		return err
	}
	if dir == "" {
		return usagef("no data dir: give --data-dir, the stopped node's data directory")
	}
	r, err := node.PrepareRepair(dir)
	if err != nil {
		return fmt.Errorf("%w; nothing changed", err)
	}
	defer r.Close()
	r.WriteReport(e.stdout)
	if !r.Needed() {
		return nil
	}
	if only := r.OnlyCopies(); len(only) > 0 && !acceptLoss {
		return fmt.Errorf("refused: this node is the only voter of %s, and nothing else holds what the repair removes; give --accept-loss to lose it for good; nothing changed", onlyCopies(only))
	}
	if !yes {
		if !isTerminal(e.stdin) {
			return errors.New("stdin is not a terminal to confirm on: give --yes to repair without a confirmation; nothing changed")
		}
		fmt.Fprintf(e.stdout, "\nRepair %s as described above? Type yes to go on: ", dir)
		line, err := bufio.NewReader(e.stdin).ReadString('\n')
		if err != nil {
			fmt.Fprintln(e.stdout)
		}
		if strings.TrimSpace(line) != "yes" {
			return errors.New("not confirmed; nothing changed")
		}
	}
	if err := r.Apply(acceptLoss); err != nil {
		return fmt.Errorf("%w (run repair again to finish: the node refuses to start until a repair finishes)", err)
	}
	fmt.Fprintf(e.stdout, "repaired %s: start the node, and it catches up from the leader\n", dir)
	return nil
}

// onlyCopies names the logs of which this node is the only voter: the
// default log (a single-node cluster) and named logs with one replica.
func onlyCopies(ls []*node.LogRepair) string {
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = l.String()
		if l.ID == 0 {
			names[i] = "the default log (a single-node cluster)"
		}
	}
	return strings.Join(names, ", ")
}

// isTerminal reports whether r is a terminal, what a confirmation is typed
// on: a character device other than the null device (which a process
// started without a stdin gets).
func isTerminal(r io.Reader) bool {
	f, ok := r.(interface{ Stat() (os.FileInfo, error) })
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}
