package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlog/raftlog/node"
)

// testEnv returns an env with buffers for stdout and stderr and vars as
// the environment.
func testEnv(vars map[string]string) (e *env, stdout, stderr *bytes.Buffer) {
	stdout, stderr = new(bytes.Buffer), new(bytes.Buffer)
	e = &env{
		stdin:  strings.NewReader(""),
		stdout: stdout,
		stderr: stderr,
		lookup: func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
	}
	return e, stdout, stderr
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "0", want: 0},
		{in: "4096", want: 4096},
		{in: "512B", want: 512},
		{in: "64KiB", want: 64 << 10},
		{in: "64k", want: 64 << 10},
		{in: "500MiB", want: 500 << 20},
		{in: "500mib", want: 500 << 20},
		{in: "10GiB", want: 10 << 30},
		{in: "10G", want: 10 << 30},
		{in: "1GB", want: 1e9},
		{in: "1.5GiB", want: 3 << 29},
		{in: " 2 TiB ", want: 2 << 40},
		{in: "8191PiB", bad: true}, // unknown unit
		{in: "9000000TiB", bad: true},
		{in: "99999999999999999999", bad: true},
		{in: "-1", bad: true},
		{in: "GiB", bad: true},
		{in: "", bad: true},
		{in: "1.2.3MiB", bad: true},
		{in: "10XB", bad: true},
	} {
		got, err := parseSize(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseSize(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v, want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1KiB", 1536: "1.5KiB", 10 << 30: "10GiB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "0", want: 0},
		{in: "90s", want: 90 * time.Second},
		{in: "36h", want: 36 * time.Hour},
		{in: "7d", want: 7 * 24 * time.Hour},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "-1h", bad: true},
		{in: "1.5d", bad: true},
		{in: "d", bad: true},
		{in: "", bad: true},
		{in: "7days", bad: true},
	} {
		got, err := parseDuration(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseDuration(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestServeFlags checks that serve's flags fill the node config, that
// RAFTLOG_* variables stand in for flags not given and that flags win.
func TestServeFlags(t *testing.T) {
	e, _, _ := testEnv(map[string]string{
		"RAFTLOG_ID":              "from-env",
		"RAFTLOG_DATA_DIR":        "/data/env",
		"RAFTLOG_RETENTION_BYTES": "10GiB",
		"RAFTLOG_RETENTION_AGE":   "7d",
		"RAFTLOG_FLUSH":           "async",
		"RAFTLOG_LOG_LEVEL":       "debug",
		"RAFTLOG_BOOTSTRAP":       "n1=127.0.0.1:7001,n2=127.0.0.1:7011",
	})
	o, err := parseServe(e, []string{"--id", "n1", "--client-addr", "127.0.0.1:0", "--retention-bytes=500MiB"})
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg
	if c.ID != "n1" || c.DataDir != "/data/env" || c.ClientAddr != "127.0.0.1:0" || c.RaftAddr != "127.0.0.1:7001" {
		t.Errorf("config %+v", c)
	}
	if c.RetentionBytes != 500<<20 || c.RetentionAge != 7*24*time.Hour || c.Flush != node.FlushAsync || o.level != hclog.Debug {
		t.Errorf("retention %d %v, flush %q, level %v", c.RetentionBytes, c.RetentionAge, c.Flush, o.level)
	}
	if len(c.Bootstrap) != 2 || c.Bootstrap[1] != (node.Peer{ID: "n2", RaftAddr: "127.0.0.1:7011"}) {
		t.Errorf("bootstrap %+v", c.Bootstrap)
	}

	e, _, _ = testEnv(map[string]string{"RAFTLOG_TLS_ADMINS": "ops, ci"})
	o, err = parseServe(e, []string{"--id=n3", "--data-dir", "d", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem"})
	if err != nil {
		t.Fatal(err)
	}
	if tc := o.cfg.TLS; tc == nil || strings.Join(tc.Admins, "|") != "ops|ci" || tc.CertFile != "c.pem" || tc.ClientAuth {
		t.Errorf("TLS config %+v", tc)
	}

	e, _, _ = testEnv(nil)
	o, err = parseServe(e, []string{"--id=n2", "--data-dir", "d", "--join", "127.0.0.1:7000,127.0.0.1:7010", "--join", "127.0.0.1:7020"})
	if err != nil {
		t.Fatal(err)
	}
	if c := o.cfg; len(c.Join) != 3 || c.Flush != node.FlushSync || c.RetentionBytes != 0 || o.level != hclog.Info || o.joinTimeout != time.Minute ||
		c.RaftTransport != node.RaftTransportNative || c.Pprof {
		t.Errorf("defaults: %+v, level %v", c, o.level)
	}
	if o.cfg.RaftMaxInFlight != 1 || o.cfg.BatchesInFlight != 1 {
		t.Errorf("raft max in flight %d, batches in flight %d by default, want 1 and 1", o.cfg.RaftMaxInFlight, o.cfg.BatchesInFlight)
	}
	o, err = parseServe(e, []string{"--id=n2", "--data-dir", "d", "--batches-in-flight", "3"})
	if err != nil || o.cfg.BatchesInFlight != 3 {
		t.Errorf("--batches-in-flight 3: %v, %d", err, o.cfg.BatchesInFlight)
	}
	o, err = parseServe(e, []string{"--id=n2", "--data-dir", "d", "--raft-transport", "hashicorp"})
	if err != nil || o.cfg.RaftTransport != node.RaftTransportHashicorp {
		t.Errorf("--raft-transport hashicorp: %v, %q", err, o.cfg.RaftTransport)
	}
	o, err = parseServe(e, []string{"--id=n2", "--data-dir", "d", "--raft-max-in-flight", "4"})
	if err != nil || o.cfg.RaftMaxInFlight != 4 {
		t.Errorf("--raft-max-in-flight 4: %v, %d", err, o.cfg.RaftMaxInFlight)
	}

	e, _, _ = testEnv(map[string]string{"RAFTLOG_PPROF": "true"})
	o, err = parseServe(e, []string{"--id=n1", "--data-dir", "d", "--admin-addr", "127.0.0.1:7002"})
	if err != nil || !o.cfg.Pprof || o.cfg.AdminAddr != "127.0.0.1:7002" {
		t.Errorf("RAFTLOG_PPROF=true: %v, pprof %v", err, o != nil && o.cfg.Pprof)
	}
}

// TestUsageErrors checks that mistakes in command lines and RAFTLOG_*
// variables exit with status 2 and a one-line message saying what is wrong.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{}, nil, "Usage: node <command>"},
		{[]string{"frobnicate"}, nil, `unknown command "frobnicate"`},
		{[]string{"serve", "--flush", "fast"}, nil, `node serve: invalid value "fast" for flag --flush: flush mode "fast": want sync or async`},
		{[]string{"serve", "--nope"}, nil, "unknown flag --nope"},
		{[]string{"serve", "--data-dir", "d"}, nil, "no node id: give --id or set RAFTLOG_ID"},
		{[]string{"serve", "--id", "n1"}, nil, "no data dir"},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--retention-bytes", "10XB"}, nil, `invalid size "10XB"`},
		{[]string{"serve", "--id", "n1", "--data-dir", "d"}, map[string]string{"RAFTLOG_RETENTION_AGE": "a week"}, `RAFTLOG_RETENTION_AGE="a week": invalid duration`},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--bootstrap", "n2=127.0.0.1:7001"}, nil, "--bootstrap does not list this node (n1)"},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--bootstrap", "n1"}, nil, `peer "n1": want id=host:port`},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--bootstrap", "n1=127.0.0.1:1", "--join", "127.0.0.1:2"}, nil, "not both"},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--client-addr", "0.0.0.0:7000"}, nil, "give --client-advertise"},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--initial-cluster-state", "old"}, nil, `--initial-cluster-state "old": want new or existing`},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--raft-transport", "grpc"}, nil, `--raft-transport "grpc": want native or hashicorp`},
		{[]string{"serve", "--id", "n1", "--data-dir", "d"}, map[string]string{"RAFTLOG_RAFT_TRANSPORT": "tcp"}, `--raft-transport "tcp": want native or hashicorp`},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--raft-max-in-flight", "0"}, nil, `--raft-max-in-flight 0: want at least 1`},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--batches-in-flight", "0"}, nil, `--batches-in-flight 0: want at least 1`},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--raft-transport", "hashicorp", "--raft-max-in-flight", "4"}, nil, `--raft-max-in-flight 4 needs --raft-transport native`},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "extra"}, nil, `unexpected argument "extra"`},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--log-level", "loud"}, nil, `log level "loud"`},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--tls-admins", "ops"}, nil, "TLS needs --tls-cert, --tls-key and --tls-ca (and --tls-client-auth and --tls-admins need TLS"},
		{[]string{"serve", "--id", "n1", "--data-dir", "d"}, map[string]string{"RAFTLOG_TLS_CLIENT_AUTH": "true"}, "TLS needs --tls-cert"},
		{[]string{"serve", "--id", "n1", "--data-dir", "d", "--pprof"}, nil, "--pprof needs --admin-addr"},
		{[]string{"append", "x"}, nil, "no cluster address: give --addrs host:port,... or set RAFTLOG_ADDRS"},
		{[]string{"append", "--addrs", "127.0.0.1:1"}, nil, "no records"},
		{[]string{"append", "--addrs", "127.0.0.1:1", "--stdin", "x"}, nil, "not both"},
		// Flags come anywhere before "--"; one that names no flag is refused.
		{[]string{"append", "--addrs", "127.0.0.1:1", "x", "--bogus"}, nil, "unknown flag --bogus (an argument that starts with - goes after --: node append [flags] -- --bogus)"},
		{[]string{"append", "--addrs", "127.0.0.1:1", "-5"}, nil, "unknown flag -5 "},
		{[]string{"append", "--addrs", "127.0.0.1:1", "x", "--timeout"}, nil, "flag needs an argument: --timeout"},
		{[]string{"append", "x", "--addrs", "127.0.0.1:1", "--stdin"}, nil, "not both"},
		{[]string{"read", "--addrs", "127.0.0.1:1", "extra"}, nil, `unexpected argument "extra"`},
		{[]string{"status", "--addrs", "127.0.0.1:1", "--", "--json"}, nil, `unexpected argument "--json"`},
		{[]string{"trim", "--addrs", "127.0.0.1:1", "--below", "5", "---below"}, nil, "bad flag syntax: ---below"},
		{[]string{"read", "--addrs", "localhost"}, nil, `address "localhost" is not host:port`},
		{[]string{"read"}, map[string]string{"RAFTLOG_ADDRS": "127.0.0.1:x"}, `RAFTLOG_ADDRS="127.0.0.1:x": address "127.0.0.1:x": bad port`},
		{[]string{"read", "--addrs", "127.0.0.1:1", "--max", "-1"}, nil, "invalid value"},
		{[]string{"status", "--addrs", "127.0.0.1:1", "--timeout", "0s"}, nil, "--timeout 0s"},
		{[]string{"join", "--addrs", "127.0.0.1:1", "--id", "n4", "--raft-addr", "127.0.0.1:2"}, nil, "no client address"},
		// remove --id and trim --below never come from the environment.
		{[]string{"remove", "--addrs", "127.0.0.1:1"}, map[string]string{"RAFTLOG_ID": "n1"}, "no node id: give --id"},
		{[]string{"trim", "--addrs", "127.0.0.1:1"}, map[string]string{"RAFTLOG_BELOW": "100"}, "no index"},
		{[]string{"restore", "--log", "orders", "--in", "f", "--addrs", "127.0.0.1:1", "--cluster-token", "x"}, nil, "--cluster-token are for a new cluster's data dirs"},
		{[]string{"demo", "--flush", "never"}, nil, "want sync or async"},
		{[]string{"bench"}, nil, "no cluster address"},
		{[]string{"bench", "--local", "--addrs", "127.0.0.1:1"}, nil, "not both"},
		{[]string{"bench", "--addrs", "127.0.0.1:1", "--flush", "async"}, nil, "--local only"},
		{[]string{"bench", "--local", "--clients", "0"}, nil, "--clients 0"},
		{[]string{"bench", "--local", "--duration", "1h"}, nil, "--duration 1h0m0s"},
		{[]string{"bench", "--local", "--size", "1MiB", "--batch", "100"}, nil, "does not fit"},
		{[]string{"bench", "--local", "--clients", "4", "--in-flight", "64"}, nil, "--clients or --in-flight, not both"},
		{[]string{"bench", "--local", "--in-flight", "0"}, nil, "--in-flight 0 is outside [1, 65536]"},
		{[]string{"bench", "--local", "--requests", "200"}, nil, "--requests 200 is outside [1, 128]"},
		{[]string{"append", "--addrs", "127.0.0.1:1", "--stdin", "--in-flight", "0"}, nil, "--in-flight 0 is outside [1, 65536]"},
	} {
		e, stdout, stderr := testEnv(tc.env)
		code := run(context.Background(), e, tc.args)
		if code != 2 {
			t.Errorf("%q: exit status %d, want 2; stderr %q", tc.args, code, stderr)
			continue
		}
		msg := stderr.String()
		if !strings.Contains(msg, tc.want) {
			t.Errorf("%q: stderr %q, want it to say %q", tc.args, msg, tc.want)
		}
		if len(tc.args) > 0 && strings.Count(msg, "\n") != 1 {
			t.Errorf("%q: stderr %q is not one line", tc.args, msg)
		}
		if stdout.Len() > 0 {
			t.Errorf("%q: stdout %q", tc.args, stdout)
		}
	}
}

