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

// Replication of the owner's buckets to the node that would own them if
// this node left (shardlimiter.v1.Quota/Replicate, a JSON list of
// quota.BucketState in a BytesValue), which merges them into what it
// holds (quota.Table.Import):
//
//   - before an assignment is answered, the instance's state of the
//     bucket (replicateBefore): an assignment is a lease, and the backup
//     knows every one that may be in use, so a new owner after a crash
//     counts them all until their TTL ends. A bucket whose backup cannot
//     be reached is answered nothing (the instance keeps what it holds,
//     which the backup knows), as with a lease that is not replicated;
//   - every interval, the whole state (replicate): the demands, and the
//     state of a bucket this node no longer owns to the one that does now
//     (after a join or a restart), which adds the assignments it lists.
//
// A replica nobody reports on is forgotten once its assignments have
// ended.

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

// replicateBefore sends the state of instance in each bucket keys[i]
// ("" for none) to the bucket's backup and reports, per key, whether the
// answer may go out: true when sent, when there is nothing to send, or
// when the bucket has no backup (a lone node).
func (s *Service) replicateBefore(ctx context.Context, now time.Time, instance string, keys []string) []bool {
	ok := make([]bool, len(keys))
	byAddr := map[string][]int{}
	for i, key := range keys {
		addr, has := "", false
		if key != "" && s.cfg.Router != nil {
			addr, has = s.cfg.Router.Backup(key)
		}
		if !has || addr == "" {
			ok[i] = true
			continue
		}
		byAddr[addr] = append(byAddr[addr], i)
	}
	for addr, idx := range byAddr { // one backup for a report's few buckets, in practice
		states := make([]quota.BucketState, 0, len(idx))
		for _, i := range idx {
			if st, found := s.table.ExportInstance(now, keys[i], instance); found {
				states = append(states, st)
			}
		}
		var err error
		for rest := states; len(rest) > 0 && err == nil; rest = rest[min(len(rest), maxReplicaBuckets):] {
			err = s.sendReplicas(ctx, addr, rest[:min(len(rest), maxReplicaBuckets)])
		}
		if err != nil {
			s.m.replicaErrors.Inc()
			continue
		}
		s.m.replicated.Add(float64(len(states)))
		for _, i := range idx {
			ok[i] = true
		}
	}
	return ok
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
