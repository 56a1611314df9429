package window

import (
	"fmt"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Counts are what a window key has counted, as a take under its rule at
// now would see them: for operators inspecting a key (the node's
// inspection API), never for decisions.
type Counts struct {
	// WindowEnd is when the window the next take counts in ends (Unix ns);
	// 0 for SLIDING_LOG, whose window ends nowhere.
	WindowEnd int64
	// Previous is the hits of the window before (SLIDING_WINDOW; its
	// weighted share enters the estimate).
	Previous int64
	// Current is the hits of the current window (SLIDING_LOG: of the last
	// period).
	Current int64
}

// StateCounts decodes an exported state of a FIXED_WINDOW, SLIDING_WINDOW
// or SLIDING_LOG key (Export) and returns its counts under r at now. It
// is pure; a state of another algorithm than r's is an error.
func StateCounts(state []byte, now int64, r limit.Rule) (Counts, error) {
	now = clampTime(now)
	p := int64(r.Period)
	switch r.Algorithm {
	case limit.FixedWindow, limit.SlidingWindow:
		c, err := decodeCell(state, r.Algorithm)
		if err != nil {
			return Counts{}, err
		}
		g := slotExp(p)
		if r.Algorithm == limit.FixedWindow && r.Calendar != limit.NoCalendar {
			end, cur := c.calendarAt(now, r.Calendar, g)
			return Counts{WindowEnd: end, Current: cur}, nil
		}
		end, _, prev, cur := c.at(now, p, g)
		if r.Algorithm == limit.FixedWindow {
			prev = 0
		}
		return Counts{WindowEnd: end, Previous: prev, Current: cur}, nil
	case limit.SlidingLog:
		im, err := decodeLog(state)
		if err != nil {
			return Counts{}, err
		}
		var n int64
		for _, run := range im.runs {
			if run.t > now-p {
				n += run.n
			}
		}
		return Counts{Current: n}, nil
	}
	return Counts{}, fmt.Errorf("window: no counts for %v", r.Algorithm)
}
