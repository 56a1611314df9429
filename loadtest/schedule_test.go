package main

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// slowServer is a call that takes service time to answer, or fails when
// ctx ends first, as an RPC would.
func slowServer(service time.Duration) call {
	return func(ctx context.Context) outcome {
		select {
		case <-time.After(service):
			return outcome{checks: 1, admitted: 1}
		case <-ctx.Done():
			return outcome{rpcErr: rpcErrorKind(ctx.Err())}
		}
	}
}

// runWorker drives one worker on a fake clock and returns what it
// recorded. The schedule is built at the bubble's start time.
func runWorker(t *testing.T, drainAfter time.Duration, mk func(start time.Time) schedule, do call) (*Histogram, tally, schedule) {
	t.Helper()
	h := newHistogram()
	var tl tally
	var s schedule
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s = mk(start)
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(drainAfter))
		defer cancel()
		rec := newShard()
		drive(ctx, s, do, rec)
		rec.drainInto(h, newHistogram(), &tl)
	})
	return h, tl, s
}

// One worker, a call due every 5 ms, a server that takes 10 ms. Call n is
// due at 5n ms but the worker is free only at 10n ms, so it answers at
// 10(n+1) ms: latency from the schedule is 10 + 5n ms (10, 15, …, 55),
// lag 5n ms. A closed loop would report 10 ms for every call.
func TestOpenLoopLatencyCountsFromTheSchedule(t *testing.T) {
	t.Parallel()
	h, tl, _ := runWorker(t, time.Second, func(start time.Time) schedule {
		return newOpenLoop(start, start.Add(50*time.Millisecond), 200) // 10 calls due
	}, slowServer(10*time.Millisecond))
	if tl.rpcs != 10 || h.Count() != 10 {
		t.Fatalf("rpcs, latencies = %d, %d; want 10 calls, all answered", tl.rpcs, h.Count())
	}
	if got, want := time.Duration(h.Max()), 55*time.Millisecond; got != want {
		t.Errorf("max latency = %v, want %v (call 9: due at 45 ms, answered at 100 ms)", got, want)
	}
	if got, want := time.Duration(h.Mean()), 32500*time.Microsecond; got != want {
		t.Errorf("mean latency = %v, want %v (10 + 5n ms over n = 0..9)", got, want)
	}
	if tl.maxLag != 45*time.Millisecond || tl.late != 9 || tl.lateWakeups != 0 {
		t.Errorf("max lag, late, late wake-ups = %v, %d, %d; want 45ms, 9 (every call but the first), 0 (all waited for the worker)",
			tl.maxLag, tl.late, tl.lateWakeups)
	}
}

// The same server in a closed loop: every latency is the service time,
// and the loop sends as many calls as fit in the duration.
func TestClosedLoopLatencyCountsFromTheSend(t *testing.T) {
	t.Parallel()
	h, tl, _ := runWorker(t, time.Second, func(start time.Time) schedule {
		return closedLoop{end: start.Add(50 * time.Millisecond)}
	}, slowServer(10*time.Millisecond))
	if tl.rpcs != 5 {
		t.Errorf("rpcs = %d, want 5 (sent at 0, 10, 20, 30, 40 ms)", tl.rpcs)
	}
	if h.Max() != int64(10*time.Millisecond) || h.Mean() != float64(10*time.Millisecond) {
		t.Errorf("max, mean latency = %v, %v; want 10ms each", time.Duration(h.Max()), time.Duration(h.Mean()))
	}
	if tl.late != 0 || tl.maxLag != 0 {
		t.Errorf("late, max lag = %d, %v; want none in a closed loop", tl.late, tl.maxLag)
	}
}

// A drain deadline at 65 ms: calls 0..5 are answered (the last at 60 ms),
// call 6, sent at 60 ms, is cut off and counted as abandoned, and calls
// 7..9 are never sent.
func TestOpenLoopDrainDeadlineCountsUnsentCalls(t *testing.T) {
	t.Parallel()
	_, tl, s := runWorker(t, 65*time.Millisecond, func(start time.Time) schedule {
		return newOpenLoop(start, start.Add(50*time.Millisecond), 200)
	}, slowServer(10*time.Millisecond))
	if tl.rpcs != 6 || tl.abandoned != 1 || tl.errorCount() != 0 {
		t.Fatalf("rpcs, abandoned, errors = %d, %d, %d; want 6, 1, 0", tl.rpcs, tl.abandoned, tl.errorCount())
	}
	col := &collector{tally: tl, total: newHistogram()}
	r := &result{}
	r.setOpenLoop(2000, s.(*openLoop).scheduled(), col)
	if ol := r.OpenLoop; ol.Scheduled != 10 || ol.Unsent != 3 || !ol.FellBehind {
		t.Errorf("open loop stats = %+v; want 10 scheduled, 3 unsent, fell behind", *ol)
	}
}

