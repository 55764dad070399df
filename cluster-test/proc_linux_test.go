package clustertest

import (
	"os/exec"
	"runtime"
	"syscall"
)

// spawn starts cmd so that it dies with the test binary: it gets SIGKILL
// when the thread that forked it exits. Every start goes through one
// goroutine locked to its thread for the life of the test binary, so
// that thread exits only with the process (a Go runtime thread that forks
// and then exits would take the child with it early).
func spawn(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	req := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawnCh <- req
	return <-req.err
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

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
