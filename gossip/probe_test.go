package gossip

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/shardlimiter/shardlimiter/internal/poll"
)

// Config.ProbeInterval reaches memberlist with a timeout of two fifths of
// it; zero is the default 500 ms, and values outside the bounds are
// refused by New.
func TestProbeIntervalConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ set, interval, timeout time.Duration }{
		{0, 500 * time.Millisecond, 200 * time.Millisecond},
		{MinProbeInterval, 100 * time.Millisecond, 40 * time.Millisecond},
		{time.Second, time.Second, 400 * time.Millisecond},
		{5 * time.Second, 5 * time.Second, 2 * time.Second},
		{MaxProbeInterval, time.Minute, 24 * time.Second},
	} {
		m, err := New(Config{NodeName: "n", GRPCAddr: ":8081", ProbeInterval: tc.set})
		if err != nil {
			t.Fatalf("New(ProbeInterval %v): %v", tc.set, err)
		}
		m.testTransport = func(*memberlist.Config) (memberlist.Transport, error) { return nil, nil }
		c, err := m.gossipConfig(context.Background())
		if err != nil {
			t.Fatalf("gossipConfig(ProbeInterval %v): %v", tc.set, err)
		}
		if c.ProbeInterval != tc.interval || c.ProbeTimeout != tc.timeout {
			t.Errorf("ProbeInterval %v: memberlist probes every %v with a %v timeout, want %v and %v", tc.set, c.ProbeInterval, c.ProbeTimeout, tc.interval, tc.timeout)
		}
	}
	for _, bad := range []time.Duration{-time.Second, MinProbeInterval - 1, MaxProbeInterval + 1} {
		if _, err := New(Config{NodeName: "n", GRPCAddr: ":8081", ProbeInterval: bad}); err == nil || !strings.Contains(err.Error(), "probe interval") {
			t.Errorf("New(ProbeInterval %v) = %v, want an error about the probe interval", bad, err)
		}
	}
}

// With probes every second instead of every 500 ms, a crashed member of
// three still leaves the others' view, later (the suspicion timeout
// scales with the interval); the log gives the time.
func TestCrashDetectedAtSlowerProbes(t *testing.T) {
	t.Parallel()
	var nodes []*gossipNode
	for i := range 3 {
		cfg := Config{ProbeInterval: time.Second}
		if i > 0 {
			cfg.Seeds = []string{nodes[0].m.LocalAddr()}
		}
		nodes = append(nodes, startGossip(t, fmt.Sprintf("slow-%c", 'a'+i), "127.0.0.1:0", cfg))
	}
	poll.Until(t, 10*time.Second, sees(nodes, membersOf(nodes...)), "%s", "3 nodes converge")
	survivors := nodes[:2]
	start := time.Now()
	nodes[2].stop(t)
	poll.Until(t, 30*time.Second, sees(survivors, membersOf(survivors...)), "%s", "survivors drop the crashed node")
	t.Logf("crash with 3 nodes probing every 1 s: all survivors dropped the node %v after the crash", time.Since(start))
}
