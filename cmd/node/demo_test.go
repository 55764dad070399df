package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/node"
)

func TestDemoOnce(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	err := runDemo(ctx, &out, demoOptions{once: true, flush: node.FlushSync, dir: dir})
	t.Logf("demo took %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "all 6 checks passed") || strings.Contains(out.String(), "FAIL") {
		t.Error("not every check passed")
	}
	if fi, err := os.Stat(filepath.Join(dir, "nodes.log")); err != nil || fi.Size() == 0 {
		t.Errorf("node logs: %v", err)
	}
	// A kept directory cannot host a second demo: its ports would differ.
	if err := runDemo(ctx, &out, demoOptions{once: true, flush: node.FlushSync, dir: dir}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("second demo in %s: %v", dir, err)
	}
}

func TestBenchLocal(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		who  string
	}{
		{"clients", []string{"--clients", "4"}, "4 clients (1 requests)"},
		{"in flight", []string{"--in-flight", "64", "--requests", "2", "--batch", "2"}, "64 appends in flight (2 requests)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			e, _, _ := testEnv(nil)
			o, err := parseBench(e, append([]string{"--local", "--dir", t.TempDir(), "--size", "256", "--duration", "1500ms", "--flush", "async"}, tc.args...))
			if err != nil {
				t.Fatal(err)
			}
			var progress bytes.Buffer
			res, err := runBench(ctx, o, &progress)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := printBench(&out, res, false); err != nil {
				t.Fatal(err)
			}
			t.Logf("progress: %q\n%s", progress.String(), out.String())
			if !strings.HasPrefix(out.String(), tc.who+", 256B records, ") {
				t.Errorf("output does not begin with %q", tc.who)
			}
			if res.Records == 0 || res.Records != res.Appends*uint64(o.batch) || res.Errors != 0 {
				t.Errorf("records %d, appends %d, errors %d (%s)", res.Records, res.Appends, res.Errors, res.FirstError)
			}
			if res.Seconds < 1 || res.RecordsPerSec <= 0 || res.MiBPerSec <= 0 {
				t.Errorf("result %+v", res)
			}
			if !(0 < res.P50Micros && res.P50Micros <= res.P99Micros && res.P99Micros <= res.P999Micros && res.P999Micros <= res.MaxMicros) {
				t.Errorf("latencies p50 %v p99 %v p99.9 %v max %v", res.P50Micros, res.P99Micros, res.P999Micros, res.MaxMicros)
			}
			if !strings.Contains(progress.String(), "records acked") {
				t.Errorf("no progress line: %q", progress.String())
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 1000; i++ {
		lat = append(lat, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 500, 0.99: 990, 0.999: 999, 1: 1000} {
		if got := percentile(lat, q); got != want {
			t.Errorf("percentile(1..1000, %v) = %v, want %v", q, got, want)
		}
	}
	if got := percentile(lat[:1], 0.999); got != 1 {
		t.Errorf("percentile of one = %v", got)
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of none = %v", got)
	}
}

// status given one address shows every member of the cluster.
func TestStatusCoversCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var logs bytes.Buffer
	lc, err := startLocalCluster(ctx, t.TempDir(), node.FlushSync, &logs)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.close()
	addrs := lc.clientAddrs()
	// Members learn each other's client addresses as they register with
	// the leader; poll, bounded, until all three are listed.
	var out bytes.Buffer
	for try := 0; ; try++ {
		out.Reset()
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &out, lookup: func(string) (string, bool) { return "", false }}
		code := run(ctx, e, []string{"status", "--addrs", addrs[0]})
		if code == 0 && strings.Count(out.String(), "127.0.0.1:") == 3 {
			break
		}
		if try == 50 {
			t.Fatalf("status of the whole cluster from one address (exit %d):\n%s", code, out.String())
		}
		timer := time.NewTimer(100 * time.Millisecond)
		<-timer.C
	}
	for _, a := range addrs {
		if !strings.Contains(out.String(), a) {
			t.Errorf("status lacks %s:\n%s", a, out.String())
		}
	}
}
