package node

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/raftlog/raftlog/transport"
)

// Who may do what. With TLS (Config.TLS) every certificate is signed by
// the one cluster CA (TLSConfig.CAFile), and what a certificate may do
// depends on the identity it carries:
//
//   - A node's certificate names the node with a URI subject alternative
//     name, NodeURI(id): raftlog://node/<id>. A node refuses to start with
//     a certificate that does not name it. The raft port (raft traffic and
//     probes, probe.go) accepts only certificates that name a node: a
//     client's certificate fails the TLS handshake (the handshake's
//     VerifyConnection), before a byte of raft is read, and is counted in
//     raftlog_peer_connections_refused_total{reason="not_a_node"}. A node
//     dialling a raft port likewise checks that the other end is a node.
//     The raft port checks that a peer is a node, not which node: raft's
//     messages name their sender, and a holder of any node certificate can
//     speak for any member. Node certificates are membership credentials.
//   - A client's identity is its certificate's subject common name (CN),
//     for example "app1". The admin operations (Join for another node,
//     Remove, TransferLeadership, Trim, Backup, CreateLog, DeleteLog, and
//     any op added later that is not listed as open below) need a client
//     whose name is in TLSConfig.Admins (--tls-admins). Append, Read,
//     Tail, Status, ListLogs and DescribeLog need only what the client
//     listener admits: a certificate from the CA with
//     TLSConfig.ClientAuth, any TLS client without it. A refusal is a
//     PermissionDenied error naming the client, the operation and the
//     admins, for example `client "app1" may not trim (admins: ops, ci)`,
//     counted in raftlog_requests_refused_total{op,reason="permission"}.
//   - Nodes talk to each other over the client protocol too, with their
//     node certificates: a new member's Join, a promotion and a member's
//     address registration (all Joins for the node itself, which a node may
//     send for itself only) and the leader's Status polls (space.go). A
//     node is no admin: it cannot remove, trim or add another node.
//
// Why a URI SAN and one CA: a name in its own namespace cannot be taken for
// a client's (a client "n1" is not node n1, as it would be with CN = node
// id), and it binds the certificate to one node id, which Join checks.
// etcd's --peer-cert-allowed-cn, CockroachDB's "node" user and NATS's
// verify_and_map likewise decide membership by the certificate's identity
// under one CA. A separate peer CA (etcd's --peer-trusted-ca-file) is not
// offered: a node presents one certificate on every port, so clients would
// have to trust the peer CA anyway.
//
// Without TLS there are no identities, and every client that reaches the
// client port may do everything, the admin operations included: run
// without TLS only where the network is trusted.

// nodeURIPrefix starts the URI subject alternative name of a node's
// certificate.
const nodeURIPrefix = "raftlog://node/"

// NodeURI returns the URI subject alternative name a node's certificate
// carries to name node id: raftlog://node/<id>, the id path-escaped.
func NodeURI(id string) string { return nodeURIPrefix + url.PathEscape(id) }

// errNotANode is the error of a certificate that names no node.
var errNotANode = errors.New("the certificate names no node")

// certNodeID returns the node a certificate names, or an error wrapping
// errNotANode when it names none, or several.
func certNodeID(c *x509.Certificate) (string, error) {
	if c == nil {
		return "", errNotANode
	}
	id := ""
	for _, u := range c.URIs {
		if u.Scheme != "raftlog" || u.Host != "node" {
			continue
		}
		got := strings.TrimPrefix(u.Path, "/")
		switch {
		case got == "" || strings.Contains(got, "/"):
			return "", fmt.Errorf("%w: malformed node URI %s", errNotANode, u)
		case id != "" && got != id:
			return "", fmt.Errorf("%w: it names nodes %q and %q", errNotANode, id, got)
		}
		id = got
	}
	if id == "" {
		return "", fmt.Errorf("%w (no URI subject alternative name %s<id>; common name %q)", errNotANode, nodeURIPrefix, c.Subject.CommonName)
	}
	return id, nil
}

