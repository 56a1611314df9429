//go:build !unix

package main

import "os/exec"

// setProcessGroup keeps exec's default: cancelling kills the process.
func setProcessGroup(*exec.Cmd) {}
