package native

import (
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/server"
	"github.com/shardlimiter/shardlimiter/transport/wire"
)

// The messages of the HTTP/JSON API are the generated ones, which protojson
// reads and writes. They convert through package wire's items, field by
// field, so that an item means the same over JSON as over gRPC: the
// conversion rules are wire's alone.

// checksFromPB converts the items of a JSON request into dst.
func checksFromPB(reqs []*pb.RateLimitRequest, dst *wire.Checks) {
	for _, r := range reqs {
		w := wire.Request{
			Name: r.GetName(), Key: r.GetUniqueKey(), Hits: r.GetHits(), Limit: r.GetLimit(),
			DurationMs: r.GetDurationMs(), Algorithm: int32(r.GetAlgorithm()), Burst: r.GetBurst(),
			MinIntervalMs: r.GetMinIntervalMs(), WarmupMs: r.GetWarmupMs(), Behavior: int32(r.GetBehavior()),
			Chained: r.GetChained(), Calendar: int32(r.GetCalendar()), CreatedAtMs: r.GetCreatedAtMs(),
		}
		dst.Add(&w)
	}
}

// resultsToPB builds the JSON answer of a batch. The messages share one
// backing array: one allocation per batch, not per item.
func resultsToPB(b *server.ResultBatch) *pb.GetRateLimitsResponse {
	out := make([]*pb.RateLimitResponse, len(b.Results))
	msgs := make([]pb.RateLimitResponse, len(b.Results))
	var meta metadataMaps
	for i := range b.Results {
		r := wire.ResponseOf(&b.Results[i], b.Limits[i], b.Owner)
		m := &msgs[i]
		m.Status, m.Limit, m.Remaining = pb.Status(r.Status), r.Limit, r.Remaining
		m.ResetTimeMs, m.RetryAfterMs, m.DelayMs = r.ResetTimeMs, r.RetryAfterMs, r.DelayMs
		m.Error, m.Metadata = r.Error, meta.of(&r)
		out[i] = m
	}
	return &pb.GetRateLimitsResponse{Responses: out}
}

// metadataMaps builds the metadata maps of one answer. Items that name the
// same owner and no reason share one map: protojson only reads them, and
// sharing saves a map per item. A failed item gets its own.
type metadataMaps struct {
	owner  string
	shared map[string]string
}

func (mm *metadataMaps) of(r *wire.Response) map[string]string {
	if r.Reason != limit.OK {
		m := map[string]string{wire.MetaReason: r.Reason.String()}
		if r.Owner != "" {
			m[wire.MetaOwner] = r.Owner
		}
		return m
	}
	if r.Owner == "" {
		return nil
	}
	if mm.shared == nil || mm.owner != r.Owner {
		mm.owner, mm.shared = r.Owner, map[string]string{wire.MetaOwner: r.Owner}
	}
	return mm.shared
}
