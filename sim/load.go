package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Rule is the rule of every simulated check: a token bucket with a burst
// of a million hits that refills 300 a day (one in 288 s), so that no key
// runs out during a run and none refills (a full key is idle and swept):
// every hit stays counted in its key's state for minutes.
var Rule = limit.Rule{Algorithm: limit.TokenBucket, Limit: 300, Period: 24 * time.Hour, Burst: 1_000_000}

// Keys returns k keys named by the seeded source r: the same seed, the
// same keys.
func Keys(r *rand.Rand, k int) []string {
	out := make([]string, k)
	for i := range out {
		out[i] = fmt.Sprintf("user:%016x", r.Uint64())
	}
	return out
}

// checks makes a batch of one hit on each key.
func checks(keys []string) []limit.Check {
	out := make([]limit.Check, len(keys))
	for i, k := range keys {
		out[i] = limit.Check{Name: "sim", Key: k, Hits: 1, Rule: Rule}
	}
	return out
}

// Fill sends one hit on each key, in batches of batch keys into members
// the cluster picks, and fails on the first error or refused check.
func (c *Cluster) Fill(ctx context.Context, keys []string, batch int) error {
	for i := 0; i < len(keys); i += batch {
		part := keys[i:min(i+batch, len(keys))]
		res, err := c.Check(ctx, c.Pick(), checks(part))
		if err != nil {
			return err
		}
		for j, r := range res {
			if r.Error != "" || !r.Allowed {
				return fmt.Errorf("sim: check of %q: allowed %v, error %q", part[j], r.Allowed, r.Error)
			}
		}
	}
	return nil
}

// Spent returns the hits counted on key by its owner, as member m routes
// it (a peek: nothing is spent).
func (c *Cluster) Spent(ctx context.Context, m *Member, key string) (int64, error) {
	in, err := m.Node.Inspect(ctx, limit.Check{Name: "sim", Key: key, Rule: Rule})
	if err != nil {
		return 0, err
	}
	if in.Owner.Error != "" {
		return 0, fmt.Errorf("sim: inspect %q: %s", key, in.Owner.Error)
	}
	return Rule.Burst - in.Owner.Remaining, nil
}

// ForwardCost sends batches of size random keys (from keys) into random
// members, one batch at a time, and returns the wall time per check of
// the median batch (a batch preempted by the rest of the process, or by
// the machine's other work, counts once), the process's CPU per check over
// all batches, and the Forward messages per batch.
//
// Both times read the machine's clocks (wallNow, cpuSeconds), not the time
// package's: inside a synctest bubble (Params.Virtual) the virtual clock
// stands still while the batches run, since a MemNet forward waits on no
// timer, and so do the other members' gossip timers: the CPU then is the
// forwards' alone. Outside a bubble it also holds whatever the members'
// gossip did meanwhile.
func (c *Cluster) ForwardCost(ctx context.Context, keys []string, batches, size int) (perCheck, cpuPerCheck time.Duration, msgsPerBatch float64, err error) {
	calls0, _ := c.Peers.Forwards()
	batch := make([]string, size)
	took := make([]time.Duration, 0, batches)
	cpu0 := cpuSeconds()
	for range batches {
		for i := range batch {
			batch[i] = keys[c.Rand.IntN(len(keys))]
		}
		cs, m := checks(batch), c.Pick()
		start := wallNow()
		if _, err := c.Check(ctx, m, cs); err != nil {
			return 0, 0, 0, err
		}
		took = append(took, wallNow().Sub(start))
	}
	cpu := cpuSeconds() - cpu0
	calls1, _ := c.Peers.Forwards()
	slices.Sort(took)
	cpuPerCheck = time.Duration(cpu * 1e9 / float64(batches*size))
	return took[len(took)/2] / time.Duration(size), cpuPerCheck, float64(calls1-calls0) / float64(batches), nil
}
