// Package testcert makes certificate authorities and certificates for
// tests: an ECDSA P-256 CA per call of NewCA, and leaf certificates for
// 127.0.0.1 that it signs, written as PEM files into a test's temporary
// directory. It is for tests only; nothing it makes is fit for use
// elsewhere (the keys live in files readable by the user, the certificates
// a day).
//
// Concurrency: a CA may issue certificates from several goroutines.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority generated for a test.
type CA struct {
	// Cert is the CA's certificate; immutable.
	Cert *x509.Certificate
	// File is the PEM file holding Cert; immutable.
	File string
	// Pool holds Cert; immutable.
	Pool *x509.CertPool

	key    *ecdsa.PrivateKey // immutable
	dir    string            // immutable: where certificates are written
	serial atomic.Int64      // the last serial number issued
}

// NewCA makes a CA whose certificate names name, and writes its
// certificate to dir/name-ca.pem.
func NewCA(t testing.TB, dir, name string) *CA {
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
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, File: filepath.Join(dir, name+"-ca.pem"), Pool: x509.NewCertPool(), key: key, dir: dir}
	ca.Pool.AddCert(cert)
	ca.serial.Store(1)
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate with the common name name and the IP address
// 127.0.0.1, valid for server and client authentication, with the URI
// subject alternative names uris (for example a node's identity). It
// writes the certificate and its key to dir/name.pem and dir/name-key.pem
// and returns the two files.
func (ca *CA) Issue(t testing.TB, name string, uris ...string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatalf("testcert: URI %q: %v", u, err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
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

// KeyPair is Issue's certificate, loaded.
func (ca *CA) KeyPair(t testing.TB, name string, uris ...string) tls.Certificate {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(ca.Issue(t, name, uris...))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