// identity is who sent a request, from its connection's TLS state.
type identity struct {
	certified bool   // it presented a certificate that the CA signed
	name      string // the certificate's common name
	node      string // the node the certificate names, "" if none
}

// identify returns the identity of a request's client (transport hands
// the connection's TLS state to the handler's ctx).
func identify(ctx context.Context) identity {
	st := transport.ConnectionState(ctx)
	if st == nil || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return identity{}
	}
	leaf := st.VerifiedChains[0][0]
	id := identity{certified: true, name: leaf.Subject.CommonName}
	id.node, _ = certNodeID(leaf)
	return id
}

// String names the identity in a refusal.
func (id identity) String() string {
	switch {
	case !id.certified:
		return "a client without a certificate"
	case id.node != "":
		return fmt.Sprintf("node %q", id.node)
	case id.name == "":
		return "a client whose certificate has no common name"
	}
	return fmt.Sprintf("client %q", id.name)
}

// Reasons of raftlog_requests_refused_total and
// raftlog_peer_connections_refused_total.
const (
	refusedPermission = "permission"
	refusedNotANode   = "not_a_node"
	// refusedOtherCluster: a raft connection whose hello named another
	// cluster (hello.go).
	refusedOtherCluster = "other_cluster"
	// refusedJoining: a raft connection that came while the node, joining
	// a cluster, had not yet learnt its id from its join target
	// (joinid.go).
	refusedJoining = "joining"
)

// authorize refuses a request its client may not make, with
// PermissionDenied. Without TLS everything is allowed.
func (n *Node) authorize(ctx context.Context, op transport.Op, req any) error {
	if n.tls == nil {
		return nil
	}
	var what, hint string // the refused action, after "may not"; why
	id := identify(ctx)
	switch r := req.(type) {
	case *transport.AppendRequest, *transport.ReadRequest, *transport.TailRequest, *transport.StatusRequest,
		*transport.ListLogsRequest, *transport.DescribeLogRequest:
		return nil // the listener admitted the client: that is enough
	case *transport.JoinRequest:
		if id.node != "" && id.node == r.NodeID {
			return nil // a node joining, promoted or registering itself
		}
		what = fmt.Sprintf("join node %q", r.NodeID)
		if id.node != "" {
			hint = "a node may join only itself; "
		}
	case *transport.RemoveRequest:
		what = fmt.Sprintf("remove node %q", r.NodeID)
	case *transport.TransferLeadershipRequest:
		what = "transfer leadership"
	case *transport.TrimRequest:
		what = "trim"
	case *transport.BackupRequest:
		what = "take a backup"
		if r.Log != "" {
			what = fmt.Sprintf("take a backup of log %q", r.Log)
		}
	case *transport.CreateLogRequest:
		what = fmt.Sprintf("create log %q", r.Name)
	case *transport.DeleteLogRequest:
		what = fmt.Sprintf("delete log %q", r.Name)
	case *transport.RestoreLogRequest:
		what = fmt.Sprintf("restore log %q", r.Log)
	default:
		what = "run " + op.String()
	}
	if id.certified && n.tls.admins[id.name] {
		return nil
	}
	admins := "no admins are configured (--tls-admins)"
	if len(n.tls.adminNames) > 0 {
		admins = "admins: " + strings.Join(n.tls.adminNames, ", ")
	}
	msg := fmt.Sprintf("%s may not %s (%s%s)", id, what, hint, admins)
	n.metrics.refusedRequests.WithLabelValues(op.String(), refusedPermission).Inc()
	n.cfg.Logger.Warn("refused a request", "op", op.String(), "why", msg)
	return &transport.Error{Code: transport.CodePermissionDenied, Message: msg}
}

// refusedPeer counts and logs a raft connection refused because its
// certificate names no node.
func (n *Node) refusedPeer(remote net.Addr, cert *x509.Certificate, err error) {
	n.metrics.refusedPeers.WithLabelValues(refusedNotANode).Inc()
	n.cfg.Logger.Warn("refused a raft connection: its certificate is not a node's", "remote", remote,
		"common_name", cert.Subject.CommonName, "error", err)
}
