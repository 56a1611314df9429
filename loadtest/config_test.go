package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

func TestBadFlagsExitTwoWithAMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no targets"},
		{[]string{"--targets", "a:1", "--batch", "0"}, "--batch: want >= 1"},
		{[]string{"--targets", "a:1", "--rate", "-1"}, "--rate: want >= 0"},
		{[]string{"--targets", "a:1", "--concurrency", "0"}, "--concurrency"},
		{[]string{"--targets", "a:1", "--duration", "0s"}, "--duration"},
		{[]string{"--targets", "a:1", "--dist", "pareto"}, `--dist: want uniform, zipf or hot, got "pareto"`},
		{[]string{"--targets", "a:1", "--zipf-s", "1"}, "--zipf-s"},
		{[]string{"--targets", "a:1", "--algorithm", "GCRA"}, `unknown algorithm "GCRA"`},
		{[]string{"--targets", "a:1", "--mode", "chaos"}, `--mode: want throughput, accuracy, idle or nemesis, got "chaos"`},
		{[]string{"--targets", "a:1", "--algorithm", "all"}, "accuracy mode only"},
		{[]string{"--mode", "nemesis", "--local", "2"}, "--mode nemesis: runs its own load and faults on a --local cluster of 3 to 5 nodes"},
		{[]string{"--mode", "nemesis", "--api", "rls"}, "--mode nemesis: runs its own load"},
		{[]string{"--mode", "nemesis", "--faults", "kill,meteor"}, `--faults: unknown kind "meteor"`},
		{[]string{"--targets", "a:1", "--faults", "kill"}, "--faults applies to --mode nemesis"},
		{[]string{"--targets", "a:1", "--local", "3"}, "exclude each other"},
		{[]string{"--local", "2", "--metrics-targets", "a:2"}, "automatic with --local"},
		{[]string{"--targets", "a:1", "--local-flag", "--x"}, "need --local"},
		{[]string{"--local", "-1"}, "--local: want 1 to 32"},
		{[]string{"--targets", "a:1", "--limit", "-5"}, "limit must be > 0"},
		{[]string{"--targets", "a:1", "--algorithm", "SLIDING_LOG", "--limit", "200000"}, "SLIDING_LOG limit"},
		{[]string{"--targets", "a:1", "--algorithm", "FIXED_WINDOW", "--burst", "5"}, "burst applies to"},
		{[]string{"--targets", "a:1", "--hits", "-1"}, "--hits: want >= 0"},
		{[]string{"--targets", "a:1", "--mode", "accuracy", "--hits", "0"}, "accuracy mode needs >= 1"},
		{[]string{"--targets", "a:1", "--mode", "accuracy", "--keys", "5000"}, "one sender per key"},
		{[]string{"--targets", "a:1", "--mode", "accuracy", "--rate", "1e9", "--duration", "1m"}, "would record"},
		{[]string{"--targets", "a:1", "--calibrate-process"}, "--calibrate-process needs --calibrate"},
		{[]string{"--targets", "a:1", "--client-inflight", "2"}, "--client-inflight needs --client direct"},
		{[]string{"--targets", "a:1", "--client", "direct", "--client-inflight", "-1"}, "--client-inflight: want >= 0"},
		{[]string{"--targets", "a:1", "--client-leases"}, "--client-leases needs --client direct"},
		{[]string{"--targets", "a:1", "extra"}, `unexpected argument "extra"`},
		{[]string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"--batch", "ten"}, `invalid value "ten" for flag -batch`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("loadtest %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, stderr.String(), exitUsage, tc.want)
		}
		if stdout.Len() != 0 {
			t.Errorf("loadtest %s: wrote %q on stdout", strings.Join(tc.args, " "), stdout.String())
		}
	}
}

func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &stdout, &stderr); code != exitOK || !strings.Contains(stderr.String(), "-targets") {
		t.Errorf("-h: exit %d, stderr %q; want 0 and the flag list", code, stderr.String())
	}
}

func TestModeDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args      []string
		limit     int64
		keys      int
		duration  time.Duration
		algorithm int
	}{
		{[]string{"--targets", "a:1"}, limit.MaxLimit, 100_000, 10 * time.Second, 1},
		{[]string{"--targets", "a:1", "--algorithm", "sliding_log"}, limit.MaxLogLimit, 100_000, 10 * time.Second, 1},
		{[]string{"--targets", "a:1", "--limit", "7"}, 7, 100_000, 10 * time.Second, 1},
		{[]string{"--targets", "a:1", "--mode", "accuracy", "--algorithm", "all"}, 10, 8, 4 * time.Second, 5},
		{[]string{"--targets", "a:1", "--mode", "accuracy", "--limit", "3", "--keys", "2", "--duration", "1s"}, 3, 2, time.Second, 1},
	} {
		c, err := parseFlags(tc.args, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if c.rule.Limit != tc.limit || c.keys != tc.keys || c.duration != tc.duration || len(c.algorithms) != tc.algorithm {
			t.Errorf("%v: limit, keys, duration, algorithms = %d, %d, %v, %d; want %d, %d, %v, %d", tc.args,
				c.rule.Limit, c.keys, c.duration, len(c.algorithms), tc.limit, tc.keys, tc.duration, tc.algorithm)
		}
	}
}

func TestBurstAppliesToBucketsOnly(t *testing.T) {
	t.Parallel()
	c, err := parseFlags([]string{"--targets", "a:1", "--mode", "accuracy", "--algorithm", "all", "--burst", "4"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range c.algorithms {
		want := int64(0)
		if a == limit.TokenBucket || a == limit.LeakyBucket {
			want = 4
		}
		if got := c.ruleFor(a).Burst; got != want {
			t.Errorf("ruleFor(%v).Burst = %d, want %d", a, got, want)
		}
	}
}
