package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/internal/testcert"
	"github.com/raftlog/raftlog/node"
)

// A binary built the normal way (go build, no tags) refuses fault
// injection, by flag and by variable, with a clear error, and does not
// list the flag; one built with -tags faultinject, as cluster-test builds
// it, takes it.
func TestReleaseBinaryRefusesFaultInjection(t *testing.T) {
	h := newServeHarness(t)
	dir := filepath.Join(h.dir, "d")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flag", nil, []string{"serve", "--id", "n1", "--data-dir", dir, "--raft-addr", "127.0.0.1:0", "--client-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--fault-injection"}},
		{"variable", []string{"RAFTLOG_FAULT_INJECTION=true"}, []string{"serve", "--id", "n1", "--data-dir", dir, "--raft-addr", "127.0.0.1:0", "--client-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}},
	} {
		out, errOut, code := h.cliEnv(tc.env, tc.args...)
		want := "--fault-injection (or RAFTLOG_FAULT_INJECTION): " + node.ErrNoFaultInjection.Error()
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("release binary, fault injection by %s: exit status %d, stdout %q, stderr %q; want 2 and %q", tc.name, code, out, errOut, want)
		}
	}
	if out := h.mustCLI("serve", "-h"); strings.Contains(out, "fault-injection") || strings.Contains(out, "/fault/") {
		t.Errorf("the release binary's serve -h mentions fault injection:\n%s", out)
	}

	tagged := newServeHarness(t, "-tags", "faultinject")
	if out := tagged.mustCLI("serve", "-h"); !strings.Contains(out, "--fault-injection") {
		t.Errorf("the faultinject binary's serve -h does not list --fault-injection:\n%s", out)
	}
	// Past the check: the next one asks for the admin address.
	_, errOut, code := tagged.cliEnv([]string{"RAFTLOG_FAULT_INJECTION=true"}, "serve", "--id", "n1", "--data-dir", dir)
	if code != 2 || !strings.Contains(errOut, "--fault-injection needs --admin-addr") {
		t.Errorf("faultinject binary: exit status %d, stderr %q; want the admin address asked for", code, errOut)
	}
}

// A node run as operators run it, with TLS, client authentication and an
// admin list: a client that is no admin appends but is refused a trim
// with PermissionDenied naming it, an admin trims, and the admin port
// speaks HTTPS.
func TestServeTLSAdmins(t *testing.T) {
	h := newServeHarness(t)
	ca := testcert.NewCA(t, t.TempDir(), "cluster")
	addrs := freeAddrs(t, 3)
	n := &procNode{id: "n1", raft: addrs[0], client: addrs[1]}
	n.dir = filepath.Join(h.dir, n.id)
	n.log = filepath.Join(h.dir, n.id+".log")
	cert, key := ca.Issue(t, "n1", node.NodeURI("n1"))
	admin := addrs[2]
	h.start(n, "--bootstrap", "n1="+n.raft, "--admin-addr", admin,
		"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca.File, "--tls-client-auth", "--tls-admins", "ops,ci")
	as := func(name string) []string {
		c, k := ca.Issue(t, name)
		return []string{"--addrs", n.client, "--tls-ca", ca.File, "--tls-cert", c, "--tls-key", k}
	}
	app, ops := as("app1"), as("ops")
	h.waitStatus(n.client, app[2:]...)

	var idx string
	for i := range 3 {
		idx = strings.TrimSpace(h.mustCLI(append([]string{"append", "--timeout", "30s", fmt.Sprintf("r%d", i)}, app...)...))
	}
	_, errOut, code := h.cli(append([]string{"trim", "--below", idx}, app...)...)
	if want := `PermissionDenied: client "app1" may not trim (admins: ops, ci)`; code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("trim by app1: exit status %d, stderr %q; want 1 and %q", code, errOut, want)
	}
	h.mustCLI(append([]string{"trim", "--below", idx}, ops...)...)
	if st := h.waitStatus(n.client, app[2:]...); fmt.Sprint(st.First) != idx {
		t.Errorf("after the admin's trim below %s: %+v", idx, st)
	}

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	resp, err := hc.Get("https://" + admin + "/health")
	if err != nil {
		t.Fatalf("HTTPS admin port: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /health: %s", resp.Status)
	}
	h.stop(n)
}
