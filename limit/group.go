package limit

import "fmt"

// MaxGroup bounds the checks of one group: the owner decides a group under
// one lock, and the bound keeps that lock short.
const MaxGroup = 16

// A group is a run of checks of one batch, each but the last Chained, all
// on one Key (one owner), that is decided all or nothing: its hits are
// admitted, and counted, under every check's rule or under none. It is how
// one descriptor with several limits (10 per second and 1,000 per hour) is
// checked: a rejected request must not use up the limits that would have
// admitted it. Routing keeps a group together, since its checks share a key.

// GroupEnd returns the end (exclusive) of the group that starts at
// checks[i]: i+1 for a check that is not Chained. A chain that runs off the
// end of the batch ends there (and fails ValidateGroup).
func GroupEnd(checks []Check, i int) int {
	j := i
	for j < len(checks)-1 && checks[j].Chained {
		j++
	}
	return j + 1
}

// ValidateGroup reports the first problem with a group, or nil: each check
// must be valid, they must share a Key, the last must not be Chained and
// there must be at most MaxGroup of them.
func ValidateGroup(g []Check) error {
	if len(g) > MaxGroup {
		return fmt.Errorf("group of %d checks, max %d", len(g), MaxGroup)
	}
	for i := range g {
		if err := g[i].Validate(); err != nil {
			if len(g) > 1 {
				return fmt.Errorf("check %d of its group: %w", i+1, err)
			}
			return err
		}
		if g[i].Key != g[0].Key {
			return fmt.Errorf("group mixes unique_key %q and %q", g[0].Key, g[i].Key)
		}
	}
	if g[len(g)-1].Chained {
		return fmt.Errorf("chained to no next check")
	}
	return nil
}
