package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	tserver "github.com/shardlimiter/shardlimiter/transport/server"
)

func TestLimitFlags(t *testing.T) {
	t.Parallel()
	c, err := parseConfig(nil, env(), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.maxInflight != tserver.DefaultInFlightChecks(1000) || c.maxPeerFlight != tserver.DefaultPeerInFlightChecks(1000) ||
		c.maxMemory <= 0 || c.memorySource == memoryFromFlag || c.readTimeout != 15*time.Second || c.idleTimeout != 60*time.Second {
		t.Fatalf("defaults: inflight %d peer %d memory %d (%s) read %v idle %v",
			c.maxInflight, c.maxPeerFlight, c.maxMemory, c.memorySource, c.readTimeout, c.idleTimeout)
	}
	c, err = parseConfig([]string{"--max-inflight", "500", "--read-timeout", "2s"},
		env("SHARDLIMITER_MAX_PEER_INFLIGHT", "0", "SHARDLIMITER_MAX_MEMORY", "512MiB", "SHARDLIMITER_IDLE_TIMEOUT", "1s"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.maxInflight != 500 || c.maxPeerFlight != 0 || c.maxMemory != 512<<20 || c.memorySource != memoryFromFlag ||
		c.readTimeout != 2*time.Second || c.idleTimeout != time.Second {
		t.Fatalf("set: %+v", c)
	}
	if h, r, w, i := httpTimeouts(c); h != 2*time.Second || r != 2*time.Second || w <= r || i != time.Second {
		t.Errorf("httpTimeouts(read 2s, idle 1s) = %v %v %v %v", h, r, w, i)
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"--max-inflight", "-1"}},
		{[]string{"--max-peer-inflight", "many"}},
		{[]string{"--max-memory", "half"}},
		{[]string{"--read-timeout", "0s"}},
		{[]string{"--idle-timeout", "soon"}},
	} {
		_, err := parseConfig(tc.args, env(), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.args[0]) {
			t.Errorf("parseConfig(%q) error = %v, want one naming %s", tc.args, err, tc.args[0])
		}
	}
}
