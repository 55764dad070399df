package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/node"
)

// demoOptions are the flags of demo.
type demoOptions struct {
	once  bool
	flush node.FlushMode
	dir   string // "": a temporary directory, removed at exit
}

// demoTimeout bounds each step of the demonstration.
const demoTimeout = 30 * time.Second

// cmdDemo is "node demo".
func cmdDemo(ctx context.Context, e *env, args []string) error {
	o := demoOptions{flush: node.FlushSync}
	fs := newFlagSet(e, "demo", "", `
Starts a 3-node cluster in this process on 127.0.0.1 (n1 bootstraps alone,
n2 and n3 join through it), appends records through the Go client, reads
and tails them back and checks them, shows the status of every node, hands
leadership over and appends again. Then it prints commands to try against
the cluster and runs until Ctrl-C. The nodes' logs go to a file in the data
directory.

With --once it stops after the demonstration: the exit status is 0 when
every check passed and 1 otherwise.`)
	fs.BoolVar(&o.once, "once", false, "exit after the demonstration")
	fs.Var(flushValue{&o.flush}, "flush", "the nodes' flush `mode`: sync or async (see 'node serve -h')")
	fs.StringVar(&o.dir, "dir", "", "keep the data and logs in this new or empty `directory`; default a temporary one, removed at exit")
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(rest); err != nil {
		return err
	}
	return runDemo(ctx, e.stdout, o)
}

// demo prints the steps of the demonstration and counts its checks.
type demo struct {
	w              io.Writer
	passed, failed int
}

// check prints the outcome of a check.
func (d *demo) check(ok bool, format string, args ...any) bool {
	mark := "ok  "
	if ok {
		d.passed++
	} else {
		d.failed++
		mark = "FAIL"
	}
	fmt.Fprintf(d.w, "%s  %s\n", mark, fmt.Sprintf(format, args...))
	return ok
}

