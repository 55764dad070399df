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
	return out, nil
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
