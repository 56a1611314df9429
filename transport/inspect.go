package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/internal/wire"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// Inspection: reading a key's state without spending (shardlimiter.v1.Inspect
// on the client port, GET /v1/keys over HTTP, State.Inspect between nodes).

// Inspector answers shardlimiter.v1.Inspect and GET /v1/keys: a key's state
// on its owner (and its replica holder), read without changing anything.
// c.Hits is 0; c.Rule may be zero (the check names a rule of the rules
// file). An error wrapping ErrInvalidArgument is the caller's fault
// (InvalidArgument / HTTP 400). Called concurrently.
type Inspector interface {
	Inspect(ctx context.Context, c limit.Check) (limit.Inspection, error)
}

// LocalInspector answers State.Inspect on the peer port: what this node
// holds of c's key under c's rule, whoever owns it, read without changing
// anything and never forwarded. A StateService that also implements it
// serves State.Inspect; others answer Unimplemented.
type LocalInspector interface {
	InspectLocal(ctx context.Context, c limit.Check) (limit.KeyView, error)
}

// ErrInvalidArgument classifies a request the caller got wrong; answered
// InvalidArgument / HTTP 400.
var ErrInvalidArgument = errors.New("invalid argument")

// InspectServiceName is the inspection service, as registered and as
// health reports it.
const InspectServiceName = "shardlimiter.v1.Inspect"

// checkOfInspect converts an inspection request; hits are ignored.
func checkOfInspect(r *pb.RateLimitRequest) (limit.Check, error) {
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

// requestOfInspect is the request of an inspection of c.
func requestOfInspect(c limit.Check) *pb.RateLimitRequest {
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

func viewToPB(v limit.KeyView) *pb.KeyView {
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
	return out
}

func viewFromPB(v *pb.KeyView) limit.KeyView {
	out := limit.KeyView{Node: v.GetNode(), Held: v.GetHeld(), Limit: v.GetLimit(), Error: v.GetError()}
	out.Allowed = v.GetStatus() == pb.Status_UNDER_LIMIT && out.Error == ""
	out.Remaining, out.ResetAt = v.GetRemaining(), v.GetResetTimeMs()*1_000_000
	if v.GetRetryAfterMs() < 0 {
		out.RetryAfter = limit.Never
	} else {
		out.RetryAfter = time.Duration(v.GetRetryAfterMs()) * time.Millisecond
	}
	out.WindowEnd, out.Previous, out.Current = v.GetWindowEndMs()*1_000_000, v.GetPreviousCount(), v.GetCurrentCount()
	return out
}

func inspectionToPB(in limit.Inspection) *pb.InspectKeyResponse {
	out := &pb.InspectKeyResponse{Owner: in.Owner.Node, OwnerState: viewToPB(in.Owner)}
	if in.Replica.Node != "" {
		out.ReplicaState = viewToPB(in.Replica)
	}
	return out
}

// inspectServer adapts an Inspector to the generated service.
type inspectServer struct {
	pb.UnimplementedInspectServer
	in Inspector
}

func (s *inspectServer) InspectKey(ctx context.Context, req *pb.InspectKeyRequest) (*pb.InspectKeyResponse, error) {
	out, err := inspect(ctx, s.in, req.GetRequest())
	if err != nil {
		return nil, grpcError(err)
	}
	return out, nil
}

// inspect answers one inspection request.
func inspect(ctx context.Context, in Inspector, r *pb.RateLimitRequest) (*pb.InspectKeyResponse, error) {
	c, err := checkOfInspect(r)
	if err != nil {
		return nil, err
	}
	res, err := in.Inspect(ctx, c)
	if err != nil {
		return nil, err
	}
	return inspectionToPB(res), nil
}

// Inspect serves State.Inspect for a StateService that is a LocalInspector.
func (s *stateServer) Inspect(ctx context.Context, req *pb.InspectKeyRequest) (*pb.KeyView, error) {
	li, ok := s.s.(LocalInspector)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "transport: this node does not inspect keys")
	}
	c, err := checkOfInspect(req.GetRequest())
	if err != nil {
		return nil, grpcError(err)
	}
	v, err := li.InspectLocal(ctx, c)
	if err != nil {
		return nil, grpcError(err)
	}
	return viewToPB(v), nil
}

