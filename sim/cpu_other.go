//go:build !unix

package sim

import "time"

// cpuSeconds is not measured here: the CPU figure stays empty.
func cpuSeconds() float64 { return 0 }

// wallNow is time.Now here: inside a synctest bubble the wall-time
// figures (ring rebuild, time per check) read the virtual clock, and are
// 0.
func wallNow() time.Time { return time.Now() }
