package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/raftlog/raftlog/transport"
)

// appendN appends n records "<prefix><i>" to g, one Append each.
func appendN(t *testing.T, g *Log, prefix string, n int) {
	t.Helper()
	ctx := testCtx(t)
	for i := range n {
		if _, err := g.Append(ctx, fmt.Appendf(nil, "%s%d", prefix, i)); err != nil {
			t.Fatalf("append to %s: %v", g.Name(), err)
		}
	}
}

// TestLogsFollowTheirOwnLeaders checks that the Client keeps a leader per
// log: a change of one log's leader moves that log's requests only, and
// another log's appends go on to their leader without a single retry,
// even while the first log has no leader at all.
func TestLogsFollowTheirOwnLeaders(t *testing.T) {
	lc := newLogsCluster(t, 3)
	lc.addLog("a", 1, 0, 1, 2)
	lc.addLog("b", 2, 0, 1, 2)
	c := dialT(t, lc.addrs, fastOptions())
	a, b := c.Log("a"), c.Log("b")

	// Each log finds its leader: the first append is redirected once.
	appendN(t, a, "a", 1)
	appendN(t, b, "b", 1)
	appendN(t, c.Log(transport.DefaultLog), "d", 1)
	if a.Leader() != lc.addrs[1] || b.Leader() != lc.addrs[2] || c.Leader() != lc.addrs[0] {
		t.Fatalf("leaders: a %s, b %s, default %s; want %s, %s, %s", a.Leader(), b.Leader(), c.Leader(), lc.addrs[1], lc.addrs[2], lc.addrs[0])
	}

	// a loses its leader: its appends wait; b's and the default log's go
	// on, each to its leader at the first attempt.
	lc.setLeader("a", -1, -1)
	fa := a.AppendAsync(testCtx(t), []byte("a-waits"))
	lc.waitFor("a's append refused", func() bool { return lc.refused[logReqKey{1, "a", transport.OpAppend}] > 0 })
	_, bRefused := lc.counts("b", transport.OpAppend)
	bHandled, _ := lc.counts("b", transport.OpAppend)
	appendN(t, b, "b-more", 20)
	appendN(t, c.Log(""), "d-more", 5)
	select {
	case <-fa.Done():
		t.Fatalf("a's append completed without a leader: %v", fa.Err())
	default:
	}
	handled, refused := lc.counts("b", transport.OpAppend)
	if !slices.Equal(refused, bRefused) || handled[2]-bHandled[2] != 20 || handled[0] != bHandled[0] || handled[1] != bHandled[1] {
		t.Errorf("b's 20 appends while a had no leader: handled %v (before %v), NotLeader %v (before %v); want 20 more at member 2 and no NotLeader",
			handled, bHandled, refused, bRefused)
	}

	// a gets a new leader: its append completes there; b's leader has not
	// moved, and b's next appends still go straight to it.
	lc.setLeader("a", 0, -1)
	if _, err := awaitFuture(t, fa); err != nil {
		t.Fatalf("a's append: %v", err)
	}
	if a.Leader() != lc.addrs[0] || b.Leader() != lc.addrs[2] {
		t.Errorf("leaders after a's change: a %s, b %s; want %s, %s", a.Leader(), b.Leader(), lc.addrs[0], lc.addrs[2])
	}
	appendN(t, b, "b-last", 5)
	if _, refused := lc.counts("b", transport.OpAppend); !slices.Equal(refused, bRefused) {
		t.Errorf("b's appends after a's leader change were refused: %v, before %v", refused, bRefused)
	}

	// Reads and tails go per log too, each to its own log's leader.
	recs, _, err := b.Read(testCtx(t), 1, ReadOptions{})
	if err != nil || len(recs) != 26 || string(recs[0].Data) != "b0" {
		t.Fatalf("read of b: %d records, %v", len(recs), err)
	}
	tl := a.Tail(testCtx(t), 0, TailOptions{})
	defer tl.Close()
	for _, want := range []string{"a0", "a-waits"} {
		rec, err := tl.Next()
		if err != nil || string(rec.Data) != want {
			t.Fatalf("tail of a: %q, %v; want %q", rec.Data, err, want)
		}
	}
	if h, _ := lc.counts("a", transport.OpTail); h[0] != 1 {
		t.Errorf("tail of a opened on members %v, want once on its leader, member 0", h)
	}
}

