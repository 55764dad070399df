package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// Going past a limit gives the client a clear error and leaves the node
// serving: too many connections, a record over the size limit, a read
// asking for more than the node allows.
func TestLimits(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) {
		cfg.MaxConns = 2
		cfg.Limits = transport.Limits{MaxRecordSize: 1024, MaxReadRecords: 100}
	})
	leader := c.waitLeader()
	a, b := dial(t, leader), dial(t, leader)
	for _, conn := range []*transport.Conn{a, b} {
		if _, err := call[transport.StatusResponse](t, conn, transport.OpStatus, &transport.StatusRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	third := dial(t, leader)
	_, err := call[transport.StatusResponse](t, third, transport.OpStatus, &transport.StatusRequest{})
	if transport.ErrorCode(err) != transport.CodeBusy || !strings.Contains(err.Error(), "client connections open") {
		t.Fatalf("third connection: %v, want Busy naming the connection limit", err)
	}
	_, err = call[transport.AppendResponse](t, a, transport.OpAppend, &transport.AppendRequest{Records: [][]byte{make([]byte, 1025)}})
	if transport.ErrorCode(err) != transport.CodeTooLarge {
		t.Fatalf("oversized record: %v, want TooLarge", err)
	}
	_, err = call[transport.ReadResponse](t, a, transport.OpRead, &transport.ReadRequest{MaxRecords: 101})
	if transport.ErrorCode(err) != transport.CodeBadRequest {
		t.Fatalf("read of too many records: %v, want BadRequest", err)
	}
	b.Close()
	<-b.Done()
	// A slot frees once the server has seen b go: a fresh connection is
	// then served.
	deadline := time.Now().Add(10 * time.Second)
	for {
		d := dial(t, leader)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := d.Call(ctx, transport.OpStatus, &transport.StatusRequest{}, &transport.StatusResponse{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection slot freed: %v", err)
		}
	}
	appendN(t, a, "still", 2)
}

// Start fails cleanly: joining through an address where nothing listens
// gives up when ctx ends, and a second node on a data dir in use is
// refused; nothing is left running.
func TestStartFailures(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, "j")
	cfg.Join = []string{"127.0.0.1:1"}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if n, err := Start(ctx, cfg); err == nil || n != nil || !strings.Contains(err.Error(), "could not join") {
		t.Fatalf("join through a dead address: %v, %v", n, err)
	}
	c := newTestCluster(t, 1, nil)
	again := testConfig(t, c.dir, "n1")
	if n, err := Start(context.Background(), again); err == nil || n != nil {
		t.Fatalf("second node on a data dir in use: %v, %v", n, err)
	}
}

// A full disk: the node refuses appends with a clear error, keeps serving
// linearizable reads, loses nothing acknowledged, and accepts appends
// again once space is freed.
func TestDiskFull(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.FaultInjection = true
		cfg.AdminAddr = "127.0.0.1:0"
	})
	leader := c.waitLeader()
	conn := dial(t, leader)
	before := appendN(t, conn, "before", 5)
	for _, n := range c.nodes {
		post(t, n, "/fault/nospace?on=1")
	}
	_, err := call[transport.AppendResponse](t, conn, transport.OpAppend, &transport.AppendRequest{Records: [][]byte{[]byte("x")}})
	if transport.ErrorCode(err) != transport.CodeNoSpace || !strings.Contains(err.Error(), "appends are refused until space is freed") {
		t.Fatalf("append on a full disk: %v", err)
	}
	got := readAll(t, leader, false)
	if len(got) != 5 || got[4].Index != before[4] {
		t.Fatalf("read on a full disk: %+v", got)
	}
	for _, n := range c.nodes {
		post(t, n, "/fault/nospace?on=0")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := call[transport.AppendResponse](t, conn, transport.OpAppend, &transport.AppendRequest{Records: [][]byte{[]byte("after")}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("appends not accepted after space was freed: %v", err)
		}
	}
	if got := readAll(t, leader, false); len(got) != 6 || string(got[5].Data) != "after" {
		t.Fatalf("after space was freed: %+v", got)
	}
}
