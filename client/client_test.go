package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// testCtx returns a context that ends with the test or after testTimeout.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// fastOptions retry quickly, so that tests of retries take milliseconds.
func fastOptions() *Options {
	return &Options{
		RequestTimeout: 5 * time.Second,
		RetryTimeout:   10 * time.Second,
		MinBackoff:     time.Millisecond,
		MaxBackoff:     10 * time.Millisecond,
	}
}

// dialT dials addrs and closes the client when the test ends.
func dialT(t *testing.T, addrs []string, opts *Options) *Client {
	t.Helper()
	c, err := Dial(testCtx(t), addrs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// deadAddrs returns n addresses on 127.0.0.1 where nothing listens.
func deadAddrs(t *testing.T, n int) []string {
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	return addrs
}

func TestAppendFollowsRedirect(t *testing.T) {
	fc := newCluster(t, 3)
	fc.setLeader(2)
	// A backoff would outlast RetryTimeout: success shows the redirect
	// was followed at once.
	opts := &Options{MinBackoff: time.Hour, MaxBackoff: time.Hour, RetryTimeout: 2 * time.Second}
	c := dialT(t, fc.addrs()[:1], opts)
	if got := c.Leader(); got != "" {
		t.Fatalf("Leader before any request = %q, want \"\"", got)
	}
	ctx := testCtx(t)
	for i := range 2 {
		idx, err := c.Append(ctx, []byte("a"), []byte("b"))
		if err != nil {
			t.Fatal(err)
		}
		if want := []uint64{uint64(2*i + 1), uint64(2*i + 2)}; !slices.Equal(idx, want) {
			t.Fatalf("append %d: indexes %v, want %v", i, idx, want)
		}
	}
	if n := fc.count(0, transport.OpAppend); n != 1 {
		t.Errorf("the follower got %d appends, want 1 (then the client goes to the leader)", n)
	}
	if n := fc.count(2, transport.OpAppend); n != 2 {
		t.Errorf("the leader got %d appends, want 2", n)
	}
	if got, want := c.Leader(), fc.members[2].addr; got != want {
		t.Errorf("Leader() = %q, want %q", got, want)
	}
	c.mu.Lock()
	learned := slices.Contains(c.addrs, fc.members[2].addr)
	c.mu.Unlock()
	if !learned {
		t.Error("the leader's address named by NotLeader was not remembered")
	}
}

// TestAppendExactlyOnceAcrossLeaderChanges runs 16 appenders of 50 appends
// each while leadership moves and leaders drop connections after storing an
// append but before replying: every append must be stored exactly once and
// get the indexes it was stored at.
//
// Appends waiting while a request is in flight go together in the next
// one, so the 800 appends take between 50 requests (16 each) and 800; the
// faults strike within the first 50.
func TestAppendExactlyOnceAcrossLeaderChanges(t *testing.T) {
	for _, requests := range []int{1, 8} {
		t.Run(fmt.Sprintf("MaxAppendRequests=%d", requests), func(t *testing.T) {
			testAppendExactlyOnce(t, requests)
		})
	}
}

func testAppendExactlyOnce(t *testing.T, requests int) {
	const goroutines, perGoroutine = 16, 50
	fc := newCluster(t, 3)
	drops := 0 // guarded by fc.mu
	fc.mu.Lock()
	fc.stored1 = func(n int) bool {
		switch n {
		case 5, 20, 35:
			drops++
			return true
		case 12:
			fc.setLeaderLocked(1)
		case 30:
			fc.setLeaderLocked(2)
		case 45: // stored, then the leader changes and the reply is lost
			fc.setLeaderLocked(0)
			drops++
			return true
		}
		return false
	}
	fc.mu.Unlock()
	opts := fastOptions()
	opts.MaxAppendRequests = requests
	c := dialT(t, fc.addrs(), opts)
	ctx := testCtx(t)
	got := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perGoroutine {
				idx, err := c.Append(ctx, fmt.Appendf(nil, "g%02d-%03d", g, i))
				if err != nil {
					t.Errorf("goroutine %d append %d: %v", g, i, err)
					return
				}
				got[g] = append(got[g], idx...)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.log) != goroutines*perGoroutine || fc.stored < perGoroutine {
		t.Fatalf("log holds %d records from %d stored requests, want %d from at least %d", len(fc.log), fc.stored, goroutines*perGoroutine, perGoroutine)
	}
	seen := make(map[string]bool)
	for _, rec := range fc.log {
		if seen[string(rec.Data)] {
			t.Fatalf("record %q stored twice", rec.Data)
		}
		seen[string(rec.Data)] = true
	}
	for g := range goroutines {
		for i, idx := range got[g] {
			want := fmt.Sprintf("g%02d-%03d", g, i)
			if rec := fc.log[idx-fc.first]; string(rec.Data) != want {
				t.Fatalf("append %q returned index %d, which holds %q", want, idx, rec.Data)
			}
		}
	}
	if fc.dups < drops {
		t.Errorf("%d duplicates answered, want at least one per dropped reply (%d)", fc.dups, drops)
	}
	if fc.leader != 0 || c.Leader() != fc.members[0].addr {
		t.Errorf("client believes %q leads, want %q", c.Leader(), fc.members[0].addr)
	}
}

func TestAppendWaitsForLeader(t *testing.T) {
	fc := newCluster(t, 3)
	fc.setLeader(-1)
	c := dialT(t, fc.addrs(), fastOptions())
	done := make(chan error, 1)
	var idx []uint64
	go func() {
		var err error
		idx, err = c.Append(testCtx(t), []byte("x"))
		done <- err
	}()
	// Without a leader named, the client goes round the members.
	fc.waitFor("every member to refuse twice", func() bool {
		return fc.refused[0] >= 2 && fc.refused[1] >= 2 && fc.refused[2] >= 2
	})
	fc.setLeader(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(idx, []uint64{1}) {
		t.Errorf("indexes %v, want [1]", idx)
	}
	if got := c.Leader(); got != fc.members[1].addr {
		t.Errorf("Leader() = %q, want %q", got, fc.members[1].addr)
	}
}

func TestAppendGivesUp(t *testing.T) {
	const retry = 300 * time.Millisecond
	opts := func() *Options {
		o := fastOptions()
		o.RetryTimeout = retry
		return o
	}
	check := func(t *testing.T, err error, tried []string, cause string) *RetryError {
		t.Helper()
		var re *RetryError
		if !errors.As(err, &re) {
			t.Fatalf("error %v (%T), want a *RetryError", err, err)
		}
		msg := err.Error()
		t.Log(msg)
		if !strings.HasPrefix(msg, "client: append: ") || !strings.Contains(msg, " after ") || !strings.Contains(msg, cause) {
			t.Errorf("message %q lacks the operation, the attempts or the cause %q", msg, cause)
		}
		for _, a := range tried {
			if !slices.Contains(re.Tried, a) || !strings.Contains(msg, a) {
				t.Errorf("%s is not among the members tried: %q", a, msg)
			}
		}
		if re.Attempts < 2 || !strings.Contains(msg, fmt.Sprintf("after %d attempts over ", re.Attempts)) {
			t.Errorf("%d attempts in %q, want several", re.Attempts, msg)
		}
		return re
	}

	t.Run("members down", func(t *testing.T) {
		fc := newCluster(t, 3)
		c := dialT(t, fc.addrs(), opts())
		for _, m := range fc.members {
			m.kill()
		}
		_, err := c.Append(testCtx(t), []byte("x"))
		re := check(t, err, fc.addrs(), "connection refused")
		if !strings.Contains(err.Error(), "no leader reachable") {
			t.Errorf("message %q does not say no leader was reachable", err)
		}
		if re.Elapsed < retry || re.Context != nil {
			t.Errorf("gave up after %v (context error %v), want RetryTimeout %v", re.Elapsed, re.Context, retry)
		}
	})
	t.Run("no leader", func(t *testing.T) {
		fc := newCluster(t, 3)
		fc.setLeader(-1)
		c := dialT(t, fc.addrs(), opts())
		_, err := c.Append(testCtx(t), []byte("x"))
		check(t, err, fc.addrs(), "NotLeader")
		if transport.ErrorCode(err) != transport.CodeNotLeader {
			t.Errorf("ErrorCode(%v) = %v, want NotLeader", err, transport.ErrorCode(err))
		}
	})
	t.Run("context deadline", func(t *testing.T) {
		fc := newCluster(t, 3)
		fc.setLeader(-1)
		c := dialT(t, fc.addrs(), fastOptions()) // RetryTimeout 10s
		ctx, cancel := context.WithTimeout(testCtx(t), retry)
		defer cancel()
		_, err := c.Append(ctx, []byte("x"))
		re := check(t, err, fc.addrs(), "NotLeader")
		if !errors.Is(err, context.DeadlineExceeded) || re.Context == nil {
			t.Errorf("error %v does not wrap the context's error", err)
		}
	})
}

// failOnce answers the first request of op with err, then serves normally.
func failOnce(fc *fakeCluster, op transport.Op, err error, store bool) {
	var once sync.Once
	fc.setScript(func(_ context.Context, h *fakeHandler, o transport.Op, req any) (any, error, bool) {
		if o != op {
			return nil, nil, false
		}
		fail := false
		once.Do(func() { fail = true })
		if !fail {
			return nil, nil, false
		}
		if store {
			h.serve(o, req) // stored, and then the reply says otherwise
		}
		return nil, err, true
	})
}

func TestAppendNonRetryableCodes(t *testing.T) {
	for _, code := range []transport.Code{
		transport.CodeBadRequest, transport.CodeTooLarge, transport.CodeTrimmed, transport.CodeNotFound,
		transport.CodeUnknownOp, transport.CodeUnsupportedVersion, transport.CodeInternal,
		transport.CodeSessionExpired, transport.CodePermissionDenied, transport.CodeFailedPrecondition,
	} {
		t.Run(code.String(), func(t *testing.T) {
			fc := newCluster(t, 3)
			fc.setScript(func(_ context.Context, h *fakeHandler, op transport.Op, req any) (any, error, bool) {
				return nil, &transport.Error{Code: code, Message: "scripted"}, true
			})
			c := dialT(t, fc.addrs(), fastOptions())
			_, err := c.Append(testCtx(t), []byte("x"))
			if !errors.Is(err, &transport.Error{Code: code}) || transport.ErrorCode(err) != code {
				t.Fatalf("error %v, want code %v", err, code)
			}
			if !strings.HasPrefix(err.Error(), "client: append: "+fc.members[0].addr+": transport: "+code.String()) {
				t.Errorf("message %q does not name the operation and member", err)
			}
			if n := fc.count(0, transport.OpAppend); n != 1 {
				t.Errorf("%d attempts, want 1", n)
			}
		})
	}
	t.Run("no records", func(t *testing.T) {
		fc := newCluster(t, 1)
		c := dialT(t, fc.addrs(), fastOptions())
		if _, err := c.Append(testCtx(t)); transport.ErrorCode(err) != transport.CodeBadRequest {
			t.Errorf("Append of nothing: %v, want BadRequest", err)
		}
	})
}

func TestAppendRetryableCodes(t *testing.T) {
	for _, tc := range []struct {
		code  transport.Code
		store bool // the leader stores the append before failing it
	}{
		{transport.CodeBusy, false},
		{transport.CodeUnavailable, false},
		{transport.CodeCanceled, false},
		{transport.CodeTimeout, true},
		{transport.CodeNoSpace, false},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			fc := newCluster(t, 3)
			failOnce(fc, transport.OpAppend, &transport.Error{Code: tc.code}, tc.store)
			c := dialT(t, fc.addrs(), fastOptions())
			idx, err := c.Append(testCtx(t), []byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			fc.mu.Lock()
			defer fc.mu.Unlock()
			if !slices.Equal(idx, []uint64{1}) || len(fc.log) != 1 || fc.reqs[reqKey{0, transport.OpAppend}] != 2 {
				t.Errorf("indexes %v, %d records stored, %d attempts at the leader; want [1], 1, 2",
					idx, len(fc.log), fc.reqs[reqKey{0, transport.OpAppend}])
			}
			if tc.store && fc.dups != 1 {
				t.Errorf("%d duplicates answered, want 1", fc.dups)
			}
		})
	}
}

func TestAdminRetries(t *testing.T) {
	ctx := testCtx(t)
	t.Run("join follows the leader", func(t *testing.T) {
		fc := newCluster(t, 3)
		fc.setLeader(1)
		c := dialT(t, fc.addrs()[:1], fastOptions())
		idx, err := c.Join(ctx, transport.JoinRequest{NodeID: "n3", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"})
		if err != nil || idx != 1001 {
			t.Fatalf("Join = %d, %v; want 1001", idx, err)
		}
		if n := fc.count(1, transport.OpJoin); n != 1 {
			t.Errorf("the leader got %d joins, want 1", n)
		}
	})
	t.Run("remove retries Unavailable", func(t *testing.T) {
		fc := newCluster(t, 3)
		failOnce(fc, transport.OpRemove, &transport.Error{Code: transport.CodeUnavailable}, false)
		c := dialT(t, fc.addrs(), fastOptions())
		if idx, err := c.Remove(ctx, "n2"); err != nil || idx != 1001 {
			t.Fatalf("Remove = %d, %v; want 1001", idx, err)
		}
		if n := fc.count(0, transport.OpRemove); n != 2 {
			t.Errorf("the leader got %d removes, want 2", n)
		}
	})
	t.Run("trim does not retry a timeout", func(t *testing.T) {
		fc := newCluster(t, 3)
		failOnce(fc, transport.OpTrim, &transport.Error{Code: transport.CodeTimeout}, true)
		c := dialT(t, fc.addrs(), fastOptions())
		_, err := c.Trim(ctx, 5)
		if transport.ErrorCode(err) != transport.CodeTimeout || !strings.Contains(err.Error(), "outcome unknown") {
			t.Fatalf("Trim: %v, want Timeout with the outcome unknown", err)
		}
		if n := fc.count(0, transport.OpTrim); n != 1 {
			t.Errorf("the leader got %d trims, want 1", n)
		}
	})
	t.Run("transfer does not retry a lost connection", func(t *testing.T) {
		fc := newCluster(t, 3)
		fc.setScript(func(_ context.Context, h *fakeHandler, op transport.Op, req any) (any, error, bool) {
			h.nc.Close()
			return nil, errors.New("dropped"), true
		})
		c := dialT(t, fc.addrs(), fastOptions())
		err := c.TransferLeadership(ctx, "")
		if !errors.Is(err, transport.ErrClosed) || !strings.Contains(err.Error(), "outcome unknown") {
			t.Fatalf("TransferLeadership: %v, want a lost connection with the outcome unknown", err)
		}
		if n := fc.count(0, transport.OpTransferLeadership); n != 1 {
			t.Errorf("the leader got %d transfers, want 1", n)
		}
	})
	t.Run("transfer forgets the leader", func(t *testing.T) {
		fc := newCluster(t, 3)
		c := dialT(t, fc.addrs(), fastOptions())
		if _, err := c.Append(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := c.TransferLeadership(ctx, "n1"); err != nil {
			t.Fatal(err)
		}
		if got := c.Leader(); got != "" {
			t.Errorf("Leader() after a transfer = %q, want \"\"", got)
		}
		if _, err := c.Append(ctx, []byte("y")); err != nil || c.Leader() != fc.members[1].addr {
			t.Errorf("append after the transfer: %v, leader %q; want %q", err, c.Leader(), fc.members[1].addr)
		}
	})
}

func TestRead(t *testing.T) {
	fc := newCluster(t, 3)
	fc.setLeader(1)
	c := dialT(t, fc.addrs()[:1], fastOptions())
	ctx := testCtx(t)
	for i := range 10 {
		if _, err := c.Append(ctx, fmt.Appendf(nil, "r%d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(recs []transport.Record, from, n uint64) {
		t.Helper()
		if uint64(len(recs)) != n {
			t.Fatalf("%d records, want %d", len(recs), n)
		}
		for i, rec := range recs {
			if idx := from + uint64(i); rec.Index != idx || string(rec.Data) != fmt.Sprintf("r%d", idx) {
				t.Fatalf("record %d: %d %q, want %d r%d", i, rec.Index, rec.Data, idx, idx)
			}
		}
	}
	recs, next, err := c.Read(ctx, 1, ReadOptions{MaxRecords: 4})
	if err != nil || next != 5 {
		t.Fatalf("Read: next %d, %v; want 5", next, err)
	}
	check(recs, 1, 4)
	recs, next, err = c.Read(ctx, next, ReadOptions{})
	if err != nil || next != 11 {
		t.Fatalf("Read: next %d, %v; want 11", next, err)
	}
	check(recs, 5, 6)
	if recs, next, err = c.Read(ctx, 11, ReadOptions{}); err != nil || len(recs) != 0 || next != 11 {
		t.Fatalf("Read past the end: %d records, next %d, %v; want none, 11", len(recs), next, err)
	}

	// Stale reads stay on a follower, even without a leader.
	fc.setLeader(-1)
	before := fc.count(2, transport.OpRead)
	recs, _, err = c.Read(ctx, 3, ReadOptions{Stale: true, Addr: fc.members[2].addr, MaxRecords: 2})
	if err != nil {
		t.Fatal(err)
	}
	check(recs, 3, 2)
	if n := fc.count(2, transport.OpRead); n != before+1 {
		t.Errorf("member 2 served %d stale reads, want 1", n-before)
	}
	if _, _, err := c.Read(ctx, 1, ReadOptions{Stale: true}); err != nil {
		t.Errorf("stale read from the current member: %v", err)
	}
	if _, _, err := c.Read(ctx, 1, ReadOptions{Addr: fc.members[2].addr}); err == nil {
		t.Error("Read with Addr but not Stale succeeded")
	}

	// Trimmed is returned at once.
	fc.setLeader(1)
	if _, err := c.Trim(ctx, 5); err != nil {
		t.Fatal(err)
	}
	before = fc.count(1, transport.OpRead)
	if _, _, err := c.Read(ctx, 2, ReadOptions{}); transport.ErrorCode(err) != transport.CodeTrimmed {
		t.Fatalf("Read below the first index: %v, want Trimmed", err)
	}
	if n := fc.count(1, transport.OpRead); n != before+1 {
		t.Errorf("a trimmed read was tried %d times, want once", n-before)
	}
}

func TestStatus(t *testing.T) {
	fc := newCluster(t, 3)
	fc.setLeader(2)
	c := dialT(t, fc.addrs()[:1], fastOptions())
	ctx := testCtx(t)
	st, err := c.Status(ctx, fc.members[1].addr)
	if err != nil {
		t.Fatal(err)
	}
	if st.NodeID != "n1" || st.Role != "Follower" || st.LeaderAddr != fc.members[2].addr {
		t.Errorf("Status of member 1: %+v", st)
	}
	if st, err = c.Status(ctx, ""); err != nil || st.NodeID != "n0" {
		t.Errorf("Status of the connected member: %+v, %v; want n0", st, err)
	}
	if n := fc.count(1, transport.OpStatus) + fc.count(0, transport.OpStatus); n != 2 {
		t.Errorf("%d status requests, want 2", n)
	}
	dead := deadAddrs(t, 1)[0]
	if _, err := c.Status(ctx, dead); err == nil || !strings.Contains(err.Error(), dead) {
		t.Errorf("Status of a dead address: %v, want an error naming it", err)
	}
}

// Status asks for a member's details, and asks a member older than them,
// which refuses the request as malformed, again without.
func TestStatusOfOlderMember(t *testing.T) {
	fc := newCluster(t, 2)
	fc.setScript(func(ctx context.Context, h *fakeHandler, op transport.Op, req any) (any, error, bool) {
		if r, ok := req.(*transport.StatusRequest); ok && r.Details && h.m.idx == 1 {
			// What DecodeBody of a node without StatusRequest.Details says.
			return nil, &transport.Error{Code: transport.CodeBadRequest, Message: "transport: malformed body: *transport.StatusRequest: no such field: details"}, true
		}
		return nil, nil, false
	})
	c := dialT(t, fc.addrs()[:1], fastOptions())
	ctx := testCtx(t)
	st, err := c.Status(ctx, fc.members[0].addr)
	if err != nil || st.Details == nil || st.Details.Version != "v0.0.0-fake" {
		t.Fatalf("Status of a current member: %+v, %v; want its details", st, err)
	}
	st, err = c.Status(ctx, fc.members[1].addr)
	if err != nil || st.NodeID != "n1" || st.Details != nil {
		t.Fatalf("Status of an older member: %+v, %v; want its status without details", st, err)
	}
	if n := fc.count(1, transport.OpStatus); n != 2 {
		t.Errorf("%d status requests to the older member, want 2 (with details, then without)", n)
	}
}

func TestCloseFailsCallsInFlight(t *testing.T) {
	fc := newCluster(t, 3)
	entered := make(chan struct{}, 16)
	fc.setScript(func(ctx context.Context, h *fakeHandler, op transport.Op, req any) (any, error, bool) {
		if op != transport.OpAppend {
			return nil, nil, false
		}
		entered <- struct{}{}
		<-ctx.Done() // never answers; ctx ends when the connection does
		return nil, nil, true
	})
	const appends = 3
	opts := fastOptions()
	opts.MaxAppendRequests = appends // each Append in a request of its own
	c, err := Dial(testCtx(t), fc.addrs(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	errs := make(chan error, appends+2)
	for range appends {
		go func() {
			_, err := c.Append(ctx, []byte("x"))
			errs <- err
		}()
		<-entered // sent before the next is submitted: not packed with it
	}
	tail := c.Tail(ctx, 1, TailOptions{})
	go func() {
		_, err := tail.Next()
		errs <- err
	}()
	fc.waitFor("the tail to start", func() bool { return fc.streams[0] == 1 })
	dead := deadAddrs(t, 1)[0]
	go func() { // retries a dead member until Close
		_, _, err := c.Read(ctx, 1, ReadOptions{Stale: true, Addr: dead})
		errs <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for range appends + 2 {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Errorf("call in flight at Close: %v, want ErrClosed", err)
		}
	}
	if _, err := c.Append(ctx, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Status(ctx, ""); !errors.Is(err, ErrClosed) {
		t.Errorf("Status after Close: %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestDial(t *testing.T) {
	ctx := testCtx(t)
	dead := deadAddrs(t, 2)
	_, err := Dial(ctx, dead, fastOptions())
	if err == nil {
		t.Fatal("Dial of dead addresses succeeded")
	}
	t.Log(err)
	msg := err.Error()
	if !strings.HasPrefix(msg, "client: dial: no member reachable: ") || strings.Count(msg, "connection refused") != 2 {
		t.Errorf("message %q does not give the reason for every address", msg)
	}
	for _, a := range dead {
		if !strings.Contains(msg, a) {
			t.Errorf("message %q does not name %s", msg, a)
		}
	}

	fc := newCluster(t, 1)
	c := dialT(t, append(dead, fc.addrs()...), fastOptions())
	if got := c.current(&c.def.route); got != fc.members[0].addr {
		t.Errorf("connected to %q, want the live member %q", got, fc.members[0].addr)
	}

	for _, addrs := range [][]string{nil, {"no-port"}} {
		if _, err := Dial(ctx, addrs, nil); err == nil {
			t.Errorf("Dial(%q) succeeded", addrs)
		}
	}
}

func TestOptionsInvalid(t *testing.T) {
	for _, o := range []Options{
		{ClientID: strings.Repeat("x", transport.MaxIDLength+1)},
		{RequestTimeout: -1},
		{RetryTimeout: -1},
		{MinBackoff: 2 * time.Second},
		{MinBackoff: time.Second, MaxBackoff: time.Millisecond},
		{MaxInFlightAppends: SeqWindow},
		{MaxInFlightAppends: -1},
		{Conn: transport.ConnOptions{MaxInFlight: -1}},
	} {
		if _, err := Dial(testCtx(t), []string{"127.0.0.1:1"}, &o); err == nil || !strings.HasPrefix(err.Error(), "client: ") {
			t.Errorf("Dial with %+v: %v, want an options error", o, err)
		}
	}
	o, err := (*Options)(nil).withDefaults()
	if err != nil || len(o.ClientID) != 32 || o.MaxInFlightAppends != DefaultMaxInFlightAppends || o.RetryTimeout != DefaultRetryTimeout {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}

// TestCustomDial checks that Options.Dial is used, as it will be for TLS.
func TestCustomDial(t *testing.T) {
	fc := newCluster(t, 1)
	var mu sync.Mutex
	var dialled []string
	opts := fastOptions()
	opts.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		dialled = append(dialled, addr)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	c := dialT(t, fc.addrs(), opts)
	if _, err := c.Append(testCtx(t), []byte("x")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(dialled, fc.addrs()) {
		t.Errorf("dialled %q, want one connection to %q", dialled, fc.addrs())
	}
}

// A member that names a leader no reply named before is followed at once,
// however many redirects came before: after a failover the first replies
// may name the old leader, and the one that names the new leader must not
// wait for a backoff.
func TestAppendFollowsANewlyNamedLeaderAtOnce(t *testing.T) {
	fc := newCluster(t, 3)
	fc.setLeader(2)
	// Member 0 names member 1, the leader that was; member 1 names member
	// 2, the new one. A backoff would outlast RetryTimeout.
	fc.setScript(func(_ context.Context, h *fakeHandler, op transport.Op, _ any) (any, error, bool) {
		if op != transport.OpAppend || h.m.idx != 0 {
			return nil, nil, false
		}
		old := fc.members[1]
		return nil, &transport.Error{Code: transport.CodeNotLeader, Message: "n0 does not lead", LeaderID: old.id, LeaderAddr: old.addr}, true
	})
	opts := &Options{MinBackoff: time.Hour, MaxBackoff: time.Hour, RetryTimeout: 2 * time.Second}
	c := dialT(t, fc.addrs()[:1], opts)
	idx, err := c.Append(testCtx(t), []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(idx, []uint64{1}) {
		t.Fatalf("indexes %v, want [1]", idx)
	}
	if n := fc.count(1, transport.OpAppend); n != 1 {
		t.Errorf("the old leader got %d appends, want 1", n)
	}
}

// A member that names as leader one the operation could not connect to a
// moment ago (a leader whose process is gone, named by a follower that
// has not noticed yet) is not followed back there: the client asks
// another member, which leads. Before, it went back and forth between the
// dead member and the one naming it until its retries ran out.
func TestAppendPassesOverALeaderThatCannotBeReached(t *testing.T) {
	fc := newCluster(t, 3)
	fc.setLeader(0)
	dead := fc.members[1]
	fc.setScript(func(_ context.Context, h *fakeHandler, op transport.Op, _ any) (any, error, bool) {
		if op != transport.OpAppend || h.m.idx != 2 {
			return nil, nil, false
		}
		return nil, &transport.Error{Code: transport.CodeNotLeader, Message: "n2 does not lead", LeaderID: dead.id, LeaderAddr: dead.addr}, true
	})
	dead.kill()
	// The dead member first, then the one naming it, then the leader.
	addrs := []string{dead.addr, fc.members[2].addr, fc.members[0].addr}
	opts := &Options{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, RetryTimeout: 2 * time.Second}
	c := dialT(t, addrs, opts)
	idx, err := c.Append(testCtx(t), []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(idx, []uint64{1}) {
		t.Fatalf("indexes %v, want [1]", idx)
	}
}
