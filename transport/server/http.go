package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/transport"
)

// HTTPConfig configures the HTTP listener's admission and probes.
type HTTPConfig struct {
	// MaxBatch bounds the items of one call of a batch API; more is a 400.
	// Zero means transport.DefaultMaxBatch (1000).
	MaxBatch int
	// MaxBodyBytes bounds a request body, in bytes; more is a 413. Zero
	// means DefaultMaxBodyBytes (4 MiB), room for 1000 items with 1 KiB
	// keys. Each call in progress may hold about this much plus the decoded
	// batch.
	MaxBodyBytes int64
	// Ready reports whether the node has joined and owns its ring slice
	// (GET /readyz: 200, else 503). Nil means always ready.
	Ready func() bool
	// Metrics records the calls of the batch APIs and the refusals; nil
	// records nothing.
	Metrics *Metrics
	// InFlight bounds the checks in flight (see [InFlight]); a call that
	// does not fit is answered 429 with Retry-After at once. A call is
	// charged at its headers, before its body is read (from its
	// Content-Length, [HTTP.Charge]), and settled to its batch size once
	// decoded; with NewFairInFlight, client addresses share the bound
	// fairly (fair.go). It may be the bound of the client gRPC listener.
	// Nil means no bound.
	InFlight *InFlight
	// BodyBytes bounds the request-body bytes held by calls being read and
	// decided at once, across all connections. A body is reserved in full
	// from its Content-Length before it is read (a chunked one as it
	// arrives); one that does not fit is answered 429 with Retry-After at
	// once and its connection is closed, so that slow or stalled uploads
	// cannot pile up memory. A body over 64 KiB must leave a quarter of the
	// bound free, which keeps room for ordinary small batches while large
	// ones hold the rest. Nil means no bound; DefaultBodyBytes is 4 ×
	// DefaultMaxBodyBytes.
	BodyBytes *InFlight
}

// HTTP is the node's HTTP listener: the routes the APIs register (as
// handlers do on a ServeMux, [HTTP.Handle]), GET /healthz and GET /readyz,
// and the admission every API shares (the in-flight bound, the body-bytes
// bound). It knows no API by name.
//
// Every answer of its own is JSON, errors included: {"error":"…"} with 404
// (no such path) or 405 (with Allow). The handlers' own answers should be
// JSON too ([WriteJSON], [WriteError], [WriteHTTPError]). Register every
// route before serving; ServeHTTP is then safe for concurrent use.
type HTTP struct {
	cfg    HTTPConfig
	routes map[string]route
}

type route struct {
	h       http.Handler
	methods []string
}

// NewHTTP returns the HTTP listener's handler with the probes registered.
func NewHTTP(cfg HTTPConfig) *HTTP {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = transport.DefaultMaxBatch
	}
	h := &HTTP{cfg: cfg, routes: map[string]route{}}
	h.handleProbes()
	return h
}

// handleProbes registers GET /healthz (200 {"status":"ok"} while the
// process runs) and GET /readyz (200 or 503, {"status":"ready"|"not
// ready"}).
func (h *HTTP) handleProbes() {
	h.Handle("/healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}), http.MethodGet, http.MethodHead)
	h.Handle("/readyz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.Ready == nil || h.cfg.Ready() {
			WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		} else {
			WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
		}
	}), http.MethodGet, http.MethodHead)
}

// Handle serves path (exact) with handler for the given methods; another
// method is answered 405 with Allow. Registering a path twice replaces it.
func (h *HTTP) Handle(path string, handler http.Handler, methods ...string) {
	h.routes[path] = route{h: handler, methods: slices.Clone(methods)}
}

// HandleView serves GET and HEAD of path with the JSON of view(r); a nil
// view is not served (404).
func (h *HTTP) HandleView(path string, view func(r *http.Request) any) {
	if view == nil {
		return
	}
	h.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, view(r))
	}), http.MethodGet, http.MethodHead)
}

func (h *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, ok := h.routes[r.URL.Path]
	if !ok {
		WriteError(w, http.StatusNotFound, "transport: no such endpoint: "+r.URL.Path)
		return
	}
	if len(rt.methods) > 0 && !allow(w, r, rt.methods...) {
		return
	}
	rt.h.ServeHTTP(w, r)
}

// Config returns the listener's configuration, defaults filled in.
func (h *HTTP) Config() HTTPConfig { return h.cfg }

// Batches returns the batch handler of c under the HTTP listener's bound;
// its refusals count as the http listener's.
func (h *HTTP) Batches(c transport.Checker) *Batches {
	return &Batches{checker: c, maxBatch: h.cfg.MaxBatch, metrics: h.cfg.Metrics, inflight: h.cfg.InFlight, listener: listenerHTTP}
}

// Charge is a batch call's hold on the HTTP listener's in-flight bound,
// taken at its headers.
type Charge struct{ t *ticket }

// Charge takes r's units of the bound before its body is read, estimated
// from its Content-Length, under the fair rule for its client address
// (the connection's remote IP; X-Forwarded-For is not read: see fair.go).
// false: refused, already counted as a shed; answer with
// WriteOverloaded(w, ErrShed.Error()).
func (h *HTTP) Charge(r *http.Request) (Charge, bool) {
	t, ok := h.cfg.InFlight.reserveAddr(clientAddr(r), httpUnits(r.ContentLength, h.cfg.MaxBatch))
	if !ok {
		h.cfg.Metrics.shed(listenerHTTP, shedChecks)
	}
	return Charge{t}, ok
}

