package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/peer"
	"github.com/shardlimiter/shardlimiter/rules"
	"github.com/shardlimiter/shardlimiter/transport"
)

// ruleInspector is the node's Inspector for the client listeners: a check
// without a rule (limit and duration 0) takes the rule of the rules file
// named by its name, as checks do (rules.ByName).
type ruleInspector struct {
	rules *rules.Store
	node  *peer.Node
}

func (ri ruleInspector) Inspect(ctx context.Context, c limit.Check) (limit.Inspection, error) {
	if c.Rule.Limit == 0 && c.Rule.Period == 0 {
		r, ok := ri.rules.Load().ByName(c.Name)
		if !ok {
			return limit.Inspection{}, fmt.Errorf("%w: limit is 0 and no rule is named %q in the rules file", transport.ErrInvalidArgument, c.Name)
		}
		r.Behavior |= c.Rule.Behavior
		c.Rule = r
	}
	return ri.node.Inspect(ctx, c)
}

// runInspect is `shardlimiter inspect key|match`: read a key's state on
// its owner, or ask which rule descriptors match, without counting.
func runInspect(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "key":
			return runInspectKey(ctx, args[1:], getenv, stdout, stderr)
		case "match":
			return runInspectMatch(ctx, args[1:], getenv, stdout, stderr)
		}
	}
	fmt.Fprintln(stderr, "usage: shardlimiter inspect key -name NAME -key KEY [rule flags]   (a key's state on its owner; see -h)")
	fmt.Fprintln(stderr, "       shardlimiter inspect match -domain D -descriptor k=v[,k=v…]…  (the rule descriptors match; see -h)")
	fmt.Fprintln(stderr, "Both name the node with -server (or SHARDLIMITER_SERVER): its HTTP API URL http://host:8080; inspect key also takes its gRPC address host:port.")
	return exitUsage
}

func runInspectKey(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("shardlimiter inspect key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", "localhost:8081", serverUsage)
	rf := addRuleFlags(fs)
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of the call")
	tf := addTLSFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: shardlimiter inspect key -name NAME -key KEY [-limit N -duration D -algorithm A …]\n\nReads the key's state on its owner (and replica holder) without spending.\nWithout -limit, the rule is the rules file's rule of that name.\n\nThe node is -server, else the environment variable SHARDLIMITER_SERVER,\nelse localhost:8081: its gRPC address host:port, or its HTTP API URL\nhttp://host:8080 (https://… with -tls-ca).\n\nFlags:")
		fs.PrintDefaults()
	}
	if code, ok := parseWithServer(fs, args, getenv, server); !ok {
		return code
	}
	c, err := rf.check()
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter inspect key: %v\n", err)
		return exitUsage
	}
	if *rf.lim == 0 {
		c.Rule = limit.Rule{} // the rules file's
	}
	if c.Name == "" || c.Key == "" {
		fmt.Fprintln(stderr, "shardlimiter inspect key: -name and -key are required")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	addr, err := tf.grpcAddr(ctx, *server)
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter inspect key: %v\n", err)
		return exitFail
	}
	client, code := tf.dial(addr, "inspect key", stderr)
	if client == nil {
		return code
	}
	defer client.Close()
	in, err := client.Inspect(ctx, c)
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter inspect key: %v\n", err)
		return exitFail
	}
	now := time.Now()
	printView(stdout, "owner", in.Owner, now)
	if in.Replica.Node != "" {
		printView(stdout, "replica", in.Replica, now)
	}
	if in.Owner.Error != "" {
		return exitFail
	}
	return exitOK
}

// printView writes one node's view of a key for a human.
func printView(w io.Writer, role string, v limit.KeyView, now time.Time) {
	fmt.Fprintf(w, "%-8s %s\n", role, v.Node)
	if v.Error != "" {
		fmt.Fprintf(w, "  error      %s\n", v.Error)
		return
	}
	held := "no (a fresh key: full allowance)"
	if v.Held {
		held = "yes"
	}
	status := "UNDER_LIMIT"
	if !v.Allowed {
		status = "OVER_LIMIT"
	}
	fmt.Fprintf(w, "  held       %s\n", held)
	fmt.Fprintf(w, "  next hit   %s: %d of %d left\n", status, v.Remaining, v.Limit)
	if v.ResetAt > 0 {
		fmt.Fprintf(w, "  reset in   %v\n", max(time.Unix(0, v.ResetAt).Sub(now).Round(time.Millisecond), 0))
	}
	if v.RetryAfter > 0 {
		fmt.Fprintf(w, "  retry in   %v\n", v.RetryAfter)
	}
	if v.Held && (v.Current > 0 || v.Previous > 0) {
		fmt.Fprintf(w, "  counted    %d in this window, %d in the one before\n", v.Current, v.Previous)
	}
	for _, l := range v.Leases {
		fmt.Fprintf(w, "  leased     %d hits to %s, ending in %v\n", l.Hits, l.Lessee, max(time.Unix(0, l.Expires).Sub(now).Round(time.Millisecond), 0))
	}
}

// descriptorFlag collects -descriptor k=v,k=v flags.
type descriptorFlag [][]rules.Entry

