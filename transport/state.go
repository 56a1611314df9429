package transport

import (
	"fmt"

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
		if a < pb.Algorithm_TOKEN_BUCKET || a > pb.Algorithm(limit.MaxAlgorithm) { // the gubernator and Cell algorithms' numbers are internal
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
