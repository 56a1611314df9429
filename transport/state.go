package transport

import (
	"fmt"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// The State service's messages other than Push's (which package wire
// encodes): key states and partitions between the generated types and
// limit's, for the server (api/peers) and the client (dial) alike.

// maxStatePartitions bounds the partitions named in one State call.
const maxStatePartitions = 1 << 20

// KeysFromProto converts the key states of a Pull answer.
func KeysFromProto(in []*pb.KeyState) ([]limit.KeyState, error) {
	out := make([]limit.KeyState, len(in))
	for i, k := range in {
		a := k.GetAlgorithm()
		if a < pb.Algorithm_TOKEN_BUCKET || a > 0xFF || !limit.Algorithm(a).Moved() { // the gubernator and Cell algorithms' numbers are internal, as is LeaseBook
			return nil, fmt.Errorf("transport: key state %d: unknown algorithm %d", i, int32(a))
		}
		out[i] = limit.KeyState{Algorithm: limit.Algorithm(a), Key: string(k.GetKey()), State: k.GetState()}
	}
	return out, nil
}

// KeysToProto converts key states for a Pull answer.
func KeysToProto(in []limit.KeyState) []*pb.KeyState {
	out := make([]*pb.KeyState, len(in))
	msgs := make([]pb.KeyState, len(in))
	for i, k := range in {
		msgs[i] = pb.KeyState{Algorithm: pb.Algorithm(k.Algorithm), Key: []byte(k.Key), State: k.State}
		out[i] = &msgs[i]
	}
	return out
}

// PartitionsFromProto converts the partitions of a call, refusing more
// than a call may name.
func PartitionsFromProto(in []uint32) ([]int, error) {
	if len(in) > maxStatePartitions {
		return nil, fmt.Errorf("transport: %d partitions in one call, max %d", len(in), maxStatePartitions)
	}
	out := make([]int, len(in))
	for i, p := range in {
		out[i] = int(p)
	}
	return out, nil
}

// PartitionsToProto converts partitions for a call.
func PartitionsToProto(in []int) []uint32 {
	out := make([]uint32, len(in))
	for i, p := range in {
		out[i] = uint32(p)
	}
	return out
}

// LeaseToProto converts a lease call for the wire.
func LeaseToProto(r limit.LeaseRequest) *pb.LeaseRequest {
	return &pb.LeaseRequest{From: r.From, Algorithm: pb.Algorithm(r.Rule.Algorithm), Key: []byte(r.Key),
		Limit: r.Rule.Limit, PeriodNs: int64(r.Rule.Period), Burst: r.Rule.Burst,
		Want: r.Want, Release: r.Release, Leftover: r.Leftover}
}

// LeaseFromProto converts a lease call from the wire. Only TOKEN_BUCKET,
// FIXED_WINDOW and SLIDING_WINDOW are leased (calendar windows are not:
// the call does not carry a calendar); the rule must be valid and the
// quantities not negative.
func LeaseFromProto(in *pb.LeaseRequest) (limit.LeaseRequest, error) {
	a := limit.Algorithm(in.GetAlgorithm())
	if a != limit.TokenBucket && a != limit.FixedWindow && a != limit.SlidingWindow {
		return limit.LeaseRequest{}, fmt.Errorf("transport: %v is not leased", a)
	}
	r := limit.Rule{Algorithm: a, Limit: in.GetLimit(), Period: time.Duration(in.GetPeriodNs()), Burst: in.GetBurst()}
	if err := r.Validate(); err != nil {
		return limit.LeaseRequest{}, fmt.Errorf("transport: lease: %w", err)
	}
	if in.GetWant() < 0 || in.GetLeftover() < 0 {
		return limit.LeaseRequest{}, fmt.Errorf("transport: lease: negative hits")
	}
	return limit.LeaseRequest{From: in.GetFrom(), Key: string(in.GetKey()), Rule: r,
		Want: in.GetWant(), Release: in.GetRelease(), Leftover: in.GetLeftover()}, nil
}

// GrantToProto converts a lease answer for the wire.
func GrantToProto(g limit.LeaseGrant) *pb.LeaseResponse {
	return &pb.LeaseResponse{NotOwner: g.NotOwner, Id: g.ID, Hits: g.Hits, TtlNs: int64(g.TTL), DenyNs: int64(g.Deny), Credited: g.Credited}
}

// GrantFromProto converts a lease answer from the wire.
func GrantFromProto(in *pb.LeaseResponse) limit.LeaseGrant {
	return limit.LeaseGrant{NotOwner: in.GetNotOwner(), ID: in.GetId(), Hits: max(in.GetHits(), 0),
		TTL: time.Duration(in.GetTtlNs()), Deny: time.Duration(in.GetDenyNs()), Credited: in.GetCredited()}
}