// Settle sets the charge to items, now the batch is decoded: the
// difference is given back, or the rest taken under the same rule. false:
// refused, already counted as a shed; the charge must still be released.
func (c Charge) Settle(h *HTTP, items int) bool {
	if !c.t.settle(int64(items)) {
		h.cfg.Metrics.shed(listenerHTTP, shedChecks)
		return false
	}
	return true
}

// Release gives the charge back.
func (c Charge) Release() { c.t.release() }

// ErrShed refuses a call that does not fit under the in-flight bound.
var ErrShed = errShed

// BodyLimit returns the bound of one body read by an API of this listener.
func (h *HTTP) BodyLimit() BodyLimit {
	return BodyLimit{Budget: h.cfg.BodyBytes, Max: h.cfg.MaxBodyBytes, Metrics: h.cfg.Metrics}
}

// DefaultMaxBodyBytes bounds a POST body unless HTTPConfig says otherwise.
const DefaultMaxBodyBytes = 4 << 20

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

// NewHealthHandler serves only GET /healthz and GET /readyz, as the HTTP
// listener does with HTTPConfig.Ready = ready; every other path is a 404.
// It is meant for a plain-HTTP listener of its own, for kubelet probes
// when the API listener requires TLS client certificates.
func NewHealthHandler(ready func() bool) http.Handler {
	h := &HTTP{cfg: HTTPConfig{Ready: ready}, routes: map[string]route{}}
	h.handleProbes()
	return h
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
	WriteError(w, http.StatusMethodNotAllowed, "transport: method "+r.Method+" not allowed, use "+allowed)
	return false
}

// clientAddr is the client of r for fair sharing: its connection's remote
// IP (X-Forwarded-For is not read: see fair.go). An address that does not
// parse (a Unix socket) is the zero Addr, one client for all of them.
func clientAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// WriteJSON writes v as a JSON body with status; it returns status.
func WriteJSON(w http.ResponseWriter, status int, v any) int {
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

// WriteError writes {"error": msg} with status; it returns status.
func WriteError(w http.ResponseWriter, status int, msg string) int {
	return WriteJSON(w, status, errorBody{Error: msg})
}

// overloadBody is the JSON of a 429.
type overloadBody struct {
	Error        string `json:"error"`
	RetryAfterMS int64  `json:"retry_after_ms"`
}

// WriteOverloaded answers 429 with a Retry-After header (whole seconds, as
// HTTP requires, so transport.ShedRetryDelay rounded up) and the exact delay in the
// body; it returns the status.
func WriteOverloaded(w http.ResponseWriter, msg string) int {
	secs := int64((transport.ShedRetryDelay + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	return WriteJSON(w, http.StatusTooManyRequests, overloadBody{Error: msg, RetryAfterMS: transport.ShedRetryDelay.Milliseconds()})
}

// BodyLimit bounds the reading of one request body by ReadBody.
type BodyLimit struct {
	// Budget is the node-wide bound on request-body bytes being read
	// (HTTPConfig.BodyBytes), shared with every API of the HTTP listener. Nil
	// means no bound.
	Budget *InFlight
	// Max bounds this body, in bytes. Zero means DefaultMaxBodyBytes.
	Max int64
	// Metrics counts a refusal for Budget as a shed of the HTTP listener
	// (resource body_bytes); nil counts nothing.
	Metrics *Metrics
}

// ReadBody reads the whole body of r under lim: the body is reserved in
// Budget from its Content-Length before it is read (a chunked one as it
// arrives; see HTTPConfig.BodyBytes), so that the bodies of every API of
// the HTTP listener count against the same bound.
//
// release, never nil, gives the reservation back: call it once the body
// and what was decoded from it are no longer needed. On error nothing is
// held. The errors, and the answers the HTTP API gives them:
//
//	*http.MaxBytesError (errors.As)   over Max: 413
//	wraps transport.ErrOverloaded               Budget full: 429, as WriteHTTPError
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
	if release, err = ReadBodyInto(w, r, lim, &buf); err != nil {
		return nil, release, err
	}
	return buf.Bytes(), release, nil
}

// ReadBodyInto is ReadBody into buf (which a caller may take from a pool of
// its own); lim.Max must be set.
func ReadBodyInto(w http.ResponseWriter, r *http.Request, lim BodyLimit, buf *bytes.Buffer) (release func(), err error) {
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
var errBodyBytes = fmt.Errorf("transport: too many request bytes being read on this node: %w", transport.ErrOverloaded)

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

// WriteHTTPError answers a failed call as the HTTP API does, with
// {"error": …} and the HTTP status of err's code ([transport.Code]); a refusal for
// overload (transport.ErrOverloaded, or a status that [transport.IsShed]) is 429 with
// Retry-After and retry_after_ms. It returns the status written.
func WriteHTTPError(w http.ResponseWriter, err error) int {
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
	}
	if errors.Is(err, transport.ErrOverloaded) || transport.IsShed(err) {
		return WriteOverloaded(w, msg)
	}
	code := transport.Code(err)
	if code == codes.OK {
		code = codes.Internal
	}
	return WriteError(w, transport.HTTPStatus(code), msg)
}

// Acquire takes units of the HTTP listener's in-flight bound for a call
// that is not a batch (an inspection, say), or refuses it at once with an
// error wrapping transport.ErrOverloaded, counted as the http listener's
// shed. Release what it returns once the call is done.
func (h *HTTP) Acquire(units int) (Held, error) {
	u, err := h.cfg.InFlight.acquireChecks(units, h.cfg.Metrics, listenerHTTP)
	return Held{h.cfg.InFlight, u}, err
}
