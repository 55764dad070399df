package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// droppedMark is what a node logs when it drops a named log's data
// (node/logs.go, dropLog).
const droppedMark = "dropped a deleted log's data"

// appendFailedMark is what hashicorp/raft v1.8.0's leader logs each time
// an AppendEntries to a follower fails (replication.go, replicateTo); the
// heartbeats it sends meanwhile log "failed to heartbeat to".
const appendFailedMark = "failed to appendEntries to"

// restartAfterFailures is how many failed AppendEntries to the stopped
// node TestMovedLogKeptAcrossRestart waits for on the default log's leader
// before it starts the node again. raft's leader waits 10 ms << (n-2)
// after a follower's nth failure before it sends the next AppendEntries
// (the only ones that carry a commit index), up to 10.24 s, while its
// heartbeats, which carry none, back off to at most half a heartbeat
// timeout (350 ms). After the 11th it waits 5.12 s: a restart then hears
// heartbeats for seconds before it learns the leader's commit index, and
// its logs are reconciled every second.
const restartAfterFailures = 11

// TestMovedLogKeptAcrossRestart replays an operator's tryout that lost a
// log of one replica (2026-12-04). Three nodes serve a log of one replica
// ("one", 50 records) and one of three ("three"), so that the node holding
// "one" holds two replicas; the default log is trimmed, so every node
// snapshots it and drops its log below the floor. A fourth node then
// joins: it gets the default log as a snapshot stream, from before it
// joined, and the planner balances by moving "one", the lowest-id log of
// the most loaded node, to it. So the fourth node's newest snapshot of the
// default log has a catalog in which "one" is still on its old node. The
// fourth node is made the default log's leader and SIGTERMed; once the new
// leader has given up on it for a while (restartAfterFailures), it is
// started again. It restores the snapshot and hears the leader's
// heartbeats seconds before an AppendEntries with a commit index. It must
// not drop "one" (it did: its check that its catalog was current compared
// the applied index, the snapshot's, with raft's commit index, 0 until
// such an AppendEntries), and every acknowledged record of "one" must
// read back from it.
//
//	go test -run TestMovedLogKeptAcrossRestart -v ./cluster-test/
func TestMovedLogKeptAcrossRestart(t *testing.T) {
	skipShort(t)
	c := newCluster(t, clusterConfig{nodes: 4, joiners: 1})
	defer c.keepLogsIfFailed(t)
	joiner := c.members[3]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	const one = "one"
	var oneID uint64
	for _, l := range []struct {
		name     string
		replicas int
	}{{one, 1}, {"three", 3}} {
		info, err := cl.CreateLog(ctx, l.name, client.CreateLogOptions{Replicas: l.replicas})
		if err != nil {
			t.Fatal(err)
		}
		if l.name == one {
			oneID = info.ID
		}
		if err := c.addLog(ctx, l.name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.waitHealthy(ctx, healthyTimeout); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	for i := range 50 {
		actx, acancel := context.WithTimeout(ctx, opTimeout)
		_, err := appendRecordedLog(actx, cl.Log(one), rec, one, 0, fmt.Sprintf("%s/%d", one, i))
		acancel()
		if err != nil {
			t.Fatalf("append %d to %s: %v", i, one, err)
		}
	}

	// Every node snapshots the default log after a trim, and drops its
	// log below the floor: a node that joins then needs a snapshot.
	idx, err := cl.Append(ctx, []byte("before the trim"))
	if err != nil {
		t.Fatal(err)
	}
	below := idx[0]
	if _, err := cl.Trim(ctx, below); err != nil {
		t.Fatalf("trim below %d: %v", below, err)
	}
	if err := poll(ctx, catchUpTimeout, func() (bool, error) {
		for _, m := range c.logMembers("") {
			if st, err := m.status(); err != nil || st.FirstIndex < below {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("not every node raised its floor to %d: %v", below, err)
	}

	if err := c.startLate(joiner); err != nil {
		t.Fatal(err)
	}
	if err := c.waitVoter(ctx, joiner, healthyTimeout); err != nil {
		t.Fatal(err)
	}
	if _, n := joiner.snapshotInstalls(); n != 1 {
		t.Fatalf("%s installed %d snapshot streams of the default log when it joined, want 1", joiner.id, n)
	}
	var members []string
	if err := poll(ctx, catchUpTimeout, func() (bool, error) {
		logs, err := cl.ListLogs(ctx)
		if err != nil {
			return false, nil
		}
		if i := slices.IndexFunc(logs, func(l transport.LogInfo) bool { return l.Name == one }); i >= 0 {
			members = logs[i].Members
		}
		return slices.Equal(members, []string{joiner.id}), nil
	}); err != nil {
		t.Fatalf("log %s was not moved to %s (its members: %v): %v", one, joiner.id, members, err)
	}
	if err := c.waitFullReplicas(ctx, catchUpTimeout); err != nil {
		t.Fatal(err)
	}
	if err := c.refreshLogs(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("log %s (id %d, %d records) moved to %s, which joined after the default log's snapshot", one, oneID, rec.ackCount(), joiner.id)

	if err := poll(ctx, healthyTimeout, func() (bool, error) {
		tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
		cl.TransferLeadership(tctx, joiner.id) // fails while a transfer or an election runs; the status says
		tcancel()
		st, err := joiner.status()
		return err == nil && st.Role == "Leader", nil
	}); err != nil {
		t.Fatalf("%s did not take the default log's leadership: %v", joiner.id, err)
	}
	others := slices.DeleteFunc(slices.Clone(c.members), func(m *member) bool { return m == joiner })
	offsets := map[*member]int64{}
	for _, m := range others {
		offsets[m] = m.logSize()
	}
	if err := joiner.stop(); err != nil {
		t.Fatal(err)
	}
	lead, err := c.leader(ctx, healthyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var failures int
	if err := poll(ctx, time.Minute, func() (bool, error) {
		failures = countLines(lead.logSince(offsets[lead]), appendFailedMark, joiner.raftAddr)
		return failures >= restartAfterFailures, nil
	}); err != nil {
		t.Fatalf("the leader %s logged %d failed AppendEntries to %s, want %d: %v", lead.id, failures, joiner.id, restartAfterFailures, err)
	}
	restartAt := joiner.logSize()
	if err := joiner.restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s SIGTERMed leading the default log, restarted after %d failed AppendEntries from %s", joiner.id, failures, lead.id)

	// Once it has applied the leader's commit index, its catalog places
	// "one" on it: it runs the log, or it dropped its data before.
	lst, err := c.waitLogHealthy(ctx, "", healthyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.waitApplied(ctx, lst.CommitIndex, catchUpTimeout, joiner); err != nil {
		t.Fatal(err)
	}
	var runs []string
	if err := poll(ctx, healthyTimeout, func() (bool, error) {
		runs, _ = joiner.namedLogs()
		return slices.Contains(runs, one) || countLines(joiner.logSince(restartAt), droppedMark) > 0, nil
	}); err != nil {
		t.Fatalf("%s neither runs log %s nor dropped it (it runs %v): %v", joiner.id, one, runs, err)
	}
	if since := joiner.logSince(restartAt); countLines(since, droppedMark) > 0 {
		t.Fatalf("%s, restarted from a snapshot of the default log older than the move of log %s (id %d, %d acknowledged records, its only replica) to it, dropped a log's data:\n%s",
			joiner.id, one, oneID, rec.ackCount(), grepLines(since, droppedMark))
	}
	// A linearizable read waits until the log's leader has committed its
	// term's first entry: until then the commit index it reports, which
	// checkLog reads up to, is the one it restarted with, 0.
	rctx, rcancel := context.WithTimeout(ctx, opTimeout)
	recs, _, err := cl.Log(one).Read(rctx, 1, client.ReadOptions{MaxRecords: 1000})
	rcancel()
	if err != nil || len(recs) != rec.ackCount() {
		t.Fatalf("log %s after %s's restart: read %d records, %d acknowledged: %v", one, joiner.id, len(recs), rec.ackCount(), err)
	}
	c.checkLog(t, rec, one)
	if p := append(c.takeProblems(), c.scanLogs()...); len(p) > 0 {
		t.Errorf("%s", strings.Join(p, "\n"))
	}
}

// countLines counts the lines of b that hold every one of needles.
func countLines(b []byte, needles ...string) int {
	n := 0
	for line := range bytes.Lines(b) {
		if !slices.ContainsFunc(needles, func(s string) bool { return !bytes.Contains(line, []byte(s)) }) {
			n++
		}
	}
	return n
}

// grepLines returns the lines of b that hold needle.
func grepLines(b []byte, needle string) string {
	var out []string
	for line := range bytes.Lines(b) {
		if bytes.Contains(line, []byte(needle)) {
			out = append(out, string(bytes.TrimSuffix(line, []byte("\n"))))
		}
	}
	return strings.Join(out, "\n")
}
