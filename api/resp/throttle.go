package resp

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// callKind is a command that is a check.
type callKind uint8

const (
	callThrottle callKind = iota // CL.THROTTLE
	callCheck                    // SL.CHECK
	numCallKinds
	notCheck
)

var callNames = [numCallKinds]string{"CL.THROTTLE", "SL.CHECK"}

func kindOf(name []byte) callKind {
	for k, n := range callNames {
		if bytes.EqualFold(name, []byte(n)) {
			return callKind(k)
		}
	}
	return notCheck
}

// throttleName is the check name of CL.THROTTLE's keys: they live apart
// from SL.CHECK's, whose names are rules'.
const throttleName = "cl.throttle"

// redis-cell's errors, in its words.
const (
	cellUsage    = "Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"
	cellParse    = "Cell error: Couldn't parse as integer: "
	cellZeroRate = "Cell error: Zero rates are not supported"
	cellPrefix   = "Cell error: "
)

// parseCheck converts a check command, or returns the error to answer.
func parseCheck(kind callKind, args [][]byte) (limit.Check, string) {
	if kind == callThrottle {
		return parseThrottle(args)
	}
	return parseSLCheck(args)
}

// parseThrottle converts CL.THROTTLE key max_burst count period
// [quantity], checking what redis-cell checks in its order, then what
// shardlimiter bounds (negative values, arithmetic beyond int64).
func parseThrottle(args [][]byte) (limit.Check, string) {
	if len(args) != 5 && len(args) != 6 {
		return limit.Check{}, cellUsage
	}
	var n [4]int64
	n[3] = 1 // quantity
	for i, a := range args[2:] {
		v, err := strconv.ParseInt(string(a), 10, 64)
		if err != nil {
			return limit.Check{}, cellParse + string(a)
		}
		n[i] = v
	}
	burst, count, period, quantity := n[0], n[1], n[2], n[3]
	if count == 0 || period == 0 {
		return limit.Check{}, cellZeroRate
	}
	for i, name := range []string{"max_burst", "count per period", "period", "quantity"} {
		if n[i] < 0 {
			return limit.Check{}, cellPrefix + name + " must not be negative"
		}
	}
	if period > int64(limit.MaxCellPeriod/time.Second) {
		return limit.Check{}, fmt.Sprintf("%speriod must be at most %d seconds", cellPrefix, limit.MaxCellPeriod/time.Second)
	}
	c := limit.Check{Name: throttleName, Key: string(args[1]), Hits: quantity, Rule: limit.Rule{
		Algorithm: limit.Cell, Limit: count, Period: time.Duration(period) * time.Second, Burst: burst}}
	if err := c.Validate(); err != nil {
		if err == limit.ErrCellZeroRate {
			return limit.Check{}, cellZeroRate
		}
		return limit.Check{}, cellPrefix + err.Error()
	}
	return c, ""
}

const slUsage = "ERR usage: SL.CHECK <name> <key> [<limit> <duration_ms>] [HITS n] [ALGORITHM a] [BURST b] [WARMUP_MS ms] [MIN_INTERVAL_MS ms] [RESET] [COUNT_REJECTED]"

// parseSLCheck converts SL.CHECK name key [limit duration_ms] [options];
// without limit and duration the rules files' rule of that name applies.
// The node validates the rest, answering an item error.
func parseSLCheck(args [][]byte) (limit.Check, string) {
	if len(args) < 3 {
		return limit.Check{}, slUsage
	}
	c := limit.Check{Name: string(args[1]), Key: string(args[2]), Hits: 1}
	rest := args[3:]
	if len(rest) >= 2 && isInt(rest[0]) {
		l, _ := strconv.ParseInt(string(rest[0]), 10, 64)
		d, err := strconv.ParseInt(string(rest[1]), 10, 64)
		if err != nil || d < 0 || d > limit.MaxPeriod.Milliseconds() {
			return limit.Check{}, "ERR duration_ms must be an integer in [0, " + strconv.FormatInt(limit.MaxPeriod.Milliseconds(), 10) + "]"
		}
		c.Rule.Limit, c.Rule.Period = l, time.Duration(d)*time.Millisecond
		rest = rest[2:]
	}
	for len(rest) > 0 {
		n, msg := option(&c, rest)
		if msg != "" {
			return limit.Check{}, msg
		}
		rest = rest[n:]
	}
	return c, ""
}

