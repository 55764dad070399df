package main

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// machine describes where the benchmark ran.
type machine struct {
	date       string
	nproc      int
	cpu        string // model name, "" if unknown
	platform   string // GOOS/GOARCH
	goVersion  string
	kernel     string
	filesystem string // of the benchmark directory
}

// describeMachine gathers the machine's description; dir is the directory
// the stores are written under.
func describeMachine(dir string) machine {
	return machine{
		date:       time.Now().Format("2006-01-02 15:04:05 MST"),
		nproc:      runtime.NumCPU(),
		cpu:        cpuModel(),
		platform:   runtime.GOOS + "/" + runtime.GOARCH,
		goVersion:  runtime.Version(),
		kernel:     kernel(),
		filesystem: filesystemOf(dir),
	}
}

// kernel returns `uname -srvm`, or "unknown".
func kernel() string {
	out, err := exec.Command("uname", "-srvm").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// cpuModel returns the first "model name" of /proc/cpuinfo, "" elsewhere.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// filesystemOf returns the mount holding dir, from /proc/mounts, as
// "fstype on mountpoint (device, options)", or "unknown".
func filesystemOf(dir string) string {
	path, err := filepath.Abs(dir)
	if err == nil {
		path, err = filepath.EvalSymlinks(path)
	}
	if err != nil {
		return "unknown"
	}
	f, err := os.Open("/proc/mounts")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	best, bestLen := "unknown", -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		dev, mnt, typ, opts := unescapeMount(fields[0]), unescapeMount(fields[1]), fields[2], fields[3]
		if !within(path, mnt) || len(mnt) < bestLen {
			continue
		}
		// A later mount on the same point hides an earlier one: >= above.
		best, bestLen = typ+" on "+mnt+" ("+dev+", "+opts+")", len(mnt)
	}
	return best
}

// within reports whether path is mnt or below it.
func within(path, mnt string) bool {
	return mnt == "/" || path == mnt || strings.HasPrefix(path, mnt+"/")
}

// unescapeMount undoes the octal escapes (\040 for a space) of a field of
// /proc/mounts.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// diskUsage is what a directory's regular files take.
type diskUsage struct {
	files     int
	apparent  int64 // sum of file sizes
	allocated int64 // sum of st_blocks × 512
}

// usageOf walks dir and adds up its regular files.
func usageOf(dir string) (diskUsage, error) {
	var u diskUsage
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		u.files++
		u.apparent += info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			u.allocated += int64(st.Blocks) * 512
		}
		return nil
	})
	return u, err
}

// removeAndSettle removes a case's directory and then syncs every file
// system, so that the next case does not pay for this one: an unsafe async
// store can leave a gigabyte of dirty pages behind, and removing large files
// on a file system mounted with discard keeps the disk busy for a while.
func removeAndSettle(dir string) error {
	err := os.RemoveAll(dir)
	syscall.Sync()
	return err
}
