package gossip

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
)

func key(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

func b64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

func TestParseKeys(t *testing.T) {
	t.Parallel()
	a, b := key('a', 32), key('b', 16)
	got, err := ParseKeys([]byte("# primary first\n" + b64(a) + "\n\n  " + b64(b) + "  \n" + b64(a) + "\n"))
	if err != nil || len(got) != 2 || !bytes.Equal(got[0], a) || !bytes.Equal(got[1], b) {
		t.Fatalf("ParseKeys(a, b, a) = %d keys, %v; want [a b]", len(got), err)
	}
	for _, tt := range []struct{ file, want string }{
		{"", "no key"},
		{"# only a comment\n", "no key"},
		{b64(a) + "\nnot base64!\n", "line 2: not base64"},
		{b64(key('c', 20)), "line 1: a key must be 16, 24 or 32 bytes, got 20"},
	} {
		_, err := ParseKeys([]byte(tt.file))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseKeys(%q) error = %v, want one containing %q", tt.file, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), b64(a)) {
			t.Errorf("ParseKeys error %q prints key material", err)
		}
	}
}

func TestRejectReasonMatchesMemberlist(t *testing.T) {
	t.Parallel()
	// The phrases memberlist v0.7.0 logs or returns when it refuses gossip.
	for _, tt := range []struct {
		line string
		want int
	}{
		{"[ERR] memberlist: failed to receive: no installed keys could decrypt the message from=127.0.0.1:5", 0},
		{"[ERR] memberlist: Decrypt packet failed: no installed keys could decrypt the message from=127.0.0.1:5", 0},
		{"[ERR] memberlist: Decrypt packet failed: payload is too small to decrypt: 3 from=127.0.0.1:5", 0},
		{"[ERR] memberlist: failed to receive: encryption is configured but remote state is not encrypted from=x", 1},
		{"[ERR] memberlist: Decrypt packet failed: unsupported encryption version 7 from=x", 1},
		{"remote state is encrypted and encryption is not configured", 2},
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:1", -1},
	} {
		if got := rejectReason([]byte(tt.line)); got != tt.want {
			t.Errorf("rejectReason(%q) = %d, want %d", tt.line, got, tt.want)
		}
	}
}

// keyed starts a node with keys that joins seed (if any).
func keyed(t *testing.T, name string, keys [][]byte, seed *gossipNode) *gossipNode {
	t.Helper()
	cfg := Config{Keys: keys}
	if seed != nil {
		cfg.Seeds = []string{seed.m.LocalAddr()}
	}
	return startGossip(t, name, "127.0.0.1:0", cfg)
}

func TestGossipKeysKeepOutsiders(t *testing.T) {
	t.Parallel()
	k1, k2 := key(1, 32), key(2, 32)
	a := keyed(t, "node-a", [][]byte{k1}, nil)
	b := keyed(t, "node-b", [][]byte{k1}, a)
	poll.Until(t, 10*time.Second, sees([]*gossipNode{a, b}, membersOf(a, b)), "a and b, sharing a key, converge")

	wrongLog, wrongLogs := testLogger(t)
	wrong := startGossip(t, "wrong-key", "127.0.0.1:0", Config{Keys: [][]byte{k2}, Seeds: []string{a.m.LocalAddr()}, Logger: wrongLog})
	plainLog, plainLogs := testLogger(t)
	plain := startGossip(t, "no-key", "127.0.0.1:0", Config{Seeds: []string{a.m.LocalAddr()}, Logger: plainLog})
	poll.Until(t, 10*time.Second, func() bool {
		return a.m.Rejected(RejectedWrongKey) > 0 && a.m.Rejected(RejectedPlaintext) > 0 &&
			wrong.m.joinAttempts.Load() >= 2 && plain.m.joinAttempts.Load() >= 2
	}, "a refuses the outsiders' join attempts and counts them")
	for _, g := range []*gossipNode{a, b} {
		if names := memberNames(g.m.Members()); !slices.Equal(names, []string{"node-a", "node-b"}) {
			t.Errorf("%s sees %v; outsiders must never be members", g.name, names)
		}
	}
	if wrong.m.Joined() || plain.m.Joined() {
		t.Errorf("Joined() wrong-key = %v, no-key = %v; want both false", wrong.m.Joined(), plain.m.Joined())
	}
	const hint = "gossip keys (--gossip-key-file) do not match"
	for name, logs := range map[string]*logBuf{"wrong-key": wrongLogs, "no-key": plainLogs} {
		if !strings.Contains(logs.String(), hint) {
			t.Errorf("%s's log does not say why it cannot join (want %q):\n%s", name, hint, logs)
		}
	}
}

// TestGossipKeyRotation rotates the cluster's key in the three steps
// SetKeys documents while a third node joins between them: the cluster
// stays whole and the node joins.
func TestGossipKeyRotation(t *testing.T) {
	t.Parallel()
	old, next := key(1, 16), key(2, 24)
	a := keyed(t, "node-a", [][]byte{old}, nil)
	b := keyed(t, "node-b", [][]byte{old}, a)
	ab := []*gossipNode{a, b}
	poll.Until(t, 10*time.Second, sees(ab, membersOf(ab...)), "converge under the old key")
	steps := [][][]byte{{old, next}, {next, old}, {next}}
	for i, keys := range steps {
		for _, g := range ab {
			if err := g.m.SetKeys(keys); err != nil {
				t.Fatalf("step %d: %s.SetKeys: %v", i+1, g.name, err)
			}
		}
		if i == 1 {
			// A node holding only the new key joins mid-rotation.
			ab = append(ab, keyed(t, "node-c", [][]byte{next}, a))
		}
		// Gossip keeps flowing: a probe round trip under the new primary.
		poll.Until(t, 10*time.Second, sees(ab, membersOf(ab...)), "step %d: the cluster stays whole", i+1)
	}
	if got := a.m.keyring.GetKeys(); len(got) != 1 || !bytes.Equal(got[0], next) {
		t.Errorf("after rotation node-a holds %d keys; want only the new one", len(got))
	}
	if a.m.Rejected(RejectedWrongKey)+b.m.Rejected(RejectedWrongKey) != 0 {
		t.Errorf("rotation refused gossip: %d, %d", a.m.Rejected(RejectedWrongKey), b.m.Rejected(RejectedWrongKey))
	}
}

func TestSetKeysErrors(t *testing.T) {
	t.Parallel()
	plain, err := New(Config{NodeName: "n", GRPCAddr: ":8081"})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.SetKeys([][]byte{key(1, 16)}); err == nil || !strings.Contains(err.Error(), "encryption is off") {
		t.Errorf("SetKeys on a plaintext node = %v, want an error saying encryption is off", err)
	}
	enc, err := New(Config{NodeName: "n", GRPCAddr: ":8081", Keys: [][]byte{key(1, 16)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, keys := range [][][]byte{nil, {key(2, 15)}} {
		if err := enc.SetKeys(keys); err == nil {
			t.Errorf("SetKeys(%d keys) = nil, want an error", len(keys))
		}
	}
	if got := enc.keyring.GetPrimaryKey(); !bytes.Equal(got, key(1, 16)) {
		t.Errorf("a refused SetKeys changed the primary key")
	}
	if _, err := New(Config{NodeName: "n", GRPCAddr: ":8081", Keys: [][]byte{key(1, 10)}}); err == nil {
		t.Error("New with a 10-byte key = nil error")
	}
}