// TestHelp checks that every command describes its flags, on stdout, with
// exit status 0.
func TestHelp(t *testing.T) {
	for _, c := range commands {
		for _, args := range [][]string{{"help", c.name}, {c.name, "-h"}, {c.name, "--help"}} {
			e, stdout, stderr := testEnv(nil)
			if code := run(context.Background(), e, args); code != 0 || stderr.Len() > 0 {
				t.Errorf("%q: exit status %d, stderr %q", args, code, stderr)
			}
			if !strings.HasPrefix(stdout.String(), "Usage: node "+c.name) {
				t.Errorf("%q: stdout %q", args, stdout)
			}
		}
	}
	e, stdout, _ := testEnv(nil)
	if code := run(context.Background(), e, []string{"help"}); code != 0 {
		t.Errorf("help: exit status %d", code)
	}
	for _, c := range commands {
		if !strings.Contains(stdout.String(), "  "+c.name+" ") {
			t.Errorf("help does not list %s:\n%s", c.name, stdout)
		}
	}
	e, stdout, _ = testEnv(nil)
	run(context.Background(), e, []string{"serve", "-h"})
	for _, want := range []string{"--data-dir directory", "[$RAFTLOG_DATA_DIR]", "--retention-bytes size", "(default sync)"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("serve -h does not say %q:\n%s", want, stdout)
		}
	}
	e, stdout, _ = testEnv(nil)
	if code := run(context.Background(), e, []string{"append", "x", "-h"}); code != 0 || !strings.Contains(stdout.String(), "goes after --") {
		t.Errorf("append x -h: exit status %d:\n%s", code, stdout)
	}
	e, stdout, _ = testEnv(nil)
	run(context.Background(), e, []string{"remove", "-h"})
	if s := stdout.String(); !strings.Contains(s, "[$RAFTLOG_ADDRS]") || strings.Contains(s, "RAFTLOG_ID") {
		t.Errorf("remove -h: only --addrs and --timeout come from the environment:\n%s", s)
	}
}

