package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/shardlimiter/shardlimiter/internal/certs/certstest"
	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/statuspage"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// screenshotEnv names a file the browser test also writes its screenshot
// to (docs/status-page.png is made so).
const screenshotEnv = "SHARDLIMITER_STATUS_SCREENSHOT"

// chromium returns the path of a Chromium or Chrome binary, or skips.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium on PATH (Debian: apt-get install chromium): the status page's browser test needs one")
	return ""
}

// browserLog collects what the page does: the URL of every request it
// sends and every console error, uncaught exception or error log entry
// (a Content-Security-Policy violation, a failed load).
type browserLog struct {
	expected string // set before listening: see openBrowser
	mu       sync.Mutex
	requests []string
	errors   []string
}

func (b *browserLog) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, ev.Request.URL)
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value))
			}
			b.errors = append(b.errors, "console: "+strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		b.errors = append(b.errors, fmt.Sprintf("exception: %s (%s:%d)", msg, d.URL, d.LineNumber))
	case *cdplog.EventEntryAdded:
		if e := ev.Entry; e.Level == cdplog.EntryLevelError &&
			!(b.expected != "" && e.Source == cdplog.EntrySourceNetwork && strings.Contains(e.URL, b.expected)) {
			b.errors = append(b.errors, fmt.Sprintf("log (%s): %s %s", e.Source, e.Text, e.URL))
		}
	}
}

func (b *browserLog) snapshot() (requests, errors []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requests...), append([]string(nil), b.errors...)
}

// pageMember is one row of the page's member table.
type pageMember struct {
	Name  string `json:"name"`
	Share string `json:"share"`
}

// pageState is what the test reads off the page.
type pageState struct {
	Refreshed int          `json:"refreshed"`
	Members   []pageMember `json:"members"`
	Arcs      int          `json:"arcs"`
	Agree     string       `json:"agree"`
	Errors    string       `json:"errors"`
	Seen      []string     `json:"seen"`
	Rules     [][]string   `json:"rules"`
	RuleNote  string       `json:"ruleNote"`
	Owner     string       `json:"owner"`
	Via       string       `json:"via"`
	LookupErr string       `json:"lookupErr"`
	Snapshot  string       `json:"snapshot"`
}

const readPage = `(() => {
  const q = (s) => document.querySelector(s);
  return {
    refreshed: Number(document.body.dataset.refreshed || 0),
    members: [...document.querySelectorAll("#members tbody tr")].map((tr) => ({name: tr.dataset.member, share: tr.cells[3].textContent})),
    arcs: document.querySelectorAll("#ring path").length,
    agree: q("#agree").textContent,
    errors: q("#errors").hidden ? "" : q("#errors").textContent,
    seen: [...document.querySelectorAll("#seen tbody tr")].map((tr) => tr.cells[0].textContent),
    rules: [...document.querySelectorAll("#rules tbody tr")].map((tr) => [...tr.cells].map((c) => c.textContent)),
    ruleNote: q("#rule-metrics-note").textContent,
    owner: q("#lookup-result").hidden ? "" : q("#lookup-owner").textContent,
    via: q("#lookup-via").textContent,
    lookupErr: q("#lookup-error").hidden ? "" : q("#lookup-error").textContent,
    snapshot: q("#snapshot").textContent,
  };
})()`

// openBrowser starts headless Chromium for the test and returns its
// context (bounded to a minute) and what it records; failed loads of
// expected (when not empty) are not errors.
func openBrowser(t *testing.T, chrome, expected string) (context.Context, *browserLog) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.WindowSize(1280, 1400),
		chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses its sandbox to root
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	log := &browserLog{expected: expected}
	if err := chromedp.Listen(ctx, log.listen); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx, log
}

// readState reads the page of ctx.
func readState(t *testing.T, ctx context.Context) pageState {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[pageState](readPage))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	return s
}

