package resp

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A throttle step: at ms after t0, CL.THROTTLE with args, and the reply.
type throttleStep struct {
	name string
	ms   int64
	args []any
	want [5]int64
}

// cellTable is redis-cell's own unit table (max_burst 4, 1 per second,
// key "foo") in the rounded integers CL.THROTTLE replies.
var cellTable = []throttleStep{
	{"larger than the limit", 0, []any{"foo", 4, 1, 1, 6}, [5]int64{1, 5, 5, -1, 0}},
	{"first", 0, []any{"foo", 4, 1, 1}, [5]int64{0, 5, 4, -1, 1}},
	{"second", 0, []any{"foo", 4, 1, 1, 1}, [5]int64{0, 5, 3, -1, 2}},
	{"third", 0, []any{"foo", 4, 1, 1}, [5]int64{0, 5, 2, -1, 3}},
	{"fourth", 0, []any{"foo", 4, 1, 1}, [5]int64{0, 5, 1, -1, 4}},
	{"fifth", 0, []any{"foo", 4, 1, 1}, [5]int64{0, 5, 0, -1, 5}},
	{"sixth refused", 0, []any{"foo", 4, 1, 1}, [5]int64{1, 5, 0, 1, 5}},
	{"3s later", 3000, []any{"foo", 4, 1, 1}, [5]int64{0, 5, 2, -1, 3}},
	{"3.1s: reset 3.9s rounds up", 3100, []any{"foo", 4, 1, 1}, [5]int64{0, 5, 1, -1, 4}},
	{"4s", 4000, []any{"foo", 4, 1, 1}, [5]int64{0, 5, 1, -1, 4}},
	{"8s", 8000, []any{"foo", 4, 1, 1}, [5]int64{0, 5, 4, -1, 1}},
	{"9.5s", 9500, []any{"foo", 4, 1, 1}, [5]int64{0, 5, 4, -1, 1}},
	{"peek", 9500, []any{"foo", 4, 1, 1, 0}, [5]int64{0, 5, 4, -1, 1}},
	{"two at once", 9500, []any{"foo", 4, 1, 1, 2}, [5]int64{0, 5, 2, -1, 3}},
	{"five do not fit", 9500, []any{"foo", 4, 1, 1, 5}, [5]int64{1, 5, 2, 3, 3}},
}

// cellE2E is redis-cell's end-to-end test: max_burst 0, 1 per 2 s.
var cellE2E = []throttleStep{
	{"allowed", 0, []any{"user123", 0, 1, 2, 1}, [5]int64{0, 1, 0, -1, 2}},
	{"refused at once", 0, []any{"user123", 0, 1, 2, 1}, [5]int64{1, 1, 0, 2, 2}},
	{"after retry_after", 2000, []any{"user123", 0, 1, 2, 1}, [5]int64{0, 1, 0, -1, 2}},
}

// doer is a client or a pipeline.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

func throttle(ctx context.Context, c doer, args []any) *redis.Cmd {
	return c.Do(ctx, append([]any{"CL.THROTTLE"}, args...)...)
}

func ints(t *testing.T, cmd *redis.Cmd) [5]int64 {
	t.Helper()
	v, err := cmd.Int64Slice()
	if err != nil || len(v) != 5 {
		t.Fatalf("%v = %v, %v; want 5 integers", cmd.Args(), v, err)
	}
	return [5]int64(v)
}

func TestThrottleRedisCellTablesGoRedis(t *testing.T) {
	t.Parallel()
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			t.Parallel()
			addr, n := serve(t, Config{})
			c := client(t, addr, func(o *redis.Options) { o.Protocol = proto })
			ctx := context.Background()
			for _, tab := range [][]throttleStep{cellTable, cellE2E} {
				for _, s := range tab {
					n.at(s.ms)
					if got := ints(t, throttle(ctx, c, s.args)); got != s.want {
						t.Fatalf("%s: CL.THROTTLE %v at t0%+dms = %v, want %v", s.name, s.args, s.ms, got, s.want)
					}
				}
			}
		})
	}
}

