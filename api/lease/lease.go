// Package lease lets client processes hold leases of hot keys:
// shardlimiter.v1.Leases/Lease on the client gRPC listener
// (transport/proto/shardlimiter/v1/lease.proto), speaking the messages of
// the nodes' own State.Lease (docs/ARCHITECTURE.md, "Leases";
// the Go client's side is package client, lease.go).
//
// A lease is a share of a key's capacity that its owner debits from the
// key and hands to the lessee, which then decides the key's checks
// itself. The node grants a client as it grants another node (the
// Granter, peer.Node.Lease): the grant is a debit, a release credits
// back at most what the lessee's grants hold, and a request for a key the
// node does not decide answers NotOwner, naming the owner, so the client
// asks there.
//
// Who may hold leases is the operator's choice (Config.Access): clients
// that presented a certificate the listener verified (mTLS,
// --tls-client-ca-file), or anyone (--client-leases, for development:
// unauthenticated). Otherwise every call is refused with PermissionDenied,
// logged (at most once per logEvery) and counted. A lessee is named by its
// certificate's identity (its first URI SAN, else its subject's common
// name, else its first DNS SAN) or, unauthenticated, by its address's
// host, followed by the instance name the client sends in from: the grants
// of one client process are pooled, those of two never are.
package lease

import (
	"context"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// Granter grants and releases leases of the keys this node decides: the
// node (peer.Node.Lease). It must not forward: for a key it does not
// decide it answers LeaseGrant.NotOwner. Called concurrently.
type Granter interface {
	Lease(ctx context.Context, r limit.LeaseRequest) (limit.LeaseGrant, error)
}

// Access says which clients may hold leases.
type Access uint8

const (
	// Nobody: every call is refused with PermissionDenied (the default).
	Nobody Access = iota
	// Certified: clients whose certificate the listener verified. Give
	// it only to a listener that requires client certificates.
	Certified
	// Anyone, unauthenticated: for development (--client-leases).
	Anyone
)

// Config configures the lease service.
type Config struct {
	Access Access
	// Logger receives the refusals (at most one line per logEvery);
	// nil discards them.
	Logger *slog.Logger
}

// MaxInstance bounds the instance name a client sends, in bytes.
const MaxInstance = 64

// logEvery spaces the log lines of refused calls: a refused client may
// ask again at every renewal, and the counter has the count.
const logEvery = 10 * time.Second

// Counts are the calls of the service so far, by outcome.
type Counts struct {
	Granted  uint64 // a grant of some hits (a renewal included)
	Denied   uint64 // a deny lease: the key is over its limit
	Empty    uint64 // nothing granted (near the limit, or a release alone)
	NotOwner uint64 // the key is decided elsewhere
	Refused  uint64 // PermissionDenied
	Invalid  uint64 // InvalidArgument
	Failed   uint64 // the Granter failed, or the node is overloaded
}

// Service is the registered lease service. Its methods are safe for
// concurrent use.
type Service struct {
	g       Granter
	cfg     Config
	acquire func(units int) (server.Held, error) // the listener's bound

	granted, denied, empty, notOwner, refused, invalid, failed atomic.Uint64
	lastLog                                                    atomic.Int64 // Unix ns of the last refusal logged
}

// Register registers shardlimiter.v1.Leases, answered by g under cfg, on
// the client listener l. Its calls are refused while l's bound is full
// and take one unit of it each, as one check.
func Register(l *server.Listener, g Granter, cfg Config) *Service {
	s := &Service{g: g, cfg: cfg, acquire: l.Acquire}
	l.Register(&pb.Leases_ServiceDesc, leaseServer{s: s}, server.Shed("Lease"))
	return s
}

// Counts returns the calls so far, by outcome.
func (s *Service) Counts() Counts {
	return Counts{Granted: s.granted.Load(), Denied: s.denied.Load(), Empty: s.empty.Load(),
		NotOwner: s.notOwner.Load(), Refused: s.refused.Load(), Invalid: s.invalid.Load(), Failed: s.failed.Load()}
}

// leaseServer adapts a Service to the generated service.
type leaseServer struct {
	pb.UnimplementedLeasesServer
	s *Service
}

func (a leaseServer) Lease(ctx context.Context, in *pb.LeaseRequest) (*pb.LeaseResponse, error) {
	return a.s.lease(ctx, in)
}

// lease answers one call: permission, then the request's validity, then
// the Granter.
func (s *Service) lease(ctx context.Context, in *pb.LeaseRequest) (*pb.LeaseResponse, error) {
	who, certified := identity(ctx)
	if err := s.permit(who, certified); err != nil {
		return nil, transport.GRPCError(err)
	}
	r, err := request(in)
	if err != nil {
		s.invalid.Add(1)
		return nil, transport.GRPCError(err)
	}
	r.From, r.Client = who+"/"+r.From, true
	held, err := s.acquire(1)
	if err != nil {
		s.failed.Add(1)
		return nil, transport.GRPCError(err)
	}
	defer held.Release()
	g, err := s.g.Lease(ctx, r)
	if err != nil {
		s.failed.Add(1)
		return nil, transport.GRPCError(err)
	}
	s.count(g)
	return transport.GrantToProto(g), nil
}

func (s *Service) count(g limit.LeaseGrant) {
	switch {
	case g.NotOwner != "":
		s.notOwner.Add(1)
	case g.Deny > 0:
		s.denied.Add(1)
	case g.Hits > 0:
		s.granted.Add(1)
	default:
		s.empty.Add(1)
	}
}

// permit refuses the call unless cfg.Access allows who.
func (s *Service) permit(who string, certified bool) error {
	var why string
	switch {
	case s.cfg.Access == Anyone, s.cfg.Access == Certified && certified:
		return nil
	case s.cfg.Access == Certified:
		why = "client leases need a verified client certificate"
	default:
		why = "client leases are off on this node: they need client certificates (--tls-client-ca-file) or, unauthenticated, --client-leases"
	}
	s.refused.Add(1)
	now := time.Now().UnixNano()
	if last := s.lastLog.Load(); now-last >= int64(logEvery) && s.lastLog.CompareAndSwap(last, now) && s.cfg.Logger != nil {
		s.cfg.Logger.Warn("client lease refused", "client", who, "reason", why, "refused_total", s.refused.Load())
	}
	return fmt.Errorf("%w: %s", transport.ErrPermissionDenied, why)
}

// request converts and checks a client's lease call: a token bucket rule,
// a table key of a valid rule name and unique key, an instance name.
func request(in *pb.LeaseRequest) (limit.LeaseRequest, error) {
	r, err := transport.LeaseFromProto(in)
	if err != nil {
		return r, fmt.Errorf("%w: %v", transport.ErrInvalidArgument, err)
	}
	switch {
	case r.From == "" || len(r.From) > MaxInstance || !utf8.ValidString(r.From):
		return r, fmt.Errorf("%w: lease: from must name the client's instance in 1 to %d bytes of UTF-8", transport.ErrInvalidArgument, MaxInstance)
	case !validTableKey(r.Key):
		return r, fmt.Errorf("%w: lease: key must be a rule name's length (uvarint), the name and the unique key", transport.ErrInvalidArgument)
	}
	return r, nil
}

// validTableKey reports whether key is a node's table key: the rule
// name's length as a uvarint, the name, then the unique key, each as
// limit.Check.Validate bounds them.
func validTableKey(key string) bool {
	l, n := binary.Uvarint([]byte(key[:min(len(key), binary.MaxVarintLen64)]))
	if n <= 0 || l == 0 || l > limit.MaxNameLen || l >= uint64(len(key)-n) {
		return false
	}
	name, uk := key[n:n+int(l)], key[n+int(l):]
	return utf8.ValidString(name) && len(uk) <= limit.MaxKeyLen
}

// identity names the caller of ctx: its verified certificate's identity
// (certified), else its address's host.
func identity(ctx context.Context) (who string, certified bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "unknown", false
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
		return certName(ti.State.VerifiedChains[0][0]), true
	}
	if p.Addr == nil {
		return "unknown", false
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		host = p.Addr.String()
	}
	return "addr:" + host, false
}

// certName is a certificate's identity: its first URI SAN, else its
// subject's common name, else its first DNS SAN, else its serial number.
func certName(c *x509.Certificate) string {
	switch {
	case len(c.URIs) > 0:
		return "uri:" + c.URIs[0].String()
	case c.Subject.CommonName != "":
		return "cn:" + c.Subject.CommonName
	case len(c.DNSNames) > 0:
		return "dns:" + c.DNSNames[0]
	}
	return "serial:" + c.SerialNumber.String()
}