// TestLogMemberHint checks that a NotLeader naming a member of the log,
// not its leader, sends the request there, and that the member is not
// taken for the leader.
func TestLogMemberHint(t *testing.T) {
	lc := newLogsCluster(t, 3)
	lc.addLog("a", -1, 1, 2)
	lc.setLeader("a", -1, 1) // no leader known: members answer with member 1
	opts := fastOptions()
	c := dialT(t, lc.addrs[:1], opts) // knows member 0 only
	a := c.Log("a")
	f := a.AppendAsync(testCtx(t), []byte("x"))
	lc.waitFor("the hint taken", func() bool { return lc.refused[logReqKey{1, "a", transport.OpAppend}] > 0 })
	if a.Leader() != "" {
		t.Errorf("leader of a %q after a member hint, want unknown", a.Leader())
	}
	lc.setLeader("a", 2, -1)
	if _, err := awaitFuture(t, f); err != nil {
		t.Fatal(err)
	}
	handled, _ := lc.counts("a", transport.OpAppend)
	if handled[0] != 1 || handled[2] != 1 || a.Leader() != lc.addrs[2] {
		t.Errorf("append to a handled %v times per member, leader %q; want once at member 0, then member 1 until it named member 2, once there", handled, a.Leader())
	}
	if c.Leader() != "" {
		t.Errorf("the default log's leader is %q: a's answers moved it", c.Leader())
	}
}

// TestLogsExactlyOnce checks sessions per log: each log's appends carry a
// session id of their own and sequence numbers from 1, so the server's
// session of one log sees every sequence number of the Client's appends
// to it, in order, with the session base of a new session first; and a
// retry after a lost reply is recognised in its log.
func TestLogsExactlyOnce(t *testing.T) {
	lc := newLogsCluster(t, 3)
	lc.addLog("a", 0, 0, 1, 2)
	lc.addLog("b", 0, 0, 1, 2)
	opts := fastOptions()
	opts.ClientID = "cid"
	c := dialT(t, lc.addrs, opts)
	lc.mu.Lock()
	lc.logs["a"].drop = 2 // the reply of a's second append is lost
	lc.mu.Unlock()
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b", transport.DefaultLog} {
		wg.Go(func() { appendN(t, c.Log(name), name, 5) })
	}
	wg.Wait()
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for name, id := range map[string]string{"a": "cid/a", "b": "cid/b", transport.DefaultLog: "cid"} {
		l := lc.logs[name]
		if len(l.sessions) != 1 || l.sessions[id] == nil {
			t.Errorf("log %s has sessions %v, want one, %q", name, keys(l.sessions), id)
		}
		if want := []uint64{1, 2, 3, 4, 5}; !slices.Equal(l.seqs[id], want) {
			t.Errorf("log %s stored sequence numbers %v, want %v", name, l.seqs[id], want)
		}
		if b := l.bases[id]; len(b) == 0 || b[0] != 1 {
			t.Errorf("log %s: session bases %v, want 1 first", name, b)
		}
		if len(l.records) != 5 {
			t.Errorf("log %s holds %d records, want 5 (each once)", name, len(l.records))
		}
	}
	if got := sessionID(strings.Repeat("x", 250), "orders"); len(got) > transport.MaxIDLength || !strings.HasSuffix(got, "/orders") {
		t.Errorf("session id of a long client id: %q", got)
	}
}

func keys[V any](m map[string]V) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	return k
}

