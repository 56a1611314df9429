//go:build unix

package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardlimiter/shardlimiter/sim"
)

// virtualArgsEnv holds the command line of a virtual-time run; empty skips
// TestVirtual.
const virtualArgsEnv = "SIMULATE_VIRTUAL"

// TestVirtual runs the command's sizes and scenarios with each cluster in
// a testing/synctest bubble (virtual time, see sim.Params.Virtual), for
// cluster sizes whose members cannot keep up with real time on this
// machine (docs/SCALING.md). A bubble needs a *testing.T, so this runs
// under go test, given the command line in SIMULATE_VIRTUAL:
//
//	SIMULATE_VIRTUAL='-n 300 -k 100000' go test ./cmd/simulate -run TestVirtual -v -timeout 3h
//
// It prints the table; it fails only if a size cannot run.
func TestVirtual(t *testing.T) {
	args := os.Getenv(virtualArgsEnv)
	if args == "" {
		t.Skip(virtualArgsEnv + " is empty: no virtual-time run asked for")
	}
	var stderr strings.Builder
	cfg, err := parse(strings.Fields(args), &stderr)
	if err != nil {
		t.Fatalf("%s=%q: %v %s", virtualArgsEnv, args, err, stderr.String())
	}
	cfg.params.Virtual = true
	var out bytes.Buffer
	log := testWriter{t}
	if err := runSizes(t.Context(), cfg, &out, log, virtualRunner(t)); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
}

// virtualRunner returns a runner that runs sim.Run inside a synctest
// bubble of its own, with a context of the bubble's (one from outside
// would keep the bubble's clock from moving), and logs the run's cost in
// the machine's time.
func virtualRunner(t *testing.T) runner {
	return func(_ context.Context, opt sim.Options, p sim.Params) (r sim.Report, err error) {
		start, cpu0 := time.Now(), cpuNow()
		synctest.Test(t, func(t *testing.T) {
			r, err = sim.Run(t.Context(), opt, p)
			// memberlist's goroutines exit after its Shutdown, up to its
			// stream timeout later (gossip.Membership.Run); the bubble's
			// clock stops when this function returns, so give them that
			// time here: virtual, it costs nothing.
			time.Sleep(sim.GossipDrain)
		})
		t.Logf("N=%d in virtual time: %v of the machine's time, %.0f s of CPU", p.N,
			time.Since(start).Round(time.Second), cpuNow()-cpu0)
		return r, err
	}
}

// testWriter writes each write to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// cpuNow is the process's user and system CPU in seconds; 0 when it
// cannot be read.
func cpuNow() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
