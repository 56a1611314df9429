package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/shardlimiter/shardlimiter/transport/server"
)

// An API registers its routes on the HTTP listener, as handlers do on a
// ServeMux; the listener answers the probes, and JSON errors for the rest.
func ExampleNewHTTP() {
	h := server.NewHTTP(server.HTTPConfig{Ready: func() bool { return true }})
	h.Handle("/v1/hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		server.WriteJSON(w, http.StatusOK, map[string]string{"hello": "world"})
	}), http.MethodGet)
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, path := range []string{"/v1/hello", "/readyz", "/v1/nothing"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s %d %s", path, resp.StatusCode, body)
	}
	// Output:
	// /v1/hello 200 {"hello":"world"}
	// /readyz 200 {"status":"ready"}
	// /v1/nothing 404 {"error":"transport: no such endpoint: /v1/nothing"}
}
