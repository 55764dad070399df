package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and parentheses; utime 250 and stime 50
	// ticks are fields 14 and 15.
	line := "1234 (we (ird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 12345 0 0\n"
	got, err := parseStatCPU([]byte(line))
	if err != nil || got != 3.0 {
		t.Fatalf("parseStatCPU: %v, %v; want 3 s", got, err)
	}
	for _, bad := range []string{"1234 no name", "1234 (x) S 1 2 3", "1234 (x) S 1 2 3 4 5 6 7 8 9 10 x 50 0"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("parseStatCPU(%q) accepted", bad)
		}
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	// This process's own figure agrees with getrusage, to a tick or so.
	s, err := cpuSeconds(os.Getpid())
	self := selfCPU()
	if err != nil || math.Abs(s-self) > 0.1 {
		t.Fatalf("cpuSeconds(self) = %v, %v; getrusage says %v", s, err, self)
	}
}

func TestRecordsAndStamps(t *testing.T) {
	recs := newRecords(1024, 1)
	a, b := recs.appenderStamps(), recs.appenderStamps()
	buf1, buf2 := make([]byte, 1024), make([]byte, 1024)
	s1, s2 := a.fill(recs, buf1), b.fill(recs, buf2)
	s3 := a.fill(recs, buf2)
	if s1 == s2 || s1 == s3 || s2 == s3 {
		t.Fatalf("stamps repeat: %#x %#x %#x", s1, s2, s3)
	}
	if err := recs.check(buf1, s1); err != nil {
		t.Fatal(err)
	}
	if err := recs.check(buf2, s3); err != nil {
		t.Fatal(err)
	}
	if err := recs.check(buf1, s3); err == nil || !strings.Contains(err.Error(), "stamp") {
		t.Errorf("wrong stamp: %v", err)
	}
	buf1[500] ^= 1
	if err := recs.check(buf1, s1); err == nil || !strings.Contains(err.Error(), "payload") {
		t.Errorf("changed payload: %v", err)
	}
	if err := recs.check(buf2[:100], s3); err == nil || !strings.Contains(err.Error(), "100 bytes") {
		t.Errorf("short record: %v", err)
	}
}

func TestTallyCountsOnlyTheWindow(t *testing.T) {
	var phase atomic.Int32
	tl := &tally{}
	tl.add(&phase, ack{1, 1}, time.Millisecond)
	phase.Store(phaseMeasuring)
	tl.add(&phase, ack{2, 2}, 2*time.Millisecond)
	tl.add(&phase, ack{3, 3}, 3*time.Millisecond)
	phase.Store(phaseDone)
	tl.add(&phase, ack{4, 4}, 4*time.Millisecond)
	if len(tl.lats) != 2 || len(tl.acks) != 4 {
		t.Fatalf("%d latencies, %d acks; want 2 in the window, 4 in all", len(tl.lats), len(tl.acks))
	}
	m := merge([]*tally{tl, {errs: 1, firstErr: os.ErrClosed}})
	if len(m.lats) != 2 || len(m.acks) != 4 || m.errs != 1 || m.firstErr != os.ErrClosed {
		t.Fatalf("merged: %+v", m)
	}
	if ps := latencyPercentiles(m.lats, 50, 100); ps[0] != 0.002 || ps[1] != 0.003 {
		t.Fatalf("percentiles %v", ps)
	}
}

func TestMatcher(t *testing.T) {
	recs := newRecords(64, 1)
	st := recs.appenderStamps()
	data := map[uint64][]byte{}
	var acks []ack
	for _, pos := range []uint64{5, 2, 3} {
		buf := make([]byte, 64)
		acks = append(acks, ack{pos, st.fill(recs, buf)})
		data[pos] = buf
	}
	other := make([]byte, 64)
	read := func(m *matcher, positions ...uint64) error {
		for _, p := range positions {
			d, ok := data[p]
			if !ok {
				d = other
			}
			if err := m.see(p, d); err != nil {
				return err
			}
		}
		_, err := m.result()
		return err
	}

	m, err := newMatcher(acks, recs)
	if err != nil || m.last() != 5 {
		t.Fatalf("newMatcher: %v, last %d", err, m.last())
	}
	if err := read(m, 1, 2, 3, 4, 5); err != nil {
		t.Fatal(err)
	}
	if rb, _ := m.result(); rb != (readBack{acked: 3, others: 2, scanned: 5}) {
		t.Fatalf("read back %+v", rb)
	}

	m, _ = newMatcher(acks, recs)
	if err := read(m, 1, 2, 4, 5); err == nil || !strings.Contains(err.Error(), "acknowledged record 3") {
		t.Errorf("record 3 lost: %v", err)
	}
	m, _ = newMatcher(acks, recs)
	if err := read(m, 2, 3); err == nil || !strings.Contains(err.Error(), "1 acknowledged records missing from 5") {
		t.Errorf("log ends before 5: %v", err)
	}
	data[3] = other
	m, _ = newMatcher(acks, recs)
	if err := read(m, 2, 3, 5); err == nil || !strings.Contains(err.Error(), "acknowledged record 3: stamp") {
		t.Errorf("record 3 holds another: %v", err)
	}
	if _, err := newMatcher(append(acks, ack{3, 99}), recs); err == nil || !strings.Contains(err.Error(), "position 3") {
		t.Errorf("two acks at 3: %v", err)
	}
}

