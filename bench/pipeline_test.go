package main

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestPipelineStoresEverywhere runs the floor's leader and two followers
// in this process and checks that each request is answered with its first
// position, after the leader and a follower stored it, and that every
// file holds every record at its position, around the ring.
func TestPipelineStoresEverywhere(t *testing.T) {
	const (
		size  = 1 << 10
		count = 3
		ring  = 8 * size // the third request wraps around
		reqs  = 4
	)
	dir := t.TempDir()
	var files []*pipelineFile
	var peers []net.Conn
	followed := make(chan error, 2)
	for i := range 2 {
		f, err := openPipelineFile(filepath.Join(dir, "f"+string(rune('1'+i))), ring)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			ln.Close()
			if err != nil {
				followed <- err
				return
			}
			followed <- follow(c, f)
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, c)
	}
	leaderFile, err := openPipelineFile(filepath.Join(dir, "leader"), ring)
	if err != nil {
		t.Fatal(err)
	}
	as := newAcks(len(peers))
	for _, p := range peers {
		go as.read(p)
	}
	client, server := net.Pipe()
	led := make(chan error, 1)
	next := uint64(1)
	go func() { led <- lead(server, leaderFile, peers, as, &next) }()

	rec := func(n int) []byte { // record n, from 1
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(n*7 + i)
		}
		return b
	}
	for r := range reqs {
		buf := make([]byte, pipelineHeader, pipelineHeader+count*size)
		binary.LittleEndian.PutUint32(buf[0:], count)
		binary.LittleEndian.PutUint32(buf[4:], size)
		for i := range count {
			buf = append(buf, rec(r*count+i+1)...)
		}
		if _, err := client.Write(buf); err != nil {
			t.Fatal(err)
		}
		var ans [8]byte
		if _, err := io.ReadFull(client, ans[:]); err != nil {
			t.Fatal(err)
		}
		if got, want := binary.LittleEndian.Uint64(ans[:]), uint64(r*count+1); got != want {
			t.Fatalf("request %d answered with position %d, want %d", r, got, want)
		}
	}
	client.Close()
	if err := <-led; err != io.EOF {
		t.Fatalf("leader: %v, want EOF once the client closed", err)
	}
	for _, p := range peers {
		p.Close()
	}
	for range peers {
		if err := <-followed; err != nil {
			t.Fatalf("follower: %v", err)
		}
	}
	last := reqs * count
	for name, f := range map[string]*pipelineFile{"leader": leaderFile, "follower 1": files[0], "follower 2": files[1]} {
		data, err := os.ReadFile(f.f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for n := last - ring/size + 1; n <= last; n++ {
			off := (n - 1) * size % ring
			if !slices.Equal(data[off:off+size], rec(n)) {
				t.Errorf("%s: record %d is not at offset %d", name, n, off)
			}
		}
	}
}

// TestFloorOnlyWhenAsked checks that -systems all leaves the floor out and
// that it can be named.
func TestFloorOnlyWhenAsked(t *testing.T) {
	all, err := selectSystems("all")
	if err != nil {
		t.Fatal(err)
	}
	if hasSystem(all, sysFloor) || len(all) != len(systemKinds())-1 {
		t.Errorf("all = %v, want every system but the floor", keysOfSystems(all))
	}
	some, err := selectSystems(sysRaftlogSync + "," + sysFloor)
	if err != nil || len(some) != 2 || !hasSystem(some, sysFloor) {
		t.Errorf("selectSystems(raftlog-sync,floor) = %v, %v", keysOfSystems(some), err)
	}
}

func keysOfSystems(ss []systemKind) []string {
	var ks []string
	for _, s := range ss {
		ks = append(ks, s.key)
	}
	return ks
}
