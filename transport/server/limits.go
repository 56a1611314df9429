package server

import (
	"time"

	"github.com/shardlimiter/shardlimiter/transport"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// ConnLimits bounds what one gRPC connection may hold and how long an idle
// or dead one stays open. Zero fields take the defaults named below.
type ConnLimits struct {
	// MaxConnectionIdle closes (GOAWAY) a connection that has had no RPC
	// in progress this long. Default DefaultIdleTimeout. Shorter frees the
	// memory of abandoned connections sooner (each holds ~50–100 KiB of
	// buffers and goroutines); a client that comes back reconnects, which
	// costs a handshake.
	MaxConnectionIdle time.Duration
	// KeepaliveTime is how long a connection may be silent before the
	// server pings it, and KeepaliveTimeout how long it then waits for the
	// answer before closing it: a peer gone without a FIN (power loss, a
	// partition) is dropped after about their sum. Defaults
	// DefaultKeepaliveTime and DefaultKeepaliveTimeout.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MaxConcurrentStreams caps the RPCs in progress on one connection;
	// more wait on the client side for a free stream. Default
	// DefaultMaxConcurrentStreams. It bounds the goroutines and buffers
	// one connection can make the server hold.
	MaxConcurrentStreams uint32
	// MaxRecvMsgSize bounds one request message, in bytes. Default
	// transport.MaxRequestBytes(transport.DefaultMaxBatch).
	MaxRecvMsgSize int
}

// Defaults of ConnLimits, and the client-side keepalive they are
// compatible with.
const (
	DefaultIdleTimeout          = 60 * time.Second
	DefaultKeepaliveTime        = time.Minute
	DefaultKeepaliveTimeout     = 20 * time.Second
	DefaultMaxConcurrentStreams = 512
	// PeerMaxConcurrentStreams is the stream cap of the peer listener:
	// a node forwards to an owner over at most PeerConfig.MaxInFlight
	// (4) RPCs at once, plus state moves and health.
	PeerMaxConcurrentStreams = 128
	// PeerIdleTimeout is MaxConnectionIdle on the peer listener, whose
	// clients are the other nodes (a reconnect delays the next forward).
	PeerIdleTimeout = 5 * time.Minute
)

// ServerOptions returns the grpc.ServerOptions that apply l: keepalive
// enforcement and parameters, the stream cap and the receive limit.
func (l ConnLimits) ServerOptions() []grpc.ServerOption {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	streams := l.MaxConcurrentStreams
	if streams == 0 {
		streams = DefaultMaxConcurrentStreams
	}
	recv := l.MaxRecvMsgSize
	if recv <= 0 {
		recv = transport.MaxRequestBytes(transport.DefaultMaxBatch)
	}
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: transport.MinPingInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: or(l.MaxConnectionIdle, DefaultIdleTimeout),
			Time:              or(l.KeepaliveTime, DefaultKeepaliveTime),
			Timeout:           or(l.KeepaliveTimeout, DefaultKeepaliveTimeout),
		}),
		grpc.MaxConcurrentStreams(streams),
		grpc.MaxRecvMsgSize(recv),
	}
}