// The configuration files the NATS servers get mean what the report says:
// JetStream on, a cluster of three routes, and fsync on every write only
// in the "always" setting.
func TestNATSConfig(t *testing.T) {
	dir := t.TempDir()
	all := []*natsServer{{name: "s1", port: 4222, cluster: 6222, expose: 8222}, {name: "s2", port: 4223, cluster: 6223, expose: 8223}, {name: "s3", port: 4224, cluster: 6224, expose: 8224}}
	for _, always := range []bool{true, false} {
		path := filepath.Join(dir, "s2.conf")
		if err := os.WriteFile(path, []byte(natsConfig(all[1], all, filepath.Join(dir, "store dir"), always)), 0o644); err != nil {
			t.Fatal(err)
		}
		o, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("%v\n%s", err, natsConfig(all[1], all, dir, always))
		}
		if o.ServerName != "s2" || o.Host != "127.0.0.1" || o.Port != 4223 || o.HTTPPort != 8223 || !o.JetStream ||
			o.StoreDir != filepath.Join(dir, "store dir") || o.Cluster.Port != 6223 || o.Cluster.Name != "bench" || len(o.Routes) != 3 {
			t.Errorf("options %+v", o)
		}
		if o.SyncAlways != always {
			t.Errorf("sync always %v, want %v", o.SyncAlways, always)
		}
	}
}

func TestParseClusterFlags(t *testing.T) {
	cfg, err := parseClusterFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.workloads) != 5 || len(cfg.systems) != 4 || cfg.duration != 5*time.Second || cfg.rounds != 1 || cfg.pprof != "" || cfg.json {
		t.Errorf("defaults %+v", cfg)
	}
	cfg, err = parseClusterFlags([]string{"-quick", "-only", "5,1x1", "-systems", "nats-default,raftlog-sync", "-pprof", "1x1", "-pprof-dir", t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(keysOf(cfg.workloads), ",") != "1x1,1x1024" || len(cfg.systems) != 2 || cfg.systems[0].key != sysRaftlogSync ||
		cfg.duration != time.Second || cfg.warmup != 500*time.Millisecond {
		t.Errorf("-quick -only 5,1x1: %+v", cfg)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-only", "1x2"}, `unknown workload "1x2"`},
		{[]string{"-systems", "kafka"}, `unknown system "kafka"`},
		{[]string{"-pprof", "16x1", "-only", "1x1"}, `-pprof "16x1": not a workload of this run`},
		{[]string{"-pprof", "1x1", "-systems", "nats-always"}, "-pprof profiles raftlog"},
		{[]string{"-pprof", "1x1", "-duration", "500ms"}, "at least 1s"},
		{[]string{"-pprof", "1x1", "-pprof-dir", filepath.Join(t.TempDir(), "none")}, "is not a directory"},
		{[]string{"-duration", "0s"}, "-duration 0s"},
		{[]string{"-rounds", "0"}, "-rounds"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		if _, err := parseClusterFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

func TestParseStatusKiB(t *testing.T) {
	status := "Name:\tnode\nVmPeak:\t  812345 kB\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n"
	if got, err := parseStatusKiB([]byte(status), "VmHWM"); err != nil || got != 204800 {
		t.Errorf("VmHWM: %d, %v; want 204800", got, err)
	}
	for _, bad := range []string{"Name:\tnode\n", "VmHWM:\t204800\n", "VmHWM:\tlots kB\n"} {
		if got, err := parseStatusKiB([]byte(bad), "VmHWM"); err == nil {
			t.Errorf("%q: %d, want an error", bad, got)
		}
	}
	rss, err := peakRSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Errorf("this process's peak RSS: %d, %v", rss, err)
	}
}

func TestParseStatusSwitches(t *testing.T) {
	status := "Name:\tnode\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t1200\nnonvoluntary_ctxt_switches:\t34\n"
	if n, err := parseStatusSwitches([]byte(status)); err != nil || n != 1234 {
		t.Errorf("parseStatusSwitches = %d, %v; want 1234", n, err)
	}
	for _, bad := range []string{"Name:\tnode\n", "voluntary_ctxt_switches:\t12\n", "voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t1\n"} {
		if _, err := parseStatusSwitches([]byte(bad)); err == nil {
			t.Errorf("parseStatusSwitches(%q) = nil error", bad)
		}
	}
	c0 := switchCounts{"1/1": 100, "1/2": 50, "2/7": 10}
	c1 := switchCounts{"1/1": 130, "1/2": 50, "2/7": 15, "2/9": 4} // 2/9 began in between
	if n := c1.since(c0); n != 39 {
		t.Errorf("since = %d, want 39", n)
	}
	self, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	if _, err := parseStatusSwitches(self); err != nil {
		t.Errorf("this process's status: %v", err)
	}
}
