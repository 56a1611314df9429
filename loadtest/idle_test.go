package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseStatTicks(t *testing.T) {
	t.Parallel()
	// utime 1234 and stime 56 are fields 14 and 15; the command name holds
	// a space and a parenthesis.
	line := "4242 (shard limiter) S 1 4242 4242 0 -1 4194560 500 0 0 0 1234 56 0 0 20 0 9 0 100 1000 200\n"
	if got, err := parseStatTicks(line); err != nil || got != 1290 {
		t.Fatalf("parseStatTicks(%q) = %d, %v; want 1290", line, got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 3 4"} {
		if got, err := parseStatTicks(bad); err == nil {
			t.Errorf("parseStatTicks(%q) = %d, want an error", bad, got)
		}
	}
}

func TestProcTicksOfThisProcess(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	before, err := procTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for i := 0; sb.Len() < 1<<26; i++ { // ~64 MB of formatting: well over one tick
		sb.WriteString(strconv.Itoa(i))
	}
	after, err := procTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Fatalf("procTicks after burning CPU = %d, before %d: want more", after, before)
	}
}

func TestIdleFlags(t *testing.T) {
	t.Parallel()
	c, err := parseFlags([]string{"--mode", "idle", "--local", "3", "--idle-load", "5s"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if c.duration != idleDuration || c.idleSettle.Seconds() != 10 || c.idleLoad.Seconds() != 5 {
		t.Fatalf("idle defaults: duration %v, settle %v, load %v; want 20s, 10s, 5s", c.duration, c.idleSettle, c.idleLoad)
	}
	for _, args := range [][]string{
		{"--mode", "idle", "--targets", "127.0.0.1:1"},
		{"--mode", "throughput", "--local", "1", "--idle-load", "1s"},
		{"--mode", "idle", "--local", "1", "--idle-settle", "-1s"},
	} {
		if _, err := parseFlags(args, &strings.Builder{}); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
}

func TestParseSchedstat(t *testing.T) {
	t.Parallel()
	if got, err := parseSchedstat("123456789 5000 42\n"); err != nil || got != 123456789 {
		t.Fatalf("parseSchedstat = %d, %v; want 123456789", got, err)
	}
	for _, bad := range []string{"", "1 2", "x 2 3", "-5 2 3", "1 2 3 4"} {
		if got, err := parseSchedstat(bad); err == nil {
			t.Errorf("parseSchedstat(%q) = %d, want an error", bad, got)
		}
	}
}

func TestProcRunNSOfThisProcess(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc on this system")
	}
	before, err := procRunNS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for i := 0; sb.Len() < 1<<24; i++ { // ~16 MB of formatting: milliseconds of CPU
		sb.WriteString(strconv.Itoa(i))
	}
	after, err := procRunNS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < int64(time.Millisecond) {
		t.Fatalf("procRunNS after burning CPU = %d, before %d: want at least 1 ms more", after, before)
	}
}
