package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// How every subcommand names the node it asks: -server ADDR, or the
// environment variable SHARDLIMITER_SERVER. ADDR is either
//
//   - the node's HTTP API as a URL, http://host:8080 (https://… with
//     TLS): every subcommand takes it. check and inspect key, which call
//     the gRPC API, read the node's gRPC address from its GET /v1/cluster;
//   - or its gRPC address, host:port: check and inspect key take it as
//     they always did (inspect match, which calls the HTTP API, does not).
//
// So a command printed by one subcommand (inspect match prints an
// inspect key) names the node as it was named to it, and runs as printed.
// inspect match's former -http URL is kept as another spelling of -server.

const serverUsage = "the node to ask: its HTTP API URL (http://host:8080, https://… with TLS) or its gRPC address host:port (env SHARDLIMITER_SERVER)"

// isURL reports whether a -server value names the HTTP API.
func isURL(server string) bool { return strings.Contains(server, "://") }

// parseWithServer parses args into fs, then takes the server address
// from SHARDLIMITER_SERVER when no flag among names (-server and its other
// spellings) was given. It returns ok false, with the exit code, for -h
// or a bad flag.
func parseWithServer(fs *flag.FlagSet, args []string, getenv func(string) string, server *string, names ...string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK, false
		}
		return exitUsage, false
	}
	set := isSet(fs, "server")
	for _, n := range names {
		set = set || isSet(fs, n)
	}
	if s := getenv(envName("server")); s != "" && !set {
		*server = s
	}
	return exitOK, true
}

// grpcAddr returns the gRPC address of the node server names: server
// itself when it is host:port, else the grpc_addr its HTTP API reports at
// GET /v1/cluster.
func (f tlsFlags) grpcAddr(ctx context.Context, server string) (string, error) {
	if !isURL(server) {
		return server, nil
	}
	u, err := url.Parse(strings.TrimSuffix(server, "/") + "/v1/cluster")
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("bad -server %q: want http(s)://host:port or host:port", server)
	}
	hc, err := f.httpClient(u.Host)
	if err != nil {
		return "", err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var view struct {
		GRPCAddr string `json:"grpc_addr"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &view) != nil || view.GRPCAddr == "" {
		return "", fmt.Errorf("%s: %s: no grpc_addr in the answer", u, resp.Status)
	}
	return view.GRPCAddr, nil
}

// httpClient is a client for the HTTP API at host, with the TLS flags.
func (f tlsFlags) httpClient(host string) (*http.Client, error) {
	tc, err := f.config(host)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

// args are the TLS flags as given, to print in a command line.
func (f tlsFlags) args() string {
	var b strings.Builder
	for _, fl := range []struct {
		name string
		v    *string
	}{{"tls-ca", f.ca}, {"tls-cert", f.cert}, {"tls-key", f.key}} {
		if *fl.v != "" {
			fmt.Fprintf(&b, " -%s %s", fl.name, shellQuote(*fl.v))
		}
	}
	return b.String()
}

// shellQuote quotes s for a POSIX shell: as it is when it holds only
// characters no shell treats specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,:/=@%+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
