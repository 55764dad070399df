package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// awaitFuture waits for f, failing the test after testTimeout.
func awaitFuture(t *testing.T, f *AppendFuture) ([]uint64, error) {
	t.Helper()
	select {
	case <-f.Done():
		return f.Indexes(), f.Err()
	case <-time.After(testTimeout):
		t.Fatal("append did not complete")
		return nil, nil
	}
}

// holdAppends makes the cluster hold every append request until release is
// closed or the connection ends, signalling entered as each arrives; the
// requests are then served as usual.
func holdAppends(fc *fakeCluster, entered chan<- *transport.AppendRequest, release <-chan struct{}) {
	fc.setScript(func(ctx context.Context, h *fakeHandler, op transport.Op, req any) (any, error, bool) {
		if op != transport.OpAppend {
			return nil, nil, false
		}
		entered <- req.(*transport.AppendRequest)
		select {
		case <-release:
			return nil, nil, false
		case <-ctx.Done():
			return nil, ctx.Err(), true
		}
	})
}

// TestAppendAsyncOrderAndExactlyOnce keeps up to 64 appends in flight from
// one goroutine while leadership moves and leaders drop connections after
// storing a request but before replying. With the default of one request
// in flight, every append must succeed, be stored exactly once, and be
// stored in submission order; futures complete in submission order. A
// request carries at most the 64 appends of the window, so the 2,000 take
// at least 32 requests, and the faults strike within the first 18.
func TestAppendAsyncOrderAndExactlyOnce(t *testing.T) {
	const n = 2000
	fc := newCluster(t, 3)
	drops := 0 // guarded by fc.mu
	fc.mu.Lock()
	fc.stored1 = func(k int) bool {
		switch k {
		case 3, 9, 15:
			drops++
			return true
		case 6:
			fc.setLeaderLocked(1)
		case 12:
			fc.setLeaderLocked(2)
		case 18: // stored, then the leader changes and the reply is lost
			fc.setLeaderLocked(0)
			drops++
			return true
		}
		return false
	}
	fc.mu.Unlock()
	opts := fastOptions()
	opts.MaxInFlightAppends = 64
	c := dialT(t, fc.addrs(), opts)
	ctx := testCtx(t)
	futs := make([]*AppendFuture, n)
	for i := range futs {
		futs[i] = c.AppendAsync(ctx, fmt.Appendf(nil, "r%04d", i))
	}
	last := uint64(0)
	for i, f := range futs {
		idx, err := awaitFuture(t, f)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if len(idx) != 1 || idx[0] <= last {
			t.Fatalf("append %d stored at %v, after an earlier append at %d", i, idx, last)
		}
		last = idx[0]
		for j := range i {
			select {
			case <-futs[j].Done():
			default:
				t.Fatalf("append %d completed before append %d", i, j)
			}
		}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.log) != n {
		t.Fatalf("log holds %d records, want %d", len(fc.log), n)
	}
	for i, rec := range fc.log {
		if want := fmt.Sprintf("r%04d", i); string(rec.Data) != want {
			t.Fatalf("record %d holds %q, want %q: stored twice or out of order", rec.Index, rec.Data, want)
		}
		if got := futs[i].Indexes()[0]; got != rec.Index {
			t.Fatalf("append %d returned index %d, stored at %d", i, got, rec.Index)
		}
	}
	if fc.dups < drops || drops != 4 {
		t.Errorf("%d duplicates answered, want at least one per dropped reply (%d of 4)", fc.dups, drops)
	}
	if fc.leader != 0 || c.Leader() != fc.members[0].addr {
		t.Errorf("client believes %q leads, want %q", c.Leader(), fc.members[0].addr)
	}
	if fc.stored >= n/2 {
		t.Errorf("%d requests for %d appends: appends waiting were not packed together", fc.stored, n)
	}
	t.Logf("%d appends in %d requests, %d duplicates answered", n, fc.stored, fc.dups)
}

