package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardlimiter/shardlimiter/api/native"
	"github.com/shardlimiter/shardlimiter/peer"
	tserver "github.com/shardlimiter/shardlimiter/transport/server"
)

// FuzzHTTPBodyThroughNode feeds arbitrary bodies to POST /v1/GetRateLimits
// wired to a real node, so conversion, validation and every algorithm's
// decision see the input: no panic, a JSON answer, 200 or 400/413, and on
// 200 one answer per request.
func FuzzHTTPBodyThroughNode(f *testing.F) {
	for _, seed := range []string{
		`{"requests":[{"name":"a","unique_key":"k","hits":1,"limit":10,"duration_ms":1000}]}`,
		`{"requests":[{"name":"a","uniqueKey":"k","hits":"5","limit":"3","durationMs":"60000","algorithm":"SLIDING_LOG","minIntervalMs":"10"}]}`,
		`{"requests":[{"name":"a","unique_key":"k","limit":1,"duration_ms":1,"algorithm":"TOKEN_BUCKET","warmup_ms":1000,"burst":3,"behavior":3}]}`,
		`{"requests":[{"name":"a","unique_key":"k","limit":9223372036854775807,"duration_ms":-1,"algorithm":7}]}`,
		`{"requests":[{},{"name":""}]}`,
		`[]`, `{`, ``,
	} {
		f.Add(seed)
	}
	n, err := peer.New(peer.Config{Name: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	h := tserver.NewHTTP(tserver.HTTPConfig{MaxBatch: 50})
	native.RegisterHTTP(h, n)
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/GetRateLimits", strings.NewReader(body)))
		var out struct {
			Responses []json.RawMessage `json:"responses"`
			Error     string            `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("status %d, body is not JSON: %q", rec.Code, rec.Body.String())
		}
		switch rec.Code {
		case http.StatusOK:
			var in struct{ Requests []json.RawMessage }
			if json.Unmarshal([]byte(body), &in) == nil && len(in.Requests) != len(out.Responses) {
				t.Fatalf("%d requests, %d responses", len(in.Requests), len(out.Responses))
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if out.Error == "" {
				t.Fatalf("status %d without an error message", rec.Code)
			}
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}
