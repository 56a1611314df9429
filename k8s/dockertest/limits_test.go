package dockertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// check is one RateLimitRequest in its protojson form.
type check struct {
	Name       string `json:"name"`
	UniqueKey  string `json:"unique_key"`
	Hits       int64  `json:"hits"`
	Limit      int64  `json:"limit"`
	DurationMs int64  `json:"duration_ms"`
	Algorithm  string `json:"algorithm"`
}

// answer is the part of a RateLimitResponse this test reads. Status is
// kept raw: protojson writes the enum name, a number is accepted too.
type answer struct {
	Status   json.RawMessage   `json:"status"`
	Error    string            `json:"error"`
	Metadata map[string]string `json:"metadata"`
}

func (a answer) admitted() bool {
	s := string(a.Status)
	return s == `"UNDER_LIMIT"` || s == `0` || s == ""
}

// getRateLimits posts one batch to node name; it fails the test on a
// transport or HTTP error or an answer count that differs from the batch.
func (c *cluster) getRateLimits(name string, batch []check) []answer {
	c.t.Helper()
	body, err := json.Marshal(map[string]any{"requests": batch})
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := client.Post(c.url(name, "/v1/GetRateLimits"), "application/json", bytes.NewReader(body))
	if err != nil {
		c.t.Fatalf("%s: POST /v1/GetRateLimits: %v", name, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("%s: POST /v1/GetRateLimits = %d %s", name, resp.StatusCode, raw)
	}
	var out struct {
		Responses []answer `json:"responses"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		c.t.Fatalf("%s: POST /v1/GetRateLimits: %v: %s", name, err, raw)
	}
	if len(out.Responses) != len(batch) {
		c.t.Fatalf("%s: %d answers for %d checks", name, len(out.Responses), len(batch))
	}
	return out.Responses
}

// Exact limiting across nodes: every key takes hitsPerKey hits of 1, spread
// round-robin over all nodes, under a fixed window of limitPerKey per
// minute; exactly limitPerKey are admitted per key, whichever node answers.
const (
	keys        = 20
	limitPerKey = 10
	hitsPerKey  = 15
	window      = time.Minute
)

func (c *cluster) exactLimits(names []string) {
	c.t.Helper()
	// A fixed window restarts at each multiple of its duration: a run that
	// straddles a boundary would rightly admit more. Run again, with fresh
	// keys, when that happens.
	for attempt := 0; attempt < 3; attempt++ {
		start := time.Now()
		admitted, owners := c.spreadHits(names, fmt.Sprintf("attempt%d", attempt))
		if start.Truncate(window) != time.Now().Truncate(window) {
			c.t.Logf("attempt %d crossed a window boundary; again with fresh keys", attempt)
			continue
		}
		for k, n := range admitted {
			if n != limitPerKey {
				c.t.Errorf("key %d: %d of %d hits admitted across %d nodes, want exactly %d", k, n, hitsPerKey, len(names), limitPerKey)
			}
		}
		distinct := map[string]int{}
		for _, o := range owners {
			distinct[o]++
		}
		c.t.Logf("keys per owner: %v", distinct)
		if len(distinct) < 2 {
			c.t.Errorf("all %d keys owned by %v: nothing was forwarded", keys, distinct)
		}
		for o := range distinct {
			if !slices.Contains(names, o) {
				c.t.Errorf("owner %q is not a node name %v", o, names)
			}
		}
		return
	}
	c.t.Fatal("three attempts crossed a window boundary")
}

// spreadHits sends hit i of key k to node (k+i) mod len(names), one batch per
// node and round. It returns the admitted count and the owner of each key;
// the owner must not depend on which node was asked.
func (c *cluster) spreadHits(names []string, prefix string) (admitted []int, owners []string) {
	admitted, owners = make([]int, keys), make([]string, keys)
	seen := make([][]string, keys) // owners reported for each key
	for i := range hitsPerKey {
		for j, name := range names {
			var batch []check
			var ks []int
			for k := range keys {
				if (k+i)%len(names) == j {
					ks = append(ks, k)
					batch = append(batch, check{
						Name: "dockertest", UniqueKey: fmt.Sprintf("%s-key-%02d", prefix, k),
						Hits: 1, Limit: limitPerKey, DurationMs: window.Milliseconds(), Algorithm: "FIXED_WINDOW",
					})
				}
			}
			for n, a := range c.getRateLimits(name, batch) {
				k := ks[n]
				if a.Error != "" {
					c.t.Errorf("%s: key %d: item error %q", name, k, a.Error)
					continue
				}
				if a.admitted() {
					admitted[k]++
				}
				if owner := a.Metadata["owner"]; owner == "" {
					c.t.Errorf("%s: key %d: no owner in metadata %v", name, k, a.Metadata)
				} else if !slices.Contains(seen[k], owner) {
					seen[k] = append(seen[k], owner)
				}
			}
		}
	}
	for k, s := range seen {
		if len(s) != 1 {
			c.t.Errorf("key %d: owners %v, want one whichever node is asked", k, s)
			continue
		}
		owners[k] = s[0]
	}
	return admitted, owners
}

// checkNoErrors sends one batch of generous checks on fresh keys to node
// name and fails the test on any item error. It returns the owners reported.
func (c *cluster) checkNoErrors(name string, round int) []string {
	c.t.Helper()
	var batch []check
	for k := range keys {
		batch = append(batch, check{
			Name: "dockertest-failover", UniqueKey: fmt.Sprintf("%s-%d-%02d", name, round, k),
			Hits: 1, Limit: 1000, DurationMs: window.Milliseconds(), Algorithm: "TOKEN_BUCKET",
		})
	}
	var owners []string
	for k, a := range c.getRateLimits(name, batch) {
		if a.Error != "" {
			c.t.Errorf("%s: round %d key %d: item error %q", name, round, k, a.Error)
		}
		if !a.admitted() {
			c.t.Errorf("%s: round %d key %d: status %s on a fresh key, want UNDER_LIMIT", name, round, k, a.Status)
		}
		owners = append(owners, a.Metadata["owner"])
	}
	return owners
}
