package gubernator

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/shardlimiter/shardlimiter/api/gubernator/gubpb"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// gubernator's HTTP gateway (grpc-gateway in gubernator): the three V1
// methods as JSON, on a listener of their own (cmd: --gubernator-http-addr)
// since its POST /v1/GetRateLimits differs from shardlimiter's.
//
//	POST /v1/GetRateLimits   GetRateLimitsReq → GetRateLimitsResp
//	GET  /v1/HealthCheck     → HealthCheckResp
//	GET  /v1/LiveCheck       → LiveCheckResp
//
// Bodies are protojson: fields by their proto names (both spellings read),
// every field written, unknown fields ignored, int64 as strings (numbers
// read too), enums by name (numbers read too). A failed call answers the
// HTTP status of its gRPC code with {"code", "message", "details"}, the
// gateway's error body.

// gubernatorMaxBody bounds a GetRateLimits body: a full batch in JSON.
var gubernatorMaxBody = int64(4 * transport.MaxRequestBytes(MaxBatch))

var (
	gubJSONOut = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	gubJSONIn  = protojson.UnmarshalOptions{DiscardUnknown: true}
)

// Gateway returns the gateway's routes, for a listener of their own. Its
// calls take units of h's in-flight bound (the node's HTTP listener, which
// counts their refusals) and are counted under api gubernator_http.
func (g *API) Gateway(h *server.HTTP) http.Handler {
	gw := &gateway{g: g, acquire: h.Acquire, calls: h.Config().Metrics.Calls("gubernator_http", "GetRateLimits", true)}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/GetRateLimits", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeGubernatorError(w, status.Error(codes.Unimplemented, "Method Not Allowed"))
			return
		}
		gw.serveGetRateLimits(w, r)
	})
	mux.HandleFunc("/v1/HealthCheck", getOnly(func(ctx context.Context) (proto.Message, error) {
		return g.HealthCheck(ctx, &gubpb.HealthCheckReq{})
	}))
	mux.HandleFunc("/v1/LiveCheck", getOnly(func(ctx context.Context) (proto.Message, error) {
		return g.LiveCheck(ctx, &gubpb.LiveCheckReq{})
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeGubernatorError(w, status.Error(codes.NotFound, "Not Found"))
	})
	return mux
}

func getOnly(call func(ctx context.Context) (proto.Message, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			writeGubernatorError(w, status.Error(codes.Unimplemented, "Method Not Allowed"))
			return
		}
		m, err := call(r.Context())
		if err != nil {
			writeGubernatorError(w, err)
			return
		}
		writeGubernatorJSON(w, m)
	}
}

// gateway serves the HTTP routes of an API.
type gateway struct {
	g       *API
	acquire func(units int) (server.Held, error)
	calls   *server.Calls
}

func (gw *gateway) serveGetRateLimits(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	items := -1
	code := http.StatusOK
	defer func() { gw.calls.ObserveHTTP(code, items, time.Since(start)) }()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, gubernatorMaxBody))
	if err != nil {
		code = writeGubernatorError(w, status.Errorf(codes.InvalidArgument, "reading the body: %v", err))
		return
	}
	var req gubpb.GetRateLimitsReq
	if err := gubJSONIn.Unmarshal(body, &req); err != nil {
		code = writeGubernatorError(w, status.Error(codes.InvalidArgument, err.Error()))
		return
	}
	items = len(req.GetRequests())
	resp, err := gw.g.getRateLimits(r.Context(), &req, gw.acquire)
	if err != nil {
		code = writeGubernatorError(w, gubernatorStatus(err))
		return
	}
	writeGubernatorJSON(w, resp)
}

func writeGubernatorJSON(w http.ResponseWriter, m proto.Message) {
	b, err := gubJSONOut.Marshal(m)
	if err != nil {
		writeGubernatorError(w, status.Error(codes.Internal, err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// gubernatorError is the gateway's error body.
type gubernatorError struct {
	Code    int32  `json:"code"`
	Message string `json:"message"`
	Details []any  `json:"details"`
}

// writeGubernatorError answers err with the HTTP status of its gRPC code
// and returns that status.
func writeGubernatorError(w http.ResponseWriter, err error) int {
	s, ok := status.FromError(err)
	if !ok {
		s = status.New(transport.Code(err), err.Error())
	}
	code := transport.HTTPStatus(s.Code())
	switch s.Code() {
	case codes.OutOfRange:
		code = http.StatusBadRequest
	case codes.NotFound:
		code = http.StatusNotFound
	case codes.Unimplemented:
		code = http.StatusMethodNotAllowed
	}
	b, _ := json.Marshal(gubernatorError{Code: int32(s.Code()), Message: s.Message(), Details: []any{}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
	return code
}
