package main

import "syscall"

// setParentDeathSignal has the kernel send SIGTERM to the server if this
// tool dies without stopping it (SIGKILL, crash): no orphan servers.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGTERM }
