//go:build !linux

package clustertest

import "os/exec"

// spawn starts cmd. Outside Linux a child outlives a test binary that
// dies without running its cleanups.
func spawn(cmd *exec.Cmd) error { return cmd.Start() }
