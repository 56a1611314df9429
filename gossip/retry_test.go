package gossip

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"
)

// The tests in this file drive the join loops (joinSeeds, reclaimName) in a
// synctest bubble: the clock is fake, the resolver answers from a table and
// the contact step is a fake, so nothing touches memberlist or a socket and
// the retry schedule is checked against exact instants.

// retryNode returns a Membership named "a" whose one seed is the DNS name
// "limiter.test" (gossip port 7946), joined every second ±20 %, with
// lookups answered by resolve and logs kept in the returned buffer. It is
// never Run.
func retryNode(t *testing.T, resolve func(context.Context, string) ([]string, error)) (*Membership, *logBuf) {
	t.Helper()
	log, buf := testLogger(t)
	m, err := New(Config{
		NodeName: "a", GRPCAddr: "127.0.0.9:8081", Seeds: []string{"limiter.test"},
		JoinRetry: time.Second, Logger: log, Resolver: resolve,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, buf
}

// call is one call of a fake contact step: when, relative to the start of
// the test, and with which targets.
type call struct {
	at      time.Duration
	targets []string
}

// checkSpacing fails the test unless the first call came at once and each
// later one 1 s ±20 % after the one before it (JoinRetry with jitter); what
// names a call in the messages.
func checkSpacing(t *testing.T, what string, calls []call) {
	t.Helper()
	if len(calls) > 0 && calls[0].at != 0 {
		t.Errorf("first %s at %v, want at once", what, calls[0].at)
	}
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].at - calls[i-1].at; gap < 800*time.Millisecond || gap > 1200*time.Millisecond {
			t.Errorf("%s %d came %v after the one before, want 1 s ±20 %%", what, i+1, gap)
		}
	}
}

// TestJoinRetrySchedule: the seed's name does not resolve for the first two
// attempts (DNS lags behind pod start), then its two pods refuse once; the
// fourth attempt joins. Every attempt resolves the name again, attempts come
// every JoinRetry ±20 %, and the node reports joined after the fourth.
func TestJoinRetrySchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lookups := 0
		notYet, up := fakeDNS(nil), fakeDNS(map[string][]string{"limiter.test": {"10.0.1.1", "10.0.1.2"}})
		m, _ := retryNode(t, func(ctx context.Context, host string) ([]string, error) {
			lookups++
			if lookups <= 2 {
				return notYet(ctx, host)
			}
			return up(ctx, host)
		})
		start := time.Now()
		var calls []call
		contact := func(_ context.Context, targets []string) (int, int, error) {
			calls = append(calls, call{time.Since(start), slices.Clone(targets)})
			if len(calls) <= 3 {
				return 0, len(targets), errors.New("connection refused")
			}
			return 1, len(targets), nil
		}
		if !m.joinSeeds(context.Background(), contact) {
			t.Fatal("joinSeeds gave up with a live context")
		}
		if len(calls) != 4 || lookups != 4 || !m.Joined() || m.joinAttempts.Load() != 4 {
			t.Fatalf("%d attempts, %d lookups, joinAttempts %d, joined %v; want 4, 4, 4 and joined",
				len(calls), lookups, m.joinAttempts.Load(), m.Joined())
		}
		checkSpacing(t, "attempt", calls)
		pods := []string{"10.0.1.1:7946", "10.0.1.2:7946"}
		for i, want := range [][]string{nil, nil, pods, pods} {
			if !slices.Equal(calls[i].targets, want) {
				t.Errorf("attempt %d targets %q, want %q", i+1, calls[i].targets, want)
			}
		}
	})
}

// TestJoinAloneAtOnce: seeds that resolve to this node only (nothing to
// try, nothing failed) start a new cluster on the first attempt, with no
// time passing.
func TestJoinAloneAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _ := retryNode(t, fakeDNS(map[string][]string{"limiter.test": {"127.0.0.9"}}))
		m.members["a"] = &member{gossip: "127.0.0.9:7946"} // as NotifyJoin records this node
		start := time.Now()
		attempts := 0
		contact := func(_ context.Context, targets []string) (ok, tried int, err error) {
			attempts++
			for _, target := range targets {
				if !m.isSelf(target) { // as contact does
					tried++
					err = errors.New("connection refused")
				}
			}
			return 0, tried, err
		}
		if !m.joinSeeds(context.Background(), contact) || !m.Joined() {
			t.Fatal("a node whose seeds are itself did not start a cluster")
		}
		if attempts != 1 || time.Since(start) != 0 {
			t.Fatalf("%d attempts over %v, want 1 at once", attempts, time.Since(start))
		}
	})
}

