package peer

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
)

// crashOwner runs the crash of an owner in a cluster of three: checks of
// its keys through node 0, the owner (node 1) killed, checks through node
// 0 before the ring knows, then the ring drops it and the handoffs
// settle. It returns the survivors and their log. With replication on,
// the test waits for the replicas first.
func crashOwner(t *testing.T, replication time.Duration) (survivors []*testNode, log string) {
	t.Helper()
	logs := &lockedBuffer{}
	clk := newClock()
	c := newTestCluster(t, 3, Config{Now: clk.Now, ReplicationInterval: replication, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	r := rule(limit.FixedWindow, 10, time.Hour)
	nodes := c.running()
	var keys []string
	for _, k := range testKeys(300) {
		if nodes[0].node.view.Load().snap.Owner(k).Name == nodes[1].name {
			keys = append(keys, k)
		}
	}
	c.spend(nodes[0], keys, r, 3)
	if replication > 0 {
		w := nodes[0].node.view.Load().without(nodes[1].name)
		byName := map[string]*testNode{nodes[0].name: nodes[0], nodes[2].name: nodes[2]}
		now := clk.Now().UnixNano()
		poll.Until(t, 20*time.Second, func() bool {
			for _, k := range keys {
				var kb keyBuf
				tk := kb.key("quota", k)
				want, _ := nodes[1].node.limiters[limit.FixedWindow].Export(tk, now)
				got, _ := byName[w.Owner(k).Name].node.limiters[limit.FixedWindow].Export(tk, now)
				if string(got) != string(want) {
					return false
				}
			}
			return true
		}, "replicas of %d keys arrive", len(keys))
	}
	c.crash(nodes[1])
	c.spend(nodes[0], keys, r, 1) // the ring still names the dead owner
	c.signal()
	c.waitConverged()
	c.waitSettled()
	return []*testNode{nodes[0], nodes[2]}, logs.String()
}

// TestCrashHealedByReplicaIsNoIncompleteHandoff: after an owner's crash,
// with replication on, the survivors take its partitions from the
// replicas they hold. That is counted as a replica fallback, logged at
// info, and not as an incomplete handoff (whose alert says keys may have
// admitted more than their limit); and the line logged when the forward
// to the dead owner fails names the stand-in that answered, not the fail
// policy (seen: both survivors warned "pull failed; deciding from the
// state held here" and counted shardlimiter_handoff_incomplete_total).
func TestCrashHealedByReplicaIsNoIncompleteHandoff(t *testing.T) {
	t.Parallel()
	survivors, log := crashOwner(t, 10*time.Millisecond)
	fallbacks := 0.0
	for _, tn := range survivors {
		if got := counterValue(tn.node.m.handoffIncomplete); got != 0 {
			t.Errorf("%s: shardlimiter_handoff_incomplete_total = %v after a crash healed by the replicas, want 0:\n%s", tn.name, got, log)
		}
		fallbacks += counterValue(tn.node.m.replicaFallbacks)
	}
	if fallbacks == 0 {
		t.Errorf("no replica fallback counted after the crash:\n%s", log)
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "handoff") {
			t.Errorf("a handoff healed by the replica was logged as a warning:\n%s", line)
		}
		if strings.Contains(line, "follow the fail policy") {
			t.Errorf("the stand-in answered, but the log says the fail policy decides:\n%s", line)
		}
	}
	if !strings.Contains(log, "deciding from its replica held here") {
		t.Errorf("no line says the partitions are decided from the replica:\n%s", log)
	}
	if !strings.Contains(log, "go to its stand-in") {
		t.Errorf("no line says the dead owner's checks go to its stand-in:\n%s", log)
	}
}

// TestCrashWithoutReplicationIsIncomplete: without replication there is
// no replica to fall back to, and the same crash is a handoff that lost
// state: counted as incomplete and warned about, never as a fallback.
func TestCrashWithoutReplicationIsIncomplete(t *testing.T) {
	t.Parallel()
	survivors, log := crashOwner(t, 0)
	incomplete := 0.0
	for _, tn := range survivors {
		incomplete += counterValue(tn.node.m.handoffIncomplete)
		if got := counterValue(tn.node.m.replicaFallbacks); got != 0 {
			t.Errorf("%s: %v replica fallbacks counted with replication off", tn.name, got)
		}
	}
	if incomplete == 0 {
		t.Errorf("a crash without replication counted no incomplete handoff:\n%s", log)
	}
	if !strings.Contains(log, `level=WARN msg="handoff: pull failed; deciding from the state held here"`) {
		t.Errorf("the lost state was not warned about:\n%s", log)
	}
	if !strings.Contains(log, "replication is off") {
		t.Errorf("the forward failure does not say there is no stand-in:\n%s", log)
	}
}
