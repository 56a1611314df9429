//go:build unix

package sim

import "syscall"

// cpuSeconds is the user and system CPU time this process has used (every
// member together); 0 when it cannot be read.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
