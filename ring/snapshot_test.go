package ring

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/buraksezer/consistent"
)

// goldenMembers is the fixed cluster of the golden vectors. The order is
// deliberately not sorted.
var goldenMembers = []Member{
	{Name: "node-c", Addr: "10.0.0.3:8081"},
	{Name: "node-a", Addr: "10.0.0.1:8081"},
	{Name: "node-e", Addr: "10.0.0.1:9081"}, // shares an IP with node-a
	{Name: "node-b", Addr: "10.0.0.2:8081"},
	{Name: "node-d", Addr: "10.0.0.4:8081"},
}

// TestGoldenOwners freezes key → owner for the default Config. Nodes running
// different versions of this package must agree on owners; if this test
// fails, a change of hasher, partitioning or defaults would make a mixed
// cluster route the same key to different owners. Change the vectors only
// together with a documented, cluster-wide migration.
func TestGoldenOwners(t *testing.T) {
	t.Parallel()
	s := mustNew(t, goldenMembers, Config{})
	for _, tt := range []struct{ key, owner string }{
		{"account:0", "node-a"},
		{"account:1", "node-e"},
		{"account:2", "node-e"},
		{"account:42", "node-c"},
		{"account:1000", "node-d"},
		{"account:99999", "node-c"},
		{"user-a", "node-a"},
		{"user-b", "node-e"},
		{"user-c", "node-c"},
		{"user-y", "node-e"},
		{"user-z", "node-b"},
		{"10.0.0.1", "node-a"},
		{"10.0.0.2", "node-a"},
		{"192.168.1.1", "node-b"},
		{"2001:db8::1", "node-a"},
		{"api_key:3f2a9c", "node-b"},
		{"tenant/acme/user/7", "node-b"},
		{"", "node-d"},
		{" ", "node-c"},
		{"a", "node-c"},
		{"ä", "node-d"},
		{"日本", "node-d"},
		{"k\x00", "node-e"},
		{"session:Z", "node-e"},
		{"order-2026-01-01", "node-c"},
		{"ACCOUNT:0", "node-a"},
		{"account:0 ", "node-a"},
		{"x", "node-d"},
		{"the quick brown fox jumps over the lazy dog", "node-a"},
		{"0", "node-d"},
	} {
		if got := s.Owner(tt.key).Name; got != tt.owner {
			t.Errorf("Owner(%q) = %q, want %q", tt.key, got, tt.owner)
		}
	}
}

// TestGoldenTable freezes the whole partition → owner table of the golden
// cluster through a digest, so a placement change that happens to spare the
// sampled keys is caught too.
func TestGoldenTable(t *testing.T) {
	t.Parallel()
	s := mustNew(t, goldenMembers, Config{})
	h := fnv.New64a()
	for _, o := range s.owners {
		h.Write([]byte{byte(o), byte(o >> 8)})
	}
	if got, want := h.Sum64(), uint64(0x77715a799fbde6bd); got != want {
		t.Errorf("partition table digest = %#x, want %#x (shares %v)", got, want, s.Shares())
	}
}

func TestOwnersIgnoreMemberOrder(t *testing.T) {
	t.Parallel()
	members := namedMembers(10)
	keys := make([]string, 20_000)
	for i := range keys {
		keys[i] = "account:" + strconv.Itoa(i)
	}
	ref := mustNew(t, members, Config{})
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 8 {
		shuffled := slices.Clone(members)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		s := mustNew(t, shuffled, Config{})
		if !slices.Equal(s.Members(), ref.Members()) {
			t.Fatalf("round %d: Members() = %v, want %v", round, s.Members(), ref.Members())
		}
		for _, k := range keys {
			if got, want := s.Owner(k), ref.Owner(k); got != want {
				t.Fatalf("round %d, order %v: Owner(%q) = %q, want %q", round, shuffled, k, got.Name, want.Name)
			}
		}
	}
}

func TestOwnersIgnoreAddr(t *testing.T) {
	t.Parallel()
	a := namedMembers(5)
	b := slices.Clone(a)
	for i := range b {
		b[i].Addr = "127.0.0.1:" + strconv.Itoa(9000+i)
	}
	sa, sb := mustNew(t, a, Config{}), mustNew(t, b, Config{})
	for i := range 5000 {
		k := "k" + strconv.Itoa(i)
		if got, want := sb.OwnerIndex(k), sa.OwnerIndex(k); got != want {
			t.Fatalf("OwnerIndex(%q) = %d, want %d", k, got, want)
		}
	}
}

