package node

import (
	"encoding/json"
	"net/http"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/raftlog/raftlog/transport"
)

func TestReadBuild(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "bd96097abcde"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		name            string
		bi              *debug.BuildInfo
		version, commit string // set at link time
		want            BuildInfo
	}{
		{"cmd/node from a checkout",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: ModulePath, Version: "v0.0.0-20260509183000-bd96097abcde+dirty"}, Settings: vcs}, "", "",
			BuildInfo{Version: "v0.0.0-20260509183000-bd96097abcde+dirty", Commit: "bd96097abcde", Modified: true, GoVersion: "go1.26.8", Platform: platform}},
		{"go install at a release",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: ModulePath, Version: "v1.2.0"}}, "", "",
			BuildInfo{Version: "v1.2.0", GoVersion: "go1.26.8", Platform: platform}},
		{"an embedder's binary",
			&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "example.com/app", Version: "v3.0.0"}, Settings: vcs,
				Deps: []*debug.Module{{Path: "github.com/hashicorp/raft", Version: "v1.8.0"}, {Path: ModulePath, Version: "v1.1.0"}}}, "", "",
			BuildInfo{Version: "v1.1.0", GoVersion: "go1.26.1", Platform: platform}},
		{"an embedder's replaced dependency",
			&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "example.com/app"},
				Deps: []*debug.Module{{Path: ModulePath, Version: "v1.1.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.1.1"}}}}, "", "",
			BuildInfo{Version: "v1.1.1", GoVersion: "go1.26.1", Platform: platform}},
		{"a tree without .git, versioned at link time",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: ModulePath, Version: "(devel)"}}, "v1.2.0", "bd96097",
			BuildInfo{Version: "v1.2.0", Commit: "bd96097", GoVersion: "go1.26.8", Platform: platform}},
		{"nothing recorded",
			nil, "", "",
			BuildInfo{Version: "(devel)", GoVersion: runtime.Version(), Platform: platform}},
	} {
		if got := readBuild(tc.bi, tc.bi != nil, tc.version, tc.commit); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	b := BuildInfo{Version: "v1.2.0", Commit: "bd96097", Modified: true, GoVersion: "go1.26.8", Platform: "linux/amd64"}
	if got, want := b.String(), "v1.2.0 (commit bd96097, modified) go1.26.8 linux/amd64"; got != want {
		t.Errorf("String: %q, want %q", got, want)
	}
}

// A node's status carries its version, flush mode and settings when asked
// (and on /status), and not otherwise: callers older than the details
// would refuse them.
func TestStatusDetails(t *testing.T) {
	settings := []transport.Setting{{Name: "retention-age", Value: "168h0m0s"}, {Name: "flush", Value: "async"}}
	c := newTestCluster(t, 1, func(cfg *Config) {
		cfg.AdminAddr = "127.0.0.1:0"
		cfg.Flush = FlushAsync
		cfg.Settings = settings
	})
	n := c.waitLeader()
	settings[0].Value = "changed after Start"
	conn := dial(t, n)

	plain, err := call[transport.StatusResponse](t, conn, transport.OpStatus, &transport.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if plain.NodeID != "n1" || plain.Details != nil {
		t.Errorf("status without details asked: %+v, details %+v", plain, plain.Details)
	}

	b := Build()
	want := transport.StatusDetails{
		Version: b.Version, Commit: b.Commit, Modified: b.Modified, GoVersion: b.GoVersion, Platform: b.Platform, Flush: "async",
		Settings: []transport.Setting{{Name: "flush", Value: "async"}, {Name: "retention-age", Value: "168h0m0s"}},
	}
	check := func(what string, d *transport.StatusDetails) {
		t.Helper()
		if d == nil {
			t.Fatalf("%s: no details", what)
		}
		got, _ := json.Marshal(d)
		exp, _ := json.Marshal(want)
		if string(got) != string(exp) {
			t.Errorf("%s: details %s, want %s", what, got, exp)
		}
	}
	st, err := call[transport.StatusResponse](t, conn, transport.OpStatus, &transport.StatusRequest{Details: true})
	if err != nil {
		t.Fatal(err)
	}
	check("status with details", st.Details)
	if b.Version == "" || b.GoVersion != runtime.Version() {
		t.Errorf("Build: %+v, want a version and Go %s", b, runtime.Version())
	}

	code, body := get(t, n, "/status")
	var adm struct {
		Node struct {
			Details *transport.StatusDetails `json:"details"`
		} `json:"node"`
	}
	if err := json.Unmarshal([]byte(body), &adm); err != nil || code != http.StatusOK {
		t.Fatalf("/status: %d %v\n%s", code, err, body)
	}
	check("/status", adm.Node.Details)
}
