package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// DefaultMaxBodyBytes bounds a POST body unless HTTPConfig says otherwise.
const DefaultMaxBodyBytes = 4 << 20

// HTTPConfig configures the HTTP/JSON handler.
type HTTPConfig struct {
	// Checker answers POST /v1/GetRateLimits. Without one it answers 503.
	Checker Checker
	// MaxBatch bounds the items of one call; more is a 400. Zero means
	// DefaultMaxBatch (1000).
	MaxBatch int
	// MaxBodyBytes bounds the request body, in bytes; more is a 413. Zero
	// means DefaultMaxBodyBytes (4 MiB), room for 1000 items with 1 KiB
	// keys. Each call in progress may hold about this much plus the decoded
	// batch.
	MaxBodyBytes int64
	// Ready reports whether the node has joined and owns its ring slice
	// (GET /readyz: 200, else 503). Nil means always ready.
	Ready func() bool
	// Metrics serves GET /metrics (e.g. promhttp.HandlerFor). Nil: 404.
	Metrics http.Handler
	// Cluster returns the cluster view served as JSON by GET /v1/cluster
	// (members, ring version, this node). Nil: 404.
	Cluster func() any
	// Telemetry records every POST /v1/GetRateLimits; nil records nothing.
	Telemetry *Metrics
	// InFlight bounds the checks in flight (see [InFlight]); a call that
	// does not fit is answered 429 with Retry-After at once. It may be the
	// bound of the client gRPC server. Nil means no bound.
	InFlight *InFlight
	// BodyBytes bounds the request-body bytes held by POST
	// /v1/GetRateLimits calls being read and decided at once, across all
	// connections. A body is reserved in full from its Content-Length
	// before it is read (a chunked one as it arrives); one that does not
	// fit is answered 429 with Retry-After at once and its connection is
	// closed, so that slow or stalled uploads cannot pile up memory. A
	// body over 64 KiB must leave a quarter of the bound free, which keeps
	// room for ordinary small batches while large ones hold the rest. Nil
	// means no bound; DefaultBodyBytes is 4 × DefaultMaxBodyBytes.
	BodyBytes *InFlight
}

// DefaultBodyBytes is the usual node-wide bound on request-body bytes
// being read at once (HTTPConfig.BodyBytes): 16 MiB, four bodies of the
// largest size. Each body byte costs about 2–3 bytes of heap while it is
// read and decoded, so this holds the HTTP API's share of a 512 MiB node
// under ~50 MiB, whatever the number of connections.
const DefaultBodyBytes = 4 * DefaultMaxBodyBytes

// smallBody is the size up to which a body may use the whole BodyBytes
// bound; larger ones leave a quarter of it free (about 270 batches of
// 100 items at a time).
const smallBody = 64 << 10

// NewHTTPHandler returns the HTTP/JSON API:
//
//	POST /v1/GetRateLimits   GetRateLimitsRequest → GetRateLimitsResponse (protojson)
//	GET  /healthz            200 {"status":"ok"} while the process runs
//	GET  /readyz             200 or 503, {"status":"ready"|"not ready"}
//	GET  /metrics            cfg.Metrics
//	GET  /v1/cluster         cfg.Cluster() as JSON
//
// Every answer of its own is JSON, errors included: {"error":"…"} with 400
// (bad JSON, unknown field, batch over MaxBatch), 404, 405 (with Allow),
// 413 (body over MaxBodyBytes), 429 (overloaded: InFlight or BodyBytes
// full; with Retry-After and "retry_after_ms"), 503 (Checker unavailable
// or shutting down).
// Responses use the proto field names (unique_key, reset_time_ms) and emit
// unpopulated fields; requests may use either spelling. Unknown fields are
// rejected: they are usually typos that would silently change a limit.
// Enum names (algorithm, behavior, calendar) match in any case, and one that
// names nothing fails its item alone (jsonenums.go).
// The handler is safe for concurrent use.
func NewHTTPHandler(cfg HTTPConfig) http.Handler {
	h := &httpHandler{cfg: cfg, batch: newBatchHandler(cfg.Checker, cfg.MaxBatch, cfg.Telemetry, cfg.InFlight, listenerHTTP)}
	if h.cfg.MaxBodyBytes <= 0 {
		h.cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return h
}

// NewHealthHandler serves only GET /healthz and GET /readyz, as
// NewHTTPHandler does with cfg.Ready = ready; every other path is a 404. It
// is meant for a plain-HTTP listener of its own, for kubelet probes when
// the API listener requires TLS client certificates.
func NewHealthHandler(ready func() bool) http.Handler {
	h := &httpHandler{cfg: HTTPConfig{Ready: ready}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
			writeError(w, http.StatusNotFound, "transport: only /healthz and /readyz are served here")
			return
		}
		h.ServeHTTP(w, r)
	})
}

type httpHandler struct {
	cfg   HTTPConfig
	batch *batchHandler
}

var marshalJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/GetRateLimits":
		if !allow(w, r, http.MethodPost) {
			return
		}
		h.getRateLimits(w, r)
	case "/healthz":
		if allow(w, r, http.MethodGet, http.MethodHead) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		}
	case "/readyz":
		if allow(w, r, http.MethodGet, http.MethodHead) {
			if h.cfg.Ready == nil || h.cfg.Ready() {
				writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
			} else {
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
			}
		}
	case "/metrics":
		if allow(w, r, http.MethodGet, http.MethodHead) {
			if h.cfg.Metrics == nil {
				writeError(w, http.StatusNotFound, "transport: metrics are not served here")
				return
			}
			h.cfg.Metrics.ServeHTTP(w, r)
		}
	case "/v1/cluster":
		if allow(w, r, http.MethodGet, http.MethodHead) {
			if h.cfg.Cluster == nil {
				writeError(w, http.StatusNotFound, "transport: no cluster view")
				return
			}
			writeJSON(w, http.StatusOK, h.cfg.Cluster())
		}
	default:
		writeError(w, http.StatusNotFound, "transport: no such endpoint: "+r.URL.Path)
	}
}

// allow answers 405 unless r uses one of methods.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	allowed := methods[0]
	for _, m := range methods[1:] {
		allowed += ", " + m
	}
	w.Header().Set("Allow", allowed)
	writeError(w, http.StatusMethodNotAllowed, "transport: method "+r.Method+" not allowed, use "+allowed)
	return false
}

func (h *httpHandler) getRateLimits(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	buf := bufPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= int(h.cfg.MaxBodyBytes)+bytes.MinRead {
			buf.Reset()
			bufPool.Put(buf)
		}
	}()
	status, items := h.serveBatch(w, r, buf)
	h.batch.metrics.observeHTTP(status, items, time.Since(start))
}

// serveBatch answers POST /v1/GetRateLimits using buf for the body and then
// the response. It returns the status written and the batch size (-1 when
// the batch was not decoded).
func (h *httpHandler) serveBatch(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer) (int, int) {
	release, err := readBody(w, r, BodyLimit{Budget: h.cfg.BodyBytes, Max: h.cfg.MaxBodyBytes, Metrics: h.batch.metrics}, buf)
	defer release()
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return h.tooLarge(w)
	case errors.Is(err, ErrOverloaded):
		return writeOverloaded(w, err.Error()), -1
	case err != nil:
		return writeError(w, http.StatusBadRequest, err.Error()), -1
	}
	// Refuse an oversized batch before decoding it, so that a body of many
	// tiny items ({},{},…) cannot cost far more memory than its size.
	if n := countObjects(buf.Bytes(), h.batch.maxBatch+1); n > h.batch.maxBatch+1 {
		return writeError(w, http.StatusBadRequest,
			fmt.Sprintf("transport: batch exceeds the limit of %d items", h.batch.maxBatch)), -1
	}
	var req pb.GetRateLimitsRequest
	badEnums, err := decodeRequest(buf.Bytes(), &req)
	if err != nil {
		return writeError(w, http.StatusBadRequest, err.Error()), -1
	}
	items := len(req.GetRequests())
	resp, err := h.decide(r.Context(), &req, badEnums)
	if errors.Is(err, ErrOverloaded) {
		return writeOverloaded(w, err.Error()), items
	} else if err != nil {
		return writeError(w, httpStatus(Code(err)), err.Error()), items
	}
	out, err := marshalJSON.MarshalAppend(buf.Bytes()[:0], resp)
	if err != nil {
		return writeError(w, http.StatusInternalServerError, "transport: encoding response: "+err.Error()), items
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	*buf = *bytes.NewBuffer(out[:0]) // keep the grown buffer for the pool
	return http.StatusOK, items
}

// decide answers a decoded JSON request, converted as gRPC's (json.go).
func (h *httpHandler) decide(ctx context.Context, req *pb.GetRateLimitsRequest, bad []badEnum) (*pb.GetRateLimitsResponse, error) {
	checks := getChecks()
	defer putChecks(checks)
	checksFromPB(req.GetRequests(), checks)
	failBadEnums(checks, bad)
	out, err := h.batch.decide(ctx, checks, false)
	if err != nil {
		return nil, err
	}
	return resultsToPB(out), nil
}