// TestOwnerAgreesWithConsistent checks that the flattened table gives the
// same answer as asking the library itself.
func TestOwnerAgreesWithConsistent(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{}, {PartitionCount: 271, ReplicationFactor: 20, Load: 1.25}} {
		members := namedMembers(7)
		s := mustNew(t, members, cfg)
		full := s.Config()
		nodes := make([]consistent.Member, len(members))
		for i, m := range members {
			nodes[i] = node(m.Name)
		}
		c := consistent.New(nodes, consistent.Config{Hasher: hasher{},
			PartitionCount: full.PartitionCount, ReplicationFactor: full.ReplicationFactor, Load: full.Load})
		for i := range 10_000 {
			k := "account:" + strconv.Itoa(i)
			if got, want := s.Owner(k).Name, c.LocateKey([]byte(k)).String(); got != want {
				t.Fatalf("%+v: Owner(%q) = %q, want %q (consistent.LocateKey)", cfg, k, got, want)
			}
		}
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	three := namedMembers(3)
	for _, tt := range []struct {
		name    string
		members []Member
		cfg     Config
		want    string
	}{
		{"nil members", nil, Config{}, "no members"},
		{"empty members", []Member{}, Config{}, "no members"},
		{"empty name", []Member{{Name: "a"}, {Addr: "10.0.0.9:1"}}, Config{}, "empty name"},
		{"duplicate name", []Member{{Name: "a", Addr: "x:1"}, {Name: "b"}, {Name: "a", Addr: "y:1"}}, Config{}, `duplicate member name "a"`},
		{"negative partitions", three, Config{PartitionCount: -1}, "partition count"},
		{"too many partitions", three, Config{PartitionCount: maxPartitionCount + 1}, "partition count"},
		{"negative replication", three, Config{ReplicationFactor: -5}, "replication factor"},
		{"too much replication", three, Config{ReplicationFactor: maxReplicationFactor + 1}, "replication factor"},
		{"load below one", three, Config{Load: 0.99}, "load"},
		{"negative load", three, Config{Load: -1}, "load"},
		{"NaN load", three, Config{Load: math.NaN()}, "load"},
		{"infinite load", three, Config{Load: math.Inf(1)}, "load"},
	} {
		s, err := New(tt.members, 1, tt.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), "ring: ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New(%v, 1, %+v) = %v, %v; want error containing %q", tt.name, tt.members, tt.cfg, s, err, tt.want)
		}
	}
	if _, err := New(nil, 1, Config{}); !errors.Is(err, ErrNoMembers) {
		t.Errorf("New(nil) error = %v, want ErrNoMembers", err)
	}
}

func TestSnapshotAccessors(t *testing.T) {
	t.Parallel()
	s, err := New(goldenMembers, 42, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Version(); got != 42 {
		t.Errorf("Version() = %d, want 42", got)
	}
	want := Config{DefaultPartitionCount, DefaultReplicationFactor, DefaultLoad}
	if got := s.Config(); got != want {
		t.Errorf("Config() = %+v, want %+v", got, want)
	}
	members := s.Members()
	if !slices.IsSortedFunc(members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) }) {
		t.Errorf("Members() = %v, want sorted by Name", members)
	}
	members[0].Name = "mutated"
	if got := s.Member(0).Name; got != "node-a" {
		t.Errorf("after changing Members()[0]: Member(0).Name = %q, want %q", got, "node-a")
	}
	if s.Len() != len(goldenMembers) {
		t.Errorf("Len() = %d, want %d", s.Len(), len(goldenMembers))
	}
	for i, m := range s.Members() {
		if got := s.IndexOf(m.Name); got != i {
			t.Errorf("IndexOf(%q) = %d, want %d", m.Name, got, i)
		}
	}
	if got := s.IndexOf("node-z"); got != -1 {
		t.Errorf("IndexOf(%q) = %d, want -1", "node-z", got)
	}
	for _, k := range []string{"account:1", "user-z", ""} {
		if got, want := s.Owner(k), s.Member(s.OwnerIndex(k)); got != want {
			t.Errorf("Owner(%q) = %+v, want Member(OwnerIndex) = %+v", k, got, want)
		}
	}
	sum := 0.0
	for name, share := range s.Shares() {
		if s.IndexOf(name) < 0 || share < 0.15 || share > 0.25 {
			t.Errorf("Shares()[%q] = %.3f, want a member near 0.2", name, share)
		}
		sum += share
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("sum of Shares() = %v, want 1", sum)
	}
}

func TestSingleMemberOwnsAll(t *testing.T) {
	t.Parallel()
	s := mustNew(t, []Member{{Name: "solo", Addr: ":8081"}}, Config{})
	for _, k := range []string{"", "a", "account:42"} {
		if got := s.Owner(k); got.Name != "solo" {
			t.Errorf("Owner(%q) = %q, want %q", k, got.Name, "solo")
		}
	}
	if got := s.Shares(); got["solo"] != 1 {
		t.Errorf("Shares() = %v, want solo: 1", got)
	}
}

// TestMoreMembersThanPartitions: the spare members own nothing, and New
// neither fails nor panics.
func TestMoreMembersThanPartitions(t *testing.T) {
	t.Parallel()
	s := mustNew(t, namedMembers(10), Config{PartitionCount: 7, Load: 1})
	owning := 0
	for _, share := range s.Shares() {
		if share > 0 {
			owning++
		}
	}
	if owning != 7 {
		t.Errorf("members owning a partition = %d, want 7 (shares %v)", owning, s.Shares())
	}
}

