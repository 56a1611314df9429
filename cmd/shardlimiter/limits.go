package main

import (
	"os"
	"strconv"
	"strings"
	"time"

	tserver "github.com/shardlimiter/shardlimiter/transport/server"
)

// validateLimits reads the flags that bound the node's work and
// connections (--max-inflight, --max-peer-inflight, --max-memory,
// --read-timeout, --idle-timeout) into c; c.maxBatch is already set.
func validateLimits(raw map[string]*string, c *config, bad func(name, format string, a ...any)) {
	inflight := func(name string, auto int64) int64 {
		v := strings.TrimSpace(*raw[name])
		if v == "" || v == "auto" {
			return auto
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			bad(name, "want auto, 0 (no bound) or a positive number of checks, got %q", v)
		}
		return n
	}
	c.maxInflight = inflight("max-inflight", tserver.DefaultInFlightChecks(c.maxBatch))
	c.maxPeerFlight = inflight("max-peer-inflight", tserver.DefaultPeerInFlightChecks(c.maxBatch))
	var err error
	if c.maxMemory, c.memorySource, err = memoryBudget(*raw["max-memory"], os.ReadFile); err != nil {
		bad("max-memory", "%v", err)
	}
	if c.readTimeout, err = time.ParseDuration(*raw["read-timeout"]); err != nil || c.readTimeout <= 0 {
		bad("read-timeout", "want a positive duration like 15s, got %q", *raw["read-timeout"])
	}
	if c.idleTimeout, err = time.ParseDuration(*raw["idle-timeout"]); err != nil || c.idleTimeout <= 0 {
		bad("idle-timeout", "want a positive duration like 60s, got %q", *raw["idle-timeout"])
	}
}

// HTTP limits that have no flag.
const (
	// maxHeaderBytes bounds a request's header block (net/http's default
	// is 1 MiB): ample for this API, whose requests carry a few short
	// headers.
	maxHeaderBytes = 64 << 10
	// headerTimeout is the ReadHeaderTimeout, unless --read-timeout is
	// shorter: slowloris headers are cut after it.
	headerTimeout = 10 * time.Second
	// writeSlack is how much longer than --read-timeout the HTTP
	// WriteTimeout is. In net/http the write deadline runs from the end of
	// the headers, so it must cover reading the body, deciding, and
	// writing the answer to a slow reader.
	writeSlack = 20 * time.Second
)

// httpTimeouts returns ReadHeaderTimeout, ReadTimeout, WriteTimeout and
// IdleTimeout of the HTTP servers.
func httpTimeouts(c config) (header, read, write, idle time.Duration) {
	return min(headerTimeout, c.readTimeout), c.readTimeout, c.readTimeout + writeSlack, c.idleTimeout
}
