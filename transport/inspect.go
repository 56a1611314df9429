package transport

import (
	"fmt"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/wire"
)

// Inspection's messages (shardlimiter.v1.Inspect on the client port,
// State.Inspect between nodes) between the generated types and limit's,
// for the servers (api/inspect, api/peers) and the clients (dial) alike.

// CheckOfInspect converts an inspection request; hits are ignored.
func CheckOfInspect(r *pb.RateLimitRequest) (limit.Check, error) {
	if r == nil {
		return limit.Check{}, fmt.Errorf("%w: request is missing", ErrInvalidArgument)
	}
	w := wire.Request{
		Name: r.GetName(), Key: r.GetUniqueKey(), Limit: r.GetLimit(),
		DurationMs: r.GetDurationMs(), Algorithm: int32(r.GetAlgorithm()), Burst: r.GetBurst(),
		MinIntervalMs: r.GetMinIntervalMs(), WarmupMs: r.GetWarmupMs(), Behavior: int32(r.GetBehavior()),
		Calendar: int32(r.GetCalendar()),
	}
	c, err := w.Check()
	if err != nil {
		return limit.Check{}, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return c, nil
}

// RequestOfInspect is the request of an inspection of c.
func RequestOfInspect(c limit.Check) *pb.RateLimitRequest {
	c.Hits = 0
	w := wire.RequestOf(&c)
	return &pb.RateLimitRequest{
		Name: w.Name, UniqueKey: w.Key, Limit: w.Limit, DurationMs: w.DurationMs,
		Algorithm: pb.Algorithm(w.Algorithm), Burst: w.Burst, MinIntervalMs: w.MinIntervalMs,
		WarmupMs: w.WarmupMs, Behavior: pb.Behavior(w.Behavior), Calendar: pb.Calendar(w.Calendar),
	}
}

func msOf(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	return (ns + 999_999) / 1_000_000
}

// ViewToPB converts a key view for the wire.
func ViewToPB(v limit.KeyView) *pb.KeyView {
	out := &pb.KeyView{Node: v.Node, Held: v.Held, Error: v.Error}
	if v.Error != "" {
		return out
	}
	if !v.Allowed {
		out.Status = pb.Status_OVER_LIMIT
	}
	out.Limit, out.Remaining, out.ResetTimeMs = v.Limit, v.Remaining, msOf(v.ResetAt)
	if v.RetryAfter == limit.Never {
		out.RetryAfterMs = -1
	} else {
		out.RetryAfterMs = msOf(int64(v.RetryAfter))
	}
	out.WindowEndMs, out.PreviousCount, out.CurrentCount = msOf(v.WindowEnd), v.Previous, v.Current
	for _, l := range v.Leases {
		out.Leases = append(out.Leases, &pb.KeyLease{Lessee: l.Lessee, Hits: l.Hits, ExpiresMs: msOf(l.Expires)})
	}
	return out
}

// ViewFromPB converts a key view from the wire.
func ViewFromPB(v *pb.KeyView) limit.KeyView {
	out := limit.KeyView{Node: v.GetNode(), Held: v.GetHeld(), Limit: v.GetLimit(), Error: v.GetError()}
	out.Allowed = v.GetStatus() == pb.Status_UNDER_LIMIT && out.Error == ""
	out.Remaining, out.ResetAt = v.GetRemaining(), v.GetResetTimeMs()*1_000_000
	if v.GetRetryAfterMs() < 0 {
		out.RetryAfter = limit.Never
	} else {
		out.RetryAfter = time.Duration(v.GetRetryAfterMs()) * time.Millisecond
	}
	out.WindowEnd, out.Previous, out.Current = v.GetWindowEndMs()*1_000_000, v.GetPreviousCount(), v.GetCurrentCount()
	for _, l := range v.GetLeases() {
		out.Leases = append(out.Leases, limit.LeaseView{Lessee: l.GetLessee(), Hits: l.GetHits(), Expires: l.GetExpiresMs() * 1_000_000})
	}
	return out
}