// clusterShares returns the members and shares of p's GET /v1/cluster.
func clusterShares(p *proc) map[string]float64 {
	resp, err := http.Get("http://" + p.http + "/v1/cluster")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var v struct {
		Members []struct {
			Name  string  `json:"name"`
			Share float64 `json:"share"`
		} `json:"members"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return nil
	}
	out := map[string]float64{}
	for _, m := range v.Members {
		out[m.Name] = m.Share
	}
	return out
}

// TestStatusPageInBrowser opens the status page of a real 3-process cluster
// (127.0.0.70-72) in headless Chromium: the page loads with no console
// error and sends no request anywhere but its node, shows the three
// members with the shares the node reports and their agreement, the rules
// file's rule and the rule names its node decided (per-rule metrics),
// looks up a key's owner through GET /v1/keys as GetRateLimits reports it,
// and drops a member that leaves (SIGTERM). A screenshot goes to the
// test's directory (and to $SHARDLIMITER_STATUS_SCREENSHOT when set).
func TestStatusPageInBrowser(t *testing.T) {
	chrome := chromium(t)
	t.Parallel()
	bin := buildBinary(t)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("domain: web\ndescriptors:\n  - key: account\n    rate_limit: {name: web_per_minute, unit: minute, requests_per_unit: 50}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hosts := []string{"127.0.0.70", "127.0.0.71", "127.0.0.72"}
	port := freeGossipPort(t, hosts...)
	seed := net.JoinHostPort(hosts[0], strconv.Itoa(port))
	var procs []*proc
	for _, h := range hosts {
		procs = append(procs, startProc(t, bin, h, port, seed, "--config", rules))
	}
	poll.Until(t, 20*time.Second, func() bool {
		for _, p := range procs {
			if len(members(p)) != 3 {
				return false
			}
		}
		return true
	}, "3 nodes converge")
	node := procs[0]

	// Checks through the page's node, until one key is owned elsewhere (the
	// lookup's, with its owner as GetRateLimits says) and one here (the
	// per-rule metrics count on the deciding node): a native rule and the
	// rules file's, by name.
	c, err := dial.Dial(node.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rule := limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Period: time.Minute}
	var key, owner, local string
	for i := 0; owner == "" || local == ""; i++ {
		k := fmt.Sprint("account:", i)
		res, err := c.GetRateLimits(context.Background(), []limit.Check{
			{Name: "page_check", Key: k, Hits: 1, Rule: rule}, {Name: "web_per_minute", Key: k, Hits: 1}})
		if err != nil || res[0].Error != "" || res[1].Error != "" {
			t.Fatalf("GetRateLimits(%s) = %+v, %v", k, res, err)
		}
		if res[0].Owner == node.name {
			local = k
		} else if owner == "" {
			key, owner = k, res[0].Owner
		}
	}

	ctx, log := openBrowser(t, chrome, "")
	pageURL := "http://" + node.http + "/"
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("open %s: %v", pageURL, err)
	}
	var st pageState
	read := func() pageState { return readState(t, ctx) }
	poll.Until(t, 15*time.Second, func() bool {
		st = read()
		return st.Refreshed >= 2 && len(st.Members) == 3 && st.Arcs == 3 && st.Agree == "every member has the same ring"
	}, "the page shows 3 members that agree on the ring")
	if st.Errors != "" {
		t.Errorf("the page shows errors: %s", st.Errors)
	}
	// Load on the local key while the page watches: its rule's rates rise.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	load.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			_, _ = c.GetRateLimits(loadCtx, []limit.Check{
				{Name: "page_check", Key: local, Hits: 1, Rule: rule}, {Name: "web_per_minute", Key: local, Hits: 1}})
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
		}
	})
	defer func() { stopLoad(); load.Wait() }()
	poll.Until(t, 15*time.Second, func() bool {
		st = read()
		if len(st.Rules) != 1 || len(st.Rules[0]) != 7 {
			return false
		}
		rate, err := strconv.ParseFloat(st.Rules[0][5], 64)
		return err == nil && rate > 0 && slices.Contains(st.Seen, "page_check") && slices.Contains(st.Seen, "web_per_minute")
	}, "the page shows the rules file's rule with live checks/s and the rule names its node decided")
	if st.RuleNote != "" || st.Rules[0][0] != "web" || st.Rules[0][2] != "web_per_minute" || st.Rules[0][3] != "50 per minute" {
		t.Errorf("rules table %q (note %q), want domain web, web_per_minute, 50 per minute", st.Rules, st.RuleNote)
	}
	shares := clusterShares(node)
	for _, m := range st.Members {
		want, ok := shares[m.Name]
		got, err := strconv.ParseFloat(strings.TrimSuffix(m.Share, "%"), 64)
		if !ok || err != nil || got < want*100-0.051 || got > want*100+0.051 {
			t.Errorf("member %q shows share %q, want %.1f%% (GET /v1/cluster: %v)", m.Name, m.Share, want*100, shares)
		}
	}

	// The key lookup names the owner GetRateLimits reported.
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#lookup input[name="name"]`), "page_check"),
		chromedp.SendKeys(chromedp.CSS(`#lookup input[name="key"]`), key),
		chromedp.SendKeys(chromedp.CSS(`#lookup input[name="limit"]`), "100"),
		chromedp.SendKeys(chromedp.CSS(`#lookup input[name="duration"]`), "60000"),
		chromedp.Click(chromedp.CSS(`#lookup button`)),
	)
	if err != nil {
		t.Fatalf("fill in the key lookup: %v", err)
	}
	poll.Until(t, 10*time.Second, func() bool { st = read(); return st.Owner != "" || st.LookupErr != "" }, "the lookup answers")
	if st.Owner != owner || st.LookupErr != "" || !strings.HasPrefix(st.Via, "GET /v1/keys") {
		t.Errorf("lookup of %s shows owner %q (error %q, via %q), want %q as GetRateLimits reported", key, st.Owner, st.LookupErr, st.Via, owner)
	}

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.TempDir(), "status-page.png")
	if err := os.WriteFile(path, shot, 0o600); err != nil || len(shot) < 1000 {
		t.Fatalf("screenshot of %d bytes to %s: %v", len(shot), path, err)
	}
	if extra := os.Getenv(screenshotEnv); extra != "" {
		if err := os.WriteFile(extra, shot, 0o644); err != nil {
			t.Errorf("%s: %v", screenshotEnv, err)
		}
	}

	stopLoad()
	load.Wait()

	// A member leaves: the page follows.
	gone := procs[2]
	if err := gone.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 15*time.Second, func() bool {
		st = read()
		if len(st.Members) != 2 || st.Arcs != 2 {
			return false
		}
		for _, m := range st.Members {
			if m.Name == gone.name {
				return false
			}
		}
		return true
	}, "the page drops %s after SIGTERM", gone.name)

	requests, errs := log.snapshot()
	for _, e := range errs {
		t.Errorf("browser: %s", e)
	}
	if len(requests) < 5 {
		t.Errorf("the browser saw %d requests, want the page, its assets and its polls: %v", len(requests), requests)
	}
	for _, r := range requests {
		if u, err := url.Parse(r); err != nil || u.Host != node.http {
			t.Errorf("the page requested %s: not its node %s", r, node.http)
		}
	}
}

