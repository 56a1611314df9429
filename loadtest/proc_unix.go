//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// setProcessGroup starts cmd in a process group of its own, so that the
// terminal's Ctrl-C reaches only this tool (which then stops the servers
// in order), and makes cancelling cmd's context send SIGTERM to the whole
// group; exec kills the process if it has not exited after WaitDelay.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
}

// churnSupported: --churn signals the nodes' process groups.
const churnSupported = true

var unixSignals = [...]syscall.Signal{sigTerm: syscall.SIGTERM, sigKill: syscall.SIGKILL, sigStop: syscall.SIGSTOP, sigCont: syscall.SIGCONT}

// signalGroup sends sig to cmd's process group: the node's server.
func signalGroup(cmd *exec.Cmd, sig churnSignal) error {
	return syscall.Kill(-cmd.Process.Pid, unixSignals[sig])
}
