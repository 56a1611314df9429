package rlqs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardlimiter/shardlimiter/quota"
)

// Replication of the owner's buckets: every interval, each bucket's state
// (its instances' demand and the assignments that may still be in use) is
// sent to the node that would own it if this node left
// (shardlimiter.v1.Quota/Replicate, a JSON list of quota.BucketState in a
// BytesValue), which keeps it as a replica. A new owner after a crash so
// counts the old owner's assignments until their TTL ends, up to one
// interval old. A replica nobody reports on is forgotten once its
// assignments have ended.

// ReplicateMethod is the peer method that takes replicas.
const ReplicateMethod = "/" + QuotaService + "/Replicate"

// maxReplicaBuckets bounds the buckets of one Replicate call, both ways.
const maxReplicaBuckets = 500

func replicateHandler(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.BytesValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	var states []quota.BucketState
	if err := json.Unmarshal(in.GetValue(), &states); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "rlqs: replicas do not decode: %v", err)
	}
	if len(states) > maxReplicaBuckets {
		return nil, status.Errorf(codes.InvalidArgument, "rlqs: %d replicas in one call, max %d", len(states), maxReplicaBuckets)
	}
	s := srv.(*Service)
	now := s.cfg.Now()
	for _, st := range states {
		if err := s.table.Import(now, st); err != nil {
			s.m.full.Inc()
		}
	}
	return &emptypb.Empty{}, nil
}

// replicate sends every bucket this node reports on to its backup.
func (s *Service) replicate(ctx context.Context, now time.Time) {
	if s.cfg.Router == nil {
		return
	}
	byAddr := map[string][]quota.BucketState{}
	s.table.Export(now, func(b quota.BucketState) {
		if addr, ok := s.cfg.Router.Backup(b.Key); ok && addr != "" {
			byAddr[addr] = append(byAddr[addr], b)
		}
	})
	for addr, states := range byAddr {
		for len(states) > 0 {
			n := min(len(states), maxReplicaBuckets)
			if err := s.sendReplicas(ctx, addr, states[:n]); err != nil {
				s.m.replicaErrors.Inc()
				break
			}
			s.m.replicated.Add(float64(n))
			states = states[n:]
		}
	}
}

func (s *Service) sendReplicas(ctx context.Context, addr string, states []quota.BucketState) error {
	data, err := json.Marshal(states)
	if err != nil {
		return err
	}
	cc, err := s.owners.conn(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PeerTimeout)
	defer cancel()
	if err := cc.Invoke(ctx, ReplicateMethod, wrapperspb.Bytes(data), new(emptypb.Empty)); err != nil {
		return fmt.Errorf("rlqs: replicas to %s: %w", addr, err)
	}
	return nil
}
