package clustertest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The node binary, built once per test binary run by nodeBinary.
var (
	binOnce   sync.Once
	binPath   string // the binary; "" until built
	binDir    string // the temporary directory holding it; removed by TestMain
	binFaults bool   // whether the binary's serve has --fault-injection
	binErr    error
)

// TestMain runs the tests, then removes the node binary they built.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// skipShort skips a test that runs a cluster under go test -short.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a cluster of node processes; skipped with -short")
	}
}

// nodeBinary returns the path of the node binary, building cmd/node the
// first time (without -race, whatever the test binary was built with, and
// with the build tag faultinject, without which it refuses
// --fault-injection), or RAFTLOG_NODE_BIN when set.
func nodeBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("RAFTLOG_NODE_BIN"); p != "" {
			binPath, binErr = filepath.Abs(p)
		} else {
			binPath, binErr = buildNode()
		}
		if binErr == nil {
			binFaults, binErr = hasFaultInjection(binPath)
		}
	})
	if binErr != nil {
		t.Fatalf("node binary: %v", binErr)
	}
	return binPath
}

// buildNode builds cmd/node into a new temporary directory.
func buildNode() (string, error) {
	dir, err := os.MkdirTemp("", "raftlog-cluster-test-bin-")
	if err != nil {
		return "", err
	}
	binDir = dir
	out := filepath.Join(dir, "node")
	// go test puts its own GOROOT/bin first in PATH.
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	start := time.Now()
	cmd := exec.Command(goTool, "build", "-tags", "faultinject", "-o", out, "github.com/raftlog/raftlog/cmd/node")
	cmd.Env = append(childEnv(), "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build -tags faultinject ./cmd/node: %v\n%s", err, stderr.Bytes())
	}
	fmt.Fprintf(os.Stderr, "cluster-test: built cmd/node in %v\n", time.Since(start).Round(100*time.Millisecond))
	if err := openNodeSources(goTool); err != nil {
		return "", err
	}
	return out, nil
}

// openNodeSources opens every file of nodeSources. go test caches a
// package's result until its test binary or a file its tests opened
// changes, and these tests build the node binary themselves: without
// this, a change to the node's code left a cached pass standing.
func openNodeSources(goTool string) error {
	files, err := nodeSources(goTool)
	if err != nil {
		return err
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}

// nodeSources returns the files that the node binary is built from within
// this module: the Go and embedded files of cmd/node and of the module's
// packages it imports, and go.mod and go.sum.
func nodeSources(goTool string) ([]string, error) {
	const format = `{{if .Module}}{{if .Module.Main}}{{.Module.GoMod}}` +
		`{{"\t"}}{{.Dir}}{{range .GoFiles}}{{"\t"}}{{.}}{{end}}{{range .EmbedFiles}}{{"\t"}}{{.}}{{end}}{{"\n"}}{{end}}{{end}}`
	cmd := exec.Command(goTool, "list", "-deps", "-tags", "faultinject", "-f", format, "github.com/raftlog/raftlog/cmd/node")
	cmd.Env = append(childEnv(), "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	list, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps ./cmd/node: %v\n%s", err, stderr.Bytes())
	}
	var files []string
	mods := map[string]bool{}
	for line := range strings.Lines(string(list)) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) < 2 {
			continue
		}
		if !mods[f[0]] {
			mods[f[0]] = true
			files = append(files, f[0], filepath.Join(filepath.Dir(f[0]), "go.sum"))
		}
		for _, name := range f[2:] {
			files = append(files, filepath.Join(f[1], name))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("go list -deps ./cmd/node named no file of this module")
	}
	return files, nil
}

// hasFaultInjection reports whether bin's serve command takes
// --fault-injection.
func hasFaultInjection(bin string) (bool, error) {
	cmd := exec.Command(bin, "serve", "-h")
	cmd.Env = childEnv()
	out, err := cmd.CombinedOutput()
	if err != nil && len(out) == 0 {
		return false, fmt.Errorf("%s serve -h: %v", bin, err)
	}
	return strings.Contains(string(out), "fault-injection"), nil
}

// childEnv is the environment of child processes: the test's own, without
// the RAFTLOG_* variables, which node's flags would otherwise read.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RAFTLOG_") {
			env = append(env, kv)
		}
	}
	return env
}

// TestNodeSources checks that the files the tests open, so that go test's
// cache notices a change to the node binary they build, take in the
// node's command, the packages it imports (the faultinject ones
// included) and the module's go.mod.
func TestNodeSources(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	files, err := nodeSources(goTool)
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range files {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		have[filepath.ToSlash(rel)] = true
	}
	for _, want := range []string{"go.mod", "go.sum", "cmd/node/main.go", "node/node.go", "node/faultinject_on.go", "replica/replica.go", "commitlog/flush.go", "raftstore/stable.go"} {
		if !have[want] {
			t.Errorf("the node's sources lack %s (%d files)", want, len(files))
		}
	}
	if have["node/faultinject_off.go"] {
		t.Error("the node's sources take node/faultinject_off.go: the binary is built with -tags faultinject")
	}
}
