package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/node"
)

// lineWriter collects output and closes done once it holds n lines.
type lineWriter struct {
	mu   sync.Mutex   // guards b and n
	b    bytes.Buffer // what was written
	n    int          // lines to wait for; 0 once done is closed
	done chan struct{}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if w.n > 0 && bytes.Count(w.b.Bytes(), []byte("\n")) >= w.n {
		close(w.done)
		w.n = 0
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// read --json and tail --json print a JSON object a line with the index,
// the append time and the data in base64, which gives back every record,
// binary and empty ones included, byte for byte.
func TestReadTailJSON(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	lc, err := startLocalCluster(ctx, t.TempDir(), node.FlushAsync, &logs)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.close()
	addrs := strings.Join(lc.clientAddrs(), ",")
	cl, err := client.Dial(ctx, lc.clientAddrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	records := [][]byte{[]byte("hello"), {}, {0x00, 0xff, 0xfe, '\n', '\t'}, []byte("ünïcode \"quoted\"")}
	before := time.Now()
	idx, err := cl.Append(ctx, records...)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()

	check := func(what, out string) {
		t.Helper()
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != len(records) {
			t.Fatalf("%s printed %d lines, want %d:\n%s", what, len(lines), len(records), out)
		}
		for i, line := range lines {
			var r struct {
				Index      *uint64 `json:"index"`
				AppendedAt string  `json:"appended_at"`
				Data       *string `json:"data"`
			}
			dec := json.NewDecoder(strings.NewReader(line))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&r); err != nil || r.Index == nil || r.Data == nil {
				t.Fatalf("%s line %q: %v", what, line, err)
			}
			data, err := base64.StdEncoding.DecodeString(*r.Data)
			if err != nil || *r.Index != idx[i] || !bytes.Equal(data, records[i]) {
				t.Errorf("%s line %q: index %d data %q (%v), want %d %q", what, line, *r.Index, data, err, idx[i], records[i])
			}
			at, err := time.Parse(time.RFC3339Nano, r.AppendedAt)
			if err != nil || !strings.HasSuffix(r.AppendedAt, "Z") || at.Before(before.Add(-time.Second)) || at.After(after.Add(time.Second)) {
				t.Errorf("%s line %q: appended_at %q (%v), want a UTC time between %v and %v", what, line, r.AppendedAt, err, before, after)
			}
		}
	}
	from := strconv.FormatUint(idx[0], 10)
	out, errOut, code := runCmd(ctx, "read", "--addrs", addrs, "--from", from, "--json")
	if code != 0 {
		t.Fatalf("read --json: exit status %d: %s", code, errOut)
	}
	check("read --json", out)

	// tail runs until interrupted: stop it once it printed every record.
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	w := &lineWriter{n: len(records), done: make(chan struct{})}
	e, _, stderr := testEnv(nil)
	e.stdout = w
	exited := make(chan int, 1)
	go func() { exited <- run(tctx, e, []string{"tail", "--addrs", addrs, "--from", from, "--json"}) }()
	select {
	case <-w.done:
	case code := <-exited:
		t.Fatalf("tail --json exited with status %d: %s", code, stderr)
	case <-ctx.Done():
		t.Fatalf("tail --json printed %q in time", w.String())
	}
	stop()
	if code := <-exited; code != 0 {
		t.Errorf("tail --json interrupted: exit status %d: %s", code, stderr)
	}
	check("tail --json", w.String())

	// Refused before anything is read (a tail would otherwise run until
	// its context ends).
	uctx, ucancel := context.WithTimeout(ctx, 10*time.Second)
	defer ucancel()
	for _, cmd := range []string{"read", "tail"} {
		out, errOut, code := runCmd(uctx, cmd, "--addrs", addrs, "--json", "--quote")
		if code != 2 || out != "" || !strings.Contains(errOut, "--quote or --json, not both") {
			t.Errorf("%s --json --quote: exit status %d, stdout %q, stderr %q; want a usage error", cmd, code, out, errOut)
		}
	}
}
