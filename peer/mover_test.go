package peer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/bucket"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/table"
	"github.com/shardlimiter/shardlimiter/transport"
)

// fakeHost is a moverHost without a node: a fixed ring, one token-bucket
// table, and links that record what is pushed to them.
type fakeHost struct {
	v      *view
	ho     *handoff
	tbl    []limiter
	down   map[string]bool // members not reachable
	refuse map[string]bool // members whose pushes fail
	gone   map[string]bool // members gossip no longer lists
	leaves bool            // this node is leaving
	mu     sync.Mutex
	pushed map[string][]limit.KeyState // by destination
}

func newFakeHost(t testing.TB, self string, names ...string) *fakeHost {
	t.Helper()
	var ms []ring.Member
	for _, n := range names {
		ms = append(ms, ring.Member{Name: n, Addr: n + ":1"})
	}
	snap, err := ring.New(ms, 1, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	v := &view{snap: snap, self: snap.IndexOf(self)}
	if v.backup, err = snap.Without(self); err != nil {
		t.Fatal(err)
	}
	tbl := make([]limiter, limit.TokenBucket+1)
	tbl[limit.TokenBucket] = bucket.NewTokenBucket(table.Config{MaxKeys: 1000, TrackChanges: true})
	return &fakeHost{v: v, ho: newHandoff(snap.Partitions()), tbl: tbl, down: map[string]bool{}, refuse: map[string]bool{}, gone: map[string]bool{}, pushed: map[string][]limit.KeyState{}}
}

func (h *fakeHost) ringView() *view                { return h.v }
func (h *fakeHost) marks() *handoff                { return h.ho }
func (h *fakeHost) tables() []limiter              { return h.tbl }
func (h *fakeHost) member(name string) ring.Member { return ring.Member{Name: name, Addr: name + ":1"} }
func (h *fakeHost) leaving() bool                  { return h.leaves }

func (h *fakeHost) gossipMembers() []ring.Member {
	return slices.DeleteFunc(h.v.snap.Members(), func(m ring.Member) bool { return h.gone[m.Name] })
}
func (h *fakeHost) othersAlive() bool                { return true }
func (h *fakeHost) reachable(m ring.Member) bool     { return !h.down[m.Name] }
func (h *fakeHost) link(m ring.Member) (Link, error) { return recordLink{h, m.Name}, nil }

func (h *fakeHost) decider(v *view, uk string) string {
	if o := v.snap.OwnerIndex(uk); o != v.self {
		return v.snap.Member(o).Name
	}
	return ""
}

// recordLink records pushes; nothing else is asked of it here.
type recordLink struct {
	h  *fakeHost
	to string
}

func (l recordLink) Push(_ context.Context, _ limit.Transfer, _ []int, keys []limit.KeyState) error {
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	if l.h.refuse[l.to] {
		return transport.ErrUnavailable
	}
	for _, k := range keys { // the round reuses its lists
		l.h.pushed[l.to] = append(l.h.pushed[l.to], limit.KeyState{Algorithm: k.Algorithm, Key: k.Key, State: append([]byte(nil), k.State...)})
	}
	return nil
}

var errNotHere = errors.New("not used by this test")

func (recordLink) Forward(context.Context, []limit.Check, bool) ([]limit.Result, error) {
	return nil, errNotHere
}
func (recordLink) Pull(context.Context, limit.PullRequest) ([]limit.KeyState, error) {
	return nil, errNotHere
}
func (recordLink) Inspect(context.Context, limit.Check) (limit.KeyView, error) {
	return limit.KeyView{}, errNotHere
}
func (recordLink) Ring(context.Context) (transport.RingInfo, error) {
	return transport.RingInfo{}, errNotHere
}
func (recordLink) Lease(context.Context, limit.LeaseRequest) (limit.LeaseGrant, error) {
	return limit.LeaseGrant{}, errNotHere
}
func (recordLink) Close() error { return nil }

// The mover needs no node: through a moverHost, a replication round sends
// each changed key this node owns to the owner of the ring without it, and
// each key it does not own to its owner; a destination that is not
// reachable keeps its keys in the backlog for the next round.
func TestMoverReplicatesThroughItsHost(t *testing.T) {
	h := newFakeHost(t, "a", "a", "b", "c")
	clk := newClock()
	mv := newMover(Config{Name: "a", Now: clk.Now, ReplicationInterval: time.Second}, h, slog.New(slog.DiscardHandler), newMetrics(nil, nil, 0))
	now := clk.Now().UnixNano()
	r := rule(limit.TokenBucket, 10, time.Hour)
	want := map[string]map[string]bool{}
	var kb keyBuf
	for _, k := range testKeys(40) {
		tk := strings.Clone(kb.key("q", k))
		h.tbl[limit.TokenBucket].Take(tk, now, r, 1)
		dest := h.v.snap.Owner(k)
		if dest.Name == "a" {
			dest = h.v.backup.Owner(k)
		}
		if want[dest.Name] == nil {
			want[dest.Name] = map[string]bool{}
		}
		want[dest.Name][tk] = true
	}
	if len(want) != 2 {
		t.Fatalf("keys go to %d destinations, want 2: the test proves less", len(want))
	}
	h.down["c"] = true
	backlog := replicaBacklog{}
	drained, sent := mv.replicateOnce(context.Background(), backlog, map[string][]limit.KeyState{})
	if drained != 40 || sent != len(want["b"]) {
		t.Errorf("round 1: drained %d, sent %d; want 40, %d", drained, sent, len(want["b"]))
	}
	if got := keysOf(h.pushed["b"]); !equalSets(got, want["b"]) || len(h.pushed["c"]) != 0 {
		t.Errorf("round 1 pushed %d keys to b (want %d) and %d to c (down, want 0)", len(got), len(want["b"]), len(h.pushed["c"]))
	}
	if got := keysOf(backlog["c"]); !equalSets(got, want["c"]) {
		t.Errorf("backlog for c: %d keys, want %d", len(got), len(want["c"]))
	}
	h.down["c"] = false
	if drained, sent := mv.replicateOnce(context.Background(), backlog, map[string][]limit.KeyState{}); drained != 0 || sent != len(want["c"]) {
		t.Errorf("round 2: drained %d, sent %d; want 0, %d (the backlog)", drained, sent, len(want["c"]))
	}
	if got := keysOf(h.pushed["c"]); !equalSets(got, want["c"]) || len(backlog) != 0 {
		t.Errorf("round 2 pushed %d keys to c, want %d; backlog %d destinations, want 0", len(got), len(want["c"]), len(backlog))
	}
}

func keysOf(ks []limit.KeyState) map[string]bool {
	out := map[string]bool{}
	for _, k := range ks {
		out[k.Key] = true
	}
	return out
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// TestPushToALeaverThatLeftIsNotAWarning: a leaving node's push that fails
// because its receiver left meanwhile (a stop of several nodes at once) is
// counted and logged at info, saying the keys stay here; a failed push to a
// receiver gossip still lists is a warning, as before.
func TestPushToALeaverThatLeftIsNotAWarning(t *testing.T) {
	for _, tc := range []struct {
		name          string
		leaving, gone bool
		want, notWant string
	}{
		{"receiver left", true, true, `level=INFO msg="handoff: push failed; the receiver left too, dropped (no --state-dir)"`, "level=WARN"},
		{"receiver still listed", true, false, `level=WARN msg="handoff: push failed"`, "the receiver left too"},
		{"not leaving", false, true, `level=WARN msg="handoff: push failed"`, "the receiver left too"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t, "a", "a", "b", "c")
			h.leaves, h.gone["b"], h.refuse["b"] = tc.leaving, tc.gone, true
			var logs bytes.Buffer
			m := newMetrics(nil, nil, 0)
			mv := newMover(Config{Name: "a", Now: newClock().Now}, h, slog.New(slog.NewTextHandler(&logs, nil)), m)
			mv.runPush(context.Background(), job{peer: ring.Member{Name: "b", Addr: "b:1"}, why: limit.Leave, parts: []int{1, 2}, pushed: make(chan struct{})})
			if out := logs.String(); !strings.Contains(out, tc.want) || strings.Contains(out, tc.notWant) {
				t.Errorf("log %q; want %q and not %q", out, tc.want, tc.notWant)
			}
			if got := counterValue(m.handoffIncomplete); got != 1 {
				t.Errorf("handoffs incomplete %v, want 1", got)
			}
		})
	}
}
