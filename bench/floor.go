package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The floor of one synchronous append, measured in the same run as the
// cells, before each round's "1 in flight" cells. hashicorp/raft stores an
// entry on the leader before it sends it to the followers, so an append
// acknowledged in sync mode waits, one after the other, for the client's
// request to reach the leader, the leader's fdatasync, the AppendEntries
// round trip with a follower's fdatasync in it, and the reply: two
// fdatasyncs and two loopback round trips, with no CPU spent anywhere.
// The floor is what those cost by themselves on this machine, measured
// with nothing else running: a 1 KiB pwrite + fdatasync over blocks
// written before (as the commit log's zero-filled segments are), and a
// 1 KiB ping-pong over loopback TCP between two goroutines.

// floorSamples is how many fdatasyncs and round trips one measurement
// takes.
const floorSamples = 400

// floorFileSize is the size of the file the fdatasyncs write into.
const floorFileSize = 8 << 20

// floor is one measurement of the floor.
type floor struct {
	FsyncP50 float64 `json:"fdatasync_p50_s"` // 1 KiB pwrite + fdatasync over written blocks
	RTTP50   float64 `json:"loopback_rtt_p50_s"`
}

// syncAppend returns the floor of one synchronous append: two fdatasyncs
// and two round trips.
func (f floor) syncAppend() float64 { return 2*f.FsyncP50 + 2*f.RTTP50 }

// measureFloor measures the floor with n samples of each kind, writing a
// file in dir that it removes.
func measureFloor(dir string, n int) (floor, error) {
	fs, err := fsyncP50(dir, n)
	if err != nil {
		return floor{}, fmt.Errorf("fdatasync floor: %w", err)
	}
	rtt, err := loopbackP50(n)
	if err != nil {
		return floor{}, fmt.Errorf("loopback floor: %w", err)
	}
	return floor{FsyncP50: fs, RTTP50: rtt}, nil
}

// fsyncP50 returns the median latency of a 1 KiB pwrite + fdatasync at
// successive offsets of a file whose blocks were zero-filled and synced
// first.
func fsyncP50(dir string, n int) (p50 float64, err error) {
	path := filepath.Join(dir, "floor")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer func() {
		err = errors.Join(err, f.Close(), os.Remove(path))
	}()
	zero := make([]byte, 1<<20)
	for off := 0; off < floorFileSize; off += len(zero) {
		if _, err := f.WriteAt(zero, int64(off)); err != nil {
			return 0, err
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return 0, err
	}
	rec := make([]byte, 1024)
	for i := range rec {
		rec[i] = byte(i)
	}
	s := newSamplerLimit(0, n)
	for i := range n {
		off := int64(i*len(rec)) % (floorFileSize - int64(len(rec)))
		start := time.Now()
		if _, err := f.WriteAt(rec, off); err != nil {
			return 0, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return 0, err
		}
		s.add(time.Since(start))
	}
	return s.percentiles(50)[0], nil
}

// loopbackP50 returns the median round trip of a 1 KiB message over a TCP
// connection on 127.0.0.1, echoed by another goroutine.
func loopbackP50(n int) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	echoed := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			echoed <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 1024)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				echoed <- err
				return
			}
			if _, err := c.Write(buf); err != nil {
				echoed <- err
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	msg := make([]byte, 1024)
	s := newSamplerLimit(0, n)
	for range n {
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			c.Close()
			return 0, err
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			c.Close()
			return 0, err
		}
		s.add(time.Since(start))
	}
	c.Close()
	if err := <-echoed; err != nil {
		return 0, fmt.Errorf("echo: %w", err)
	}
	return s.percentiles(50)[0], nil
}

// floorWorkload is the workload before whose cells each round measures the
// floor.
const floorWorkload = "1x1"

// printFloor writes the floor measured in the run, medians over its
// rounds, next to raftlog's sync p50 with 1 in flight.
func (r *clusterReport) printFloor(out io.Writer) {
	if len(r.floors) == 0 {
		return
	}
	var fs, rtt, sum []float64
	for _, f := range r.floors {
		fs = append(fs, f.FsyncP50)
		rtt = append(rtt, f.RTTP50)
		sum = append(sum, f.syncAppend())
	}
	fmt.Fprintf(out, "Floor of one sync append in this run (medians of %d measurements, one before each round's 1-in-flight cells): "+
		"a 1 KiB pwrite + fdatasync over written blocks, p50 %s, and a 1 KiB loopback TCP round trip, p50 %s. "+
		"hashicorp/raft stores an entry on the leader before it replicates it, so a sync append waits for two of each in a row: %s",
		len(r.floors), fmtSeconds(median(fs)), fmtSeconds(median(rtt)), fmtSeconds(median(sum)))
	if hasSystem(r.cfg.systems, sysRaftlogSync) {
		fmt.Fprintf(out, ", against raftlog sync's p50 of %s with 1 in flight", fmtSeconds(r.median(floorWorkload, sysRaftlogSync, mLatP50)))
	}
	fmt.Fprintf(out, ".\n\n")
}
