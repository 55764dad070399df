package node

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/internal/testcert"
	"github.com/raftlog/raftlog/transport"
)

// probeWith opens a TLS connection to a raft address with the certificate
// (none if cert is ""), sends a probe and returns the answer.
func probeWith(addr string, ca *testcert.CA, cert, key string) (probeAnswer, error) {
	var a probeAnswer
	conf, err := clientTLS(ca, cert, key)
	if err != nil {
		return a, err
	}
	conf.MinVersion = tls.VersionTLS13 // the raft port's
	c, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		return a, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, probeMagic+`{"id":"tester"}`+"\n"); err != nil {
		return a, err
	}
	line, err := readLine(bufio.NewReader(c))
	if err != nil {
		return a, err
	}
	return a, json.Unmarshal(line, &a)
}

// The raft port takes a node's certificate and refuses, in the TLS
// handshake, a client's certificate from the same CA, counting it; a node
// dialling a raft port refuses one that is not a node's.
func TestRaftPortNeedsNodeCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "cluster")
	c := tlsCluster(t, ca, 1)
	n := c.waitLeader()

	cert, key := ca.Issue(t, "app1")
	if a, err := probeWith(n.RaftAddr(), ca, cert, key); err == nil {
		t.Fatalf("a client certificate was answered on the raft port: %+v", a)
	} else if !strings.Contains(err.Error(), "bad certificate") {
		t.Fatalf("a client certificate on the raft port: %v, want a bad certificate alert", err)
	}
	if got := counterValue(n.metrics.refusedPeers.WithLabelValues(refusedNotANode)); got != 1 {
		t.Errorf("raftlog_peer_connections_refused_total{reason=not_a_node} = %v, want 1", got)
	}
	// A node's certificate, of a node that is no member yet (as a new
	// node probes before it joins), is answered.
	cert, key = issueNode(t, ca, "n9")
	a, err := probeWith(n.RaftAddr(), ca, cert, key)
	if err != nil || a.ID != "n1" {
		t.Fatalf("a node certificate on the raft port: %+v, %v", a, err)
	}

	// A raft "port" that presents a client's certificate.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fake := &tls.Config{Certificates: []tls.Certificate{ca.KeyPair(t, "app2")}, ClientAuth: tls.RequireAnyClientCert}
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		tc := tls.Server(nc, fake)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		tc.Handshake()
		io.Copy(io.Discard, tc)
	}()
	if _, err := n.tls.dialRaft(ln.Addr().String(), 10*time.Second); !errors.Is(err, errNotANode) {
		t.Fatalf("dialling a raft port with a client certificate: %v, want %v", err, errNotANode)
	}
}

// A node refuses to start with a certificate that does not name it.
func TestNodeCertificateMustNameNode(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "cluster")
	plainCert, plainKey := ca.Issue(t, "n1")
	otherCert, otherKey := issueNode(t, ca, "n2")
	for _, tc := range []struct{ name, cert, key, want string }{
		{"no node URI", plainCert, plainKey, "names no node"},
		{"another node", otherCert, otherKey, `names node "n2", not this node "n1"`},
	} {
		cfg := testConfig(t, dir, "n1")
		cfg.Bootstrap = []Peer{{ID: "n1", RaftAddr: "127.0.0.1:0"}}
		cfg.TLS = &TLSConfig{CertFile: tc.cert, KeyFile: tc.key, CAFile: ca.File}
		n, err := Start(context.Background(), cfg)
		if err == nil {
			n.Close()
			t.Fatalf("%s: started", tc.name)
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), NodeURI("n1")) {
			t.Errorf("%s: %v, want %q and %s", tc.name, err, tc.want, NodeURI("n1"))
		}
	}
}

// refused checks that err is PermissionDenied with the message want.
func refused(t *testing.T, what string, err error, want string) {
	t.Helper()
	var te *transport.Error
	if !errors.As(err, &te) || te.Code != transport.CodePermissionDenied || te.Message != want {
		t.Errorf("%s: %v, want PermissionDenied %q", what, err, want)
	}
}

