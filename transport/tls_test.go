package transport

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/internal/testcert"
)

// A handler learns the identity of the client from the TLS state Serve
// hands it: the verified certificate of a TLS client, nothing for a plain
// connection. A client that never finishes its handshake is dropped after
// FrameTimeout, not the idle timeout.
func TestServeHandsOverTLSState(t *testing.T) {
	ca := testcert.NewCA(t, t.TempDir(), "ca")
	serverCert := ca.KeyPair(t, "server")
	clientCert := ca.KeyPair(t, "app1")
	seen := make(chan string, 2)
	h := funcHandler{handle: func(ctx context.Context, op Op, req any) (any, error) {
		st := ConnectionState(ctx)
		switch {
		case st == nil:
			seen <- "plain"
		case len(st.VerifiedChains) == 0:
			seen <- "tls without a verified certificate"
		default:
			seen <- st.VerifiedChains[0][0].Subject.CommonName
		}
		return &StatusResponse{NodeID: "n1"}, nil
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool}
	lim := Limits{FrameTimeout: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 10)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { errs <- Serve(ctx, tls.Server(nc, conf), h, lim) })
		}
	})
	plainLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		nc, err := plainLn.Accept()
		if err == nil {
			errs <- Serve(ctx, nc, h, lim)
		}
	})
	t.Cleanup(func() { cancel(); ln.Close(); plainLn.Close(); wg.Wait() })

	for _, tc := range []struct {
		name string
		dial func() (net.Conn, error)
		want string
	}{
		{"client certificate", func() (net.Conn, error) {
			return tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{clientCert}})
		}, "app1"},
		{"no client certificate", func() (net.Conn, error) {
			return tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool})
		}, "tls without a verified certificate"},
		{"plain", func() (net.Conn, error) { return net.Dial("tcp", plainLn.Addr().String()) }, "plain"},
	} {
		nc, err := tc.dial()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c, err := NewConn(nc, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Call(testCtx(t), OpStatus, &StatusRequest{}, &StatusResponse{}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c.Close()
		if got := <-seen; got != tc.want {
			t.Errorf("%s: the handler saw %q, want %q", tc.name, got, tc.want)
		}
	}

	// A TCP client that never starts its handshake.
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for {
		select {
		case err := <-errs:
			if err != nil {
				return // the silent client's Serve gave up on the handshake
			}
		case <-time.After(testTimeout):
			t.Fatal("Serve still waits for a handshake that never comes")
		}
	}
}