// runDemo runs the demonstration, writing to w. It returns an error when
// the cluster could not run or a check failed.
func runDemo(ctx context.Context, w io.Writer, o demoOptions) (err error) {
	dir, remove, err := tempOrGiven(o.dir, "raftlog-demo-")
	if err != nil {
		return err
	}
	defer remove()
	logPath := filepath.Join(dir, "nodes.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	kept := "kept at exit"
	if o.dir == "" {
		kept = "removed at exit"
	}
	fmt.Fprintf(w, "raftlog demo: a 3-node cluster in this process on 127.0.0.1, flush %s\n", o.flush)
	fmt.Fprintf(w, "data:  %s (%s)\n", dir, kept)
	fmt.Fprintf(w, "logs:  %s (the nodes log there, not here)\n\n", logPath)

	start := time.Now()
	lc, err := startLocalCluster(ctx, dir, o.flush, logFile)
	if err != nil {
		return fmt.Errorf("%w (see %s)", err, logPath)
	}
	defer func() {
		closeStart := time.Now()
		cerr := lc.close()
		fmt.Fprintf(w, "stopped the cluster in %v\n", time.Since(closeStart).Round(time.Millisecond))
		if err == nil && cerr != nil {
			err = cerr
		}
	}()
	fmt.Fprintf(w, "started n1 (bootstraps alone), then n2 and n3 (join through n1) in %v:\n\n", time.Since(start).Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODE\tCLIENT\tRAFT\tADMIN (HTTP)")
	for _, n := range lc.nodes {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", n.ID(), n.ClientAddr(), n.RaftAddr(), n.AdminAddr())
	}
	tw.Flush()
	fmt.Fprintln(w)

	addrs := lc.clientAddrs()
	d := &demo{w: w}
	if err := d.run(ctx, addrs); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if d.failed > 0 {
		fmt.Fprintf(w, "%d of %d checks FAILED\n", d.failed, d.passed+d.failed)
	} else {
		fmt.Fprintf(w, "all %d checks passed\n", d.passed)
	}
	if o.once {
		if d.failed > 0 {
			return fmt.Errorf("%d of %d checks failed", d.failed, d.passed+d.failed)
		}
		return nil
	}
	joined := strings.Join(addrs, ",")
	fmt.Fprintf(w, `
Try it, from another terminal in this repository:

  go run ./cmd/node status --addrs %[1]s
  go run ./cmd/node append --addrs %[1]s hello world
  go run ./cmd/node read --addrs %[1]s
  go run ./cmd/node tail --addrs %[1]s --from 1       (then append from a third terminal)
  go run ./cmd/node transfer --addrs %[1]s
  go run ./cmd/node bench --addrs %[1]s --clients 16 --duration 5s
  curl http://%[2]s/status

or export RAFTLOG_ADDRS=%[1]s and leave out --addrs.

Running until Ctrl-C.
`, joined, lc.nodes[0].AdminAddr())
	<-ctx.Done()
	fmt.Fprintln(w, "\nstopping")
	if d.failed > 0 {
		return fmt.Errorf("%d of %d checks failed", d.failed, d.passed+d.failed)
	}
	return nil
}

// run appends, reads, tails, shows the status and hands leadership over,
// checking each step. It returns an error only when it cannot go on.
func (d *demo) run(ctx context.Context, addrs []string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*demoTimeout)
	defer cancel()
	opts := &client.Options{RequestTimeout: 5 * time.Second, RetryTimeout: demoTimeout}
	c, err := client.Dial(ctx, addrs, opts)
	if err != nil {
		return err
	}
	defer c.Close()

	// Append ten records: one alone, four in one request, five from
	// concurrent callers sharing the Client (which pipelines them).
	want := map[uint64][]byte{}
	var mu sync.Mutex
	add := func(idx []uint64, recs [][]byte) {
		mu.Lock()
		defer mu.Unlock()
		for i, x := range idx {
			want[x] = recs[i]
		}
	}
	rec := func(i int) []byte { return fmt.Appendf(nil, "demo record %d", i) }
	first := [][]byte{rec(1)}
	idx, err := c.Append(ctx, first...)
	if err != nil {
		return fmt.Errorf("appending: %w", err)
	}
	add(idx, first)
	batch := [][]byte{rec(2), rec(3), rec(4), rec(5)}
	bidx, err := c.Append(ctx, batch...)
	if err != nil {
		return fmt.Errorf("appending: %w", err)
	}
	add(bidx, batch)
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := [][]byte{rec(6 + i)}
			x, err := c.Append(ctx, r...)
			errs[i] = err
			if err == nil {
				add(x, r)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("appending: %w", err)
	}
	indexes := make([]uint64, 0, len(want))
	for x := range want {
		indexes = append(indexes, x)
	}
	slices.Sort(indexes)
	d.check(len(want) == 10 && slices.IsSorted(bidx) && bidx[0] > idx[0],
		"appended 10 records (1 alone, a batch of 4, 5 concurrently) at indexes %v", indexes)

	// Read them back, linearizably, from the first one's index.
	from := indexes[0]
	var got []uint64
	mismatch := ""
	for next, i := from, 0; len(got) < len(want) && i < 100; i++ {
		recs, nx, err := c.Read(ctx, next, client.ReadOptions{})
		if err != nil {
			return fmt.Errorf("reading: %w", err)
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			got = append(got, r.Index)
			if !bytes.Equal(r.Data, want[r.Index]) && mismatch == "" {
				mismatch = fmt.Sprintf("index %d holds %q, want %q", r.Index, r.Data, want[r.Index])
			}
		}
		next = nx
	}
	if !d.check(slices.Equal(got, indexes) && mismatch == "", "read them back from index %d (a linearizable read, served by the leader): all %d match", from, len(want)) {
		fmt.Fprintf(d.w, "      read indexes %v; %s\n", got, mismatch)
	}

	// Tail them: the stream a consumer would follow.
	tctx, tcancel := context.WithTimeout(ctx, demoTimeout)
	t := c.Tail(tctx, from, client.TailOptions{})
	var tailed []uint64
	var tailErr error
	for range want {
		r, err := t.Next()
		if err != nil {
			tailErr = err
			break
		}
		tailed = append(tailed, r.Index)
		if !bytes.Equal(r.Data, want[r.Index]) {
			tailErr = fmt.Errorf("index %d holds %q, want %q", r.Index, r.Data, want[r.Index])
			break
		}
	}
	t.Close()
	tcancel()
	if !d.check(tailErr == nil && slices.Equal(tailed, indexes), "tailed from index %d: the same %d records, in order", from, len(want)) {
		fmt.Fprintf(d.w, "      tailed %v: %v\n", tailed, tailErr)
	}

	// Wait for the followers to catch up, then show who leads.
	start := time.Now()
	err = waitApplied(ctx, c, addrs, indexes[len(indexes)-1], 5*time.Second)
	if !d.check(err == nil, "every node applied the records (up to index %d) within %v of the read", indexes[len(indexes)-1], time.Since(start).Round(time.Millisecond)) {
		fmt.Fprintf(d.w, "      %v\n", err)
	}
	oldLeader, ok := d.showStatus(ctx, c, addrs)
	if !ok {
		return nil
	}

	// Hand leadership over and append through the new leader.
	if err := c.TransferLeadership(ctx, ""); err != nil {
		d.check(false, "transfer leadership from %s: %v", oldLeader, err)
		return nil
	}
	last := rec(11)
	lidx, err := c.Append(ctx, last)
	if err != nil {
		return fmt.Errorf("appending after the transfer: %w", err)
	}
	st, err := c.Status(ctx, c.Leader())
	newLeader := "?"
	if err == nil {
		newLeader = st.NodeID
	}
	recs, _, rerr := c.Read(ctx, lidx[0], client.ReadOptions{MaxRecords: 1})
	ok = err == nil && rerr == nil && st.Role == "Leader" && newLeader != oldLeader &&
		len(recs) == 1 && recs[0].Index == lidx[0] && bytes.Equal(recs[0].Data, last)
	if !d.check(ok, "handed leadership over from %s to %s; the client followed it: appended %q at index %d and read it back", oldLeader, newLeader, last, lidx[0]) {
		fmt.Fprintf(d.w, "      status: %v, read: %v %v\n", err, recs, rerr)
	}
	return nil
}

// pollInterval is how often waitApplied asks the nodes for their status.
const pollInterval = 10 * time.Millisecond

// waitApplied polls the status of the nodes at addrs, at most for timeout,
// until each has applied index. It returns an error naming the nodes
// behind when the time is up.
func waitApplied(ctx context.Context, c *client.Client, addrs []string, index uint64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for range timeout / pollInterval {
		var behind []string
		for _, r := range queryStatus(ctx, c, addrs, nil) {
			if r.err != nil || r.st.AppliedIndex < index {
				behind = append(behind, r.addr)
			}
		}
		if len(behind) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%v did not apply index %d within %v", behind, index, timeout)
		case <-tick.C:
		}
	}
	return fmt.Errorf("nodes did not apply index %d within %v", index, timeout)
}

// showStatus prints the status table of the nodes at addrs and checks that
// one of them leads and the others know it. It returns the leader's id.
func (d *demo) showStatus(ctx context.Context, c *client.Client, addrs []string) (leader string, ok bool) {
	rows := queryStatus(ctx, c, addrs, nil)
	var leaders, failed []string
	for _, r := range rows {
		switch {
		case r.err != nil:
			failed = append(failed, r.addr)
		case r.st.Role == "Leader":
			leaders = append(leaders, r.st.NodeID)
		}
	}
	ok = len(leaders) == 1 && len(failed) == 0
	if ok {
		leader = leaders[0]
		for _, r := range rows {
			ok = ok && r.st.LeaderID == leader
		}
	}
	d.check(ok, "every node answers status and names the same leader: %s", strings.Join(leaders, ", "))
	var b bytes.Buffer
	writeStatusTable(&b, rows)
	fmt.Fprintf(d.w, "\n  %s\n\n", strings.ReplaceAll(strings.TrimSuffix(b.String(), "\n"), "\n", "\n  "))
	return leader, len(leaders) == 1
}
