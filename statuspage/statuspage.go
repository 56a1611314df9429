// Package statuspage implements the node's status page: one read-only
// HTML page at / on the HTTP listener that draws the cluster, its ring and
// its rules, and a key lookup.
//
// The page is plain HTML, CSS and JavaScript embedded in the binary: it
// loads nothing from elsewhere and works offline. Its script polls the
// node's own JSON and metrics every two seconds (GET /v1/cluster,
// /v1/cluster/rings, /v1/config, /metrics) and computes rates from two
// scrapes of /metrics; the key lookup asks GET /v1/keys, or peeks (POST
// /v1/GetRateLimits with hits 0) where that is missing. A strict Content
// Security Policy allows scripts, styles, images and requests from the
// node only, and no inline script or style.
//
// The handler is safe for concurrent use; it holds no state.
package statuspage

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// CSP is the Content-Security-Policy of every answer of the handler.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Prefix is the path under which the page's assets are served; the page
// itself is at /.
const Prefix = "/status/"

// files maps a served path to its embedded file and content type.
var files = map[string]struct{ name, contentType string }{
	"/":                  {"static/index.html", "text/html; charset=utf-8"},
	Prefix + "app.js":    {"static/app.js", "text/javascript; charset=utf-8"},
	Prefix + "style.css": {"static/style.css", "text/css; charset=utf-8"},
	Prefix + "icon.svg":  {"static/icon.svg", "image/svg+xml"},
}

// Handler serves the page at / and its assets under Prefix: GET and HEAD
// only (405 otherwise), 404 for any other path under Prefix. Mount it on
// "/{$}" and Prefix, beside the API.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		f, ok := files[r.URL.Path]
		if !ok {
			http.Error(w, "statuspage: no such file: "+r.URL.Path, http.StatusNotFound)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "statuspage: the page is read-only: use GET", http.StatusMethodNotAllowed)
			return
		}
		body, err := fs.ReadFile(static, f.name)
		if err != nil { // embedded at build time: cannot happen
			http.Error(w, "statuspage: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h.Set("Content-Type", f.contentType)
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(body)
	})
}

// Mount returns a handler that serves the page at / and its assets under
// Prefix, and everything else with next.
func Mount(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	page := Handler()
	mux.Handle("/{$}", page)
	mux.Handle(Prefix, page)
	mux.Handle("/", next)
	return mux
}