func TestServeLimitFlags(t *testing.T) {
	e, _, _ := testEnv(map[string]string{"RAFTLOG_IDLE_TIMEOUT": "90s"})
	o, err := parseServe(e, []string{"--id", "n1", "--data-dir", "d", "--max-frame-size", "1MiB", "--max-record-size", "64KiB",
		"--max-in-flight", "7", "--frame-timeout", "2s", "--write-timeout", "3s", "--max-conns", "9", "--min-free", "1GiB"})
	if err != nil {
		t.Fatal(err)
	}
	l := o.cfg.Limits
	if l.MaxFrameSize != 1<<20 || l.MaxRecordSize != 64<<10 || l.MaxInFlight != 7 || l.IdleTimeout != 90*time.Second ||
		l.FrameTimeout != 2*time.Second || l.WriteTimeout != 3*time.Second || o.cfg.MaxConns != 9 || o.cfg.MinFreeBytes != 1<<30 {
		t.Fatalf("limits %+v, max conns %d, min free %d", l, o.cfg.MaxConns, o.cfg.MinFreeBytes)
	}
	if _, err := parseServe(e, []string{"--id", "n1", "--data-dir", "d", "--max-in-flight", "-1"}); err == nil {
		t.Fatal("negative --max-in-flight accepted")
	}
}