// TestAppendAsyncManyInFlight keeps 4,000 appends in flight, held by the
// server, and checks that they cost no goroutine each; then they all
// complete.
func TestAppendAsyncManyInFlight(t *testing.T) {
	const n = 4000
	fc := newCluster(t, 1)
	entered := make(chan *transport.AppendRequest, n)
	release := make(chan struct{})
	holdAppends(fc, entered, release)
	opts := fastOptions()
	opts.MaxInFlightAppends = n
	opts.MaxAppendRequests = 4
	c := dialT(t, fc.addrs(), opts)
	ctx := testCtx(t) // can end: each append watches it
	before := runtime.NumGoroutine()
	futs := make([]*AppendFuture, n)
	for i := range futs {
		futs[i] = c.AppendAsync(ctx, []byte("x"))
	}
	for range opts.MaxAppendRequests {
		<-entered
	}
	// The server holds 4 requests (a goroutine each in the fake) of up to
	// 1,024 records; the rest wait in the client.
	if grown := runtime.NumGoroutine() - before; grown > 40 {
		t.Errorf("%d goroutines more with %d appends in flight", grown, n)
	}
	close(release)
	for i, f := range futs {
		if _, err := awaitFuture(t, f); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	// The first requests may leave before many appends wait; once they
	// are held, everything else waits and goes in full requests.
	most := opts.MaxAppendRequests + (n+maxBatchRecords-1)/maxBatchRecords
	if len(fc.log) != n || fc.stored > most {
		t.Errorf("%d records in %d requests, want %d in at most %d", len(fc.log), fc.stored, n, most)
	}
}

// TestAppendAsyncWindowFull: with MaxInFlightAppends in flight,
// TryAppendAsync fails at once, AppendAsync waits for room or for its
// context, and Append waits too.
func TestAppendAsyncWindowFull(t *testing.T) {
	const window = 4
	fc := newCluster(t, 1)
	entered := make(chan *transport.AppendRequest, 16)
	release := make(chan struct{})
	holdAppends(fc, entered, release)
	opts := fastOptions()
	opts.MaxInFlightAppends = window
	c := dialT(t, fc.addrs(), opts)
	ctx := testCtx(t)
	var futs []*AppendFuture
	for i := range window {
		futs = append(futs, c.AppendAsync(ctx, fmt.Appendf(nil, "w%d", i)))
	}
	<-entered
	if f, err := c.TryAppendAsync(ctx, []byte("over")); !errors.Is(err, ErrWindowFull) || f != nil {
		t.Fatalf("TryAppendAsync with the window full: %v, %v; want ErrWindowFull", f, err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := awaitFuture(t, c.AppendAsync(short, []byte("late"))); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AppendAsync that found no room before its deadline: %v", err)
	}
	if _, err := c.Append(short, []byte("late")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Append that found no room before its deadline: %v", err)
	}

	waited := make(chan *AppendFuture)
	go func() { waited <- c.AppendAsync(ctx, []byte("waited")) }()
	close(release)
	f := <-waited
	if _, err := awaitFuture(t, f); err != nil {
		t.Fatalf("AppendAsync that waited for room: %v", err)
	}
	for i, f := range futs {
		if _, err := awaitFuture(t, f); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if f, err := c.TryAppendAsync(ctx, []byte("room")); err != nil {
		t.Fatalf("TryAppendAsync with room: %v", err)
	} else if _, err := awaitFuture(t, f); err != nil {
		t.Fatal(err)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var got []string
	for _, rec := range fc.log {
		got = append(got, string(rec.Data))
	}
	if want := []string{"w0", "w1", "w2", "w3", "waited", "room"}; !slices.Equal(got, want) {
		t.Errorf("log holds %q, want %q: what found no room was stored", got, want)
	}
}

// TestAppendAsyncContext: an append whose context ends completes at once
// with the context's error, whether it waits in the client (and is then
// never sent) or is in flight (whose request is then abandoned if no other
// append shares it); the appends sharing its request go on.
func TestAppendAsyncContext(t *testing.T) {
	fc := newCluster(t, 1)
	entered := make(chan *transport.AppendRequest, 16)
	release := make(chan struct{})
	holdAppends(fc, entered, release)
	c := dialT(t, fc.addrs(), fastOptions())
	ctx := testCtx(t)

	alone, cancelAlone := context.WithCancel(ctx)
	first := c.AppendAsync(alone, []byte("first"))
	req := <-entered
	queued, cancelQueued := context.WithCancel(ctx)
	shared, cancelShared := context.WithCancel(ctx)
	gone := c.AppendAsync(queued, []byte("gone"))
	kept := c.AppendAsync(ctx, []byte("kept"))
	dropped := c.AppendAsync(shared, []byte("dropped"))

	cancelQueued()
	if _, err := awaitFuture(t, gone); !errors.Is(err, context.Canceled) {
		t.Fatalf("queued append whose context ended: %v, want Canceled", err)
	}
	cancelAlone()
	if _, err := awaitFuture(t, first); !errors.Is(err, context.Canceled) {
		t.Fatalf("append in flight whose context ended: %v, want Canceled", err)
	}
	// Its request, abandoned, ends on the server; the next one carries
	// kept and dropped.
	fc.waitFor("the abandoned request to end", func() bool { return fc.reqs[reqKey{0, transport.OpAppend}] == 2 })
	next := <-entered
	if len(next.Records) != 2 || string(next.Records[0]) != "kept" || string(next.Records[1]) != "dropped" || next.Seq <= req.Seq {
		t.Fatalf("next request: seq %d, records %q; want kept and dropped after seq %d", next.Seq, next.Records, req.Seq)
	}
	cancelShared()
	if _, err := awaitFuture(t, dropped); !errors.Is(err, context.Canceled) {
		t.Fatalf("append in flight whose context ended: %v, want Canceled", err)
	}
	close(release)
	if idx, err := awaitFuture(t, kept); err != nil || len(idx) != 1 {
		t.Fatalf("append sharing a request with a cancelled one: %v, %v", idx, err)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, rec := range fc.log {
		if string(rec.Data) == "gone" {
			t.Error("an append cancelled before it was sent was stored")
		}
	}
}

// TestAppendAsyncClose: Close completes every future, queued, in flight or
// waiting for room, with ErrClosed; later calls fail with it too.
func TestAppendAsyncClose(t *testing.T) {
	fc := newCluster(t, 1)
	entered := make(chan *transport.AppendRequest, 16)
	holdAppends(fc, entered, nil) // never released
	opts := fastOptions()
	opts.MaxInFlightAppends = 8
	c, err := Dial(testCtx(t), fc.addrs(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	var futs []*AppendFuture
	for i := range 8 {
		futs = append(futs, c.AppendAsync(ctx, fmt.Appendf(nil, "c%d", i)))
	}
	<-entered
	waiting := make(chan *AppendFuture)
	go func() { waiting <- c.AppendAsync(ctx, []byte("no room")) }()
	flushed := make(chan error)
	go func() { flushed <- c.Flush(ctx) }()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	futs = append(futs, <-waiting)
	for i, f := range futs {
		if _, err := awaitFuture(t, f); !errors.Is(err, ErrClosed) {
			t.Errorf("append %d at Close: %v, want ErrClosed", i, err)
		}
	}
	if err := <-flushed; err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("Flush across Close: %v", err)
	}
	if _, err := awaitFuture(t, c.AppendAsync(ctx, []byte("after"))); !errors.Is(err, ErrClosed) {
		t.Errorf("AppendAsync after Close: %v, want ErrClosed", err)
	}
	if _, err := c.TryAppendAsync(ctx, []byte("after")); err != nil {
		t.Errorf("TryAppendAsync after Close: %v, want a future that fails", err)
	}
	if err := c.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close: %v, want ErrClosed", err)
	}
}

// TestFlush waits for the appends submitted before it and not for later
// ones, and gives up with its context.
func TestFlush(t *testing.T) {
	fc := newCluster(t, 1)
	entered := make(chan *transport.AppendRequest, 16)
	release := make(chan struct{})
	holdAppends(fc, entered, release)
	c := dialT(t, fc.addrs(), fastOptions())
	ctx := testCtx(t)
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("Flush with nothing in flight: %v", err)
	}
	futs := []*AppendFuture{c.AppendAsync(ctx, []byte("a")), c.AppendAsync(ctx, []byte("b"))}
	<-entered
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := c.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with appends held: %v, want DeadlineExceeded", err)
	}
	flushed := make(chan error)
	go func() { flushed <- c.Flush(ctx) }()
	close(release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	for i, f := range futs {
		select {
		case <-f.Done():
		default:
			t.Errorf("append %d still in flight after Flush", i)
		}
	}
}

// TestAppendAsyncSplitsTooLarge: a request the server refuses as too large
// before storing anything is split, and each append goes alone: only the
// one too large by itself fails, and order holds.
func TestAppendAsyncSplitsTooLarge(t *testing.T) {
	const limit = 100 // record bytes a request may carry
	fc := newCluster(t, 1)
	entered := make(chan struct{}, 16)
	release := make(chan struct{})
	fc.setScript(func(ctx context.Context, h *fakeHandler, op transport.Op, req any) (any, error, bool) {
		r, ok := req.(*transport.AppendRequest)
		if !ok {
			return nil, nil, false
		}
		if string(r.Records[0]) == "hold" {
			entered <- struct{}{}
			<-release
			return nil, nil, false
		}
		size := 0
		for _, rec := range r.Records {
			size += len(rec)
		}
		if size > limit {
			return nil, &transport.Error{Code: transport.CodeTooLarge, Message: fmt.Sprintf("%d bytes", size)}, true
		}
		return nil, nil, false
	})
	c := dialT(t, fc.addrs(), fastOptions())
	ctx := testCtx(t)
	hold := c.AppendAsync(ctx, []byte("hold"))
	<-entered
	// Packed into one request while "hold" is in flight.
	small1 := c.AppendAsync(ctx, bytes.Repeat([]byte("a"), 60))
	big := c.AppendAsync(ctx, bytes.Repeat([]byte("b"), limit+1))
	small2 := c.AppendAsync(ctx, bytes.Repeat([]byte("c"), 60))
	close(release)
	for _, f := range []*AppendFuture{hold, small1, small2} {
		if _, err := awaitFuture(t, f); err != nil {
			t.Fatalf("append that fits alone: %v", err)
		}
	}
	if _, err := awaitFuture(t, big); transport.ErrorCode(err) != transport.CodeTooLarge || !strings.HasPrefix(err.Error(), "client: append: ") {
		t.Fatalf("append too large alone: %v, want TooLarge", err)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var got []byte
	for _, rec := range fc.log {
		got = append(got, rec.Data[0])
	}
	if string(got) != "hac" {
		t.Errorf("log holds records starting %q, want \"hac\"", got)
	}
	if n := fc.reqs[reqKey{0, transport.OpAppend}]; n != 5 {
		t.Errorf("%d append requests, want 5: hold, the three together, then each alone", n)
	}
}

// TestAppendAsyncGivesUp: an append whose retries run out fails with a
// RetryError, as Append does; the appends queued behind it go on once a
// leader is back, in order.
func TestAppendAsyncGivesUp(t *testing.T) {
	fc := newCluster(t, 3)
	fc.setLeader(-1)
	opts := fastOptions()
	opts.RetryTimeout = 300 * time.Millisecond
	c := dialT(t, fc.addrs(), opts)
	ctx := testCtx(t)
	lost := c.AppendAsync(ctx, []byte("lost"))
	fc.waitFor("every member to refuse", func() bool {
		return fc.refused[0] >= 1 && fc.refused[1] >= 1 && fc.refused[2] >= 1
	})
	later := []*AppendFuture{c.AppendAsync(ctx, []byte("x")), c.AppendAsync(ctx, []byte("y"))}
	_, err := awaitFuture(t, lost)
	var re *RetryError
	if !errors.As(err, &re) || transport.ErrorCode(err) != transport.CodeNotLeader {
		t.Fatalf("append without a leader: %v, want a RetryError of NotLeader", err)
	}
	fc.setLeader(2)
	var idx []uint64
	for _, f := range later {
		i, err := awaitFuture(t, f)
		if err != nil {
			// The retries of the later ones may run out too, before the
			// leader is back; then they fail the same way.
			if !errors.As(err, &re) {
				t.Fatalf("append queued behind a failed one: %v", err)
			}
			continue
		}
		idx = append(idx, i...)
	}
	if !slices.IsSorted(idx) {
		t.Errorf("indexes %v out of submission order", idx)
	}
}

// TestAppendAsyncNoRecords fails at once, as Append does.
func TestAppendAsyncNoRecords(t *testing.T) {
	fc := newCluster(t, 1)
	c := dialT(t, fc.addrs(), fastOptions())
	if _, err := awaitFuture(t, c.AppendAsync(testCtx(t))); transport.ErrorCode(err) != transport.CodeBadRequest {
		t.Errorf("AppendAsync of nothing: %v, want BadRequest", err)
	}
}