// A server faster than the schedule: every call leaves on time and the
// latency is the service time.
func TestOpenLoopOnScheduleHasNoLag(t *testing.T) {
	t.Parallel()
	h, tl, _ := runWorker(t, time.Second, func(start time.Time) schedule {
		return newOpenLoop(start, start.Add(100*time.Millisecond), 100) // every 10 ms
	}, slowServer(2*time.Millisecond))
	if tl.rpcs != 10 || tl.late != 0 || tl.maxLag != 0 {
		t.Errorf("rpcs, late, max lag = %d, %d, %v; want 10, 0, 0", tl.rpcs, tl.late, tl.maxLag)
	}
	if h.Max() != int64(2*time.Millisecond) {
		t.Errorf("max latency = %v, want 2ms", time.Duration(h.Max()))
	}
}

func TestOpenLoopDueTimesDoNotDrift(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	o := newOpenLoop(start, start.Add(time.Second), 3) // every 333.33… ms
	for n, want := range []time.Duration{0, 333333333, 666666667, time.Second} {
		if got := o.due(int64(n)).Sub(start); got != want {
			t.Errorf("due(%d) = start+%v, want start+%v", n, got, want)
		}
	}
	if got := o.scheduled(); got != 3 {
		t.Errorf("scheduled() = %d, want 3 (the 4th is due at the end)", got)
	}
}

// A call the server shed is counted as refused, with its latency apart:
// not an error, not an answered call.
func TestRefusedCallsAreCountedApart(t *testing.T) {
	t.Parallel()
	st, err := status.New(codes.ResourceExhausted, "overloaded").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	shed := st.Err()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		n := 0
		rec := newShard()
		drive(context.Background(), closedLoop{end: start.Add(10 * time.Millisecond)}, func(context.Context) outcome {
			n++
			if n%2 == 0 {
				time.Sleep(time.Millisecond) // the refusal: answered at once, in 1 ms
				return judgeCall(nil, shed)
			}
			time.Sleep(4 * time.Millisecond) // an answer
			return outcome{checks: 1, admitted: 1}
		}, rec)
		h, refusals, tl := newHistogram(), newHistogram(), tally{}
		rec.drainInto(h, refusals, &tl)
		if tl.rpcs != 4 || tl.refused != 2 || tl.checks != 2 || tl.errorCount() != 0 || h.Count() != 2 || refusals.Count() != 2 {
			t.Fatalf("tally %+v, %d answered latencies, %d refusal latencies; want 4 calls: 2 answered, 2 refused, no error", tl, h.Count(), refusals.Count())
		}
		if got := time.Duration(refusals.Max()); got != time.Millisecond {
			t.Errorf("refusal latency %v, want 1ms", got)
		}
	})
}

// TestDriveBacksOff: with a backoff (--backoff), a worker waits it out
// after a refusal before its next call, and the wait is not part of the
// refusal's latency.
func TestDriveBacksOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var calls []time.Duration
		rec := newShard()
		drive(context.Background(), closedLoop{end: start.Add(250 * time.Millisecond)}, func(context.Context) outcome {
			calls = append(calls, time.Since(start))
			time.Sleep(time.Millisecond)
			return outcome{refused: true, backoff: 100 * time.Millisecond}
		}, rec)
		want := []time.Duration{0, 101 * time.Millisecond, 202 * time.Millisecond}
		if !slices.Equal(calls, want) {
			t.Fatalf("calls at %v, want %v (each 1 ms, then 100 ms of backoff)", calls, want)
		}
		h, refusals, tl := newHistogram(), newHistogram(), tally{}
		rec.drainInto(h, refusals, &tl)
		if got := time.Duration(refusals.Max()); tl.refused != 3 || got != time.Millisecond {
			t.Errorf("%d refusals, latency %v; want 3 of 1ms", tl.refused, got)
		}
	})
}
