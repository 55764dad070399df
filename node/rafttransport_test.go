package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/transport"
)

// TestRaftTransportKinds: a cluster runs on either raft transport, the
// native one with and without pipelining, through a leader change and
// the old leader's return.
func TestRaftTransportKinds(t *testing.T) {
	for _, tc := range []struct {
		kind     RaftTransportKind
		inFlight int
	}{{RaftTransportNative, 0}, {RaftTransportNative, 4}, {RaftTransportHashicorp, 0}} {
		kind := tc.kind
		t.Run(fmt.Sprintf("%s-%d", kind, tc.inFlight), func(t *testing.T) {
			c := newTestCluster(t, 3, func(cfg *Config) { cfg.RaftTransport, cfg.RaftMaxInFlight = kind, tc.inFlight })
			for id, n := range c.nodes {
				switch n.tr.(type) {
				case *transport.RaftTransport:
					if kind != RaftTransportNative {
						t.Fatalf("%s runs the native transport", id)
					}
				case *raft.NetworkTransport:
					if kind != RaftTransportHashicorp {
						t.Fatalf("%s runs hashicorp/raft's NetworkTransport", id)
					}
				default:
					t.Fatalf("%s runs a %T", id, n.tr)
				}
			}
			leader := c.waitLeader()
			appendN(t, dial(t, leader), "a", 30)
			c.stop(leader.ID())
			next := c.waitLeader()
			idx := appendN(t, dial(t, next), "b", 30)
			back := c.start(leader.ID(), nil)
			waitCaughtUp(t, back, idx[len(idx)-1])
			want := readAll(t, next, false)
			if len(want) != 60 {
				t.Fatalf("%d records, want 60", len(want))
			}
			for id, n := range c.nodes {
				waitCaughtUp(t, n, idx[len(idx)-1])
				sameRecords(t, id, readAll(t, n, true), want)
			}
		})
	}
}

// TestRaftTransportConfig: an unknown transport, or records too large for
// the native transport's frames, are refused at Start with the cause.
func TestRaftTransportConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
		want  string
	}{
		{"unknown", func(c *Config) { c.RaftTransport = "grpc" }, `raft transport "grpc": want native or hashicorp`},
		{"negative in flight", func(c *Config) { c.RaftMaxInFlight = -1 }, "raft max in flight -1 is negative"},
		{"hashicorp pipelined", func(c *Config) { c.RaftTransport, c.RaftMaxInFlight = RaftTransportHashicorp, 2 }, "needs the native raft transport"},
		{"records too large", func(c *Config) {
			c.Limits = transport.Limits{MaxFrameSize: 3 << 30, MaxRecordSize: 1 << 30, MaxReadBytes: 2 << 30}
		}, "do not fit the native raft transport's frames"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, t.TempDir(), "n1")
			cfg.Bootstrap = []Peer{{ID: "n1", RaftAddr: cfg.RaftAddr}}
			tc.tweak(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n, err := Start(ctx, cfg)
			if err == nil {
				n.Close()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