// Under TLS, the admin operations need an admin: a client that is no
// admin, and a node for anything but its own join, are refused with
// PermissionDenied (counted), while they may append, read, tail and ask
// for status; an admin may do everything.
func TestAdminOperationsNeedAdmin(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "cluster")
	c := tlsCluster(t, ca, 3, "ops", "ci")
	leader := c.waitLeader()
	dialAs := func(cert, key string) *transport.Conn {
		t.Helper()
		conn, err := dialTLS(leader.ClientAddr(), ca, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	app := dialAs(ca.Issue(t, "app1"))
	node2 := dialAs(issueNode(t, ca, "n2"))
	ops := dialAs(ca.Issue(t, "ops"))

	// Appends, reads, tails and status: any client.
	idx := appendN(t, app, "r", 3)
	rr, err := call[transport.ReadResponse](t, app, transport.OpRead, &transport.ReadRequest{From: idx[0], MaxRecords: 10, MaxBytes: 1 << 20})
	if err != nil || len(rr.Records) != 3 {
		t.Fatalf("read by a client that is no admin: %+v, %v", rr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tail, err := app.OpenStream(ctx, transport.OpTail, &transport.TailRequest{From: idx[0], MaxRecords: 10, MaxBytes: 1 << 20}, 4)
	if err != nil {
		t.Fatal(err)
	}
	var item transport.TailItem
	if err := tail.Recv(&item); err != nil || len(item.Records) == 0 {
		t.Fatalf("tail by a client that is no admin: %+v, %v", item, err)
	}
	tail.Close()
	if _, err := call[transport.StatusResponse](t, app, transport.OpStatus, &transport.StatusRequest{}); err != nil {
		t.Fatalf("status by a client that is no admin: %v", err)
	}

	// The admin operations: refused to the client and to a node.
	const admins = "admins: ops, ci"
	join := &transport.JoinRequest{NodeID: "n9", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}
	for _, tc := range []struct {
		what string
		op   transport.Op
		req  any
		want string
	}{
		{"trim", transport.OpTrim, &transport.TrimRequest{Below: idx[1]}, `client "app1" may not trim (` + admins + `)`},
		{"remove", transport.OpRemove, &transport.RemoveRequest{NodeID: "n3"}, `client "app1" may not remove node "n3" (` + admins + `)`},
		{"transfer", transport.OpTransferLeadership, &transport.TransferLeadershipRequest{}, `client "app1" may not transfer leadership (` + admins + `)`},
		{"join", transport.OpJoin, join, `client "app1" may not join node "n9" (` + admins + `)`},
	} {
		_, err := call[struct{}](t, app, tc.op, tc.req)
		refused(t, "a client that is no admin: "+tc.what, err, tc.want)
	}
	_, err = call[struct{}](t, node2, transport.OpJoin, join)
	refused(t, "node n2 joining n9", err, `node "n2" may not join node "n9" (a node may join only itself; `+admins+`)`)
	_, err = call[struct{}](t, node2, transport.OpTrim, &transport.TrimRequest{Below: idx[1]})
	refused(t, "node n2 trimming", err, `node "n2" may not trim (`+admins+`)`)
	var total float64
	for _, op := range []transport.Op{transport.OpTrim, transport.OpRemove, transport.OpTransferLeadership, transport.OpJoin} {
		total += counterValue(leader.metrics.refusedRequests.WithLabelValues(op.String(), refusedPermission))
	}
	if total != 6 {
		t.Errorf("raftlog_requests_refused_total{reason=permission} sums to %v, want 6", total)
	}
	if st := leader.Status(); st.FirstIndex >= idx[1] || len(st.Members) != 3 {
		t.Fatalf("a refused operation took effect: %+v", st)
	}

	// An admin may do them all.
	if _, err := call[transport.JoinResponse](t, ops, transport.OpJoin, join); err != nil {
		t.Fatalf("join by an admin: %v", err)
	}
	if _, err := call[transport.RemoveResponse](t, ops, transport.OpRemove, &transport.RemoveRequest{NodeID: "n9"}); err != nil {
		t.Fatalf("remove by an admin: %v", err)
	}
	if _, err := call[transport.TrimResponse](t, ops, transport.OpTrim, &transport.TrimRequest{Below: idx[1]}); err != nil {
		t.Fatalf("trim by an admin: %v", err)
	}
	if _, err := call[transport.TransferLeadershipResponse](t, ops, transport.OpTransferLeadership, &transport.TransferLeadershipRequest{}); err != nil {
		t.Fatalf("transfer by an admin: %v", err)
	}
}

// With TLS but without client authentication, a client without a
// certificate may append but not trim, and an admin presents its
// certificate to trim. The admin port speaks HTTPS.
func TestTLSWithoutClientAuth(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "cluster")
	c := newTestCluster(t, 1, func(cfg *Config) {
		cert, key := issueNode(t, ca, cfg.ID)
		cfg.TLS = &TLSConfig{CertFile: cert, KeyFile: key, CAFile: ca.File, Admins: []string{"ops"}}
		cfg.AdminAddr = "127.0.0.1:0"
	})
	n := c.waitLeader()
	anon, err := dialTLS(n.ClientAddr(), ca, "", "")
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	idx := appendN(t, anon, "r", 2)
	_, err = call[transport.TrimResponse](t, anon, transport.OpTrim, &transport.TrimRequest{Below: idx[1]})
	refused(t, "trim without a certificate", err, "a client without a certificate may not trim (admins: ops)")
	opsCert, opsKey := ca.Issue(t, "ops")
	ops, err := dialTLS(n.ClientAddr(), ca, opsCert, opsKey)
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	if _, err := call[transport.TrimResponse](t, ops, transport.OpTrim, &transport.TrimRequest{Below: idx[1]}); err != nil {
		t.Fatalf("trim by an admin: %v", err)
	}

	if !strings.HasPrefix(n.AdminURL(), "https://") {
		t.Fatalf("admin URL %s under TLS", n.AdminURL())
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	for _, path := range []string{"/health", "/metrics"} {
		resp, err := hc.Get(n.AdminURL() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s without client authentication: %s", path, resp.Status)
		}
	}
}