// TestThrottlePipelined sends each run of the table that shares an
// instant as one pipeline: the replies come back in order, and the run is
// decided as one batch of the node.
func TestThrottlePipelined(t *testing.T) {
	t.Parallel()
	addr, n := serve(t, Config{})
	c := client(t, addr, nil)
	ctx := context.Background()
	for i := 0; i < len(cellTable); {
		j := i
		for j < len(cellTable) && cellTable[j].ms == cellTable[i].ms {
			j++
		}
		n.at(cellTable[i].ms)
		before := n.calls.Load()
		p := c.Pipeline()
		cmds := make([]*redis.Cmd, 0, j-i)
		for _, s := range cellTable[i:j] {
			cmds = append(cmds, throttle(ctx, p, s.args))
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatalf("pipeline at t0%+dms: %v", cellTable[i].ms, err)
		}
		for k, s := range cellTable[i:j] {
			if got := ints(t, cmds[k]); got != s.want {
				t.Fatalf("%s (pipelined): %v, want %v", s.name, got, s.want)
			}
		}
		if calls := n.calls.Load() - before; j-i > 1 && calls >= int64(j-i) {
			t.Errorf("a pipeline of %d checks took %d calls of the node, want them batched", j-i, calls)
		}
		i = j
	}
}

// TestThrottleErrors: redis-cell's errors in its words, then shardlimiter's
// refusals of what redis-cell would compute with overflowing or negative
// values; each answers one command and the connection goes on.
func TestThrottleErrors(t *testing.T) {
	t.Parallel()
	addr, _ := serve(t, Config{})
	c := client(t, addr, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"k", 1, 1}, "Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"},
		{[]any{"k", 1, 1, 1, 1, 1}, "Cell error: Usage: cl.throttle"},
		{[]any{"k", "x", 1, 1}, "Cell error: Couldn't parse as integer: x"},
		{[]any{"k", 1, 1, "1.5"}, "Cell error: Couldn't parse as integer: 1.5"},
		{[]any{"k", 1, 1, 1, "99999999999999999999"}, "Cell error: Couldn't parse as integer: 99999999999999999999"},
		{[]any{"k", 1, 0, 1}, "Cell error: Zero rates are not supported"},
		{[]any{"k", 1, 1, 0}, "Cell error: Zero rates are not supported"},
		{[]any{"k", 1, 2_000_000_000, 1}, "Cell error: Zero rates are not supported"}, // under 1 ns per action
		{[]any{"k", -1, 1, 1}, "Cell error: max_burst must not be negative"},
		{[]any{"k", 1, -1, 1}, "Cell error: count per period must not be negative"},
		{[]any{"k", 1, 1, -1}, "Cell error: period must not be negative"},
		{[]any{"k", 1, 1, 1, -1}, "Cell error: quantity must not be negative"},
		{[]any{"k", 1 << 62, 1, 1}, "Cell error: max_burst"},
		{[]any{"k", 1, 1, 1, 1 << 62}, "Cell error: quantity"},
	} {
		err := throttle(ctx, c, tc.args).Err()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("CL.THROTTLE %v = %v, want an error starting %q", tc.args, err, tc.want)
		}
	}
	if got := ints(t, throttle(ctx, c, []any{"k", 1, 1, 1})); got != [5]int64{0, 2, 1, -1, 1} {
		t.Errorf("after the errors: %v, want the connection still answering", got)
	}
}

func TestSLCheck(t *testing.T) {
	t.Parallel()
	addr, _ := serve(t, Config{})
	c := client(t, addr, nil)
	ctx := context.Background()
	v, err := c.Do(ctx, "SL.CHECK", "api", "acct:1", 10, 1000, "HITS", 3, "ALGORITHM", "sliding_window").Int64Slice()
	if err != nil || len(v) != 6 || v[0] != 0 || v[1] != 10 || v[2] != 7 || v[4] != 0 {
		t.Fatalf("SL.CHECK = %v, %v; want [0 10 7 reset 0 0]", v, err)
	}
	for _, args := range [][]any{{"SL.CHECK", "a"}, {"SL.CHECK", "a", "k", "ALGORITHM", "nope"}, {"SL.CHECK", "a", "k", "HITS"}, {"SL.CHECK", "a", "k", "FOO", 1}} {
		if err := c.Do(ctx, args...).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR ") {
			t.Errorf("%v = %v, want an ERR", args, err)
		}
	}
}
