// Package testaddr picks free TCP ports on 127.0.0.1 for tests that must
// name an address before the server that listens on it starts: a
// cluster's bootstrap list, a restored member. It is for tests only.
//
// A port taken by listening on port 0 and closed again lies in the
// kernel's ephemeral range, where the next outgoing connection or
// listener on port 0 of any process may take it before the server binds
// it, which happened to tests running beside other clusters. So the ports
// come from below that range (net.ipv4.ip_local_port_range), picked at
// random and checked free by listening on them; where the range leaves no
// room below it, they come from port 0 as before.
//
// Concurrency: Ports and Addrs may be called from several goroutines and
// processes at once; two callers picking the same port at the same
// moment is possible, if unlikely (one in thousands per port).
package testaddr

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port picked.
const lowest = 10000

// Ports returns n distinct ports that were free on 127.0.0.1 a moment
// ago, outside the ephemeral range when it leaves room below it.
func Ports(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	high := ephemeralLow()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if high-lowest >= 1000 && tries < 1000 {
			addr = "127.0.0.1:" + strconv.Itoa(lowest+rand.IntN(high-lowest))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // taken: another
			}
			return nil, fmt.Errorf("testaddr: %w", err)
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Addrs is Ports as "127.0.0.1:port" addresses.
func Addrs(n int) ([]string, error) {
	ports, err := Ports(n)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	return out, nil
}

// ephemeralLow returns the first port of the kernel's ephemeral range, or
// lowest when it cannot be read (nothing is picked below it then).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lowest
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lowest
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low < lowest {
		return lowest
	}
	return low
}
