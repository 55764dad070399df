package clustertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// Lanes of the operations TestNoSpaceQuorum makes itself, apart from the
// workload's.
const (
	spaceAppendLane = 1000
	spaceTrimLane   = 1001
)

// TestNoSpaceQuorum fills both followers' disks (the disk-full fault: new
// segments cannot be created, free space reads 0) under append load. The
// leader, whose own disk is fine, must then refuse appends with NoSpace
// naming both followers (not NotLeader, not a timeout), keep serving
// reads, take a trim, and accept appends again by itself once the disks
// have space, with nothing acknowledged lost (the usual checks).
//
//	go test -run TestNoSpaceQuorum -v ./cluster-test/
func TestNoSpaceQuorum(t *testing.T) {
	skipShort(t)
	const seed = 61
	c := newCluster(t, clusterConfig{nodes: 3, faults: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := newRecorder()
	w, err := startWorkload(ctx, c, rec, workloadConfig{
		duration:       20 * time.Second,
		retryAppenders: 2,
		// Clients that give up after a second: a retrying Client rides
		// out a refusal for its whole retry budget (30 s) before it
		// reports NoSpace; these report it at once.
		onceAppenders: 2,
		readers:       1,
		opsPerWorker:  2_000,
		think:         5 * time.Millisecond,
	}, seed)
	if err != nil {
		t.Fatalf("starting the workload: %v", err)
	}
	defer w.stop()
	if err := rec.waitAcks(ctx, 50, healthyTimeout); err != nil {
		t.Fatalf("no steady load: %v", err)
	}
	l, err := c.leader(ctx, healthyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var followers []*member
	for _, m := range c.members {
		if m != l {
			followers = append(followers, m)
		}
	}
	setFull := func(on bool) {
		t.Helper()
		for _, m := range followers {
			start := rec.now()
			err := m.noSpace(on)
			if on {
				rec.addFault(faultEvent{Kind: string(faultDiskFull), Start: start, End: start, Detail: "disk full on " + m.id})
			}
			if err != nil {
				t.Fatalf("disk full %v on %s: %v", on, m.id, err)
			}
		}
	}
	conn, err := transport.Dial(ctx, l.clientAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n := 0
	direct := func() error {
		n++
		_, err := appendDirectRecorded(ctx, conn, rec, fmt.Sprintf("direct-%d", n))
		return err
	}

	setFull(true)
	t.Logf("%s: disks of %s and %s full; %s leads", fmtNanos(rec.now()), followers[0].id, followers[1].id, l.id)
	var last error
	err = poll(ctx, 15*time.Second, func() (bool, error) {
		last = direct()
		return transport.ErrorCode(last) == transport.CodeNoSpace, nil
	})
	if err != nil {
		t.Fatalf("the leader did not refuse appends with NoSpace: last answer %v", last)
	}
	for _, m := range followers {
		if !strings.Contains(last.Error(), m.id) {
			t.Errorf("NoSpace does not name %s: %v", m.id, last)
		}
	}
	t.Logf("%s: %v", fmtNanos(rec.now()), last)
	for range 5 {
		if err := direct(); transport.ErrorCode(err) != transport.CodeNoSpace {
			t.Errorf("append while both followers are full: %v, want NoSpace", err)
		}
	}
	st, err := l.status()
	if err != nil {
		t.Fatal(err)
	}

	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, rcancel := context.WithTimeout(ctx, opTimeout)
	recs, _, err := cl.Read(rctx, 0, client.ReadOptions{MaxRecords: 10})
	rcancel()
	if err != nil || len(recs) == 0 {
		t.Fatalf("linearizable read while appends are refused: %d records, %v", len(recs), err)
	}
	below := st.CommitIndex / 2
	op := &operation{Lane: spaceTrimLane, Kind: kindTrim, Below: below}
	tctx, tcancel := context.WithTimeout(ctx, opTimeout)
	op.Call = rec.now()
	idx, err := cl.Trim(tctx, below)
	op.Return = rec.now()
	tcancel()
	if err != nil {
		op.Err = err.Error()
	} else {
		op.OK, op.Index = true, idx
	}
	rec.add(op)
	if err != nil {
		t.Fatalf("trim below %d while appends are refused: %v", below, err)
	}
	t.Logf("%s: read %d records and trimmed below %d while appends were refused", fmtNanos(rec.now()), len(recs), below)

	// The workload's appends meet the refusal too before space is freed
	// (its one-shot appenders report it after their one-second budget).
	refused := func() int {
		k := 0
		for _, op := range rec.snapshot().Ops {
			if op.Kind == kindAppend && op.Lane != spaceAppendLane && strings.Contains(op.Err, "NoSpace") {
				k++
			}
		}
		return k
	}
	if err := poll(ctx, 15*time.Second, func() (bool, error) { return refused() >= 4, nil }); err != nil {
		t.Errorf("the workload's appends met NoSpace %d times while both followers were full", refused())
	}
	setFull(false)
	err = poll(ctx, 20*time.Second, func() (bool, error) {
		last = direct()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("appends not accepted again after space was freed: last answer %v", last)
	}
	t.Logf("%s: appends accepted again", fmtNanos(rec.now()))
	verify(t, verification{c: c, rec: rec, w: w, seed: seed, what: "both followers out of space",
		replay: "go test -run TestNoSpaceQuorum -v ./cluster-test/", checkTimeout: time.Minute,
		faults: map[faultKind]int{faultDiskFull: 2}})
}

// appendDirectRecorded sends one append to the node of conn itself,
// without retries or leader following, and records it.
func appendDirectRecorded(ctx context.Context, conn *transport.Conn, rec *recorder, data string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	op := &operation{Lane: spaceAppendLane, Kind: kindAppend, Record: data}
	op.Call = rec.now()
	var resp transport.AppendResponse
	err := conn.Call(ctx, transport.OpAppend, &transport.AppendRequest{Records: [][]byte{[]byte(data)}}, &resp)
	op.Return = rec.now()
	if err == nil && len(resp.Indexes) != 1 {
		err = fmt.Errorf("%d indexes for 1 record", len(resp.Indexes))
	}
	if err != nil {
		op.Err = err.Error()
	} else {
		op.OK, op.Index = true, resp.Indexes[0]
	}
	rec.add(op)
	return op.Index, err
}
