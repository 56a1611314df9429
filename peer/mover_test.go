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
	parts  map[string][]int            // partitions handed over, by destination
	pulls  map[string][]int            // partitions pulled, by source
	// refused, when set, is called (without mu) after a push is refused;
	// delivered, after one is taken, before it returns; pulling, while a
	// pull is answered.
	refused, delivered, pulling func(to string)
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
	return &fakeHost{v: v, ho: newHandoff(snap.Partitions()), tbl: tbl, down: map[string]bool{}, refuse: map[string]bool{}, gone: map[string]bool{}, pushed: map[string][]limit.KeyState{}, parts: map[string][]int{}, pulls: map[string][]int{}}
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

func (l recordLink) Push(_ context.Context, _ limit.Transfer, parts []int, keys []limit.KeyState) error {
	l.h.mu.Lock()
	if l.h.refuse[l.to] {
		refused := l.h.refused
		l.h.mu.Unlock()
		if refused != nil {
			refused(l.to)
		}
		return transport.ErrUnavailable
	}
	l.h.parts[l.to] = append(l.h.parts[l.to], parts...)
	for _, k := range keys { // the round reuses its lists
		l.h.pushed[l.to] = append(l.h.pushed[l.to], limit.KeyState{Algorithm: k.Algorithm, Key: k.Key, State: append([]byte(nil), k.State...)})
	}
	delivered := l.h.delivered
	l.h.mu.Unlock()
	if delivered != nil {
		delivered(l.to)
	}
	return nil
}

var errNotHere = errors.New("not used by this test")

func (recordLink) Forward(context.Context, []limit.Check, bool) ([]limit.Result, error) {
	return nil, errNotHere
}

// Pull records the partitions asked for and answers no keys.
func (l recordLink) Pull(_ context.Context, r limit.PullRequest) ([]limit.KeyState, error) {
	l.h.mu.Lock()
	l.h.pulls[l.to] = append(l.h.pulls[l.to], r.Partitions...)
	pulling := l.h.pulling
	l.h.mu.Unlock()
	if pulling != nil {
		pulling(l.to)
	}
	return nil, nil
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
			j := job{peer: ring.Member{Name: "b", Addr: "b:1"}, why: limit.Leave, parts: []int{1, 2}, pushed: make(chan struct{})}
			markMoved(h, j)
			mv.runPush(context.Background(), j)
			if out := logs.String(); !strings.Contains(out, tc.want) || strings.Contains(out, tc.notWant) {
				t.Errorf("log %q; want %q and not %q", out, tc.want, tc.notWant)
			}
			if got := counterValue(m.handoffIncomplete); got != 1 {
				t.Errorf("handoffs incomplete %v, want 1", got)
			}
		})
	}
}

// TestRetriedPushHandsOverOnlyWhatIsStillMoved: a push whose first try
// failed is retried with only the partitions still marked moved by it. A
// rebuild in between that gave a partition back to this node (its mark
// incoming) keeps it here; handed over anyway, the receiver would decide it
// beside this node until the next ring change (seen in a nemesis run, seed
// 30: a push planned during a one-way cut landed after the rings healed).
// When every partition was taken back, nothing is sent.
func TestRetriedPushHandsOverOnlyWhatIsStillMoved(t *testing.T) {
	for _, tc := range []struct {
		name     string
		takeBack []int
		want     []int
	}{
		{"none taken back", nil, []int{1, 2, 3}},
		{"one taken back", []int{2}, []int{1, 3}},
		{"all taken back", []int{1, 2, 3}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t, "a", "a", "b", "c")
			mv := newMover(Config{Name: "a", Now: newClock().Now}, h, slog.New(slog.DiscardHandler), newMetrics(nil, nil, 0))
			j := job{peer: ring.Member{Name: "b", Addr: "b:1"}, why: limit.Join, parts: []int{1, 2, 3}, pushed: make(chan struct{})}
			markMoved(h, j)
			h.refuse["b"] = true
			h.refused = func(string) { // the receiver is back, and a rebuild gave some partitions back
				h.ho.mu.Lock()
				for _, p := range tc.takeBack {
					h.ho.setLocked(p, partIncoming, partDetail{from: j.peer, done: make(chan struct{}), why: limit.Join})
				}
				h.ho.mu.Unlock()
				h.mu.Lock()
				h.refuse["b"], h.refused = false, nil
				h.mu.Unlock()
			}
			mv.runPush(context.Background(), j)
			h.mu.Lock()
			defer h.mu.Unlock()
			if got := h.parts["b"]; !slices.Equal(got, tc.want) {
				t.Errorf("partitions handed over %v, want %v", got, tc.want)
			}
			for _, p := range tc.takeBack {
				if k := h.ho.kind(p); k != partIncoming {
					t.Errorf("partition %d taken back: mark %s after the push, want incoming", p, partKindNames[k])
				}
			}
		})
	}
}