// TestJoinStopsWithContext: while every attempt fails, cancelling the
// context ends the loop at once, unjoined, in the middle of its wait.
func TestJoinStopsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _ := retryNode(t, fakeDNS(map[string][]string{"limiter.test": {"10.0.1.1"}}))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(1400*time.Millisecond, cancel) // between the 2nd attempt (≤ 1.2 s) and the 3rd (≥ 1.6 s)
		start := time.Now()
		attempts := 0
		contact := func(_ context.Context, targets []string) (int, int, error) {
			attempts++
			return 0, len(targets), errors.New("connection refused")
		}
		if m.joinSeeds(ctx, contact) {
			t.Fatal("joinSeeds reported joined although every attempt failed")
		}
		if took := time.Since(start); took != 1400*time.Millisecond || attempts != 2 || m.Joined() {
			t.Fatalf("stopped after %v and %d attempts (joined %v), want at the cancel, 1.4 s, after 2 attempts", took, attempts, m.Joined())
		}
	})
}

// reclaimNode returns a retryNode that knows itself and three other
// members, and whose fake contact step records each round and, for the
// first claimRounds rounds, reports that another address claims the name
// (as memberlist's NotifyConflict does when our push meets the old entry).
func reclaimNode(t *testing.T, claimRounds int) (*Membership, *logBuf, *[]call, contactFunc) {
	t.Helper()
	m, buf := retryNode(t, fakeDNS(map[string][]string{"limiter.test": {"10.0.1.1"}}))
	for name, addr := range map[string]string{"a": "10.0.0.1:7946", "b": "10.0.0.2:7946", "c": "10.0.0.3:7946", "d": "10.0.0.4:7946"} {
		m.members[name] = &member{gossip: addr}
	}
	start := time.Now()
	var calls []call
	contact := func(_ context.Context, targets []string) (int, int, error) {
		calls = append(calls, call{time.Since(start), slices.Clone(targets)})
		if len(calls) <= claimRounds {
			self := &memberlist.Node{Name: "a"}
			(&hooks{m: m}).NotifyConflict(self, self)
		}
		return len(targets), len(targets), nil
	}
	return m, buf, &calls, contact
}

// TestReclaimNameWindow: once another address claims the name, reclaimName
// pushes at once and then every JoinRetry ±20 % until reclaimWindow has
// passed, each round to the seeds and two other members (never itself). A
// claim that stops early (the old entry was declared dead) is not a
// conflict; the pending claim signal is consumed.
func TestReclaimNameWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, buf, calls, contact := reclaimNode(t, 3)
		start := time.Now()
		m.reclaimName(context.Background(), contact)
		took := time.Since(start)

		if took < reclaimWindow || took > reclaimWindow+1200*time.Millisecond {
			t.Errorf("reclaimName took %v, want the %v window and at most one more JoinRetry", took, reclaimWindow)
		}
		// Rounds start before the window ends, 0.8-1.2 s apart: 17 to 25.
		if n := len(*calls); n < 17 || n > 25 {
			t.Errorf("%d rounds in the %v window, want 17-25", n, reclaimWindow)
		}
		if n := len(*calls); n > 0 && (*calls)[n-1].at >= reclaimWindow {
			t.Errorf("last round at %v, want before the window ends at %v", (*calls)[n-1].at, reclaimWindow)
		}
		checkSpacing(t, "round", *calls)
		for i, c := range *calls {
			ok := len(c.targets) == 3 && c.targets[0] == "10.0.1.1:7946" && c.targets[1] != c.targets[2]
			for _, target := range c.targets[1:] {
				ok = ok && slices.Contains([]string{"10.0.0.2:7946", "10.0.0.3:7946", "10.0.0.4:7946"}, target)
			}
			if !ok {
				t.Errorf("round %d targets %q, want the seed 10.0.1.1:7946 then two of the other members", i+1, c.targets)
			}
		}
		select {
		case <-m.nameClaimed:
			t.Error("a claim seen during the window is still pending after it")
		default:
		}
		if strings.Contains(buf.String(), "level=ERROR") {
			t.Errorf("claims that stopped after 3 rounds logged an error:\n%s", buf)
		}
	})
}

// TestReclaimNameConflict: a claim still made in the last round comes from
// another live node with this name, logged as an error once the window
// ends.
func TestReclaimNameConflict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, buf, _, contact := reclaimNode(t, 1000)
		m.reclaimName(context.Background(), contact)
		if n := strings.Count(buf.String(), `level=ERROR msg="another live node gossips under this node's name`); n != 1 {
			t.Errorf("a name still claimed at the end of the window logged %d errors, want 1:\n%s", n, buf)
		}
	})
}

// TestReclaimNameStopsWithContext: cancelling the context ends the window
// at once, in the middle of a wait.
func TestReclaimNameStopsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, calls, contact := reclaimNode(t, 1000)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(5*time.Second, cancel)
		start := time.Now()
		m.reclaimName(ctx, contact)
		if took := time.Since(start); took != 5*time.Second || len(*calls) < 5 || len(*calls) > 7 {
			t.Errorf("stopped after %v and %d rounds, want at the cancel, 5 s, after 5-7 rounds", took, len(*calls))
		}
	})
}
