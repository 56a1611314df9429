package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
)

// metric returns the sum of the series of name whose labels contain every
// label given ("kind=\"gossip_keys\""), read from p's /metrics; -1 when
// unreachable.
func metric(client *http.Client, url, name string, labels ...string) float64 {
	resp, err := client.Get(url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(line, l)
		}
		if f := strings.Fields(line); all && len(f) == 2 {
			v, _ := strconv.ParseFloat(f[1], 64)
			sum += v
		}
	}
	return sum
}

func writeKeys(t *testing.T, path string, keys ...[]byte) {
	t.Helper()
	var b bytes.Buffer
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	// Write then rename, as a Secret update does: never a half-written file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestGossipKeys runs real binaries on 127.0.0.20-24. Two nodes share a
// key; a node with another key and one with none try to join and never
// appear in either member's /v1/cluster, each saying why in its log while
// the members count the refused gossip. Then the key rotates in the three
// documented steps with no restart, the pair watched throughout: it never
// splits, a node holding only the new key joins after the primary moved,
// and once the old key is removed a node holding only it stays out.
func TestGossipKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	bin := buildBinary(t)
	hosts := []string{"127.0.0.20", "127.0.0.21", "127.0.0.22", "127.0.0.23", "127.0.0.24"}
	port := freeGossipPort(t, hosts...)
	seed := net.JoinHostPort(hosts[0], strconv.Itoa(port))
	dir := t.TempDir()
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)
	clusterKeys, otherKeys, oldOnly := filepath.Join(dir, "cluster"), filepath.Join(dir, "other"), filepath.Join(dir, "old")
	writeKeys(t, clusterKeys, oldKey)
	writeKeys(t, otherKeys, bytes.Repeat([]byte{3}, 24))
	writeKeys(t, oldOnly, oldKey)

	a := startProc(t, bin, hosts[0], port, seed, "--gossip-key-file", clusterKeys)
	b := startProc(t, bin, hosts[1], port, seed, "--gossip-key-file", clusterKeys)
	pair := []*proc{a, b}
	whole := func() bool {
		for _, p := range pair {
			if got := members(p); !slices.Equal(got, []string{a.name, b.name}) {
				return false
			}
		}
		return true
	}
	poll.Until(t, 20*time.Second, whole, "two nodes sharing a key converge")

	wrong := startProc(t, bin, hosts[2], port, seed, "--gossip-key-file", otherKeys)
	none := startProc(t, bin, hosts[3], port, seed)
	const hint = "gossip keys (--gossip-key-file) do not match"
	poll.Until(t, 20*time.Second, func() bool {
		url := "http://" + a.http
		return strings.Contains(wrong.stderr.String(), hint) && strings.Contains(none.stderr.String(), hint) &&
			metric(http.DefaultClient, url, "shardlimiter_gossip_rejected_total", `reason="wrong_key"`) > 0 &&
			metric(http.DefaultClient, url, "shardlimiter_gossip_rejected_total", `reason="plaintext"`) > 0
	}, "the outsiders say why they cannot join and the members count their gossip")
	for _, p := range pair {
		if got := members(p); slices.Contains(got, wrong.name) || slices.Contains(got, none.name) {
			t.Errorf("%s sees %v; the outsiders must never be members", p.name, got)
		}
	}
	if !whole() {
		t.Errorf("the pair split while outsiders knocked: %v, %v", members(a), members(b))
	}
	for _, p := range []*proc{wrong, none} {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
	// together: each of the pair sees the other (a joiner may be there too).
	together := func() bool {
		for _, p := range pair {
			if got := members(p); !slices.Contains(got, a.name) || !slices.Contains(got, b.name) {
				return false
			}
		}
		return true
	}

	// Rotation, watched: sample both members' views until it is over.
	var splits atomic.Int32
	var splitSeen atomic.Value
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if !together() {
				splits.Add(1)
				splitSeen.Store(fmt.Sprint(members(a), members(b)))
			}
		}
	})
	reloaded := func(n float64) func() bool {
		return func() bool {
			for _, p := range pair {
				if metric(http.DefaultClient, "http://"+p.http, "shardlimiter_security_reloads_total", `kind="gossip_keys"`) < n {
					return false
				}
			}
			return true
		}
	}
	steps := []struct {
		name string
		keys [][]byte
	}{
		{"add the new key second", [][]byte{oldKey, newKey}},
		{"make it primary", [][]byte{newKey, oldKey}},
		{"remove the old key", [][]byte{newKey}},
	}
	var joiner *proc
	for i, st := range steps {
		writeKeys(t, clusterKeys, st.keys...)
		poll.Until(t, 10*time.Second, reloaded(float64(i+1)), "step %q reaches both nodes", st.name)
		// Gossip has gone round under the new keys: a probe every 0.5 s.
		poll.Until(t, 10*time.Second, together, "step %q: the pair stays whole", st.name)
		if i == 1 {
			newOnly := filepath.Join(dir, "new")
			writeKeys(t, newOnly, newKey)
			// Fresh ports for a node started this late: the test's first
			// probe is long past.
			joiner = startProc(t, bin, hosts[4], freeGossipPort(t, hosts[4]), seed, "--gossip-key-file", newOnly)
			poll.Until(t, 20*time.Second, func() bool { return len(members(a)) == 3 && len(members(joiner)) == 3 },
				"a node holding only the new key joins once the primary moved")
			joiner.cmd.Process.Kill()
			poll.Until(t, 20*time.Second, whole, "the joiner is dropped")
		}
	}
	close(stop)
	watch.Wait()
	if n := splits.Load(); n > 0 {
		t.Errorf("the pair was split in %d samples during rotation, e.g. %v", n, splitSeen.Load())
	}
	old := startProc(t, bin, hosts[2], freeGossipPort(t, hosts[2]), seed, "--gossip-key-file", oldOnly)
	poll.Until(t, 20*time.Second, func() bool { return strings.Contains(old.stderr.String(), hint) },
		"a node holding only the removed key is refused")
	if got := members(a); slices.Contains(got, old.name) {
		t.Errorf("%s sees %v; a node with the removed key must stay out", a.name, got)
	}
}