// Inspect asks the node what it holds of c's key (State.Inspect).
func (c *StateClient) Inspect(ctx context.Context, check limit.Check) (limit.KeyView, error) {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	out, err := c.client.Inspect(ctx, &pb.InspectKeyRequest{Request: requestOfInspect(check)})
	if err != nil {
		return limit.KeyView{}, c.classify(err)
	}
	return viewFromPB(out), nil
}

// Inspect reads c's key on its owner without spending (the Inspect
// service; see Inspector). A zero c.Rule names a rule of the server's
// rules file.
func (c *Client) Inspect(ctx context.Context, check limit.Check) (limit.Inspection, error) {
	out, err := pb.NewInspectClient(c.conn).InspectKey(ctx, &pb.InspectKeyRequest{Request: requestOfInspect(check)})
	if err != nil {
		return limit.Inspection{}, fmt.Errorf("transport: inspect on %s: %w", c.addr, err)
	}
	res := limit.Inspection{Owner: viewFromPB(out.GetOwnerState())}
	if out.GetReplicaState() != nil {
		res.Replica = viewFromPB(out.GetReplicaState())
	}
	return res, nil
}

// serveKeys answers GET /v1/keys?name=…&key=…[&limit=…&duration_ms=…&algorithm=…]:
// the JSON of an InspectKeyResponse.
func (h *httpHandler) serveKeys(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Inspector == nil {
		writeError(w, http.StatusNotFound, "transport: key inspection is not served here")
		return
	}
	req, err := inspectQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out, err := inspect(r.Context(), h.cfg.Inspector, req)
	if err != nil {
		writeError(w, httpStatus(Code(err)), err.Error())
		return
	}
	body, err := marshalJSON.Marshal(out)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "transport: encoding JSON: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(body, '\n'))
}

// inspectQuery reads an inspection request from query parameters named as
// RateLimitRequest's fields (key is also accepted for unique_key;
// algorithm and calendar by name or number).
func inspectQuery(q url.Values) (*pb.RateLimitRequest, error) {
	known := map[string]bool{"name": true, "key": true, "unique_key": true, "limit": true, "duration_ms": true,
		"algorithm": true, "burst": true, "min_interval_ms": true, "warmup_ms": true, "behavior": true, "calendar": true}
	for k := range q {
		if !known[k] {
			return nil, fmt.Errorf("%w: unknown parameter %q", ErrInvalidArgument, k)
		}
	}
	r := &pb.RateLimitRequest{Name: q.Get("name"), UniqueKey: q.Get("unique_key")}
	if k := q.Get("key"); k != "" {
		r.UniqueKey = k
	}
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"limit", &r.Limit}, {"duration_ms", &r.DurationMs}, {"burst", &r.Burst}, {"min_interval_ms", &r.MinIntervalMs}, {"warmup_ms", &r.WarmupMs}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: want an integer, got %q", ErrInvalidArgument, f.name, v)
			}
			*f.dst = n
		}
	}
	var err error
	enum := func(name string, values map[string]int32) int32 {
		v := q.Get(name)
		if v == "" || err != nil {
			return 0
		}
		if n, ok := values[strings.ToUpper(v)]; ok {
			return n
		}
		n, perr := strconv.ParseInt(v, 10, 32)
		if perr != nil {
			err = fmt.Errorf("%w: unknown %s %q", ErrInvalidArgument, name, v)
		}
		return int32(n)
	}
	r.Algorithm = pb.Algorithm(enum("algorithm", pb.Algorithm_value))
	r.Calendar = pb.Calendar(enum("calendar", pb.Calendar_value))
	r.Behavior = pb.Behavior(enum("behavior", pb.Behavior_value))
	return r, err
}
