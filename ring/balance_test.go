package ring

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
)

// The balance and movement tests run the default Config over key sets shaped
// like real traffic. Their measured figures are logged (go test -v -run
// 'Balance|Join'); the asserts hold bounds with room for a different but
// equally good hash, not the measured numbers.

const (
	maxBusiest  = 1.15 // busiest member / average, large key sets
	minIdlest   = 0.75 // idlest member / average: bounded loads cap only the top
	maxMoveRate = 1.5  // moved fraction / ideal 1/(N+1), on a join
	minMoveRate = 0.75 // the newcomer must take a fair share
)

const alphabet62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// keySet is a named list of keys for the balance tests.
type keySet struct {
	name string
	keys []string
}

// largeKeySets are realistic populations: sequential account ids, a block
// of IPv4 addresses, and short ids that differ only in their last characters.
func largeKeySets() []keySet {
	accounts := make([]string, 100_000)
	for i := range accounts {
		accounts[i] = "account:" + strconv.Itoa(i)
	}
	var ips []string // 10.0.0.0 – 10.1.255.255
	for x := range 2 {
		for y := range 256 {
			for z := range 256 {
				ips = append(ips, fmt.Sprintf("10.%d.%d.%d", x, y, z))
			}
		}
	}
	var suffixed []string // user-000 … user-zzz: neighbours differ in the last byte
	for _, a := range alphabet62 {
		for _, b := range alphabet62 {
			for _, c := range alphabet62 {
				suffixed = append(suffixed, "user-"+string([]rune{a, b, c}))
			}
		}
	}
	return []keySet{{"account:<n>", accounts}, {"10.x.y.z", ips}, {"user-<3 of 62>", suffixed}}
}

// namedMembers returns n members node-00, node-01, ….
func namedMembers(n int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{Name: fmt.Sprintf("node-%02d", i), Addr: fmt.Sprintf("10.9.0.%d:8081", i)}
	}
	return ms
}

func mustNew(t testing.TB, members []Member, cfg Config) *Snapshot {
	t.Helper()
	s, err := New(members, 1, cfg)
	if err != nil {
		t.Fatalf("New(%d members, %+v) error: %v", len(members), cfg, err)
	}
	return s
}

// counts returns how many of keys each member of s owns.
func counts(s *Snapshot, keys []string) []int {
	c := make([]int, s.Len())
	for _, k := range keys {
		c[s.OwnerIndex(k)]++
	}
	return c
}

func TestBalanceLargeKeySets(t *testing.T) {
	t.Parallel()
	sets := largeKeySets()
	for n := 3; n <= 10; n++ {
		s := mustNew(t, namedMembers(n), Config{})
		for _, set := range sets {
			c := counts(s, set.keys)
			avg := float64(len(set.keys)) / float64(n)
			busiest, idlest := float64(slices.Max(c))/avg, float64(slices.Min(c))/avg
			t.Logf("%2d members %-15s max/avg %.3f min/avg %.3f", n, set.name, busiest, idlest)
			if busiest > maxBusiest {
				t.Errorf("%d members, %s: busiest member owns %.3f× the average (counts %v), want <= %.2f",
					n, set.name, busiest, c, maxBusiest)
			}
			if idlest < minIdlest {
				t.Errorf("%d members, %s: idlest member owns %.3f× the average (counts %v), want >= %.2f",
					n, set.name, idlest, c, minIdlest)
			}
		}
	}
}

// TestBalanceFewSimilarKeys guards against clustering of keys that differ
// only in their last character: the product shardlimiter replaces put all
// 26 of "user-a".."user-z" on one node.
func TestBalanceFewSimilarKeys(t *testing.T) {
	t.Parallel()
	var letters, chars []string
	for c := 'a'; c <= 'z'; c++ {
		letters = append(letters, "user-"+string(c))
	}
	for _, c := range alphabet62 {
		chars = append(chars, "session:"+string(c))
	}
	for n := 3; n <= 10; n++ {
		s := mustNew(t, namedMembers(n), Config{})
		for _, keys := range [][]string{letters, chars} {
			c := counts(s, keys)
			t.Logf("%2d members %d keys %s..%s: %v", n, len(keys), keys[0], keys[len(keys)-1], c)
			if slices.Max(c) == len(keys) {
				t.Errorf("%d members: all %d keys %s..%s on one member, want them spread",
					n, len(keys), keys[0], keys[len(keys)-1])
			}
		}
	}
}

// TestJoinMovesAboutOneOverN adds one member to N and measures which keys
// change owner. Ideally exactly the newcomer's share, 1/(N+1), moves. Bounded
// loads move a little more: the cap ⌈Load·P/N⌉ shrinks, so a few partitions
// shift between old members too.
func TestJoinMovesAboutOneOverN(t *testing.T) {
	t.Parallel()
	keys := largeKeySets()[0].keys
	for n := 3; n <= 9; n++ {
		before := mustNew(t, namedMembers(n), Config{})
		after := mustNew(t, namedMembers(n+1), Config{})
		newcomer := fmt.Sprintf("node-%02d", n)
		moved, toNewcomer := 0, 0
		for _, k := range keys {
			a, b := before.Owner(k), after.Owner(k)
			if a.Name != b.Name {
				moved++
				if b.Name == newcomer {
					toNewcomer++
				}
			}
		}
		ideal := 1 / float64(n+1)
		frac := float64(moved) / float64(len(keys))
		t.Logf("%d→%d members: moved %.4f of keys, ideal %.4f, ratio %.2f, %.0f%% of moves to the newcomer",
			n, n+1, frac, ideal, frac/ideal, 100*float64(toNewcomer)/float64(moved))
		if frac > maxMoveRate*ideal || frac < minMoveRate*ideal {
			t.Errorf("%d→%d members: moved %.4f of keys, want within [%.2f, %.2f]× the ideal %.4f",
				n, n+1, frac, minMoveRate, maxMoveRate, ideal)
		}
	}
}
