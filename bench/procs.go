package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Server processes of the cluster comparison. Linux only: CPU time is read
// from /proc/<pid>/stat, and children get SIGKILL when the bench dies
// (Pdeathsig).

// userHZ is the unit of utime and stime in /proc/<pid>/stat: USER_HZ, which
// Linux fixes at 100 for user space whatever the kernel's tick.
const userHZ = 100

// stopWait bounds how long a server may take to exit after SIGTERM before
// it gets SIGKILL.
const stopWait = 15 * time.Second

// proc is a server process the bench started. Its fields are set by
// procSet.start; err is written by the goroutine that waits for the
// process, before it closes exited.
type proc struct {
	name   string
	cmd    *exec.Cmd     // immutable once started
	log    string        // path of the file holding its stdout and stderr
	exited chan struct{} // closed once cmd.Wait has returned
	err    error         // cmd.Wait's result; read only after exited is closed
}

// procSet holds every process the bench started, so that all of them are
// stopped at the end, on error and on interrupt.
type procSet struct {
	mu    sync.Mutex // guards procs
	procs []*proc
}

// start starts bin with args, its output going to the file logPath, and
// records it in the set. The process gets SIGKILL if the bench dies.
func (s *procSet) start(name, bin string, args []string, env []string, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p, nil
}

// pid returns the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// exitError describes how the process ended, with the tail of its log.
func (p *proc) exitError() error {
	return fmt.Errorf("%s (pid %d) exited: %v; the end of its log %s:\n%s", p.name, p.pid(), p.err, p.log, logTail(p.log, 2000))
}

// stop sends SIGTERM to the process, by its pid, and waits for it to exit;
// after stopWait it sends SIGKILL. It returns an error if the process had
// to be killed or exited with a failure, before or after the signal.
func (p *proc) stop() error {
	if !p.running() {
		if p.err != nil {
			return p.exitError()
		}
		return nil
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopWait)
	defer t.Stop()
	select {
	case <-p.exited:
		if p.err != nil {
			return fmt.Errorf("%s (pid %d) exited after SIGTERM: %v (log %s)", p.name, p.pid(), p.err, p.log)
		}
		return nil
	case <-t.C:
		p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s (pid %d) did not exit within %v of SIGTERM: killed (log %s)", p.name, p.pid(), stopWait, p.log)
	}
}

// stopAll stops every process of the set that still runs, all at once,
// and forgets them.
func (s *procSet) stopAll() error {
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.stop()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// forget drops p from the set, so that stopAll leaves it alone: a process
// the bench killed on purpose, which it has waited for.
func (s *procSet) forget(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs = slices.DeleteFunc(s.procs, func(q *proc) bool { return q == p })
}

// cpuSeconds returns the user plus system CPU time the process pid has
// used, from /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	s, err := parseStatCPU(b)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return s, nil
}

// parseStatCPU returns utime+stime in seconds from the contents of a
// /proc/<pid>/stat file.
func parseStatCPU(b []byte) (float64, error) {
	// The command name, field 2, is in parentheses and may hold spaces and
	// parentheses; fields 3 on follow the last ')'. utime and stime are
	// fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("no ')' in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the name, want at least 13", len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(utime+stime) / userHZ, nil
}

// cpuOf returns the CPU seconds summed over procs.
func cpuOf(procs []*proc) (float64, error) {
	var sum float64
	for _, p := range procs {
		s, err := cpuSeconds(p.pid())
		if err != nil {
			return 0, fmt.Errorf("CPU time of %s: %w", p.name, err)
		}
		sum += s
	}
	return sum, nil
}

// peakRSS returns the largest resident set of process pid so far, in
// bytes (VmHWM of /proc/<pid>/status).
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	n, err := parseStatusKiB(b, "VmHWM")
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	return n << 10, nil
}

// parseStatusKiB returns the value of field (given in kB) from the
// contents of a /proc/<pid>/status file.
func parseStatusKiB(b []byte, field string) (int64, error) {
	for line := range strings.Lines(string(b)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s: %q, want a number of kB", field, strings.TrimSpace(rest))
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, fmt.Errorf("no %s line", field)
}

// selfCPU returns the user plus system CPU time of this process.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// freePorts returns n distinct loopback ports that were free a moment
// ago. They are held open until all n are chosen, so none repeats.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// logTail returns up to the last n bytes of the file at path.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// cellDir makes a fresh directory under base, named from pattern as
// os.MkdirTemp does, for one cell's servers. Its finish, deferred by the
// cell, stops every process of e and removes the directory unless keep,
// keeping the first error in *err.
func (e *clusterEnv) cellDir(base, pattern string, keep bool) (string, func(err *error), error) {
	dir, err := os.MkdirTemp(base, pattern)
	if err != nil {
		return "", nil, err
	}
	return dir, func(err *error) {
		if serr := e.procs.stopAll(); *err == nil {
			*err = serr
		}
		if !keep {
			if rerr := removeAndSettle(dir); *err == nil {
				*err = rerr
			}
		}
	}, nil
}

// serverEnv returns env with the GOMAXPROCS of server processes, if set.
func (e *clusterEnv) serverEnv(env []string) []string {
	if e.maxprocs <= 0 {
		return env
	}
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			out = append(out, kv)
		}
	}
	return append(out, fmt.Sprintf("GOMAXPROCS=%d", e.maxprocs))
}

// childEnv is the environment of server processes: this one's, without
// the RAFTLOG_* variables, which node's flags would read.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RAFTLOG_") {
			env = append(env, kv)
		}
	}
	return env
}

// spawn starts cmd from one goroutine locked to its OS thread for the life
// of the process: Pdeathsig fires when the thread that forked the child
// exits, and a locked thread exits only with the process.
func spawn(cmd *exec.Cmd) error {
	req := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawnCh <- req
	return <-req.err
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

// spawnCh feeds the spawning goroutine; it is started with the program
// and never stops.
var spawnCh = func() chan spawnReq {
	ch := make(chan spawnReq)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		for req := range ch {
			req.err <- req.cmd.Start()
		}
	}()
	return ch
}()
