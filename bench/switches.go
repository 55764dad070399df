package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Context switches of the server processes over a cell's window: on a
// machine where the three servers share two cores, what a round of
// replication costs is mostly wake-ups (README, "Node benchmarks"). Linux
// keeps the counts per thread (/proc/<pid>/task/<tid>/status); a thread
// that exits during the window takes its switches with it, which a Go
// server's threads rarely do.

// switchCounts maps "pid/tid" to the thread's context switches,
// voluntary and not.
type switchCounts map[string]int64

// switchesOf returns the context switches of every thread of procs.
func switchesOf(procs []*proc) (switchCounts, error) {
	c := switchCounts{}
	for _, p := range procs {
		if err := c.add(p.pid()); err != nil {
			return nil, fmt.Errorf("context switches of %s: %w", p.name, err)
		}
	}
	return c, nil
}

// add adds the threads of process pid.
func (c switchCounts) add(pid int) error {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tids, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, t := range tids {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "status"))
		if err != nil {
			if os.IsNotExist(err) {
				continue // the thread exited since the listing
			}
			return err
		}
		n, err := parseStatusSwitches(b)
		if err != nil {
			return fmt.Errorf("%s/%s/status: %w", dir, t.Name(), err)
		}
		c[strconv.Itoa(pid)+"/"+t.Name()] = n
	}
	return nil
}

// since returns the switches made between c0 and c: a thread not in c0
// began after it, and all of its switches count.
func (c switchCounts) since(c0 switchCounts) int64 {
	var n int64
	for k, v := range c {
		n += v - c0[k]
	}
	return n
}

// parseStatusSwitches returns voluntary_ctxt_switches plus
// nonvoluntary_ctxt_switches from the contents of a status file.
func parseStatusSwitches(b []byte) (int64, error) {
	var sum int64
	found := 0
	for line := range strings.Lines(string(b)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "voluntary_ctxt_switches" && name != "nonvoluntary_ctxt_switches") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		sum += n
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("%d of the 2 context-switch lines", found)
	}
	return sum, nil
}
