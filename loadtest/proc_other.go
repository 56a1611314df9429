//go:build !unix

package main

import (
	"errors"
	"os/exec"
)

// setProcessGroup keeps exec's default: cancelling kills the process.
func setProcessGroup(*exec.Cmd) {}

// churnSupported: --churn needs Unix signals (SIGSTOP, SIGCONT).
const churnSupported = false

func signalGroup(*exec.Cmd, churnSignal) error {
	return errors.New("--churn needs a Unix system")
}
