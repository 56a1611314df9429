// Package inspect implements key inspection, reading a key's state
// without spending: shardlimiter.v1.Inspect on the client gRPC listener and
// GET /v1/keys on the HTTP listener (State.Inspect between nodes is package
// peers'). It registers itself on the listeners it is given.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// Inspector answers shardlimiter.v1.Inspect and GET /v1/keys: a key's state
// on its owner (and its replica holder), read without changing anything.
// c.Hits is 0; c.Rule may be zero (the check names a rule of the rules
// file). An error wrapping transport.ErrInvalidArgument is the caller's fault
// (InvalidArgument / HTTP 400). Called concurrently.
type Inspector interface {
	Inspect(ctx context.Context, c limit.Check) (limit.Inspection, error)
}

func inspectionToPB(in limit.Inspection) *pb.InspectKeyResponse {
	out := &pb.InspectKeyResponse{Owner: in.Owner.Node, OwnerState: transport.ViewToPB(in.Owner)}
	if in.Replica.Node != "" {
		out.ReplicaState = transport.ViewToPB(in.Replica)
	}
	return out
}

// Register registers shardlimiter.v1.Inspect, answered by in, on the
// client listener l.
func Register(l *server.Listener, in Inspector) {
	pb.RegisterInspectServer(l, &inspectServer{in: in, acquire: l.Acquire})
}

// RegisterHTTP registers GET /v1/keys, answered by in, on the HTTP
// listener h.
func RegisterHTTP(h *server.HTTP, in Inspector) {
	s := &inspectServer{in: in, acquire: h.Acquire}
	h.Handle("/v1/keys", http.HandlerFunc(s.serveKeys), http.MethodGet)
}

// inspectServer adapts an Inspector to the generated service and to HTTP.
type inspectServer struct {
	pb.UnimplementedInspectServer
	in      Inspector
	acquire func(units int) (server.Held, error) // the listener's bound
}

func (s *inspectServer) InspectKey(ctx context.Context, req *pb.InspectKeyRequest) (*pb.InspectKeyResponse, error) {
	out, err := s.inspect(ctx, req.GetRequest())
	if err != nil {
		return nil, transport.GRPCError(err)
	}
	return out, nil
}

// inspect answers one inspection request. It takes one unit of the
// listener's in-flight bound, as a check does: inspections share the
// capacity of the API, and a flood of them is refused like one of checks.
func (s *inspectServer) inspect(ctx context.Context, r *pb.RateLimitRequest) (*pb.InspectKeyResponse, error) {
	c, err := transport.CheckOfInspect(r)
	if err != nil {
		return nil, err
	}
	held, err := s.acquire(1)
	if err != nil {
		return nil, err
	}
	defer held.Release()
	res, err := s.in.Inspect(ctx, c)
	if err != nil {
		return nil, err
	}
	return inspectionToPB(res), nil
}

// serveKeys answers GET /v1/keys?name=…&key=…[&limit=…&duration_ms=…&algorithm=…]:
// the JSON of an InspectKeyResponse.
func (s *inspectServer) serveKeys(w http.ResponseWriter, r *http.Request) {
	req, err := inspectQuery(r.URL.Query())
	if err != nil {
		server.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	out, err := s.inspect(r.Context(), req)
	switch {
	case errors.Is(err, transport.ErrOverloaded):
		server.WriteOverloaded(w, err.Error())
		return
	case err != nil:
		server.WriteError(w, transport.HTTPStatus(transport.Code(err)), err.Error())
		return
	}
	body, err := marshalJSON.Marshal(out)
	if err != nil {
		server.WriteError(w, http.StatusInternalServerError, "transport: encoding JSON: "+err.Error())
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
			return nil, fmt.Errorf("%w: unknown parameter %q", transport.ErrInvalidArgument, k)
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
				return nil, fmt.Errorf("%w: %s: want an integer, got %q", transport.ErrInvalidArgument, f.name, v)
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
			err = fmt.Errorf("%w: unknown %s %q", transport.ErrInvalidArgument, name, v)
		}
		return int32(n)
	}
	r.Algorithm = pb.Algorithm(enum("algorithm", pb.Algorithm_value))
	r.Calendar = pb.Calendar(enum("calendar", pb.Calendar_value))
	r.Behavior = pb.Behavior(enum("behavior", pb.Behavior_value))
	return r, err
}

var marshalJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
