package rulemetrics

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/limit"
)

// BenchmarkRuleMetricsRecord is the per-check cost of the per-rule
// counters on the check path: batches of 100 checks of one name, or of
// names that change at every check (the worst case: a lookup and the
// adds for each).
func BenchmarkRuleMetricsRecord(b *testing.B) {
	for _, mixed := range []bool{false, true} {
		b.Run(fmt.Sprintf("mixed=%v", mixed), func(b *testing.B) {
			rm := New(0)
			batch := make([]limit.Check, 100)
			for i := range batch {
				batch[i] = limit.Check{Name: "api_per_minute", Key: "k", Hits: 1, Rule: limit.Rule{Limit: 100}}
				if mixed {
					batch[i].Name = fmt.Sprint("rule-", i%7)
				}
			}
			d := limit.Decision{Allowed: true, Remaining: 50}
			b.RunParallel(func(pb *testing.PB) {
				t := rm.NewTally()
				for pb.Next() {
					for i := range batch {
						t.Record(&batch[i], &d)
					}
					t.Flush()
				}
			})
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/check")
		})
	}
}

// A tally counts each outcome once per check, folds the names past the
// bound into OtherRule, and adds the admitted hits.
func TestTallyOutcomesAndFolding(t *testing.T) {
	rm := New(1)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(rm.Collectors()...)
	tl := rm.NewTally()
	rule := limit.Rule{Limit: 10}
	for _, c := range []struct {
		name string
		hits int64
		d    limit.Decision
	}{
		{"a", 1, limit.Decision{Allowed: true, Remaining: 9}}, // under
		{"a", 1, limit.Decision{Allowed: true, Remaining: 1}}, // near: less than 20% left
		{"a", 1, limit.Decision{}},                            // over
		{"a", 0, limit.Decision{Allowed: true, Remaining: 9}}, // peek
		{"b", 2, limit.Decision{Allowed: true, Remaining: 8}}, // past the bound: other
	} {
		tl.Record(&limit.Check{Name: c.name, Hits: c.hits, Rule: rule}, &c.d)
	}
	tl.Flush()
	want := map[string]float64{
		`shardlimiter_rule_checks_total{outcome="under",rule="a"}`:     1,
		`shardlimiter_rule_checks_total{outcome="near",rule="a"}`:      1,
		`shardlimiter_rule_checks_total{outcome="over",rule="a"}`:      1,
		`shardlimiter_rule_checks_total{outcome="peek",rule="a"}`:      1,
		`shardlimiter_rule_checks_total{outcome="under",rule="other"}`: 1,
		`shardlimiter_rule_hits_total{rule="a"}`:                       2,
		`shardlimiter_rule_hits_total{rule="other"}`:                   2,
		`shardlimiter_rule_folded_checks_total`:                        1,
	}
	got := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			if len(m.GetLabel()) > 0 {
				name += "{"
				for i, l := range m.GetLabel() {
					if i > 0 {
						name += ","
					}
					name += fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
				}
				name += "}"
			}
			if m.GetCounter() != nil {
				got[name] = m.GetCounter().GetValue()
			}
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
