package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// Connection and overload reproductions against a node (docs/PERFORMANCE.md,
// "Overload and connection limits").

// okBatch is n valid checks on distinct keys of prefix.
func okBatch(prefix string, n int) []limit.Check {
	out := make([]limit.Check, n)
	for i := range out {
		out[i] = limit.Check{Name: "r", Key: fmt.Sprintf("%s-%d", prefix, i), Hits: 1,
			Rule: limit.Rule{Limit: 1_000_000_000, Period: time.Minute}}
	}
	return out
}

func jsonBatch(prefix string, n int) string {
	var b strings.Builder
	b.WriteString(`{"requests":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"r","unique_key":"%s-%d","hits":1,"limit":1000000000,"duration_ms":60000}`, prefix, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// wellBehaved makes one gRPC and one HTTP call of a few checks and
// reports the first failure.
func wellBehaved(client *dial.Client, httpAddr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if res, err := client.GetRateLimits(ctx, okBatch("good", 3)); err != nil || len(res) != 3 || res[0].Error != "" {
		return fmt.Errorf("gRPC: %v %v", res, err)
	}
	resp, err := http.Post("http://"+httpAddr+"/v1/GetRateLimits", "application/json", strings.NewReader(jsonBatch("good", 3)))
	if err != nil {
		return fmt.Errorf("HTTP: %w", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "UNDER_LIMIT") {
		return fmt.Errorf("HTTP: %d %s", resp.StatusCode, body)
	}
	return nil
}

// TestUnfinishedBodiesAreCut is the "unfinished HTTP bodies" reproduction
// against the real binary: 50 connections each declare a body of 4 MiB
// minus 100 bytes, send 3 MiB of it and go silent. The node refuses what
// does not fit its body-bytes bound at once, closes the rest at its read
// deadline, its Go heap stays under heapMargin throughout (without the
// bounds it would buffer all 150 MiB sent, in buffers grown to 4 MiB
// each: ~200 MiB), and a well-behaved client's checks keep succeeding
// meanwhile.
func TestUnfinishedBodiesAreCut(t *testing.T) {
	t.Parallel()
	const (
		conns      = 50
		declared   = 4<<20 - 100
		sent       = 3 << 20
		heapMargin = 64 << 20
	)
	bin := buildBinary(t)
	p := startProc(t, bin, "127.0.0.1", freeGossipPort(t, "127.0.0.1"), "", "--read-timeout", "2s")
	client := dialAPI(t, p.grpc)
	url := "http://" + p.http
	poll.Until(t, 10*time.Second, func() bool { return wellBehaved(client, p.http) == nil }, "node answers")

	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // samples the heap until the test is done with the uploads
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if v := int64(metric(http.DefaultClient, url, "go_memstats_heap_inuse_bytes")); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	chunk := strings.Repeat("x", sent)
	var closed sync.WaitGroup
	var notClosed atomic.Int64
	for i := range conns {
		c, err := net.Dial("tcp", p.http)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/GetRateLimits HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", declared)
		_, _ = io.WriteString(c, chunk) // a refused connection may be closed under us
		closed.Go(func() {
			// The server answers (429 at once, or 400 at the read deadline)
			// and closes; give it far longer than the deadline.
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
				notClosed.Add(1)
				t.Errorf("connection %d: %v, want closed by the server", i, err)
			}
		})
	}
	// Meanwhile, a well-behaved client is served.
	for range 5 {
		if err := wellBehaved(client, p.http); err != nil {
			t.Errorf("well-behaved client during the stalled uploads: %v", err)
		}
	}
	closed.Wait()
	close(stopSampling)
	<-sampled
	if err := wellBehaved(client, p.http); err != nil {
		t.Errorf("well-behaved client after the stalled uploads: %v", err)
	}
	shed := metric(http.DefaultClient, url, "shardlimiter_transport_shed_total", `listener="http"`, `resource="body_bytes"`)
	t.Logf("peak heap in use %.1f MiB; %v of %d uploads refused at once", float64(peak.Load())/(1<<20), shed, conns)
	if peak.Load() > heapMargin {
		t.Errorf("peak heap in use %d MiB, want <= %d MiB", peak.Load()>>20, heapMargin>>20)
	}
	if shed < 1 {
		t.Errorf("no upload refused for body bytes (shed_total %v)", shed)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// TestIdleConnectionsAreClosed: HTTP keep-alive connections and gRPC
// connections that carry no request are closed after --idle-timeout.
func TestIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	s := serve(t, "--idle-timeout", "500ms")
	const n = 10
	var done sync.WaitGroup
	for i := range n {
		// HTTP: one request on a keep-alive connection, then nothing.
		h, err := net.Dial("tcp", s.http)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		fmt.Fprintf(h, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		// gRPC: the HTTP/2 preface and SETTINGS, then nothing.
		g, err := net.Dial("tcp", s.grpc)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		_, _ = io.WriteString(g, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
		for _, c := range []net.Conn{h, g} {
			done.Go(func() {
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				if _, err := io.Copy(io.Discard, c); err != nil && !isReset(err) {
					t.Errorf("idle connection %d to %s: %v, want closed by the server", i, c.RemoteAddr(), err)
				}
			})
		}
	}
	done.Wait()
	// A new client is served as before.
	client := dialAPI(t, s.grpc)
	if err := wellBehaved(client, s.http); err != nil {
		t.Fatal(err)
	}
}

// TestShedsUnderAFlood: with a small --max-inflight, a flood of
// concurrent batches over gRPC and HTTP gets some refusals
// (RESOURCE_EXHAUSTED with a retry delay, 429 with Retry-After); every call
// gets either an answer or that refusal; the shed metric counts exactly
// the refusals seen; and a well-behaved client is served right after.
func TestShedsUnderAFlood(t *testing.T) {
	t.Parallel()
	const batch = 150
	s := serve(t, "--max-inflight", "200")
	client := dialAPI(t, s.grpc)
	url := "http://" + s.http
	var grpcShed, httpShed, answered atomic.Int64
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for w := range 24 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil && (grpcShed.Load() == 0 || httpShed.Load() == 0 || i < 20); i++ {
				if w%3 != 0 {
					res, err := client.GetRateLimits(ctx, okBatch(fmt.Sprintf("flood-%d-%d", w, i), batch))
					switch d, ok := transport.RetryDelay(err); {
					case err == nil && len(res) == batch && res[0].Error == "" && res[batch-1].Allowed:
						answered.Add(1)
					case errors.Is(err, transport.ErrOverloaded) && ok && d > 0:
						grpcShed.Add(1)
					case ctx.Err() != nil:
					default:
						t.Errorf("gRPC call: %d results, %v; want an answer or RESOURCE_EXHAUSTED with a retry delay", len(res), err)
						return
					}
					continue
				}
				resp, err := http.Post(url+"/v1/GetRateLimits", "application/json", strings.NewReader(jsonBatch(fmt.Sprintf("hflood-%d-%d", w, i), batch)))
				if err != nil {
					t.Errorf("HTTP call: %v", err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusOK && strings.Count(string(body), "UNDER_LIMIT") == batch:
					answered.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" && strings.Contains(string(body), `"retry_after_ms"`):
					httpShed.Add(1)
				default:
					t.Errorf("HTTP call: %d %.200s; want 200 or 429 with Retry-After", resp.StatusCode, body)
					return
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the flood saw %d gRPC and %d HTTP refusals in 30s; want some of each", grpcShed.Load(), httpShed.Load())
	}
	t.Logf("flood: %d calls answered, %d refused over gRPC, %d over HTTP", answered.Load(), grpcShed.Load(), httpShed.Load())
	if err := wellBehaved(client, s.http); err != nil {
		t.Fatalf("well-behaved client right after the flood: %v", err)
	}
	for listener, want := range map[string]int64{"grpc": grpcShed.Load(), "http": httpShed.Load()} {
		if got := metric(http.DefaultClient, url, "shardlimiter_transport_shed_total", `listener="`+listener+`"`); int64(got) != want {
			t.Errorf("shed_total{listener=%q} = %v, want the %d refusals seen", listener, got, want)
		}
	}
	if got := metric(http.DefaultClient, url, "shardlimiter_transport_inflight_checks", `pool="client"`); got != 0 {
		t.Errorf("inflight_checks{pool=client} = %v after the flood, want 0", got)
	}
}
