package statuspage

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string) (*http.Response, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	body, _ := io.ReadAll(w.Result().Body)
	return w.Result(), string(body)
}

// TestServes: the page and each asset are served with their type and the
// strict policy; other paths fall through to the API, other methods are
// refused.
func TestServes(t *testing.T) {
	t.Parallel()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "api "+r.URL.Path) })
	h := Mount(api)
	for _, tt := range []struct{ path, ctype, contains string }{
		{"/", "text/html; charset=utf-8", `<script src="/status/app.js" defer></script>`},
		{"/status/app.js", "text/javascript; charset=utf-8", "function refresh"},
		{"/status/style.css", "text/css; charset=utf-8", "body {"},
		{"/status/icon.svg", "image/svg+xml", "<svg"},
	} {
		resp, body := get(t, h, http.MethodGet, tt.path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tt.ctype || !strings.Contains(body, tt.contains) {
			t.Errorf("GET %s = %d %q, want 200 %q containing %q", tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), tt.ctype, tt.contains)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); csp != CSP || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: Content-Security-Policy %q, nosniff %q; want %q, nosniff", tt.path, csp, resp.Header.Get("X-Content-Type-Options"), CSP)
		}
		if resp, body := get(t, h, http.MethodHead, tt.path); resp.StatusCode != 200 || body != "" {
			t.Errorf("HEAD %s = %d with %d bytes, want 200 and no body", tt.path, resp.StatusCode, len(body))
		}
	}
	for _, path := range []string{"/v1/cluster", "/metrics", "/index.html"} {
		if _, body := get(t, h, http.MethodGet, path); body != "api "+path {
			t.Errorf("GET %s = %q, want the API's answer", path, body)
		}
	}
	if resp, _ := get(t, h, http.MethodGet, "/status/nothing.js"); resp.StatusCode != 404 {
		t.Errorf("GET /status/nothing.js = %d, want 404", resp.StatusCode)
	}
	if resp, _ := get(t, h, http.MethodPost, "/"); resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST / = %d Allow %q, want 405 with Allow: GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// TestSelfContained: the page names no other origin and has no inline
// script, inline style or event handler attribute, which the policy would
// refuse; and every asset the page links is served.
func TestSelfContained(t *testing.T) {
	t.Parallel()
	outside := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|url\(|@import`)
	inline := regexp.MustCompile(`(?i)<script>|<script [^>]*>[^<]|<style|\sstyle=|\son[a-z]+=|javascript:|innerHTML|eval\(|new Function`)
	err := fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := fs.ReadFile(static, path)
		text := string(b)
		// The SVG namespace is a name, not a request.
		text = strings.ReplaceAll(text, "http://www.w3.org/2000/svg", "")
		if m := outside.FindString(text); m != "" {
			t.Errorf("%s refers outside the node: %q", path, m)
		}
		if m := inline.FindString(text); m != "" {
			t.Errorf("%s has %q, refused by the policy or unsafe", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	index, _ := fs.ReadFile(static, "static/index.html")
	for _, m := range regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(string(index), -1) {
		if _, ok := files[m[1]]; !ok {
			t.Errorf("index.html links %s, which the handler does not serve", m[1])
		}
	}
}

// The page has a line for the capacity held in leases, filled from the
// node's lease gauges (granted to others, held from owners) and the rate
// of checks decided from leases.
func TestLeasesLine(t *testing.T) {
	t.Parallel()
	h := Mount(http.NotFoundHandler())
	_, page := get(t, h, http.MethodGet, "/")
	_, js := get(t, h, http.MethodGet, "/status/app.js")
	if !strings.Contains(page, `<dt>capacity held in leases</dt><dd id="leases">`) {
		t.Error("the page has no line for the capacity held in leases")
	}
	for _, want := range []string{`$("leases").textContent`, `"shardlimiter_lease_granted_hits"`, `"shardlimiter_lease_held_hits"`, `"shardlimiter_lease_decisions_total"`} {
		if !strings.Contains(js, want) {
			t.Errorf("app.js lacks %s", want)
		}
	}
}
