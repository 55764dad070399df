package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// serve records the flags set to other values than their defaults, from
// the command line or the environment, as the node's settings, and which
// flags it took from RAFTLOG_* variables.
func TestServeSettings(t *testing.T) {
	e, _, _ := testEnv(map[string]string{
		"RAFTLOG_ID":            "overridden",
		"RAFTLOG_DATA_DIR":      "/data/env",
		"RAFTLOG_RETENTION_AGE": "7d",
		"RAFTLOG_FLUSH":         "async",
		"RAFTLOG_MAX_CONNS":     "0",              // the default: taken, but no setting
		"RAFTLOG_LOG_JSON":      "",               // empty: not taken
		"RAFTLOG_TIMEOUT":       "10s",            // no such flag of serve
		"RAFTLOG_RAFT_ADDR":     "127.0.0.1:7001", // the default
	})
	o, err := parseServe(e, []string{"--id", "n1", "--heartbeat-timeout", "300ms", "--client-addr=127.0.0.1:7100", "--batch-linger", "0s"})
	if err != nil {
		t.Fatal(err)
	}
	want := []transport.Setting{
		{Name: "client-addr", Value: "127.0.0.1:7100"},
		{Name: "data-dir", Value: "/data/env"},
		{Name: "flush", Value: "async"},
		// Not election-timeout nor leader-lease-timeout, which follow it.
		{Name: "heartbeat-timeout", Value: "300ms"},
		{Name: "id", Value: "n1"},
		{Name: "retention-age", Value: "168h0m0s"},
	}
	if fmt.Sprint(o.cfg.Settings) != fmt.Sprint(want) {
		t.Errorf("settings:\n %v\nwant\n %v", o.cfg.Settings, want)
	}
	if o.cfg.LeaderLeaseTimeout != 300*time.Millisecond {
		t.Errorf("leader lease timeout %v, want 300ms (it follows --heartbeat-timeout)", o.cfg.LeaderLeaseTimeout)
	}
	wantEnv := []envUse{
		{"data-dir", "RAFTLOG_DATA_DIR", "/data/env"},
		{"flush", "RAFTLOG_FLUSH", "async"},
		{"max-conns", "RAFTLOG_MAX_CONNS", "0"},
		{"raft-addr", "RAFTLOG_RAFT_ADDR", "127.0.0.1:7001"},
		{"retention-age", "RAFTLOG_RETENTION_AGE", "7d"},
	}
	if fmt.Sprint(o.fromEnv) != fmt.Sprint(wantEnv) {
		t.Errorf("taken from the environment:\n %v\nwant\n %v", o.fromEnv, wantEnv)
	}
}

