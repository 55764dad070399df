package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// TLSConfig configures TLS for a node, from PEM files. Who may do what
// under it is in authz.go.
//
// Raft traffic between nodes is always mutual TLS when TLS is configured:
// each node presents its certificate, which must name it as a node (a URI
// subject alternative name NodeURI(id)), and accepts only peers whose
// certificate CAFile signed and that name a node. The client protocol is
// TLS; with ClientAuth it is mutual TLS too, and a client without a
// certificate CAFile signed is refused during the handshake. Without
// ClientAuth a client may still present a certificate, and must to run
// the admin operations.
type TLSConfig struct {
	// CertFile and KeyFile are the node's certificate chain and private
	// key. The certificate must name the addresses peers and clients dial
	// (IP or DNS subject alternative names), carry the node's identity
	// (the URI subject alternative name NodeURI(Config.ID)), and allow
	// both server and client authentication.
	CertFile, KeyFile string
	// CAFile holds the certificates of the authorities that sign nodes'
	// and clients' certificates.
	CAFile string
	// ClientAuth requires clients of the client protocol to present a
	// certificate signed by CAFile.
	ClientAuth bool
	// Admins are the client names (the common name of a client
	// certificate) that may run the admin operations: join another node,
	// remove, transfer leadership and trim. Empty: no client may.
	Admins []string
}

// tlsConfigs are the crypto/tls configurations of a node. Every field is
// set by load (refusedPeer by Node.start) before the listeners open, then
// immutable.
type tlsConfigs struct {
	client *tls.Config // the client-protocol listener
	raftIn *tls.Config // the raft listener
	admin  *tls.Config // the admin HTTP listener
	cert   tls.Certificate
	pool   *x509.CertPool
	// clientAuth: clients must present a certificate.
	clientAuth bool
	// admins are TLSConfig.Admins, as a set and in order.
	admins     map[string]bool
	adminNames []string
	// refusedPeer is called for each raft connection refused because its
	// certificate names no node; set before the listeners open.
	refusedPeer func(remote net.Addr, cert *x509.Certificate, err error)
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

// load reads the files and builds the configurations of node id, whose
// certificate must name it.
func (t *TLSConfig) load(id string) (*tlsConfigs, error) {
	if t.CertFile == "" || t.KeyFile == "" || t.CAFile == "" {
		return nil, errors.New("node: TLS needs a certificate, a key and a CA file")
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("node: TLS key pair %s, %s: %w", t.CertFile, t.KeyFile, err)
	}
	switch named, err := certNodeID(cert.Leaf); {
	case err != nil:
		return nil, fmt.Errorf("node: TLS certificate %s: %w; node %s needs the URI subject alternative name %s", t.CertFile, err, id, NodeURI(id))
	case named != id:
		return nil, fmt.Errorf("node: TLS certificate %s names node %q, not this node %q (%s)", t.CertFile, named, id, NodeURI(id))
	}
	pool, err := LoadCertPool(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	c := &tlsConfigs{cert: cert, pool: pool, clientAuth: t.ClientAuth, admins: map[string]bool{}}
	for _, a := range t.Admins {
		if a = strings.TrimSpace(a); a != "" && !c.admins[a] {
			c.admins[a] = true
			c.adminNames = append(c.adminNames, a)
		}
	}
	// Without ClientAuth a client may still present a certificate: the
	// admins and the other nodes do.
	c.client = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}
	if t.ClientAuth {
		c.client.ClientAuth = tls.RequireAndVerifyClientCert
	}
	// The admin server asks for a certificate but lets /health and /ready
	// be read without one (admin.go).
	c.admin = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}
	raftIn := &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	}
	// Each handshake gets a copy that knows the peer's address, for the
	// refusal's log line.
	c.raftIn = &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			conf := raftIn.Clone()
			remote := hello.Conn.RemoteAddr()
			conf.VerifyConnection = func(cs tls.ConnectionState) error {
				return c.verifyPeer(cs, remote)
			}
			return conf, nil
		},
	}
	return c, nil
}

// verifyPeer refuses a raft connection whose (verified) certificate names
// no node: a client's certificate, signed by the same CA, is not a
// member's.
func (c *tlsConfigs) verifyPeer(cs tls.ConnectionState, remote net.Addr) error {
	if len(cs.PeerCertificates) == 0 {
		return errNotANode // not reached: RequireAndVerifyClientCert
	}
	if _, err := certNodeID(cs.PeerCertificates[0]); err != nil {
		if c.refusedPeer != nil {
			c.refusedPeer(remote, cs.PeerCertificates[0], err)
		}
		return err
	}
	return nil
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
			// The raft port at the other end must be a node's too.
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errNotANode
				}
				if _, err := certNodeID(cs.PeerCertificates[0]); err != nil {
					return fmt.Errorf("raft peer %s: %w", address, err)
				}
				return nil
			},
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
