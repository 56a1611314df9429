//go:build unix && !linux

package main

import "syscall"

// setParentDeathSignal is Linux-only; elsewhere a server outlives a
// killed tool.
func setParentDeathSignal(*syscall.SysProcAttr) {}
