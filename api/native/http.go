package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// RegisterHTTP registers the JSON API on the HTTP listener h:
//
//	POST /v1/GetRateLimits   GetRateLimitsRequest → GetRateLimitsResponse (protojson)
//
// answered by c under h's in-flight and body-bytes bounds. Every answer is
// JSON, errors included: {"error":"…"} with 400 (bad JSON, unknown field,
// batch over MaxBatch), 413 (body over MaxBodyBytes), 429 (overloaded:
// the in-flight or the body-bytes bound full; with Retry-After and
// "retry_after_ms"), 503 (c unavailable or shutting down). Responses use
// the proto field names (unique_key, reset_time_ms) and emit unpopulated
// fields; requests may use either spelling. Unknown fields are rejected:
// they are usually typos that would silently change a limit. Enum names
// (algorithm, behavior, calendar) match in any case, and one that names
// nothing fails its item alone (jsonenums.go). The handler is safe for
// concurrent use.
func RegisterHTTP(h *server.HTTP, c transport.Checker) {
	cfg := h.Config()
	hh := &httpHandler{
		http: h, batch: h.Batches(c), maxBody: cfg.MaxBodyBytes,
		calls: cfg.Metrics.Calls("http", "GetRateLimits", true),
	}
	h.Handle("/v1/GetRateLimits", http.HandlerFunc(hh.getRateLimits), http.MethodPost)
}

type httpHandler struct {
	http    *server.HTTP
	batch   *server.Batches
	maxBody int64
	calls   *server.Calls
}

var marshalJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (h *httpHandler) getRateLimits(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	buf := bufPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= int(h.maxBody)+bytes.MinRead {
			buf.Reset()
			bufPool.Put(buf)
		}
	}()
	status, items := h.serveBatch(w, r, buf)
	h.calls.ObserveHTTP(status, items, time.Since(start))
}

// serveBatch answers POST /v1/GetRateLimits using buf for the body and then
// the response. It returns the status written and the batch size (-1 when
// the batch was not decoded).
func (h *httpHandler) serveBatch(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer) (int, int) {
	// Charged at the headers, before the body is read (fair.go), and
	// settled to the batch's size once it is decoded.
	t, ok := h.http.Charge(r)
	if !ok {
		return server.WriteOverloaded(w, server.ErrShed.Error()), -1
	}
	defer t.Release()
	release, err := server.ReadBodyInto(w, r, h.http.BodyLimit(), buf)
	defer release()
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return h.tooLarge(w)
	case errors.Is(err, transport.ErrOverloaded):
		return server.WriteOverloaded(w, err.Error()), -1
	case err != nil:
		return server.WriteError(w, http.StatusBadRequest, err.Error()), -1
	}
	// Refuse an oversized batch before decoding it, so that a body of many
	// tiny items ({},{},…) cannot cost far more memory than its size.
	if n := countObjects(buf.Bytes(), h.batch.MaxBatch()+1); n > h.batch.MaxBatch()+1 {
		return server.WriteError(w, http.StatusBadRequest,
			fmt.Sprintf("transport: batch exceeds the limit of %d items", h.batch.MaxBatch())), -1
	}
	var req pb.GetRateLimitsRequest
	badEnums, err := decodeRequest(buf.Bytes(), &req)
	if err != nil {
		return server.WriteError(w, http.StatusBadRequest, err.Error()), -1
	}
	items := len(req.GetRequests())
	if !t.Settle(h.http, items) {
		return server.WriteOverloaded(w, server.ErrShed.Error()), items
	}
	resp, err := h.decide(r.Context(), &req, badEnums)
	if errors.Is(err, transport.ErrOverloaded) {
		return server.WriteOverloaded(w, err.Error()), items
	} else if err != nil {
		return server.WriteError(w, transport.HTTPStatus(transport.Code(err)), err.Error()), items
	}
	out, err := marshalJSON.MarshalAppend(buf.Bytes()[:0], resp)
	if err != nil {
		return server.WriteError(w, http.StatusInternalServerError, "transport: encoding response: "+err.Error()), items
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	*buf = *bytes.NewBuffer(out[:0]) // keep the grown buffer for the pool
	return http.StatusOK, items
}

// decide answers a decoded JSON request, converted as gRPC's (json.go),
// whose units of the bound the call holds already.
func (h *httpHandler) decide(ctx context.Context, req *pb.GetRateLimitsRequest, bad []badEnum) (*pb.GetRateLimitsResponse, error) {
	checks := server.GetChecks()
	defer server.PutChecks(checks)
	checksFromPB(req.GetRequests(), checks)
	failBadEnums(checks, bad)
	out, err := h.batch.Decide(ctx, checks, false)
	if err != nil {
		return nil, err
	}
	return resultsToPB(out), nil
}

func (h *httpHandler) tooLarge(w http.ResponseWriter) (int, int) {
	return server.WriteError(w, http.StatusRequestEntityTooLarge,
		fmt.Sprintf("transport: body exceeds the limit of %d bytes", h.maxBody)), -1
}

// countObjects counts the '{' of b outside JSON strings, stopping once it
// exceeds limit. A GetRateLimitsRequest holds one object per item plus its
// own, so more than maxBatch+1 means too many items or invalid input. It
// need not validate: invalid input fails decoding anyway.
func countObjects(b []byte, limit int) int {
	n, inString, escaped := 0, false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{':
			if n++; n > limit {
				return n
			}
		}
	}
	return n
}