func TestStatusDetailsTable(t *testing.T) {
	rows := []statusRow{
		{addr: "127.0.0.1:7000", st: &transport.StatusResponse{NodeID: "n1", Role: "Leader", Details: &transport.StatusDetails{
			Version: "v0.0.0-20260509183000-bd96097abcde+dirty", Commit: "bd96097abcdef0123456789", Modified: true,
			GoVersion: "go1.26.8", Platform: "linux/amd64", Flush: "async",
			Settings: []transport.Setting{{Name: "flush", Value: "async"}, {Name: "id", Value: "n1"}},
		}}},
		{addr: "127.0.0.1:7010", st: &transport.StatusResponse{NodeID: "n2", Role: "Follower", Details: &transport.StatusDetails{
			Version: "v1.2.0", GoVersion: "go1.26.8", Platform: "linux/amd64", Flush: "sync",
		}}},
		{addr: "127.0.0.1:7020", st: &transport.StatusResponse{NodeID: "n3", Role: "Follower"}},
		{addr: "127.0.0.1:7030", err: errors.New("connection refused")},
	}
	var b bytes.Buffer
	if err := writeDetailsTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := `NODE  VERSION                                   COMMIT              GO        FLUSH  SETTINGS
n1    v0.0.0-20260509183000-bd96097abcde+dirty  bd96097abcde+dirty  go1.26.8  async  --flush=async --id=n1
n2    v1.2.0                                    -                   go1.26.8  sync   (all defaults)
n3    (an older version, which does not report these)
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	j, err := json.Marshal(rows[1].json())
	if err != nil {
		t.Fatal(err)
	}
	if want := `"details":{"version":"v1.2.0","go_version":"go1.26.8","platform":"linux/amd64","flush":"sync"}}`; !strings.HasSuffix(string(j), want) {
		t.Errorf("json: %s\nwant it to end with %s", j, want)
	}
}

// goVersionM returns what "go version -m" reads in the binary bin: the Go
// version, the main module's version and the vcs build settings.
func goVersionM(t *testing.T, bin string) (goVersion, modVersion string, settings map[string]string) {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	settings = map[string]string{}
	for i, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case i == 0 && len(f) == 2:
			goVersion = f[1]
		case len(f) >= 3 && f[0] == "mod":
			modVersion = f[2]
		case len(f) == 2 && f[0] == "build":
			if k, v, ok := strings.Cut(f[1], "="); ok {
				settings[k] = v
			}
		}
	}
	return goVersion, modVersion, settings
}

// "node version" and "node --version" print what the Go toolchain recorded
// in the binary: the module version, the commit (when built from a
// checkout) and the Go version. (TestDockerBuildStage checks a binary
// versioned at link time.)
func TestVersionCommand(t *testing.T) {
	h := newServeHarness(t, "-buildvcs=auto")
	goVer, modVer, settings := goVersionM(t, h.bin)
	want := versionJSON{Version: modVer, Commit: settings["vcs.revision"], Modified: settings["vcs.modified"] == "true",
		GoVersion: goVer, Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if want.Version == "" || want.GoVersion == "" {
		t.Fatalf("go version -m: no module or Go version in the binary: %+v", want)
	}
	var got versionJSON
	if err := json.Unmarshal([]byte(h.mustCLI("version", "--json")), &got); err != nil || got != want {
		t.Errorf("version --json: %+v (%v), want %+v", got, err, want)
	}
	text := h.mustCLI("--version")
	if text != h.mustCLI("version") {
		t.Errorf("--version and version differ")
	}
	for _, s := range []string{"version:  " + want.Version + "\n", "go:       " + want.GoVersion + "\n", "platform: " + want.Platform + "\n"} {
		if !strings.Contains(text, s) {
			t.Errorf("version prints\n%s\nwithout %q", text, s)
		}
	}
	if want.Commit != "" && !strings.Contains(text, "commit:   "+want.Commit) {
		t.Errorf("version prints\n%s\nwithout the commit %s", text, want.Commit)
	}
	t.Logf("node version:\n%s", text)
}

// A running node reports its version, flush mode and the settings that
// differ from the defaults to "node status" and on /status, and "node
// serve" logs every setting it took from a RAFTLOG_* variable.
func TestServeReportsSettings(t *testing.T) {
	h := newServeHarness(t)
	addrs := freeAddrs(t, 3)
	n := &procNode{id: "n1", raft: addrs[0], client: addrs[1]}
	n.dir, n.log = filepath.Join(h.dir, "n1"), filepath.Join(h.dir, "n1.log")
	admin := addrs[2]
	n.env = []string{
		"RAFTLOG_ID=overridden-on-the-command-line",
		"RAFTLOG_FLUSH=async",
		"RAFTLOG_RETENTION_AGE=7d",
		"RAFTLOG_LOG_LEVEL=info", // the default
		"RAFTLOG_ADMIN_ADDR=" + admin,
	}
	h.start(n, "--bootstrap", "n1="+n.raft)
	st := h.waitStatus(n.client)

	var ver versionJSON
	if err := json.Unmarshal([]byte(h.mustCLI("version", "--json")), &ver); err != nil {
		t.Fatal(err)
	}
	d := st.Details
	if d == nil || d.Version != ver.Version || d.Commit != ver.Commit || d.GoVersion != ver.GoVersion || d.Flush != "async" {
		t.Fatalf("status --json details %+v, want version %+v and flush async", d, ver)
	}
	wantSettings := fmt.Sprint([]transport.Setting{
		{Name: "admin-addr", Value: admin}, {Name: "bootstrap", Value: "n1=" + n.raft}, {Name: "client-addr", Value: n.client},
		{Name: "data-dir", Value: n.dir}, {Name: "flush", Value: "async"}, {Name: "id", Value: "n1"},
		{Name: "raft-addr", Value: n.raft}, {Name: "retention-age", Value: "168h0m0s"},
	})
	if got := fmt.Sprint(d.Settings); got != wantSettings {
		t.Errorf("settings\n %s\nwant\n %s", got, wantSettings)
	}
	table := h.mustCLI("status", "--addrs", n.client)
	if !strings.Contains(table, "NODE  VERSION") || !strings.Contains(table, " async ") || !strings.Contains(table, "--retention-age=168h0m0s") {
		t.Errorf("status table without the details:\n%s", table)
	}

	resp, err := http.Get("http://" + admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	var adm struct {
		Node struct {
			Details *transport.StatusDetails `json:"details"`
		} `json:"node"`
	}
	if err != nil || json.Unmarshal(body, &adm) != nil || adm.Node.Details == nil ||
		adm.Node.Details.Version != ver.Version || fmt.Sprint(adm.Node.Details.Settings) != wantSettings {
		t.Errorf("/status: %v\n%s", err, body)
	}

	h.stop(n)
	log := readFile(t, n.log)
	for _, v := range []string{"RAFTLOG_FLUSH flag=--flush value=async", "RAFTLOG_RETENTION_AGE flag=--retention-age value=7d",
		"RAFTLOG_LOG_LEVEL flag=--log-level value=info", "RAFTLOG_ADMIN_ADDR flag=--admin-addr value=" + admin} {
		if !strings.Contains(log, "setting from the environment: variable="+v) {
			t.Errorf("the log does not say %s came from the environment:\n%s", v, log)
		}
	}
	if strings.Contains(log, "RAFTLOG_ID") {
		t.Errorf("the log says RAFTLOG_ID was taken, but --id overrode it:\n%s", log)
	}
	if first, _, _ := strings.Cut(log, "\n"); !strings.Contains(first, "raftlog node: version=") || !strings.Contains(first, ver.Version) {
		t.Errorf("the log does not start with the version %s:\n%s", ver.Version, log)
	}
}

// readFile returns the contents of a file the test made.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
