package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseCounters(t *testing.T) {
	text := `# HELP raftlog_store_appends_total Records appended to the commit log.
# TYPE raftlog_store_appends_total counter
raftlog_store_appends_total 1.234567e+06
raftlog_store_appends_total_extra 5
raftlog_log_leader{log="orders"} 1
raftlog_store_fsyncs_total 4321
`
	got, err := parseCounters(text, "raftlog_store_appends_total", "raftlog_store_fsyncs_total")
	if err != nil || got[0] != 1234567 || got[1] != 4321 {
		t.Fatalf("parseCounters = %v, %v; want [1234567 4321]", got, err)
	}
	if _, err := parseCounters(text, "raftlog_store_syncs_total"); err == nil || !strings.Contains(err.Error(), "no metric raftlog_store_syncs_total") {
		t.Errorf("a missing metric: %v", err)
	}
	if _, err := parseCounters("raftlog_store_fsyncs_total x\n", "raftlog_store_fsyncs_total"); err == nil {
		t.Error("a value that is no number was accepted")
	}
}

func TestSpreadProblem(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	names := logNames(4)
	pref := map[string]string{names[0]: "n1", names[1]: "n2", names[2]: "n3", names[3]: "n1"}
	spread := map[string]string{names[0]: "n1", names[1]: "n2", names[2]: "n3", names[3]: "n1", "default": "n2"}
	if p := spreadProblem(spread, pref, names, ids); p != "" {
		t.Errorf("spread leaders: %q", p)
	}
	missing := map[string]string{names[0]: "n1", names[1]: "n2", names[2]: "n3"}
	if p := spreadProblem(missing, pref, names, ids); !strings.Contains(p, "1 logs without a leader (bench-004)") {
		t.Errorf("a log without a leader: %q", p)
	}
	piled := map[string]string{names[0]: "n1", names[1]: "n1", names[2]: "n1", names[3]: "n1"}
	p := spreadProblem(piled, pref, names, ids)
	for _, want := range []string{"2 logs not yet on their preferred leader", "leaders not spread", "n1 leads 4, n2 leads 0, n3 leads 0"} {
		if !strings.Contains(p, want) {
			t.Errorf("all on n1: %q lacks %q", p, want)
		}
	}
	// Fewer than 3 logs need only a leader, wherever it is.
	if p := spreadProblem(map[string]string{"default": "n3"}, nil, logNames(0), ids); p != "" {
		t.Errorf("the default log alone: %q", p)
	}
}

func TestPickVictim(t *testing.T) {
	nodes := []*raftlogNode{{id: "n1"}, {id: "n2"}, {id: "n3"}}
	names := logNames(8)
	leaders := map[string]string{}
	for i, name := range names {
		leaders[name] = []string{"n1", "n2", "n3", "n3"}[i%4] // n1 2, n2 2, n3 4
	}
	var got []string
	for rep := range 4 {
		v, err := pickVictim(leaders, names, nodes, rep)
		if err != nil {
			t.Fatal(err)
		}
		if countLeads(leaders, names, v.id) < 2 {
			t.Fatalf("repetition %d: %s leads fewer than 2 logs", rep, v.id)
		}
		got = append(got, v.id)
	}
	if strings.Join(got, ",") != "n1,n2,n3,n1" {
		t.Errorf("victims %v, want n1,n2,n3,n1 (in turn)", got)
	}
	one := map[string]string{names[0]: "n1", names[1]: "n2", names[2]: "n3"}
	if _, err := pickVictim(one, names[:3], nodes, 0); err == nil {
		t.Error("a victim leading one log of three was picked")
	}
	v, err := pickVictim(map[string]string{"default": "n2"}, logNames(0), nodes, 3)
	if err != nil || v.id != "n2" {
		t.Errorf("the default log alone: %v, %v; want its leader n2", v, err)
	}
}

func TestPacedLoaderFirstAckAfter(t *testing.T) {
	p := &pacedLoader{}
	t0 := time.Now()
	if _, ok := p.firstAckAfter(t0); ok {
		t.Fatal("an ack without appends")
	}
	p.times = []time.Time{t0, t0.Add(time.Millisecond), t0.Add(time.Second)}
	if at, ok := p.firstAckAfter(t0); !ok || !at.Equal(t0.Add(time.Millisecond)) {
		t.Errorf("firstAckAfter(t0) = %v, %v; want t0+1ms (strictly after)", at.Sub(t0), ok)
	}
	if _, ok := p.firstAckAfter(t0.Add(time.Second)); ok {
		t.Error("an ack after the last")
	}
}

func TestParseLogsFlags(t *testing.T) {
	cfg, err := parseLogsFlags([]string{"-quick", "-logs", "8,1,8"})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.throughput || !cfg.failover || cfg.duration != time.Second || cfg.failoverReps != 2 || len(cfg.counts) != 2 || cfg.counts[0] != 8 {
		t.Errorf("-quick -logs 8,1,8: %+v", cfg)
	}
	if cfg, err := parseLogsFlags(nil); err != nil || len(cfg.counts) != 3 || cfg.flush != "sync" || cfg.window != 64 || cfg.failoverReps != 5 {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	if cfg, err := parseLogsFlags([]string{"-pprof", "0,64", "-pprof-dir", t.TempDir()}); err != nil || !slices.Equal(cfg.pprof, []int{0, 64}) {
		t.Errorf("-pprof 0,64: %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{{"-logs", "0"}, {"-logs", "8,x"}, {"-flush", "fast"}, {"-only", "latency"},
		{"-failover-logs", "2"}, {"-in-flight", "0"}, {"-failover-reps", "0"}, {"extra"},
		{"-pprof", "8", "-logs", "1,64"}, {"-pprof", "0,x"}, {"-pprof", "0", "-only", "failover"}, {"-pprof", "0", "-duration", "500ms"},
		{"-pprof", "1", "-pprof-dir", "/nonexistent/dir"}} {
		if _, err := parseLogsFlags(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
