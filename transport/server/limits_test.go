package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardlimiter/shardlimiter/transport"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The node's own clients must ping no more often than the servers allow,
// or the servers would close their connections (GOAWAY too_many_pings).
func TestPeerKeepaliveWithinPolicy(t *testing.T) {
	t.Parallel()
	if transport.PeerKeepaliveTime < transport.MinPingInterval {
		t.Fatalf("transport.PeerKeepaliveTime %v < transport.MinPingInterval %v", transport.PeerKeepaliveTime, transport.MinPingInterval)
	}
	if DefaultIdleTimeout <= 0 || PeerIdleTimeout < DefaultIdleTimeout {
		t.Fatalf("idle timeouts: client %v, peer %v", DefaultIdleTimeout, PeerIdleTimeout)
	}
}

// A full legal batch of the longest names and keys fits the receive limit;
// a message over it fails with ResourceExhausted but is not mistaken for
// an overload (no retry delay, not transport.ErrOverloaded).
func TestMaxRequestBytesFitsABatch(t *testing.T) {
	t.Parallel()
	const maxBatch = 50
	_, target, dialer := startGRPC(t, testConfig{Checker: &fakeChecker{Owner: "o"}, MaxBatch: maxBatch,
		ServerOptions: ConnLimits{MaxRecvMsgSize: transport.MaxRequestBytes(maxBatch)}.ServerOptions()})
	client := dialClient(t, target, dialer)
	checks := keyedChecks(strings.Repeat("k", 1020), maxBatch)
	for i := range checks {
		checks[i].Name = strings.Repeat("n", 128)
	}
	if _, err := client.GetRateLimits(ctxTimeout(t), checks); err != nil {
		t.Fatalf("a full batch of 1 KiB keys = %v", err)
	}
	big := keyedChecks(strings.Repeat("k", 4000), maxBatch)
	_, err := client.GetRateLimits(ctxTimeout(t), big)
	if status.Code(err) != codes.ResourceExhausted || errors.Is(err, transport.ErrOverloaded) {
		t.Fatalf("a message over the limit = %v, want ResourceExhausted that is not transport.ErrOverloaded", err)
	}
	if _, ok := transport.RetryDelay(err); ok {
		t.Errorf("a message over the limit carries a retry delay")
	}
}