func (h *httpHandler) tooLarge(w http.ResponseWriter) (int, int) {
	return writeError(w, http.StatusRequestEntityTooLarge,
		fmt.Sprintf("transport: body exceeds the limit of %d bytes", h.cfg.MaxBodyBytes)), -1
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

// writeJSON writes v as a JSON body with status; it returns status.
func writeJSON(w http.ResponseWriter, status int, v any) int {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = json.Marshal(errorBody{Error: "transport: encoding JSON: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
	return status
}

type errorBody struct {
	Error string `json:"error"`
}

// writeError writes {"error": msg} with status; it returns status.
func writeError(w http.ResponseWriter, status int, msg string) int {
	return writeJSON(w, status, errorBody{Error: msg})
}

// overloadBody is the JSON of a 429.
type overloadBody struct {
	Error        string `json:"error"`
	RetryAfterMS int64  `json:"retry_after_ms"`
}

// writeOverloaded answers 429 with a Retry-After header (whole seconds, as
// HTTP requires, so ShedRetryDelay rounded up) and the exact delay in the
// body; it returns the status.
func writeOverloaded(w http.ResponseWriter, msg string) int {
	secs := int64((ShedRetryDelay + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	return writeJSON(w, http.StatusTooManyRequests, overloadBody{Error: msg, RetryAfterMS: ShedRetryDelay.Milliseconds()})
}

// BodyLimit bounds the reading of one request body by ReadBody.
type BodyLimit struct {
	// Budget is the node-wide bound on request-body bytes being read
	// (HTTPConfig.BodyBytes), shared with POST /v1/GetRateLimits. Nil
	// means no bound.
	Budget *InFlight
	// Max bounds this body, in bytes. Zero means DefaultMaxBodyBytes.
	Max int64
	// Metrics counts a refusal for Budget as a shed of the HTTP listener
	// (resource body_bytes); nil counts nothing.
	Metrics *Metrics
}

// ReadBody reads the whole body of r under lim, as POST /v1/GetRateLimits
// reads its own: the body is reserved in Budget from its Content-Length
// before it is read (a chunked one as it arrives; see
// HTTPConfig.BodyBytes). It is for handlers served beside the HTTP API
// (package rls's POST /json), so that their bodies count against the same
// bound.
//
// release, never nil, gives the reservation back: call it once the body
// and what was decoded from it are no longer needed. On error nothing is
// held. The errors, and the answers the HTTP API gives them:
//
//	*http.MaxBytesError (errors.As)   over Max: 413
//	wraps ErrOverloaded               Budget full: 429, as WriteHTTPError
//	                                  answers it; already counted in
//	                                  Metrics, and the response is marked
//	                                  Connection: close, as the rest of the
//	                                  body stays unread
//	anything else                     the body could not be read: 400
func ReadBody(w http.ResponseWriter, r *http.Request, lim BodyLimit) (body []byte, release func(), err error) {
	if lim.Max <= 0 {
		lim.Max = DefaultMaxBodyBytes
	}
	var buf bytes.Buffer
	if n := r.ContentLength; n > 0 && n <= lim.Max {
		buf.Grow(int(n) + bytes.MinRead) // room for the EOF too: no second copy
	}
	if release, err = readBody(w, r, lim, &buf); err != nil {
		return nil, release, err
	}
	return buf.Bytes(), release, nil
}

// readBody is ReadBody into buf, which the HTTP API takes from its pool;
// lim.Max must be set.
func readBody(w http.ResponseWriter, r *http.Request, lim BodyLimit, buf *bytes.Buffer) (release func(), err error) {
	if r.ContentLength > lim.Max {
		return func() {}, &http.MaxBytesError{Limit: lim.Max}
	}
	body := &bodyReservation{budget: lim.Budget, r: http.MaxBytesReader(w, r.Body, lim.Max)}
	if !body.reserve(r.ContentLength) {
		err = errBodyBytes
	} else if _, err = buf.ReadFrom(body); err == nil {
		return body.release, nil
	}
	body.release()
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return func() {}, err
	case errors.Is(err, errBodyBytes):
		lim.Metrics.shed(listenerHTTP, shedBodyBytes)
		w.Header().Set("Connection", "close") // the rest of the body stays unread
		return func() {}, err
	}
	return func() {}, fmt.Errorf("transport: reading body: %w", err)
}

// errBodyBytes refuses a body that does not fit under
// HTTPConfig.BodyBytes: before it is read when its length is declared, as
// it arrives when not.
var errBodyBytes = fmt.Errorf("transport: too many request bytes being read on this node: %w", ErrOverloaded)

// bodyReservation reads a request body under the node-wide body-bytes
// bound: a declared length is reserved whole before reading, an unknown
// one as its bytes arrive. release gives everything back.
type bodyReservation struct {
	budget *InFlight
	r      io.Reader
	held   int64
	known  bool // the length was declared and reserved
}

// reserve takes length bytes (Content-Length; -1 when unknown, then
// Read reserves as it goes).
func (b *bodyReservation) reserve(length int64) bool {
	if length < 0 {
		return true
	}
	b.known = true
	return b.take(length)
}

func (b *bodyReservation) take(n int64) bool {
	if n == 0 {
		return true
	}
	var spare int64
	if b.held+n > smallBody {
		spare = b.budget.Limit() / 4
	}
	if !b.budget.tryAcquireLeaving(n, spare) {
		return false
	}
	b.held += n
	return true
}

func (b *bodyReservation) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if !b.known && n > 0 && !b.take(int64(n)) {
		return n, errBodyBytes
	}
	return n, err
}

func (b *bodyReservation) release() {
	b.budget.Release(b.held)
	b.held = 0
}
