package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// tailChecker appends records "r<i>" and checks that a Tail returns each
// one once, in order.
type tailChecker struct {
	t    *testing.T
	c    *Client
	tail *Tail
	next uint64 // index of the next record expected, and appended
	last uint64 // index of the last record appended
}

func (tc *tailChecker) append(n int) {
	tc.t.Helper()
	for range n {
		tc.last++
		idx, err := tc.c.Append(testCtx(tc.t), fmt.Appendf(nil, "r%d", tc.last))
		if err != nil {
			tc.t.Fatal(err)
		}
		if idx[0] != tc.last {
			tc.t.Fatalf("append stored at %d, want %d", idx[0], tc.last)
		}
	}
}

// expect reads every record appended and not yet read.
func (tc *tailChecker) expect() {
	tc.t.Helper()
	for ; tc.next <= tc.last; tc.next++ {
		rec, err := tc.tail.Next()
		if err != nil {
			tc.t.Fatalf("Next, expecting record %d: %v", tc.next, err)
		}
		if want := fmt.Sprintf("r%d", tc.next); rec.Index != tc.next || string(rec.Data) != want {
			tc.t.Fatalf("Next = %d %q, want %d %q", rec.Index, rec.Data, tc.next, want)
		}
	}
}

// TestTailResumes drops the tail's connection, moves leadership, and kills
// the member serving the tail: the tail must go on from the next record,
// skipping and repeating none, although the fake server repeats the record
// before the one asked for whenever a stream starts.
func TestTailResumes(t *testing.T) {
	fc := newCluster(t, 3)
	fc.mu.Lock()
	fc.replay = true
	fc.mu.Unlock()
	c := dialT(t, fc.addrs(), fastOptions())
	tail := c.Tail(testCtx(t), 1, TailOptions{MaxRecords: 2, Window: 1})
	defer tail.Close()
	tc := &tailChecker{t: t, c: c, tail: tail, next: 1}
	tc.append(5)
	tc.expect()

	fc.members[0].dropConns()
	tc.append(3)
	tc.expect()
	fc.waitFor("the tail to reopen on member 0", func() bool { return fc.streams[0] >= 2 })

	fc.setLeader(1) // member 0 ends the stream with NotLeader naming 1
	tc.append(4)
	tc.expect()
	fc.waitFor("the tail to move to member 1", func() bool { return fc.streams[1] >= 1 })

	fc.setLeader(2)
	fc.members[1].kill() // the tail's member goes away without a word
	tc.append(4)
	tc.expect()
	fc.waitFor("the tail to move to member 2", func() bool { return fc.streams[2] >= 1 })

	tail.Close()
	if _, err := tail.Next(); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close: %v, want ErrClosed", err)
	}
}

func TestTailFromZeroAndStale(t *testing.T) {
	fc := newCluster(t, 3)
	c := dialT(t, fc.addrs()[1:], fastOptions())
	tc := &tailChecker{t: t, c: c, next: 1}
	tc.append(4)
	fc.setLeader(-1) // a stale tail needs no leader
	tc.tail = c.Tail(testCtx(t), 0, TailOptions{Stale: true})
	defer tc.tail.Close()
	tc.expect()
	// The appends moved the client to member 0, which no longer leads.
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if c.current(&c.def.route) != fc.members[0].addr || fc.streams[0] != 1 {
		t.Errorf("the client talks to %s; member 0 served %d streams; want member 0, 1 stream", c.current(&c.def.route), fc.streams[0])
	}
}

func TestTailTrimmed(t *testing.T) {
	fc := newCluster(t, 3)
	c := dialT(t, fc.addrs(), fastOptions())
	ctx := testCtx(t)
	tc := &tailChecker{t: t, c: c, next: 1}
	tc.append(10)
	if _, err := c.Trim(ctx, 5); err != nil {
		t.Fatal(err)
	}
	tail := c.Tail(ctx, 2, TailOptions{})
	defer tail.Close()
	_, err := tail.Next()
	if !errors.Is(err, &transport.Error{Code: transport.CodeTrimmed}) {
		t.Fatalf("Next below the first index: %v, want Trimmed", err)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.streams[0] != 1 {
		t.Errorf("%d streams opened, want 1: Trimmed is not retried", fc.streams[0])
	}
}

func TestTailEnds(t *testing.T) {
	fc := newCluster(t, 1)
	c := dialT(t, fc.addrs(), fastOptions())
	next := func(tail *Tail) chan error {
		errs := make(chan error, 1)
		go func() {
			_, err := tail.Next()
			errs <- err
		}()
		return errs
	}

	tail := c.Tail(testCtx(t), 1, TailOptions{})
	errs := next(tail)
	fc.waitFor("the first stream", func() bool { return fc.streams[0] == 1 })
	tail.Close()
	if err := <-errs; !errors.Is(err, ErrClosed) {
		t.Errorf("Next when closed: %v, want ErrClosed", err)
	}

	ctx, cancel := context.WithCancel(testCtx(t))
	tail = c.Tail(ctx, 1, TailOptions{})
	defer tail.Close()
	errs = next(tail)
	fc.waitFor("the second stream", func() bool { return fc.streams[0] == 2 })
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Errorf("Next when the context ends: %v, want context.Canceled", err)
	}
}

func TestTailGivesUp(t *testing.T) {
	fc := newCluster(t, 2)
	opts := fastOptions()
	opts.RetryTimeout = 200 * time.Millisecond
	c := dialT(t, fc.addrs(), opts)
	tail := c.Tail(testCtx(t), 1, TailOptions{})
	defer tail.Close()
	for _, m := range fc.members {
		m.kill()
	}
	_, err := tail.Next()
	var re *RetryError
	if !errors.As(err, &re) || re.Op != "tail" || len(re.Tried) != 2 {
		t.Fatalf("Next with every member down: %v, want a *RetryError of a tail over both members", err)
	}
	// A later Next retries afresh.
	if _, err := tail.Next(); !errors.As(err, &re) {
		t.Fatalf("second Next: %v, want a *RetryError", err)
	}
}
