package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/internal/testcert"
	"github.com/raftlog/raftlog/transport"
)

// TestRankOf pins the order in which failures are reported: a definite
// refusal over a member at its connection limit, over a reason, over an
// unreachable member, over NotLeader and timeouts.
func TestRankOf(t *testing.T) {
	busyAtLimit := fmt.Errorf("%w: %w", transport.ErrClosed, &transport.Error{Code: transport.CodeBusy, Message: "node n1 has 1024 client connections open, its limit"})
	for _, tc := range []struct {
		err  error
		want rank
	}{
		{&transport.Error{Code: transport.CodeNoSpace, Message: "n2, n3 below the free-space reserve"}, rankRefusal},
		{&transport.Error{Code: transport.CodePermissionDenied}, rankRefusal},
		{&dialError{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, rankRefusal},
		{fmt.Errorf("%w: %w", transport.ErrClosed, &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}), rankRefusal},
		{&dialError{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}}, rankRefusal},
		{busyAtLimit, rankAtLimit},
		{&transport.Error{Code: transport.CodeUnavailable, Message: "no quorum"}, rankReason},
		{&transport.Error{Code: transport.CodeBusy, Message: "128 requests in flight"}, rankReason},
		{&dialError{&net.OpError{Op: "dial", Err: errors.New("connect: connection refused")}}, rankUnreachable},
		{fmt.Errorf("%w: server closed the connection: %w", transport.ErrClosed, io.EOF), rankUnreachable},
		{&transport.Error{Code: transport.CodeNotLeader, LeaderAddr: "127.0.0.1:1"}, rankSilent},
		{&transport.Error{Code: transport.CodeTimeout}, rankSilent},
		{&transport.Error{Code: transport.CodeUnavailable}, rankSilent},
		{fmt.Errorf("no reply within 10s: %w", context.DeadlineExceeded), rankSilent},
		{&dialError{context.DeadlineExceeded}, rankSilent},
	} {
		if got := rankOf(tc.err); got != tc.want {
			t.Errorf("rankOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// A member at its connection limit refuses the connection with Busy: the
// client goes to another member at once instead of hammering that one.
func TestBusyAtConnectionLimitMovesOn(t *testing.T) {
	fc := newCluster(t, 3)
	fc.setLeader(1)
	fc.members[0].setRefuse(&transport.Error{Code: transport.CodeBusy, Message: "node n0 has 2 client connections open, its limit"})
	opts := fastOptions()
	opts.RetryTimeout = 2 * time.Second // without moving on, the append fails after this
	c := dialT(t, fc.addrs(), opts)     // connects to member 0, which refuses right after
	ctx := testCtx(t)
	for i := range 3 {
		if _, err := c.Append(ctx, fmt.Appendf(nil, "r%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	// Dial's connection, and perhaps one redial that raced the refusal.
	if n := fc.accepted[0]; n > 2 {
		t.Errorf("member 0, at its connection limit, was dialled %d times, want at most 2", n)
	}
	if n := fc.reqs[reqKey{1, transport.OpAppend}]; n != 3 {
		t.Errorf("the leader got %d appends, want 3", n)
	}

	// With every member at its limit, the error says so.
	for _, m := range fc.members {
		m.setRefuse(&transport.Error{Code: transport.CodeBusy, Message: m.id + " has 2 client connections open, its limit"})
		m.dropConns()
	}
	fc.mu.Unlock()
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := c.Append(actx, []byte("x"))
	t.Log(err)
	fc.mu.Lock()
	var re *RetryError
	if !errors.As(err, &re) || transport.ErrorCode(err) != transport.CodeBusy || !strings.Contains(err.Error(), "connections open, its limit") {
		t.Fatalf("append with every member at its limit: %v, want a RetryError naming the connection limit", err)
	}
	if len(re.Tried) != 3 {
		t.Errorf("tried %q, want every member", re.Tried)
	}
}

// A NoSpace refusal is retried until the retries run out, and then reported
// rather than the NotLeader replies that came after it.
func TestNoSpaceOutranksLaterNotLeader(t *testing.T) {
	fc := newCluster(t, 3)
	const why = "appends refused: n1, n2 are below the free-space reserve"
	var once sync.Once
	fc.setScript(func(_ context.Context, h *fakeHandler, op transport.Op, req any) (any, error, bool) {
		refuse := false
		once.Do(func() {
			fc.setLeader(-1) // from now on every member answers NotLeader
			refuse = true
		})
		if !refuse {
			return nil, nil, false
		}
		return nil, &transport.Error{Code: transport.CodeNoSpace, Message: why}, true
	})
	opts := fastOptions()
	opts.RetryTimeout = 500 * time.Millisecond
	c := dialT(t, fc.addrs(), opts)
	_, err := c.Append(testCtx(t), []byte("x"))
	t.Log(err)
	var re *RetryError
	if !errors.As(err, &re) || transport.ErrorCode(err) != transport.CodeNoSpace {
		t.Fatalf("append: %v, want a RetryError with NoSpace", err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "client: append: gave up after ") || !strings.Contains(msg, fc.members[0].addr+": transport: NoSpace: "+why) {
		t.Errorf("message %q does not report the NoSpace refusal", msg)
	}
	if transport.ErrorCode(re.Last) != transport.CodeNotLeader || !strings.Contains(msg, "; last error: ") {
		t.Errorf("last error %v, want the NotLeader that came last, in %q", re.Last, msg)
	}
	if errors.Is(err, &transport.Error{Code: transport.CodeNotLeader}) {
		t.Errorf("%v unwraps to NotLeader", err)
	}
	// Every attempt reached a member, but for the last, which RetryTimeout
	// may end before it is sent.
	if n := fc.count(0, transport.OpAppend) + fc.count(1, transport.OpAppend) + fc.count(2, transport.OpAppend); n < 3 || n > re.Attempts || n < re.Attempts-1 {
		t.Errorf("%d attempts, %d appends served; want several, and all but perhaps the last served", re.Attempts, n)
	}
}

// tlsDial returns an Options.Dial that speaks TLS trusting ca, presenting
// certs, and calls after with the outcome of every dial.
func tlsDial(ca *testcert.CA, certs []tls.Certificate, after func(addr string, err error)) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		d := &tls.Dialer{Config: &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", Certificates: certs}}
		nc, err := d.DialContext(ctx, "tcp", addr)
		if after != nil {
			after(addr, err)
		}
		return nc, err
	}
}

// TLS failures are reported as such, not as the NotLeader replies and
// timeouts that follow them.
func TestTLSFailureReported(t *testing.T) {
	dir := t.TempDir()
	good, other := testcert.NewCA(t, dir, "cluster"), testcert.NewCA(t, dir, "other")
	t.Run("leader's certificate from another CA", func(t *testing.T) {
		fc := newTLSCluster(t, []*tls.Config{
			{Certificates: []tls.Certificate{other.KeyPair(t, "n0")}},
			{Certificates: []tls.Certificate{good.KeyPair(t, "n1")}},
			{Certificates: []tls.Certificate{good.KeyPair(t, "n2")}},
		})
		opts := fastOptions()
		opts.RequestTimeout = 200 * time.Millisecond
		opts.RetryTimeout = 2 * time.Second
		// After its handshake fails once, the leader stops answering at
		// all: every later attempt there times out.
		opts.Dial = tlsDial(good, nil, func(addr string, err error) {
			if addr == fc.members[0].addr && err != nil {
				fc.members[0].setHang()
			}
		})
		c := dialT(t, fc.addrs()[1:2], opts)
		_, err := c.Append(testCtx(t), []byte("x"))
		t.Log(err)
		var re *RetryError
		var verify *tls.CertificateVerificationError
		if !errors.As(err, &re) || !errors.As(err, &verify) || !strings.Contains(err.Error(), fc.members[0].addr) {
			t.Fatalf("append: %v, want a RetryError naming the certificate of %s", err, fc.members[0].addr)
		}
		if re.Last == nil || tlsFailure(re.Last) {
			t.Errorf("last error %v, want the NotLeader or timeout after the TLS failure", re.Last)
		}
		if n := fc.count(1, transport.OpAppend); n < 2 {
			t.Errorf("member 1 got %d appends, want the client to keep trying", n)
		}
	})
	t.Run("client certificate refused", func(t *testing.T) {
		mutual := func(name string) *tls.Config {
			return &tls.Config{Certificates: []tls.Certificate{good.KeyPair(t, name)}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: good.Pool}
		}
		fc := newTLSCluster(t, []*tls.Config{mutual("n0"), mutual("n1")})
		opts := fastOptions()
		// Once every member has refused the handshake, no retry can
		// help: the client gives up then, not after RetryTimeout.
		opts.RetryTimeout = 30 * time.Second
		opts.Dial = tlsDial(good, []tls.Certificate{other.KeyPair(t, "client")}, nil)
		// TLS 1.3: the client's side of the handshake completes before the
		// member checks its certificate, so Dial succeeds.
		c := dialT(t, fc.addrs(), opts)
		// Trim is not repeatable, but a refused handshake ran nothing: it
		// is retried, and not reported as of unknown outcome.
		_, err := c.Trim(testCtx(t), 5)
		t.Log(err)
		var re *RetryError
		if !errors.As(err, &re) || !tlsFailure(re.Err) || strings.Contains(err.Error(), "outcome unknown") || len(re.Tried) != 2 {
			t.Fatalf("trim: %v, want a RetryError over both members naming the TLS refusal", err)
		}
		if re.Elapsed >= opts.RetryTimeout/2 {
			t.Errorf("gave up after %v: every member had refused the handshake long before the retries' %v ran out", re.Elapsed, opts.RetryTimeout)
		}
		if n := fc.count(0, transport.OpTrim) + fc.count(1, transport.OpTrim); n != 0 {
			t.Errorf("%d trims served over refused connections", n)
		}
	})
}

// When the leader's process dies, the client redials it once at once
// (the connection was lost), and, refused, goes at once to a member it has
// not tried, which names the new leader or leads: a failover costs the
// client no backoff. The backoff here is a minute, so an append that
// waited for one would outlast the test's context.
func TestFailoverWithoutBackoff(t *testing.T) {
	fc := newCluster(t, 3)
	fc.setLeader(0)
	opts := &Options{MinBackoff: time.Minute, MaxBackoff: time.Minute, RetryTimeout: 5 * time.Minute}
	c := dialT(t, fc.addrs(), opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Append(ctx, []byte("before")); err != nil {
		t.Fatal(err)
	}
	fc.members[0].kill()
	fc.setLeader(2) // member 1, asked first, names member 2
	start := time.Now()
	idx, err := c.Append(ctx, []byte("after"))
	if err != nil {
		t.Fatalf("append after the leader died: %v (after %v)", err, time.Since(start).Round(time.Millisecond))
	}
	if !slices.Equal(idx, []uint64{2}) {
		t.Fatalf("indexes %v, want [2]", idx)
	}
	if n := fc.count(2, transport.OpAppend); n != 1 {
		t.Errorf("the new leader got %d appends, want 1", n)
	}
}