// TestLogErrors checks the errors of named logs: an unknown log fails at
// once with NotFound naming it, an invalid name without a request, a
// duplicate create with FailedPrecondition; and the log operations reach
// the catalog's leader and the log's.
func TestLogErrors(t *testing.T) {
	lc := newLogsCluster(t, 3)
	lc.addLog("orders", 2, 0, 2)
	lc.mu.Lock()
	lc.catalog = 1
	lc.mu.Unlock()
	c := dialT(t, lc.addrs, fastOptions())
	ctx := testCtx(t)

	_, err := c.Log("nosuch").Append(ctx, []byte("x"))
	if transport.ErrorCode(err) != transport.CodeNotFound || !strings.Contains(err.Error(), `log "nosuch" does not exist`) ||
		!strings.HasPrefix(err.Error(), `client: append (log "nosuch"): `) {
		t.Errorf("append to an unknown log: %v", err)
	}
	if h, _ := lc.counts("nosuch", transport.OpAppend); h[0]+h[1]+h[2] != 1 {
		t.Errorf("append to an unknown log sent %v times, want once", h)
	}
	if _, _, err := c.Log("nosuch").Read(ctx, 0, ReadOptions{}); transport.ErrorCode(err) != transport.CodeNotFound {
		t.Errorf("read of an unknown log: %v", err)
	}
	if _, err := c.Log("nosuch").Tail(ctx, 0, TailOptions{}).Next(); transport.ErrorCode(err) != transport.CodeNotFound {
		t.Errorf("tail of an unknown log: %v", err)
	}
	for _, bad := range []string{"no such", "-x", strings.Repeat("x", 65)} {
		g := c.Log(bad)
		_, err1 := g.Append(ctx, []byte("x"))
		_, _, err2 := g.Read(ctx, 0, ReadOptions{})
		_, err3 := g.Tail(ctx, 0, TailOptions{}).Next()
		_, err4 := g.Trim(ctx, 1)
		err5 := g.AppendAsync(ctx, []byte("x")).Err()
		for _, err := range []error{err1, err2, err3, err4, err5} {
			if transport.ErrorCode(err) != transport.CodeBadRequest || !strings.Contains(err.Error(), "log name") {
				t.Errorf("log %q: %v, want BadRequest about the name", bad, err)
			}
		}
	}

	info, err := c.CreateLog(ctx, "events", CreateLogOptions{Replicas: 1})
	if err != nil || info.Name != "events" || info.ID == 0 {
		t.Fatalf("create: %+v, %v", info, err)
	}
	if h, r := lc.counts("", transport.OpCreateLog); h[1] != 1 || r[0] != 1 {
		t.Errorf("create handled %v, refused %v; want a redirect from member 0 to the catalog's leader, member 1", h, r)
	}
	_, err = c.CreateLog(ctx, "orders", CreateLogOptions{})
	if transport.ErrorCode(err) != transport.CodeFailedPrecondition || !strings.Contains(err.Error(), `log "orders" exists already`) {
		t.Errorf("duplicate create: %v", err)
	}
	for _, tc := range []struct {
		name string
		opts CreateLogOptions
	}{{transport.DefaultLog, CreateLogOptions{}}, {"x y", CreateLogOptions{}}, {"x", CreateLogOptions{Replicas: 2}}, {"x", CreateLogOptions{Replicas: 7}}} {
		if _, err := c.CreateLog(ctx, tc.name, tc.opts); err == nil || transport.ErrorCode(err) == transport.CodeFailedPrecondition && tc.name != transport.DefaultLog {
			t.Errorf("create %q %+v: %v, want refused", tc.name, tc.opts, err)
		}
	}
	logs, err := c.ListLogs(ctx)
	if err != nil || len(logs) != 3 || logs[0].Name != transport.DefaultLog || logs[1].Name != "events" || logs[2].Name != "orders" {
		t.Errorf("list: %+v, %v", logs, err)
	}
	d, err := c.DescribeLog(ctx, "orders")
	if err != nil || d.Log.Name != "orders" || d.LeaderAddr != lc.addrs[2] || len(d.Members) != 2 || c.Log("orders").Leader() != lc.addrs[2] {
		t.Errorf("describe: %+v, %v", d, err)
	}
	if _, err := c.DescribeLog(ctx, "nosuch"); transport.ErrorCode(err) != transport.CodeNotFound || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Errorf("describe of an unknown log: %v", err)
	}
	if _, err := c.DeleteLog(ctx, "nosuch"); transport.ErrorCode(err) != transport.CodeNotFound || !strings.Contains(err.Error(), `log "nosuch" does not exist`) {
		t.Errorf("delete of an unknown log: %v", err)
	}
	if _, err := c.DeleteLog(ctx, transport.DefaultLog); transport.ErrorCode(err) != transport.CodeBadRequest {
		t.Errorf("delete of the default log: %v", err)
	}
	if info, err := c.DeleteLog(ctx, "orders"); err != nil || info.State != transport.LogDeleting {
		t.Errorf("delete: %+v, %v", info, err)
	}
	if _, err := c.Log("orders").Append(ctx, []byte("x")); transport.ErrorCode(err) != transport.CodeNotFound {
		t.Errorf("append to a deleted log: %v", err)
	}
}