// option applies the option at the head of rest and returns how many
// arguments it took, or the error to answer.
func option(c *limit.Check, rest [][]byte) (int, string) {
	name := strings.ToUpper(string(rest[0]))
	switch name {
	case "RESET":
		c.Rule.Behavior |= limit.Reset
		return 1, ""
	case "COUNT_REJECTED":
		c.Rule.Behavior |= limit.CountRejected
		return 1, ""
	}
	if len(rest) < 2 {
		return 0, slUsage
	}
	arg := string(rest[1])
	if name == "ALGORITHM" {
		for _, a := range limit.Algorithms() {
			if strings.EqualFold(arg, a.String()) {
				c.Rule.Algorithm = a
				return 2, ""
			}
		}
		return 0, "ERR unknown algorithm '" + arg + "'"
	}
	v, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || v < 0 || v > limit.MaxPeriod.Milliseconds() && name != "HITS" && name != "BURST" {
		return 0, "ERR " + name + " must be a non-negative integer in range, got '" + arg + "'"
	}
	switch name {
	case "HITS":
		c.Hits = v
	case "BURST":
		c.Rule.Burst = v
	case "WARMUP_MS":
		c.Rule.Warmup = time.Duration(v) * time.Millisecond
	case "MIN_INTERVAL_MS":
		c.Rule.MinInterval = time.Duration(v) * time.Millisecond
	default:
		return 0, "ERR unknown option '" + string(rest[0]) + "'"
	}
	return 2, ""
}

func isInt(b []byte) bool {
	_, err := strconv.ParseInt(string(b), 10, 64)
	return err == nil
}

// batch is the checks of a pipeline waiting to be decided, in order.
type batch struct {
	checks []limit.Check
	kinds  []callKind
	tally  server.Tally
}

func (b *batch) add(c limit.Check, k callKind) {
	b.checks, b.kinds = append(b.checks, c), append(b.kinds, k)
}

func (b *batch) reset() {
	clear(b.checks) // drop the keys
	b.checks, b.kinds = b.checks[:0], b.kinds[:0]
}

// reply writes each check's answer, in order: err fails them all.
func (b *batch) reply(c redcon.Conn, res []limit.Result, err error, m *server.Metrics) {
	b.tally = server.Tally{}
	for i := range b.checks {
		switch {
		case err == errShed:
			writeError(c, "ERR overloaded: the node's in-flight bound is full, retry later")
		case err != nil:
			writeError(c, "ERR "+err.Error())
		case res[i].Error != "":
			b.tally.Item(b.checks[i].Rule.Algorithm, b.checks[i].Hits, &res[i])
			writeError(c, "ERR "+res[i].Error)
		case b.kinds[i] == callThrottle:
			b.tally.Item(limit.Cell, b.checks[i].Hits, &res[i])
			r := throttleReply(&res[i].Decision, b.checks[i].Rule.Burst+1)
			writeInts(c, r[:]...)
		default:
			b.tally.Item(b.checks[i].Rule.Algorithm, b.checks[i].Hits, &res[i])
			r := checkReply(&res[i].Decision, b.checks[i].Rule.Limit)
			writeInts(c, r[:]...)
		}
	}
	m.Add(&b.tally)
}

// throttleReply is CL.THROTTLE's five integers from the owner's
// decision (limit.Cell: durations in whole seconds, reset_after in
// Delay): limited, limit, remaining, retry_after, reset_after.
func throttleReply(d *limit.Decision, limitN int64) [5]int64 {
	limited, retry := int64(0), int64(-1)
	if !d.Allowed {
		limited = 1
		if d.RetryAfter != limit.Never {
			retry = int64(d.RetryAfter / time.Second)
		}
	}
	return [5]int64{limited, limitN, d.Remaining, retry, int64(d.Delay / time.Second)}
}

// checkReply is SL.CHECK's six integers: over (0 or 1), limit,
// remaining, reset_time_ms (Unix), retry_after_ms (-1: never) and
// delay_ms.
func checkReply(d *limit.Decision, limitN int64) [6]int64 {
	over, retry := int64(1), int64(-1)
	if d.Allowed {
		over = 0
	}
	if d.RetryAfter != limit.Never {
		retry = d.RetryAfter.Milliseconds()
	}
	return [6]int64{over, limitN, d.Remaining, d.ResetAt / int64(time.Millisecond), retry, d.Delay.Milliseconds()}
}

// writeInts writes an array of integers.
func writeInts(c redcon.Conn, v ...int64) {
	c.WriteArray(len(v))
	for _, x := range v {
		c.WriteInt64(x)
	}
}
