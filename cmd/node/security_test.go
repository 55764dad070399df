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

// A node run as operators run it, with TLS, client authentication and an
// admin list: a client that is no admin appends but is refused a trim
// with PermissionDenied naming it, an admin trims, and the admin port
// speaks HTTPS.
func TestServeTLSAdmins(t *testing.T) {
	h := newServeHarness(t)
	ca := testcert.NewCA(t, t.TempDir(), "cluster")
	n := &procNode{id: "n1", raft: freeAddr(t), client: freeAddr(t)}
	n.dir = filepath.Join(h.dir, n.id)
	n.log = filepath.Join(h.dir, n.id+".log")
	cert, key := ca.Issue(t, "n1", node.NodeURI("n1"))
	admin := freeAddr(t)
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