// markMoved marks j's partitions moved by j, as the rebuild that plans a
// push does.
func markMoved(h *fakeHost, j job) {
	h.ho.mu.Lock()
	defer h.ho.mu.Unlock()
	for _, p := range j.parts {
		h.ho.setLocked(p, partMoved, partDetail{to: j.peer, pushed: j.pushed, why: j.why})
	}
}

// TestPushTakenBackDuringItsTryIsPulledBack: a partition given back to this
// node by a rebuild while the push handing it over was under way is pulled
// back from the receiver once the push is answered (the receiver may have
// answered this node's pull of it first, and then marked it received); one
// still moved by the push, or one the ring gives another node, is not.
func TestPushTakenBackDuringItsTryIsPulledBack(t *testing.T) {
	h := newFakeHost(t, "a", "a", "b", "c")
	mv := newMover(Config{Name: "a", Now: newClock().Now}, h, slog.New(slog.DiscardHandler), newMetrics(nil, nil, 0))
	var mine, others []int // partitions the ring gives a, and another node
	for p := 0; p < h.v.snap.Partitions() && (len(mine) < 2 || len(others) < 1); p++ {
		if h.v.snap.PartitionOwner(p) == h.v.self {
			mine = append(mine, p)
		} else {
			others = append(others, p)
		}
	}
	j := job{peer: ring.Member{Name: "b", Addr: "b:1"}, why: limit.Join, parts: []int{mine[0], mine[1], others[0]}, pushed: make(chan struct{})}
	markMoved(h, j)
	h.delivered = func(string) { // during the call: a rebuild takes back mine[0] and others[0]
		h.ho.mu.Lock()
		for _, p := range []int{mine[0], others[0]} {
			h.ho.setLocked(p, partNormal, partDetail{})
		}
		h.ho.mu.Unlock()
	}
	mv.runPush(context.Background(), j)
	h.mu.Lock()
	defer h.mu.Unlock()
	if got := h.pulls["b"]; !slices.Equal(got, []int{mine[0]}) {
		t.Errorf("pulled back %v, want [%d] (taken back, and this node's by the ring)", got, mine[0])
	}
}

// TestTakeOverYieldsToAPullBack: a node that takes over partitions its
// ring gives another node (that node said they are this one's) does not
// mark one received when a node pulled it from here while the take-over's
// own pull was under way: the other node's ring caught up and it took the
// partition back, finding it unmarked here; marked received afterwards, it
// would be decided on both nodes until the next ring change (seen in
// loadtest --mode nemesis --seed 42). Without the pull back, it is marked.
func TestTakeOverYieldsToAPullBack(t *testing.T) {
	for _, pulledBack := range []bool{false, true} {
		h := newFakeHost(t, "a", "a", "b", "c")
		mv := newMover(Config{Name: "a", Now: newClock().Now}, h, slog.New(slog.DiscardHandler), newMetrics(nil, nil, 0))
		var c limit.Check
		for _, k := range testKeys(100) {
			if h.v.snap.Owner(k).Name == "b" {
				c = limit.Check{Name: "q", Key: k, Rule: rule(limit.TokenBucket, 10, time.Second)}
				break
			}
		}
		p := h.v.snap.PartitionOf(c.Key)
		if pulledBack {
			h.pulling = func(string) { // b pulls it back before our pull is answered
				if _, err := mv.pull(context.Background(), limit.PullRequest{From: "b", Partitions: []int{p}}); err != nil {
					t.Errorf("pull back: %v", err)
				}
			}
		}
		mv.takeOver(context.Background(), ring.Member{Name: "b", Addr: "b:1"}, []limit.Check{c}, []int{0})
		want := partReceived
		if pulledBack {
			want = partNormal
		}
		if k := h.ho.kind(p); k != want {
			t.Errorf("pulled back %v: partition %d marked %s after the take-over, want %s", pulledBack, p, partKindNames[k], partKindNames[want])
		}
	}
}
