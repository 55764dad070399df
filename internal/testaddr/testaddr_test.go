package testaddr

import (
	"net"
	"testing"
)

// The addresses are distinct, their ports below the ephemeral range (where
// it leaves room), and free: a server can listen on each.
func TestAddrs(t *testing.T) {
	addrs, err := Addrs(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	high := ephemeralLow()
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s picked twice: %v", a, addrs)
		}
		seen[a] = true
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s is not free: %v", a, err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if high-lowest >= 1000 && (p < lowest || p >= high) {
			t.Fatalf("port %d outside [%d, %d), below the ephemeral range", p, lowest, high)
		}
	}
}