// oldServer serves the client protocol as a node older than named logs
// does: requests decode into the request types of that version, which
// refuse the log field, and the log operations are unknown.
func oldServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	type oldAppendRequest struct {
		ClientID string   `msgpack:"client_id,omitempty"`
		Seq      uint64   `msgpack:"seq,omitempty"`
		Base     uint64   `msgpack:"base,omitempty"`
		After    uint64   `msgpack:"after,omitempty"`
		Records  [][]byte `msgpack:"records"`
	}
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() {
				defer nc.Close()
				for {
					f, err := transport.ReadFrame(nc, 0)
					if err != nil {
						return
					}
					if f.Type != transport.FrameRequest {
						continue
					}
					var reply any
					var e *transport.Error
					switch f.Op {
					case transport.OpAppend:
						var r oldAppendRequest
						if err := transport.DecodeBody(f.Body, &r); err != nil {
							e = &transport.Error{Code: transport.CodeBadRequest, Message: err.Error()} // as its Serve answers
						} else {
							reply = &transport.AppendResponse{Indexes: []uint64{7}}
						}
					default:
						e = &transport.Error{Code: transport.CodeUnknownOp, Message: fmt.Sprintf("unknown op %d", f.Op)}
					}
					out := transport.Frame{Type: transport.FrameResponse, Op: f.Op, ID: f.ID}
					if e != nil {
						out.Type, reply = transport.FrameError, e
					}
					if out.Body, err = transport.EncodeBody(reply); err != nil {
						t.Error(err)
						return
					}
					if transport.WriteFrame(nc, out) != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// TestOlderServer checks what a member older than named logs answers:
// the log operations and a request naming a log fail at once with
// ErrNoNamedLogs, keeping the member's own error; the default log works.
func TestOlderServer(t *testing.T) {
	c := dialT(t, []string{oldServer(t)}, fastOptions())
	ctx := testCtx(t)
	if idx, err := c.Append(ctx, []byte("x")); err != nil || len(idx) != 1 {
		t.Fatalf("append to the default log: %v, %v", idx, err)
	}
	if _, err := c.Log(transport.DefaultLog).Append(ctx, []byte("x")); err != nil {
		t.Fatalf("append to the default log by name: %v", err)
	}
	_, err1 := c.Log("orders").Append(ctx, []byte("x"))
	_, err2 := c.CreateLog(ctx, "orders", CreateLogOptions{})
	_, err3 := c.ListLogs(ctx)
	_, err4 := c.DescribeLog(ctx, "orders")
	_, err5 := c.DeleteLog(ctx, "orders")
	for i, err := range []error{err1, err2, err3, err4, err5} {
		want := transport.CodeUnknownOp
		if i == 0 {
			want = transport.CodeBadRequest
		}
		if !errors.Is(err, ErrNoNamedLogs) || transport.ErrorCode(err) != want || !strings.Contains(err.Error(), "this server does not serve named logs") {
			t.Errorf("%d: %v, want ErrNoNamedLogs wrapping %v", i, err, want)
		}
	}
}

// TestLogHandles checks that handles of one name share their state, and
// that the default log has two names.
func TestLogHandles(t *testing.T) {
	lc := newLogsCluster(t, 1)
	c := dialT(t, lc.addrs, fastOptions())
	a1, a2 := c.Log("a"), c.Log("a")
	if a1.l != a2.l || c.Log("").l != c.def || c.Log(transport.DefaultLog).l != c.def || c.Log("a").l == c.Log("b").l {
		t.Error("Log handles do not share the state of their log")
	}
	if c.Log("").Name() != transport.DefaultLog || c.Log("a").Name() != "a" {
		t.Error("Log names")
	}
	c.Close()
	if _, err := c.Log("late").Append(context.Background(), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("append to a log first used after Close: %v", err)
	}
}

// Log.Restore uploads the file in parts to the log's leader and asks it to
// restore it; when the leadership moves during the upload it uploads
// again, from the start, to the new leader. The default log takes no
// restore.
func TestLogRestore(t *testing.T) {
	lc := newLogsCluster(t, 3)
	lc.addLog("copy", 0, 0, 1, 2)
	moved := false
	lc.mu.Lock()
	lc.logs["copy"].restoreHook = func(m int, r *transport.RestoreLogRequest) error {
		if m == 0 && r.Offset >= 2*restorePart && !moved {
			moved = true
			lc.logs["copy"].leader = 1
		}
		return nil
	}
	lc.mu.Unlock()
	file := make([]byte, 3*restorePart+12345)
	for i := range file {
		file[i] = byte(i * 7)
	}
	c := dialT(t, lc.addrs, fastOptions())
	res, err := c.Log("copy").Restore(testCtx(t), bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != int64(len(file)) || res.Index != 100 || res.BackupIndex != 99 || res.Replicas != 3 {
		t.Fatalf("restore: %+v", res)
	}
	lc.mu.Lock()
	restored, on, wasMoved := lc.logs["copy"].restored, lc.logs["copy"].uploadOn, moved
	lc.mu.Unlock()
	if !wasMoved || on != 1 || !bytes.Equal(restored, file) {
		t.Fatalf("leadership moved %v; the restore on member %d holds %d bytes, want member 1 and the %d of the file", wasMoved, on, len(restored), len(file))
	}
	handled, refused := lc.counts("copy", transport.OpRestoreLog)
	if handled[0] != 3 || refused[0] != 1 || handled[1] != 4 {
		t.Fatalf("restore parts handled per member %v, refused %v; want 3 at member 0 (the third refused) and 4 at member 1", handled, refused)
	}
	if _, err := c.Log(transport.DefaultLog).Restore(testCtx(t), bytes.NewReader(file)); transport.ErrorCode(err) != transport.CodeBadRequest {
		t.Fatalf("a restore into the default log: %v, want BadRequest", err)
	}
}

// A restore of a file of one part is begun and run by two requests, and a
// refusal of either that came before the member did anything (here
// Unavailable: a leadership transfer under way) is retried.
func TestLogRestoreRetriesRefusals(t *testing.T) {
	lc := newLogsCluster(t, 3)
	lc.addLog("copy", 0, 0, 1, 2)
	var seen []string
	lc.mu.Lock()
	lc.logs["copy"].restoreHook = func(m int, r *transport.RestoreLogRequest) error {
		seen = append(seen, fmt.Sprintf("%d@%d done=%v", len(r.Data), r.Offset, r.Done))
		if len(seen) == 1 || len(seen) == 3 {
			return &transport.Error{Code: transport.CodeUnavailable, Message: "leadership transfer in progress"}
		}
		return nil
	}
	lc.mu.Unlock()
	file := []byte("a small backup file")
	c := dialT(t, lc.addrs, fastOptions())
	if _, err := c.Log("copy").Restore(testCtx(t), bytes.NewReader(file)); err != nil {
		t.Fatal(err)
	}
	lc.mu.Lock()
	restored, got := lc.logs["copy"].restored, slices.Clone(seen)
	lc.mu.Unlock()
	want := []string{"19@0 done=false", "19@0 done=false", "0@19 done=true", "19@0 done=false", "0@19 done=true"}
	if !bytes.Equal(restored, file) || !slices.Equal(got, want) {
		t.Fatalf("restored %q after the parts %q; want %q after %q", restored, got, file, want)
	}
}
