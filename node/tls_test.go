package node

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlog/raftlog/transport"
)

// testCA is a certificate authority generated for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
	file string // PEM of the CA certificate
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, dir: dir, file: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a certificate for 127.0.0.1 usable as server and client,
// and returns its cert and key files.
func (ca *testCA) issue(t *testing.T, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// dialTLS connects to a node's client address with an optional client
// certificate.
func dialTLS(addr string, ca *testCA, cert, key string) (*transport.Conn, error) {
	pool, err := LoadCertPool(ca.file)
	if err != nil {
		return nil, err
	}
	conf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		conf.Certificates = []tls.Certificate{kp}
	}
	nc, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		return nil, err
	}
	return transport.NewConn(nc, nil)
}

// With mutual TLS, raft runs between the nodes, a client with a
// certificate from the cluster's CA is served, and clients without one, or
// with one from another CA, or without TLS, are refused.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "cluster")
	other := newTestCA(t, dir, "other")
	c := newTestCluster(t, 3, func(cfg *Config) {
		cert, key := ca.issue(t, cfg.ID)
		cfg.TLS = &TLSConfig{CertFile: cert, KeyFile: key, CAFile: ca.file, ClientAuth: true}
	})
	leader := c.waitLeader()
	if v := leader.voters(); v != 3 {
		t.Fatalf("leader sees %d voters", v)
	}
	cert, key := ca.issue(t, "client")
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
	ocert, okey := other.issue(t, "stranger")
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
}
