//go:build unix

package sim

import (
	"syscall"
	"time"
)

// cpuSeconds is the user and system CPU time this process has used (every
// member together); 0 when it cannot be read.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// wallNow reads the machine's clock past the time package, so that inside
// a testing/synctest bubble (Params.Virtual), where time.Now is the
// bubble's virtual clock and stands still while members compute, it still
// measures what a computation costs. Outside a bubble it is time.Now
// without the monotonic reading.
func wallNow() time.Time {
	var tv syscall.Timeval
	if err := syscall.Gettimeofday(&tv); err != nil {
		return time.Now()
	}
	return time.Unix(0, tv.Nano())
}