// TestStatusPageNeedsClientCertificate: with client certificates required,
// the status page and its assets are served to a client with one and
// refused to a client without.
func TestStatusPageNeedsClientCertificate(t *testing.T) {
	t.Parallel()
	p := newPKI(t, "page")
	good := p.ca.WriteFiles(t, p.dir, "good", certstest.Leaf{Client: true})
	s := serve(t, "--tls-cert-file", p.server.Cert, "--tls-key-file", p.server.Key, "--tls-client-ca-file", p.server.CA)
	with, without := httpsClient(p.client(t, &good)), httpsClient(p.client(t, nil))
	for _, path := range []string{"/", "/status/app.js"} {
		resp, err := with.Get("https://" + s.http + path)
		if err != nil {
			t.Fatalf("GET %s with a client certificate: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") == "" || len(body) == 0 {
			t.Errorf("GET %s with a client certificate = %d, CSP %q, %d bytes; want 200 with a policy", path, resp.StatusCode,
				resp.Header.Get("Content-Security-Policy"), len(body))
		}
		if resp, err := without.Get("https://" + s.http + path); err == nil {
			resp.Body.Close()
			t.Errorf("GET %s without a client certificate answered %d; want the handshake refused", path, resp.StatusCode)
		}
	}
}

// TestStatusPageFallbacks: served by a node without the inspection API and
// without per-rule metrics (the page's handler in front of a stand-in for
// the API of such a node), the page says per-rule metrics are not
// available, and its key lookup peeks: GetRateLimits with hits 0 under
// the rule given, showing the owner that answer names.
func TestStatusPageFallbacks(t *testing.T) {
	chrome := chromium(t)
	t.Parallel()
	var mu sync.Mutex
	var peeks []string
	api := http.NewServeMux()
	answer := func(path, body string) {
		api.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, body)
		})
	}
	answer("/v1/cluster", `{"node":"old","ready":true,"replication":"off","handoff":{},"memory":{"budget_bytes":0,"held_bytes":0},
		"snapshot":{"dir":"state","path":"state/old.snapshot","interval":"10s","keys":6,"last_written":"2026-01-02T03:04:05Z","last_error":"disk full"},
		"members":[{"name":"old","addr":"127.0.0.1:1","share":1}]}`)
	answer("/v1/cluster/rings", `{"node":"old","agree":true,"rings":[{"node":"old","ring_version":2,"agrees":true}]}`)
	answer("/v1/config", `{}`)
	api.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "# TYPE shardlimiter_table_keys gauge\nshardlimiter_table_keys{algorithm=\"TOKEN_BUCKET\"} 3\n")
	})
	api.HandleFunc("/v1/keys", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"transport: no such endpoint: /v1/keys"}`)
	})
	api.HandleFunc("/v1/GetRateLimits", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		peeks = append(peeks, string(body))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"responses":[{"status":"UNDER_LIMIT","limit":"7","remaining":"7","reset_time_ms":"0","error":"","metadata":{"owner":"old-owner"}}]}`)
	})
	srv := httptest.NewServer(statuspage.Mount(api))
	defer srv.Close()

	ctx, log := openBrowser(t, chrome, "/v1/keys?")
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	var st pageState
	poll.Until(t, 15*time.Second, func() bool { st = readState(t, ctx); return st.Refreshed >= 1 && len(st.Members) == 1 },
		"the page shows its node")
	if !strings.HasPrefix(st.Snapshot, "6 keys in state/old.snapshot, written ") || !strings.HasSuffix(st.Snapshot, "last write FAILED: disk full") {
		t.Errorf("snapshot line %q, want the keys, the file, the last write and its failure", st.Snapshot)
	}
	if st.RuleNote != "per-rule metrics not available on this node" || len(st.Seen) != 0 {
		t.Errorf("without per-rule metrics the page says %q and lists %q; want it to say they are not available", st.RuleNote, st.Seen)
	}
	err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#lookup input[name="name"]`), "old_rule"),
		chromedp.SendKeys(chromedp.CSS(`#lookup input[name="key"]`), "account:9"),
		chromedp.SendKeys(chromedp.CSS(`#lookup input[name="limit"]`), "7"),
		chromedp.SendKeys(chromedp.CSS(`#lookup input[name="duration"]`), "1000"),
		chromedp.Click(chromedp.CSS(`#lookup button`)),
	)
	if err != nil {
		t.Fatalf("fill in the key lookup: %v", err)
	}
	poll.Until(t, 10*time.Second, func() bool { st = readState(t, ctx); return st.Owner != "" || st.LookupErr != "" }, "the lookup answers")
	if st.Owner != "old-owner" || !strings.HasPrefix(st.Via, "a peek") {
		t.Errorf("lookup without /v1/keys: owner %q via %q (error %q), want old-owner through a peek", st.Owner, st.Via, st.LookupErr)
	}
	mu.Lock()
	defer mu.Unlock()
	want := `{"requests":[{"name":"old_rule","unique_key":"account:9","limit":7,"duration_ms":1000,"algorithm":"TOKEN_BUCKET","hits":0}]}`
	if len(peeks) != 1 || peeks[0] != want {
		t.Errorf("the lookup sent %q, want one peek %s", peeks, want)
	}
	_, errs := log.snapshot()
	for _, e := range errs {
		t.Errorf("browser: %s", e)
	}
}
