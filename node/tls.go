package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/hashicorp/raft"
)

// TLSConfig configures TLS for a node, from PEM files.
//
// Raft traffic between nodes is always mutual TLS when TLS is configured:
// each node presents its certificate and accepts only peers whose
// certificate CAFile signed. The client protocol is TLS; with ClientAuth it
// is mutual TLS too, and a client without a certificate CAFile signed is
// refused during the handshake.
type TLSConfig struct {
	// CertFile and KeyFile are the node's certificate chain and private
	// key. The certificate must name the addresses peers and clients dial
	// (IP or DNS subject alternative names) and allow both server and
	// client authentication.
	CertFile, KeyFile string
	// CAFile holds the certificates of the authorities that sign nodes'
	// and (with ClientAuth) clients' certificates.
	CAFile string
	// ClientAuth requires clients of the client protocol to present a
	// certificate signed by CAFile.
	ClientAuth bool
}

// tlsConfigs are the crypto/tls configurations of a node.
type tlsConfigs struct {
	client *tls.Config // the client-protocol listener
	raftIn *tls.Config // the raft listener
	cert   tls.Certificate
	pool   *x509.CertPool
}

// LoadCertPool reads PEM certificates from a file into a pool.
func LoadCertPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

func (t *TLSConfig) load() (*tlsConfigs, error) {
	if t.CertFile == "" || t.KeyFile == "" || t.CAFile == "" {
		return nil, errors.New("node: TLS needs a certificate, a key and a CA file")
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("node: TLS key pair %s, %s: %w", t.CertFile, t.KeyFile, err)
	}
	pool, err := LoadCertPool(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	c := &tlsConfigs{cert: cert, pool: pool}
	c.client = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientAuth {
		c.client.ClientAuth = tls.RequireAndVerifyClientCert
		c.client.ClientCAs = pool
	}
	c.raftIn = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	}
	return c, nil
}

// dialRaft dials a peer's raft address with mutual TLS.
func (c *tlsConfigs) dialRaft(address string, timeout time.Duration) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	d := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: timeout},
		Config: &tls.Config{
			Certificates: []tls.Certificate{c.cert},
			RootCAs:      c.pool,
			ServerName:   host,
			MinVersion:   tls.VersionTLS13,
		},
	}
	return d.Dial("tcp", address)
}

// streamLayer is a raft.StreamLayer over a listener and a dial function
// (TCP or TLS).
type streamLayer struct {
	net.Listener
	dial      func(address string, timeout time.Duration) (net.Conn, error)
	advertise net.Addr // the address peers dial, which raft takes for its own
}

// Addr implements net.Listener: it returns the advertised address, which
// raft's transport reports as the node's own (raft.Transport.LocalAddr).
func (s *streamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.Listener.Addr()
}

// tcpAddrString is a TCP address kept as given (a host name stays one).
type tcpAddrString string

// Network implements net.Addr.
func (tcpAddrString) Network() string { return "tcp" }

// String implements net.Addr.
func (a tcpAddrString) String() string { return string(a) }

// Dial implements raft.StreamLayer.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.dial(string(address), timeout)
}

func dialTCP(address string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", address, timeout)
}

// dialClient dials another node's client address, with TLS (presenting
// this node's certificate) when configured.
func (n *Node) dialClient(ctx context.Context, addr string) (net.Conn, error) {
	if n.tls == nil {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d := &tls.Dialer{Config: &tls.Config{
		Certificates: []tls.Certificate{n.tls.cert},
		RootCAs:      n.tls.pool,
		ServerName:   host,
		MinVersion:   tls.VersionTLS12,
	}}
	return d.DialContext(ctx, "tcp", addr)
}
