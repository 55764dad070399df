package raftstore

import (
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/raft"
)

// metricsRecorder records the names and types of the metrics it gets, as
// go-metrics (goMetrics) and as Options.Metrics (commitlog.Metrics).
type metricsRecorder struct {
	mu   sync.Mutex
	seen map[string]MetricType // mu
}

func (r *metricsRecorder) add(name string, typ MetricType) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]MetricType{}
	}
	r.seen[name] = typ
}

func (r *metricsRecorder) IncCounter(name string, _ uint64) { r.add(name, Counter) }
func (r *metricsRecorder) Observe(name string, _ float64)   { r.add(name, Sample) }

func (r *metricsRecorder) IncrCounter(key []string, _ float32) {
	r.add(strings.Join(key, "."), Counter)
}
func (r *metricsRecorder) AddSample(key []string, _ float32) { r.add(strings.Join(key, "."), Sample) }
func (r *metricsRecorder) MeasureSince(key []string, _ time.Time) {
	r.add(strings.Join(key, "."), Sample)
}
func (r *metricsRecorder) SetGaugeWithLabels(key []string, _ float32, labels []metrics.Label) {
	var names []string
	for _, l := range labels {
		names = append(names, l.Name)
	}
	r.add(strings.Join(key, ".")+"{"+strings.Join(names, ",")+"}", Gauge)
}

func (r *metricsRecorder) names() map[string]MetricType {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]MetricType{}
	for k, v := range r.seen {
		out[k] = v
	}
	return out
}

// TestMetricsListsWhatIsReported runs a DB through appends, reads,
// compaction across segments and checkpoints, and checks that Metrics
// lists exactly the metrics it reported, with their types and labels: to
// go-metrics under the prefix, and to Options.Metrics for those marked
// Collector.
func TestMetricsListsWhatIsReported(t *testing.T) {
	gm, coll := &metricsRecorder{}, &metricsRecorder{}
	db, err := OpenDB(t.TempDir(), &Options{
		SegmentSize: 64 << 10, CheckpointInterval: 10 * time.Millisecond,
		MetricsPrefix: []string{"svc", "store"}, Metrics: coll, goMetrics: gm,
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := db.Store(1)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 2000; i += 50 {
		var logs []*raft.Log
		for j := i; j < i+50; j++ {
			logs = append(logs, ctEntry(j, 1, 100))
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	var out raft.Log
	if err := s.GetLog(1000, &out); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 1900); err != nil {
		t.Fatal(err)
	}
	// pinned_bytes is set at checkpoints.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := gm.names()["svc.store.pinned_bytes{group}"]; ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint set pinned_bytes within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	wantGo, wantColl := map[string]MetricType{}, map[string]MetricType{}
	prev := ""
	for _, m := range Metrics() {
		if m.Name <= prev {
			t.Errorf("Metrics() is not sorted by name: %q after %q", m.Name, prev)
		}
		prev = m.Name
		if m.Help == "" || m.Unit == "" {
			t.Errorf("metric %q has no help or unit", m.Name)
		}
		key := "svc.store." + m.Name
		if len(m.Labels) > 0 {
			key += "{" + strings.Join(m.Labels, ",") + "}"
		}
		wantGo[key] = m.Type
		if m.Collector {
			wantColl[m.Name] = m.Type
		}
	}
	for what, c := range map[string]struct {
		got, want map[string]MetricType
	}{
		"go-metrics":      {gm.names(), wantGo},
		"Options.Metrics": {coll.names(), wantColl},
	} {
		for name, typ := range c.got {
			if want, ok := c.want[name]; !ok || want != typ {
				t.Errorf("%s got %s %q, which Metrics() lists as %q", what, typ, name, want)
			}
		}
		var missing []string
		for name := range c.want {
			if _, ok := c.got[name]; !ok {
				missing = append(missing, name)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("%s never got %q, which Metrics() lists", what, missing)
		}
	}
	if m := Metrics(); &m[0] == &Metrics()[0] {
		t.Error("Metrics() returns a shared slice")
	}
}
