package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/transport"
)

// What `bench logs` asks of the raftlog cluster besides appends: creating
// the logs, who leads each (from every node's /status), and the commit
// log's counters (from every node's /metrics).

// adminHTTP is the HTTP client of the nodes' admin ports.
var adminHTTP = &http.Client{Timeout: 5 * time.Second}

// nan returns NaN.
func nan() float64 { return math.NaN() }

// createLogs creates the named logs of names with 3 replicas (nothing for
// the default log) and returns each one's preferred leader, the first
// member the catalog chose.
func (c *raftlogCluster) createLogs(ctx context.Context, names []string) (map[string]string, error) {
	preferred := map[string]string{}
	cl, err := client.Dial(ctx, c.clientAddrs(), nil)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	for _, name := range names {
		if name == transport.DefaultLog {
			continue
		}
		info, err := cl.CreateLog(ctx, name, client.CreateLogOptions{Replicas: 3})
		if err != nil {
			return nil, fmt.Errorf("creating log %s: %w", name, err)
		}
		if len(info.Members) != 3 {
			return nil, fmt.Errorf("log %s was created with members %v, want 3", name, info.Members)
		}
		preferred[name] = info.Members[0]
	}
	return preferred, nil
}

// nodeLogStatus is what `bench logs` reads of a log in a node's /status.
type nodeLogStatus struct {
	Name string `json:"name"`
	Role string `json:"role"`
	Term uint64 `json:"term"`
}

// nodeStatus is what `bench logs` reads of a node's /status.
type nodeStatus struct {
	Logs []nodeLogStatus `json:"logs"`
}

// getJSON GETs url into v.
func getJSON(ctx context.Context, url string, v any) error {
	body, err := getBody(ctx, url)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// getBody GETs url and returns its body.
func getBody(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := adminHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, body)
	}
	return body, nil
}

// leadersNow returns the node id leading each log, by name, from the
// /status of every running node: the node that says it leads, in the
// highest term where two do (one deposed and not yet aware). Nodes that
// do not answer are left out; it fails only if none answers.
func (c *raftlogCluster) leadersNow(ctx context.Context) (map[string]string, error) {
	type lead struct {
		id   string
		term uint64
	}
	best := map[string]lead{}
	var errs []string
	answered := 0
	for _, n := range c.nodes {
		if !n.proc.running() {
			continue
		}
		var st nodeStatus
		if err := getJSON(ctx, "http://"+n.admin+"/status", &st); err != nil {
			errs = append(errs, n.id+": "+err.Error())
			continue
		}
		answered++
		for _, l := range st.Logs {
			if l.Role == "Leader" && l.Term >= best[l.Name].term {
				best[l.Name] = lead{n.id, l.Term}
			}
		}
	}
	if answered == 0 {
		return nil, fmt.Errorf("no node's /status answers: %s", strings.Join(errs, "; "))
	}
	out := map[string]string{}
	for name, l := range best {
		out[name] = l.id
	}
	return out, nil
}

// spreadProblem says why the leaders of names are not yet as `bench logs`
// waits for them, "" when they are: every log has a leader and, with 3 or
// more named logs, each is led by its preferred leader and the nodes of
// ids lead numbers of them that differ by at most one.
func spreadProblem(leaders, preferred map[string]string, names, ids []string) string {
	var missing, moving []string
	for _, name := range names {
		switch l := leaders[name]; {
		case l == "":
			missing = append(missing, name)
		case len(names) >= 3 && preferred[name] != "" && l != preferred[name]:
			moving = append(moving, fmt.Sprintf("%s led by %s, not %s", name, l, preferred[name]))
		}
	}
	var counts []string
	lo, hi := len(names), 0
	for _, id := range ids {
		k := countLeads(leaders, names, id)
		lo, hi = min(lo, k), max(hi, k)
		counts = append(counts, fmt.Sprintf("%s leads %d", id, k))
	}
	var why []string
	if len(missing) > 0 {
		why = append(why, fmt.Sprintf("%d logs without a leader (%s)", len(missing), firstFew(missing)))
	}
	if len(moving) > 0 {
		why = append(why, fmt.Sprintf("%d logs not yet on their preferred leader (%s)", len(moving), firstFew(moving)))
	}
	if len(names) >= 3 && hi-lo > 1 {
		why = append(why, "leaders not spread")
	}
	if len(why) == 0 {
		return ""
	}
	return strings.Join(why, "; ") + " (" + strings.Join(counts, ", ") + ")"
}

// firstFew joins the first 3 of xs, and says how many more there are.
func firstFew(xs []string) string {
	if len(xs) <= 3 {
		return strings.Join(xs, ", ")
	}
	return strings.Join(xs[:3], ", ") + fmt.Sprintf(" and %d more", len(xs)-3)
}

// nodeIDs returns the ids of the nodes.
func (c *raftlogCluster) nodeIDs() []string {
	var ids []string
	for _, n := range c.nodes {
		ids = append(ids, n.id)
	}
	return ids
}

// waitSpread waits up to d until every log of names has a leader and the
// leaders are spread (spreadProblem), and returns who leads each log.
func (c *raftlogCluster) waitSpread(ctx context.Context, names []string, preferred map[string]string, d time.Duration) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no answer"
	for {
		leaders, err := c.leadersNow(ctx)
		if err == nil {
			if last = spreadProblem(leaders, preferred, names, c.nodeIDs()); last == "" {
				return leaders, nil
			}
		} else {
			last = err.Error()
		}
		if !c.allRunning() {
			return nil, c.whyNot(fmt.Errorf("waiting for the logs' leaders: %s", last))
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("the logs' leaders are not spread within %v: %s", d, last)
		}
	}
}

// storeCount is a node's commit-log counters at one moment.
type storeCount struct {
	appends float64 // raftlog_store_appends_total
	fsyncs  float64 // raftlog_store_fsyncs_total
}

// storeCounters reads every node's commit-log counters from its /metrics,
// in the order of c.nodes.
func (c *raftlogCluster) storeCounters(ctx context.Context) ([]storeCount, error) {
	out := make([]storeCount, len(c.nodes))
	for i, n := range c.nodes {
		body, err := getBody(ctx, "http://"+n.admin+"/metrics")
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", n.id, err)
		}
		vs, err := parseCounters(string(body), "raftlog_store_appends_total", "raftlog_store_fsyncs_total")
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", n.id, err)
		}
		out[i] = storeCount{appends: vs[0], fsyncs: vs[1]}
	}
	return out, nil
}

// parseCounters returns the values of the unlabelled metrics names in a
// Prometheus text exposition, in the order of names; a name missing is an
// error.
func parseCounters(text string, names ...string) ([]float64, error) {
	out := make([]float64, len(names))
	found := make([]bool, len(names))
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		i := slices.Index(names, f[0])
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: value %q: %w", f[0], f[1], err)
		}
		out[i], found[i] = v, true
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i, ok := range found {
		if !ok {
			return nil, fmt.Errorf("no metric %s", names[i])
		}
	}
	return out, nil
}