func (d *descriptorFlag) String() string { return fmt.Sprint(*d) }

func (d *descriptorFlag) Set(s string) error {
	var entries []rules.Entry
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("want key=value[,key=value…], got %q", s)
		}
		entries = append(entries, rules.Entry{Key: k, Value: v})
	}
	*d = append(*d, entries)
	return nil
}

func runInspectMatch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("shardlimiter inspect match", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("server", "http://localhost:8080", "the node to ask: its HTTP API URL (https://… with TLS) (env SHARDLIMITER_SERVER)")
	fs.StringVar(base, "http", "http://localhost:8080", "the same as -server")
	domain := fs.String("domain", "", "the rate-limit domain (required)")
	var descs descriptorFlag
	fs.Var(&descs, "descriptor", "a descriptor's entries, key=value[,key=value…]; repeat for more (at least one)")
	raw := fs.Bool("json", false, "print the answer as JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of the call")
	tf := addTLSFlags(fs)
	if code, ok := parseWithServer(fs, args, getenv, base, "http"); !ok {
		return code
	}
	if *domain == "" || len(descs) == 0 {
		fmt.Fprintln(stderr, "shardlimiter inspect match: -domain and at least one -descriptor are required")
		return exitUsage
	}
	if !isURL(*base) {
		fmt.Fprintf(stderr, "shardlimiter inspect match: -server %q: inspect match asks the HTTP API, give its URL (http://host:8080)\n", *base)
		return exitUsage
	}
	u, err := url.Parse(strings.TrimSuffix(*base, "/") + "/v1/config/match")
	if err != nil || u.Host == "" {
		fmt.Fprintf(stderr, "shardlimiter inspect match: bad -server %q\n", *base)
		return exitUsage
	}
	tc, err := tf.config(u.Host)
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter inspect match: %v\n", err)
		return exitUsage
	}
	req := struct {
		Domain      string `json:"domain"`
		Descriptors []struct {
			Entries []rules.Entry `json:"entries"`
		} `json:"descriptors"`
	}{Domain: *domain}
	for _, d := range descs {
		req.Descriptors = append(req.Descriptors, struct {
			Entries []rules.Entry `json:"entries"`
		}{d})
	}
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	hreq.Header.Set("Content-Type", "application/json")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err := hc.Do(hreq)
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter inspect match: %v\n", err)
		return exitFail
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "shardlimiter inspect match: %s: %s %v\n", u, resp.Status, strings.TrimSpace(string(out)))
		return exitFail
	}
	if *raw {
		stdout.Write(out)
		return exitOK
	}
	var ans struct {
		Results []matchResult `json:"results"`
	}
	if err := json.Unmarshal(out, &ans); err != nil || len(ans.Results) != len(descs) {
		fmt.Fprintf(stderr, "shardlimiter inspect match: unexpected answer %q\n", out)
		return exitFail
	}
	// The inspect key commands name the node as it was named here, with
	// the same TLS flags: they run as printed.
	node := "-server " + shellQuote(*base) + tf.args()
	for i, r := range ans.Results {
		printMatch(stdout, descs[i], r, node)
	}
	return exitOK
}

// matchResult is what the CLI reads of rls.MatchResult.
type matchResult struct {
	Matched   bool   `json:"matched"`
	Key       string `json:"key"`
	Unlimited bool   `json:"unlimited"`
	Shadow    bool   `json:"shadow_mode"`
	Limits    []struct {
		Name            string `json:"name"`
		RequestsPerUnit int64  `json:"requests_per_unit"`
		Unit            string `json:"unit"`
		Algorithm       string `json:"algorithm"`
		DurationMs      int64  `json:"duration_ms"`
	} `json:"limits"`
}

// printMatch writes one descriptor's match for a human, with the inspect
// key command line of each limit; node is that command's -server and TLS
// flags.
func printMatch(w io.Writer, d []rules.Entry, r matchResult, node string) {
	var parts []string
	for _, e := range d {
		parts = append(parts, e.Key+"="+e.Value)
	}
	fmt.Fprintf(w, "descriptor %s\n", strings.Join(parts, ","))
	switch {
	case !r.Matched:
		fmt.Fprintln(w, "  no rule: answered OK, nothing counted")
		return
	case r.Unlimited:
		fmt.Fprintln(w, "  unlimited: answered OK, nothing counted")
		return
	}
	fmt.Fprintf(w, "  counter key  %q\n", r.Key)
	if r.Shadow {
		fmt.Fprintln(w, "  shadow mode  counted and reported, always answered OK")
	}
	for _, l := range r.Limits {
		fmt.Fprintf(w, "  limit        %s: %d per %s (%s)\n", l.Name, l.RequestsPerUnit, l.Unit, l.Algorithm)
		fmt.Fprintf(w, "    inspect    shardlimiter inspect key %s -name %s -key %s -limit %d -duration %v -algorithm %s\n",
			node, shellQuote(l.Name), shellQuote(r.Key), l.RequestsPerUnit, time.Duration(l.DurationMs)*time.Millisecond, l.Algorithm)
	}
}
