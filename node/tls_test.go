package node

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/raftlog/raftlog/internal/testcert"
	"github.com/raftlog/raftlog/transport"
)

// issueNode issues a certificate for node id, named by its common name and
// its node URI.
func issueNode(t *testing.T, ca *testcert.CA, id string) (certFile, keyFile string) {
	return ca.Issue(t, id, NodeURI(id))
}

// tlsCluster starts n nodes with mutual TLS, each with a certificate that
// names it, clients required to present certificates, and the admins.
func tlsCluster(t *testing.T, ca *testcert.CA, n int, admins ...string) *testCluster {
	return newTestCluster(t, n, func(cfg *Config) {
		cert, key := issueNode(t, ca, cfg.ID)
		cfg.TLS = &TLSConfig{CertFile: cert, KeyFile: key, CAFile: ca.File, ClientAuth: true, Admins: admins}
	})
}

// clientTLS is the TLS configuration of a test's client of 127.0.0.1 that
// trusts ca and presents the certificate in cert and key (none if cert is
// "").
func clientTLS(ca *testcert.CA, cert, key string) (*tls.Config, error) {
	conf := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		conf.Certificates = []tls.Certificate{kp}
	}
	return conf, nil
}

// dialTLS connects to a node's client address with an optional client
// certificate.
func dialTLS(addr string, ca *testcert.CA, cert, key string) (*transport.Conn, error) {
	conf, err := clientTLS(ca, cert, key)
	if err != nil {
		return nil, err
	}
	nc, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		return nil, err
	}
	return transport.NewConn(nc, nil)
}

// With mutual TLS, raft runs between the nodes, a client with a
// certificate from the cluster's CA is served, and clients without one, or
// with one from another CA, or without TLS, are refused. The nodes, which
// are no admins, join and are promoted (newTestCluster waits for it), and
// the leader's status polls are answered, with their node certificates.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "cluster")
	other := testcert.NewCA(t, dir, "other")
	c := tlsCluster(t, ca, 3)
	leader := c.waitLeader()
	if v := leader.voters(); v != 3 {
		t.Fatalf("leader sees %d voters", v)
	}
	cert, key := ca.Issue(t, "client")
	conn, err := dialTLS(leader.ClientAddr(), ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	idx := appendN(t, conn, "secret", 3)
	for _, n := range c.nodes {
		waitCaughtUp(t, n, idx[2])
	}

	call := func(conn *transport.Conn, err error) error {
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return conn.Call(ctx, transport.OpStatus, &transport.StatusRequest{}, &transport.StatusResponse{})
	}
	if err := call(dialTLS(leader.ClientAddr(), ca, "", "")); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	ocert, okey := other.Issue(t, "stranger")
	if err := call(dialTLS(leader.ClientAddr(), ca, ocert, okey)); err == nil {
		t.Fatal("a client with a certificate from another CA was served")
	}
	plain, err := net.Dial("tcp", leader.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	if err := call(transport.NewConn(plain, nil)); err == nil {
		t.Fatal("a plain TCP client was served")
	}

	for _, n := range c.nodes {
		if n == leader {
			continue
		}
		polled := n.metrics.requests.WithLabelValues(transport.OpStatus.String(), "ok")
		waitFor(t, n.ID()+" answers the leader's status polls", func() bool { return counterValue(polled) > 0 })
	}
	for _, n := range c.nodes {
		var m dto.Metric
		n.metrics.requests.WithLabelValues(transport.OpJoin.String(), transport.CodePermissionDenied.String()).Write(&m)
		if v := m.GetCounter().GetValue(); v != 0 {
			t.Errorf("%s refused %v joins", n.ID(), v)
		}
	}
}

// With TLS the admin port speaks HTTPS; with client authentication,
// /metrics, /status and the profiles need a client certificate, /health
// and /ready do not.
func TestAdminPortHTTPS(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "cluster")
	c := newTestCluster(t, 1, func(cfg *Config) {
		cert, key := issueNode(t, ca, cfg.ID)
		cfg.TLS = &TLSConfig{CertFile: cert, KeyFile: key, CAFile: ca.File, ClientAuth: true}
		cfg.AdminAddr = "127.0.0.1:0"
		cfg.Pprof = true
	})
	n := c.waitLeader()
	get := func(conf *tls.Config, url string) (int, string) {
		t.Helper()
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: conf}}
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	anon := &tls.Config{RootCAs: ca.Pool}
	withCert := &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{ca.KeyPair(t, "prometheus")}}
	if !strings.HasPrefix(n.AdminURL(), "https://") {
		t.Fatalf("admin URL %s under TLS", n.AdminURL())
	}
	for _, tc := range []struct {
		conf *tls.Config
		path string
		want int
	}{
		{anon, "/health", http.StatusOK},
		{anon, "/ready", http.StatusOK},
		{anon, "/metrics", http.StatusUnauthorized},
		{anon, "/status", http.StatusUnauthorized},
		{withCert, "/metrics", http.StatusOK},
		{withCert, "/status", http.StatusOK},
		{anon, "/debug/pprof/", http.StatusUnauthorized},
		{anon, "/debug/pprof/heap", http.StatusUnauthorized},
		{anon, "/debug/pprof/profile?seconds=1", http.StatusUnauthorized},
		{withCert, "/debug/pprof/", http.StatusOK},
		{withCert, "/debug/pprof/heap", http.StatusOK},
	} {
		if code, body := get(tc.conf, n.AdminURL()+tc.path); code != tc.want {
			t.Errorf("GET %s (client certificate: %v): %d %s, want %d", tc.path, tc.conf == withCert, code, body, tc.want)
		}
	}
	if code, _ := get(nil, "http://"+n.AdminAddr()+"/health"); code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the admin port: %d, want 400", code)
	}
}
