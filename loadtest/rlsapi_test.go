package main

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

func TestRLSOverride(t *testing.T) {
	t.Parallel()
	o := rlsOverride(limit.Rule{Limit: 100, Period: time.Minute})
	if o.RequestsPerUnit != 100 || o.Unit.String() != "SECOND" || o.GetUnitMultiplier().GetValue() != 60 {
		t.Errorf("rlsOverride(100/min) = %v, want 100 per 60 × SECOND", o)
	}
	if o := rlsOverride(limit.Rule{Limit: 5, Period: time.Second}); o.UnitMultiplier != nil {
		t.Errorf("rlsOverride(5/s) = %v, want no multiplier", o)
	}
	for _, r := range []limit.Rule{{Limit: 1, Period: 1500 * time.Millisecond}, {Limit: 1, Period: time.Millisecond}, {Limit: 1 << 33, Period: time.Second}} {
		if checkRLSRule(r) == "" {
			t.Errorf("checkRLSRule(%+v) = ok, want refused", r)
		}
	}
}
