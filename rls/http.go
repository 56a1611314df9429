package rls

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shardlimiter/shardlimiter/rules"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// maxJSONBody bounds the body of POST /json.
const maxJSONBody = 1 << 20

// JSONHandler serves POST /json as envoyproxy/ratelimit does, for testing
// from curl: a RateLimitRequest in proto3 JSON in, the RateLimitResponse
// out, with status 200 when overall_code is OK and 429 when it is
// OVER_LIMIT. A body over 1 MiB is 413; one that does not fit under
// Config.BodyBytes is 429 with Retry-After, as the native HTTP API answers
// it, and its connection is closed; one that cannot be read or does not
// decode is 400. A call that fails is answered as the native HTTP API
// answers it (server.WriteHTTPError): the HTTP status of its gRPC code
// and {"error": …}, and 429 with Retry-After when the node sheds it.
func (s *Service) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "use POST")
			return
		}
		body, release, ok := s.readBody(w, r)
		defer release() // the body counts against the bound until answered, as the native API's
		if !ok {
			return
		}
		var req rlspb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "bad RateLimitRequest JSON: "+err.Error())
			return
		}
		resp, err := s.should(r.Context(), &req, s.cfg.JSONChecker)
		if err != nil {
			server.WriteHTTPError(w, err) // 429 with Retry-After when shed
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		code := http.StatusOK
		if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
			code = http.StatusTooManyRequests
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		w.Write(out)
	})
}

// readBody reads the body of POST /json under the node's body-bytes bound
// (server.ReadBody), or answers why not and reports false. release
// gives the bytes back to the bound.
func (s *Service) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), ok bool) {
	body, release, err := server.ReadBody(w, r, server.BodyLimit{
		Budget: s.cfg.BodyBytes, Max: maxJSONBody, Metrics: s.cfg.Telemetry})
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body exceeds the limit of %d bytes", tooLarge.Limit))
	case errors.Is(err, transport.ErrOverloaded):
		server.WriteHTTPError(w, err) // 429 with Retry-After, counted by ReadBody
	case err != nil:
		writeError(w, http.StatusBadRequest, err.Error())
	}
	return body, release, err == nil
}

// ConfigHandler serves GET /v1/config: the loaded rules and their version
// as JSON (rules.Set.MarshalJSON); {} while no rules are loaded.
func ConfigHandler(store *rules.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "use GET")
			return
		}
		var set *rules.Set
		if store != nil {
			set = store.Load()
		}
		out := []byte("{}")
		if set != nil {
			var err error
			if out, err = set.MarshalJSON(); err != nil {
				writeError(w, http.StatusInternalServerError, err.Error())
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(out)
	})
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