func TestOwnerDoesNotAllocate(t *testing.T) {
	s := mustNew(t, namedMembers(10), Config{})
	keys := []string{"account:42", "10.1.2.3", "a-rather-long-key-for-a-tenant/and/a/user/with/many/segments"}
	var sink Member
	for _, k := range keys {
		if n := testing.AllocsPerRun(100, func() { sink = s.Owner(k) }); n != 0 {
			t.Errorf("Owner(%q) allocates %v times per call, want 0", k, n)
		}
		if n := testing.AllocsPerRun(100, func() { _ = s.OwnerIndex(k) }); n != 0 {
			t.Errorf("OwnerIndex(%q) allocates %v times per call, want 0", k, n)
		}
	}
	_ = sink
}

// FuzzNew feeds New arbitrary configurations and member counts. New must
// return an error or a Snapshot that respects the load bound; it must never
// panic. The seeds run with every go test.
func FuzzNew(f *testing.F) {
	f.Add(3, 0, 0, 0.0)
	f.Add(1, 1, 1, 1.0)
	f.Add(10, 7, 1, 1.0)
	f.Add(7, 271, 20, 1.0000001)
	f.Add(9, 4093, 3, 1.01)
	f.Add(3, 100, 1, 0.5)
	f.Add(4, 1<<14, 1, 1e300)
	f.Add(0, 10, 10, 1.1)
	f.Add(5, -3, -3, -1.0)
	f.Fuzz(func(t *testing.T, n, partitions, replication int, load float64) {
		if n < 0 || n > 64 || replication > 64 || partitions > 1<<14 {
			t.Skip("too slow to be worth fuzzing")
		}
		cfg := Config{PartitionCount: partitions, ReplicationFactor: replication, Load: load}
		s, err := New(namedMembers(n), 1, cfg)
		if err != nil {
			return
		}
		full := s.Config()
		limit := math.Ceil(float64(full.PartitionCount) / float64(n) * full.Load)
		total := 0
		for i, owned := range s.owned {
			if float64(owned) > limit {
				t.Errorf("%+v, %d members: member %d owns %d partitions, want <= %.0f", cfg, n, i, owned, limit)
			}
			total += owned
		}
		if total != full.PartitionCount {
			t.Errorf("%+v, %d members: %d partitions owned, want %d", cfg, n, total, full.PartitionCount)
		}
		for _, k := range []string{"", "a", fmt.Sprint(n)} {
			if i := s.OwnerIndex(k); i < 0 || i >= n {
				t.Errorf("%+v: OwnerIndex(%q) = %d, want in [0, %d)", cfg, k, i, n)
			}
		}
	})
}

// TestWithoutIsTheRingAfterTheMemberLeaves: the owners of Without(x) are
// those of a snapshot built from the members less x, for every x, so the
// node that holds a key's replica is the one that owns it once its owner is
// gone. Keys x did not own keep their owner in most cases (bounded loads
// may move a few).
func TestWithoutIsTheRingAfterTheMemberLeaves(t *testing.T) {
	t.Parallel()
	members := namedMembers(5)
	s := mustNew(t, members, Config{})
	for _, gone := range members {
		w, err := s.Without(gone.Name)
		if err != nil {
			t.Fatal(err)
		}
		var rest []Member
		for _, m := range members {
			if m.Name != gone.Name {
				rest = append(rest, m)
			}
		}
		want := mustNew(t, rest, Config{})
		if w.Len() != 4 || w.IndexOf(gone.Name) != -1 {
			t.Fatalf("Without(%q) has %d members, index of the gone one %d", gone.Name, w.Len(), w.IndexOf(gone.Name))
		}
		for p := range s.Partitions() {
			if got, exp := w.Member(w.PartitionOwner(p)), want.Member(want.PartitionOwner(p)); got != exp {
				t.Fatalf("Without(%q): partition %d owned by %v, a ring of the rest says %v", gone.Name, p, got, exp)
			}
		}
		for i := range 1000 {
			k := "account:" + strconv.Itoa(i)
			if s.Owner(k).Name == gone.Name && w.Owner(k).Name == gone.Name {
				t.Fatalf("Without(%q) still routes %s to it", gone.Name, k)
			}
			if p := s.PartitionOf(k); s.Member(s.PartitionOwner(p)) != s.Owner(k) {
				t.Fatalf("PartitionOwner(PartitionOf(%q)) = %v, Owner = %v", k, s.Member(s.PartitionOwner(p)), s.Owner(k))
			}
		}
	}
	if _, err := s.Without("nobody"); err == nil {
		t.Fatal("Without(a non-member) succeeded")
	}
	one := mustNew(t, members[:1], Config{})
	if _, err := one.Without(members[0].Name); err == nil {
		t.Fatal("Without(the only member) succeeded")
	}
}
