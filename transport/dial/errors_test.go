package dial

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/transport"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
)

// closedAddr is a loopback address nobody listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// The clients' errors name each part once: the call, the kind, gRPC's
// message, without "transport: …: transport: unavailable: rpc error: code
// = Unavailable desc = …"; errors.Is and status.Code still see the kind
// and the code. The client API's errors do not speak of forwarding, which
// is what nodes do among themselves.
func TestClientErrorsDoNotStutter(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	checks := []limit.Check{{Name: "n", Key: "k", Hits: 1, Rule: limit.Rule{Limit: 1, Period: time.Second}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, clientErr := c.GetRateLimits(ctx, checks)

	bc, err := NewBatchClient(addr, PeerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	res, batchErr := bc.GetRateLimits(ctx, checks)
	if batchErr == nil && len(res) == 1 && res[0].Error != "" {
		batchErr = errors.New(res[0].Error)
	}

	pc, err := NewPeerClient(addr, PeerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	res, peerErr := pc.Forward(ctx, checks)
	if peerErr == nil && len(res) == 1 && res[0].Error != "" {
		peerErr = errors.New(res[0].Error)
	}

	for name, err := range map[string]error{"Client": clientErr, "BatchClient": batchErr, "PeerClient": peerErr} {
		t.Logf("%s: %v", name, err)
		if err == nil {
			t.Errorf("%s: no error from %s, where nobody listens", name, addr)
			continue
		}
		msg := err.Error()
		for _, bad := range []string{"transport: unavailable", "rpc error:", addr + ": transport:"} {
			if strings.Contains(msg, bad) {
				t.Errorf("%s: error %q contains %q", name, msg, bad)
			}
		}
		if !strings.HasPrefix(msg, "transport: ") || !strings.Contains(msg, addr+": unavailable: ") {
			t.Errorf("%s: error %q, want \"transport: … %s: unavailable: …\"", name, msg, addr)
		}
	}
	if clientErr != nil && (!errors.Is(clientErr, transport.ErrUnavailable) || status.Code(clientErr) != codes.Unavailable) {
		t.Errorf("Client: error %v: errors.Is(transport.ErrUnavailable) = %v, status.Code = %v", clientErr, errors.Is(clientErr, transport.ErrUnavailable), status.Code(clientErr))
	}
	if batchErr != nil && strings.Contains(batchErr.Error(), "forward") {
		t.Errorf("BatchClient: error %q speaks of forwarding", batchErr)
	}
	if peerErr != nil && !strings.Contains(peerErr.Error(), "forward to "+addr) {
		t.Errorf("PeerClient: error %q does not name the forward", peerErr)
	}
	if err := transport.CallFailed("x", transport.ErrClosed, nil); err.Error() != "transport: x: client closed" || !errors.Is(err, transport.ErrClosed) {
		t.Errorf("transport.CallFailed(x, transport.ErrClosed, nil) = %q", err)
	}
}
