package limit

import (
	"errors"
	"fmt"
	"time"
)

// The Cell algorithm answers redis-cell's CL.THROTTLE (package cell
// implements it) with that module's arithmetic, which is not
// TOKEN_BUCKET's: docs/REDIS.md has the differences. A Cell rule is the
// command's quota as it was given:
//
//   - Limit is "count per period" and Period is "period", whole seconds;
//   - Burst is max_burst itself, 0 included (the bucket holds Burst+1);
//   - hits is the quantity, 0 a peek.
//
// Its number is internal, as the gubernator algorithms' are: the Redis
// protocol's package builds Cell checks, nodes forward them to each
// other, and shardlimiter's own API refuses them.

// MaxCellTime bounds the times of a Cell check, its bucket's size in time
// (interval × (Burst+1)) and the cost of its hits (interval × hits), so
// that a theoretical arrival time plus both stays within int64 ns
// (about 36 years each).
const MaxCellTime = 1 << 60

// MaxCellPeriod bounds a Cell rule's period.
const MaxCellPeriod = time.Duration(MaxCellTime) / time.Second * time.Second

// ErrCellZeroRate refuses a rule whose emission interval is 0 ns, as
// redis-cell does ("Zero rates are not supported", which package api/resp
// replies).
var ErrCellZeroRate = errors.New("zero rates are not supported")

// CellInterval returns redis-cell's emission interval of count actions
// per period: the quotient in float64, truncated to whole nanoseconds, as
// that module computes it; 0 when count or period is 0 (a zero rate).
// period must be within MaxCellPeriod and count ≥ 0.
func CellInterval(count int64, period time.Duration) int64 {
	if count == 0 || period == 0 {
		return 0
	}
	return int64(float64(period) / float64(count))
}

// CellTime returns interval × n, or MaxCellTime+1 when that is beyond
// MaxCellTime (interval ≥ 0, n ≥ 0).
func CellTime(interval, n int64) int64 {
	if n != 0 && interval > MaxCellTime/n {
		return MaxCellTime + 1
	}
	return interval * n
}

func (r Rule) validateCell() error {
	switch {
	case r.Limit < 0:
		return fmt.Errorf("count must be >= 0, got %d", r.Limit)
	case r.Burst < 0:
		return fmt.Errorf("max_burst must be >= 0, got %d", r.Burst)
	case r.Period < 0 || r.Period > MaxCellPeriod:
		return fmt.Errorf("period must be in [0, %d] seconds, got %v", MaxCellPeriod/time.Second, r.Period)
	case r.Period%time.Second != 0:
		return fmt.Errorf("period must be whole seconds, got %v", r.Period)
	case r.Behavior != 0 || r.MinInterval != 0 || r.Warmup != 0 || r.Calendar != NoCalendar || r.CreatedAt != 0:
		return fmt.Errorf("no option applies to %v", r.Algorithm)
	}
	i := CellInterval(r.Limit, r.Period)
	if i <= 0 {
		return ErrCellZeroRate
	}
	if r.Burst >= MaxCellTime || CellTime(i, r.Burst+1) > MaxCellTime {
		return fmt.Errorf("max_burst %d at %d per %v takes longer than %v to refill", r.Burst, r.Limit, r.Period, time.Duration(MaxCellTime))
	}
	return nil
}

func (c Check) validateCellHits() error {
	if err := c.Rule.Validate(); err != nil {
		return err
	}
	if c.Hits < 0 {
		return fmt.Errorf("quantity must be >= 0, got %d", c.Hits)
	}
	if CellTime(CellInterval(c.Rule.Limit, c.Rule.Period), c.Hits) > MaxCellTime {
		return fmt.Errorf("quantity %d at %d per %v is longer than %v", c.Hits, c.Rule.Limit, c.Rule.Period, time.Duration(MaxCellTime))
	}
	return nil
}