func TestServeRaftTimeoutFlags(t *testing.T) {
	base := []string{"--id", "n1", "--data-dir", "d"}
	o, err := parseServe(&env{lookup: func(string) (string, bool) { return "", false }}, base)
	if err != nil {
		t.Fatal(err)
	}
	if c := o.cfg; c.HeartbeatTimeout != node.DefaultHeartbeatTimeout || c.ElectionTimeout != node.DefaultElectionTimeout ||
		c.LeaderLeaseTimeout != node.DefaultLeaderLeaseTimeout {
		t.Fatalf("defaults: heartbeat %v, election %v, lease %v", c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout)
	}
	e, _, _ := testEnv(map[string]string{"RAFTLOG_LEADER_LEASE_TIMEOUT": "150ms"})
	o, err = parseServe(e, append(base, "--heartbeat-timeout", "300ms", "--election-timeout", "600ms"))
	if err != nil {
		t.Fatal(err)
	}
	if c := o.cfg; c.HeartbeatTimeout != 300*time.Millisecond || c.ElectionTimeout != 600*time.Millisecond || c.LeaderLeaseTimeout != 150*time.Millisecond {
		t.Fatalf("heartbeat %v, election %v, lease %v", c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout)
	}
	// A lower heartbeat timeout alone brings the defaults that must follow
	// it along; a higher one raises the election timeout.
	o, err = parseServe(e, append(base, "--heartbeat-timeout", "100ms"))
	if err == nil {
		t.Fatalf("lease 150ms over heartbeat 100ms accepted: %+v", o.cfg)
	}
	o, err = parseServe(&env{}, append(base, "--heartbeat-timeout", "200ms"))
	if err != nil || o.cfg.LeaderLeaseTimeout != 200*time.Millisecond || o.cfg.ElectionTimeout != node.DefaultElectionTimeout {
		t.Fatalf("heartbeat 200ms alone: %v, lease %v, election %v", err, o.cfg.LeaderLeaseTimeout, o.cfg.ElectionTimeout)
	}
	o, err = parseServe(&env{}, append(base, "--heartbeat-timeout", "3s"))
	if err != nil || o.cfg.ElectionTimeout != 3*time.Second || o.cfg.LeaderLeaseTimeout != node.DefaultLeaderLeaseTimeout {
		t.Fatalf("heartbeat 3s alone: %v, election %v, lease %v", err, o.cfg.ElectionTimeout, o.cfg.LeaderLeaseTimeout)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--leader-lease-timeout", "2s"}, "leader lease timeout 2s is longer than the heartbeat timeout 700ms"},
		{[]string{"--heartbeat-timeout", "2s", "--election-timeout", "1s"}, "election timeout 1s is shorter than the heartbeat timeout 2s"},
		{[]string{"--heartbeat-timeout", "5ms"}, "heartbeat timeout 5ms is below 10ms"},
		{[]string{"--election-timeout", "-1s"}, "negative timeout"},
	} {
		_, err := parseServe(&env{}, append(base, tc.args...))
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}
