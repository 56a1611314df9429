package sim

import (
	"context"
	"errors"
	"time"
)

// The scenarios that change membership.

// handoffQuiet is how long no handoff transfer must have returned for a
// handoff to count as finished.
const handoffQuiet = time.Second

// settle waits, after an agreement, until no handoff transfer has returned
// for handoffQuiet, counted from the agreement at the earliest (up to
// timeout), and returns what was moved since before.
func (c *Cluster) settle(start time.Time, before Moved, timeout time.Duration) Handoff {
	agreed := time.Now()
	deadline := agreed.Add(timeout)
	for time.Now().Before(deadline) {
		last := c.Peers.LastHandoff()
		if last.Before(agreed) {
			last = agreed
		}
		if time.Since(last) >= handoffQuiet {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, after := c.Peers.Moved()
	h := Handoff{Keys: after.Keys - before.Keys, Bytes: after.Bytes - before.Bytes}
	if last := c.Peers.LastHandoff(); last.After(start) {
		h.Took = last.Sub(start)
	}
	return h
}

// join starts one member and measures the agreement, the keys moved
// against the ideal 1/(N+1), and the handoff.
func join(_ context.Context, c *Cluster, p Params, keys []string, r *Report) error {
	before, err := c.ring(c.Running()[0])
	if err != nil {
		return err
	}
	_, moved0 := c.Peers.Moved()
	start := time.Now()
	if _, err := c.Start(); err != nil {
		return err
	}
	if r.Join, err = c.WaitAgree(start, p.Timeout); err != nil {
		return err
	}
	r.JoinHandoff = c.settle(start, moved0, p.Timeout)
	after, err := c.ring(c.Running()[0])
	if err != nil {
		return err
	}
	r.JoinMovedIdeal = MovedFraction(before, after, keys) * float64(after.Len())
	return nil
}

// leave stops a member chosen at random gracefully.
func leave(_ context.Context, c *Cluster, p Params, _ []string, r *Report) error {
	_, moved0 := c.Peers.Moved()
	m := c.Pick()
	start := time.Now()
	// A leave that fails (at 1,000 members memberlist had not finished
	// sending the leave within its 3 s) is reported, and how long the
	// others took to agree all the same is measured.
	lerr := c.Leave(m)
	var err error
	if r.Leave, err = c.WaitAgree(start, p.Timeout); err != nil {
		return errors.Join(lerr, err)
	}
	r.LeaveHandoff = c.settle(start, moved0, p.Timeout)
	return lerr
}

// crash stops a member chosen at random abruptly: the agreement is how
// long gossip takes to declare it dead and every ring to drop it.
func crash(_ context.Context, c *Cluster, p Params, _ []string, r *Report) error {
	m := c.Pick()
	start := time.Now()
	c.Crash(m)
	var err error
	r.Crash, err = c.WaitAgree(start, p.Timeout)
	return err
}

// partition cuts the members into halves, waits until each half agrees
// on itself, heals, and waits for one ring of all.
func partition(_ context.Context, c *Cluster, p Params, _ []string, r *Report) error {
	start := time.Now()
	a, b := c.Partition()
	da, err := c.WaitAgreeOn(a, start, p.Timeout)
	if err != nil {
		c.Heal(a, b)
		return err
	}
	db, err := c.WaitAgreeOn(b, start, p.Timeout)
	if err != nil {
		c.Heal(a, b)
		return err
	}
	r.Split = max(da, db)
	start = time.Now()
	c.Heal(a, b)
	r.Heal, err = c.WaitAgree(start, p.Timeout)
	return err
}

// restart leaves and restarts every member in turn, each once the ring
// agrees again.
func restart(_ context.Context, c *Cluster, p Params, _ []string, r *Report) error {
	start := time.Now()
	for _, m := range c.Running() {
		t0 := time.Now()
		if _, err := c.Restart(m); err != nil {
			return err
		}
		d, err := c.WaitAgree(t0, p.Timeout)
		if err != nil {
			return err
		}
		r.RestartWorst = max(r.RestartWorst, d)
	}
	r.Restart = time.Since(start)
	return nil
}
