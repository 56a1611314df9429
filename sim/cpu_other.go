//go:build !unix

package sim

// cpuSeconds is not measured here: the CPU figure stays empty.
func cpuSeconds() float64 { return 0 }
