package bucket

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/statebytes"
	"github.com/shardlimiter/shardlimiter/internal/wide"
	"github.com/shardlimiter/shardlimiter/limit"
)

// Moving one key's state between nodes (handoff and replication).
//
// A key's state is its theoretical arrival time (TAT), the rule it was
// computed under (limit, capacity, period: what a rule change rescales
// from) and, under a warm-up, its stored permits out of maxp. The node that
// receives it has no rule, only these bytes, so they carry all of it:
//
//	byte     stateVersion (1)
//	byte     kind: 0 TOKEN_BUCKET, 1 LEAKY_BUCKET (limit.Algorithm's wire
//	         value), | kindWarm for a token bucket with a warm-up
//	uvarint  limit, hits per period
//	uvarint  capacity, hits (LEAKY_BUCKET: queue depth + 1)
//	uvarint  period, ns
//	uvarint  TAT, Unix ns
//	warm:    stored permits, maxp: float64 bits, 8 bytes little endian each
//
// Varints are minimal, so a state has exactly one encoding.
//
// The TAT is an instant, not a debt relative to the exporter's clock: an
// import is then idempotent (a replica that receives the same state twice,
// or late, counts it once), at the price of trusting the nodes' clocks to
// agree, which an NTP-synchronized cluster does to within milliseconds. A
// receiver whose clock is behind holds the key back a little longer; one
// that is ahead by Δ frees it Δ early, about Δ×rate hits.
//
// # Merge: the state that has consumed more wins
//
// When two states of one key meet (mergeImages), the result never admits
// more than either: a check at any later instant, under any rule, with
// nothing taken in between, is admitted from the merged state only if it
// is admitted from both, and a sequence of checks of one size admits no
// more hits from it than from either. (Greedy admission of mixed sizes is
// monotone for no algorithm: a fuller bucket may reject a large check that
// a less full one admits, and then admit small ones the other can no
// longer fit. Over any span the merged key still admits at most the
// rule's bound.)
//
//   - Same rule, no warm-up: the later TAT. GCRA admits n hits at t when
//     max(TAT, t) + n×T ≤ t + τ, so a later TAT admits a subset, and
//     stays later after the same take.
//   - Different rules (the rule changed on one node and not yet on the
//     other): the rule of the side with the larger fraction of its
//     capacity in use at now, and the later of the two TATs. The next
//     check rescales the state to its own rule keeping that fraction
//     (debt/τ for a token bucket, the queued hits debt/T for a leaky
//     bucket: see rescale), but only when it comes, and each side's debt
//     shrinks at 1 ns per ns until then: the side with the larger fraction
//     now may hold the smaller one later if its debt ends first. With the
//     later TAT on the larger fraction's rule, the merged fraction is the
//     larger of the two at every later instant. Ties keep the receiver's
//     rule.
//   - Warm-up: the TAT as above, and the colder stored permits: under one
//     rule, those of the side that is colder once both are brought to the
//     later TAT as if idle until then (idle time beyond a full bucket
//     cools a key); across rules, the larger fraction of maxp, and fully
//     cold against a key without warm-up (which starts fully cold when it
//     turns to one). Admission under a warm-up is the plain test, so the
//     first check after a merge is admitted only if both sides would admit
//     it. Further on the warm-up is monotone only in a weaker sense: a
//     colder key pays a larger surcharge, which pushes its TAT out, and
//     cooling starts at the TAT; and a rule change rescales the permits
//     before they cool at the new rule's pace. So a merged key holds
//     both sides back over a few checks under the rule both took under
//     (the property test's bound), not over any sequence. A fresh key is
//     fully cold, colder than any used one: a used key admits more than a
//     fresh one, merged or not.
//
// A state that is full (and fully cold) at now equals a fresh key's: it is
// neither exported nor imported.

// stateVersion is the first byte of an encoded state.
const stateVersion = 1

// kindWarm marks a token bucket with warm-up state in the kind byte.
const kindWarm = 0x80

// maxTAT bounds the TAT of a state: the latest now plus the largest debt
// a valid rule can build (τ, one period under COUNT_REJECTED, half a
// warm-up's surcharge), with room to spare. Takes, rescales and merges of
// any TAT up to it stay inside int64.
const maxTAT = maxNow + int64(limit.MaxCapacityTime) + 3*int64(limit.MaxPeriod)

var errState = errors.New("bucket: malformed key state")

// keyImage is one key's state as it moves between nodes: plain values,
// independent of the table's packing. The zero keyImage is a key with no
// state (no rule yet).
type keyImage struct {
	shaping bool // LEAKY_BUCKET
	warm    bool // computed under a warm-up; stored and maxp are set
	limit   int64
	cap     int64 // capacity, hits
	period  int64 // ns
	tat     int64 // Unix ns
	stored  float64
	maxp    float64
}

// rate returns the rule the image was computed under.
func (s keyImage) rate() rate {
	return rate{limit: s.limit, period: s.period, capacity: s.cap, shaping: s.shaping}
}

// sameRule reports whether a and b were computed under the same rule (up to
// the warm-up length, which maxp measures).
func (s keyImage) sameRule(o keyImage) bool {
	return s.warm == o.warm && s.limit == o.limit && s.cap == o.cap && s.period == o.period
}

// stable returns the ns per hit of the image's stable rate.
func (s keyImage) stable() float64 { return float64(s.period) / float64(s.limit) }

// coolTo returns the image's stored permits at t ≥ its TAT if it stays idle
// until then (warmRate.resync).
func (s keyImage) coolTo(t int64) float64 {
	if t <= s.tat {
		return s.stored
	}
	return min(s.maxp, s.stored+float64(t-s.tat)/s.stable())
}

// freshAt reports whether the image equals a fresh key's state at now: a
// full bucket and, under a warm-up, fully cold.
func (s keyImage) freshAt(now int64) bool {
	return s.limit == 0 || s.tat <= now && (!s.warm || s.coolTo(now) >= s.maxp)
}

// maxImageSize bounds the length of an encoded state.
const maxImageSize = 2 + 4*binary.MaxVarintLen64 + 16

// encodeImage encodes a key's state (see the format above).
func encodeImage(s keyImage) []byte { return appendImage(make([]byte, 0, maxImageSize), s) }

// appendImage appends a key's encoded state to b.
func appendImage(b []byte, s keyImage) []byte {
	kind := byte(limit.TokenBucket)
	switch {
	case s.shaping:
		kind = byte(limit.LeakyBucket)
	case s.warm:
		kind |= kindWarm
	}
	b = append(b, stateVersion, kind)
	b = binary.AppendUvarint(b, uint64(s.limit))
	b = binary.AppendUvarint(b, uint64(s.cap))
	b = binary.AppendUvarint(b, uint64(s.period))
	b = binary.AppendUvarint(b, uint64(s.tat))
	if s.warm {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.stored))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.maxp))
	}
	return b
}

// decodeImage decodes a key's state and checks that the table can take
// from it: a rule that a valid limit.Rule produces, a TAT up to maxTAT,
// and warm-up permits that a warm-up of 1 ns to limit.MaxPeriod produces.
// shaping selects the algorithm the bytes must be for.
func decodeImage(b []byte, shaping bool) (keyImage, error) {
	r := statebytes.NewReader(b, errState)
	version, kind := r.Byte(), r.Byte()
	s := keyImage{shaping: shaping}
	want := byte(limit.TokenBucket)
	if shaping {
		want = byte(limit.LeakyBucket)
	}
	if r.Err() != nil || version != stateVersion || kind&^kindWarm != want || shaping && kind&kindWarm != 0 {
		return keyImage{}, fmt.Errorf("%w: header %#x %#x", errState, version, kind)
	}
	s.warm = kind&kindWarm != 0
	lim, capacity, period, tat := r.Uvarint(), r.Uvarint(), r.Uvarint(), r.Uvarint()
	if s.warm {
		s.stored, s.maxp = r.Float64(), r.Float64()
	}
	if err := r.End(); err != nil {
		return keyImage{}, err
	}
	if lim > limit.MaxLimit || capacity < 1 || capacity > limit.MaxLimit+1 || period > uint64(limit.MaxPeriod) || tat > uint64(maxTAT) {
		return keyImage{}, fmt.Errorf("%w: limit %d, capacity %d, period %d, TAT %d", errState, lim, capacity, period, tat)
	}
	s.limit, s.cap, s.period, s.tat = int64(lim), int64(capacity), int64(period), int64(tat)
	if err := s.ruleOf().Validate(); err != nil {
		return keyImage{}, fmt.Errorf("%w: %w", errState, err)
	}
	if s.warm {
		// maxp = warm-up / stable; a warm-up is 1 ns to MaxPeriod. The
		// bounds keep the surcharge finite (warmRate.extra divides by maxp).
		w := s.maxp * s.stable()
		if !(w >= 0.5 && w <= float64(limit.MaxPeriod)*(1+1e-9) && s.stored >= 0 && s.stored <= s.maxp) || math.Signbit(s.stored) {
			return keyImage{}, fmt.Errorf("%w: warm-up permits %v of %v", errState, s.stored, s.maxp)
		}
	}
	return s, nil
}

// ruleOf returns a rule that computes under the image's rate.
func (s keyImage) ruleOf() limit.Rule {
	if s.shaping {
		return limit.Rule{Algorithm: limit.LeakyBucket, Limit: s.limit, Period: time.Duration(s.period), Burst: s.cap - 1}
	}
	return limit.Rule{Algorithm: limit.TokenBucket, Limit: s.limit, Period: time.Duration(s.period), Burst: s.cap}
}

// mergeImages returns the state of a key that has consumed more of a and b
// at now (see "Merge" above). It returns a itself when a has consumed at
// least as much as b, so that a merge that changes nothing is seen as such.
func mergeImages(a, b keyImage, now int64) keyImage {
	switch {
	case b.freshAt(now):
		return a
	case a.limit == 0:
		return b
	case a.warm && a.sameRule(b):
		return mergeWarm(a, b, now)
	}
	m, o := a, b
	if usedMore(b, a, now) {
		m, o = b, a
	}
	t := max(m.tat, o.tat, now) // the later TAT
	if !m.warm {
		if t > max(m.tat, now) {
			m.tat = t
		}
		return m
	}
	// At least as cold as either side at t, as a fraction of maxp (a
	// plain key that turns to warm-up starts fully cold), and cooled as
	// if idle until t.
	s := m.coolTo(t)
	if o.warm {
		s = max(s, min(o.coolTo(t)/o.maxp*m.maxp, m.maxp))
	} else {
		s = m.maxp
	}
	if t <= max(m.tat, now) && s <= m.coolTo(t) {
		return m
	}
	m.tat, m.stored = t, s
	return m
}

// mergeWarm merges two warm-up states of one rule.
func mergeWarm(a, b keyImage, now int64) keyImage {
	if b.maxp != a.maxp {
		// Another warm-up length: b's coldness on a's scale, as a rule
		// change would keep it (adoptWarm).
		b.stored, b.maxp = min(b.stored/b.maxp*a.maxp, a.maxp), a.maxp
	}
	// Bring both to the later TAT t as if idle until then; one dominates
	// when it is at least as late and at least as cold there.
	t := max(a.tat, b.tat, now)
	sa, sb := a.coolTo(t), b.coolTo(t)
	switch ta, tb := max(a.tat, now), max(b.tat, now); {
	case ta >= tb && sa >= sb:
		return a
	case tb >= ta && sb >= sa:
		return b
	}
	m := a
	m.tat, m.stored = t, max(sa, sb)
	return m
}

// usedMore reports whether x has strictly more of its capacity in use at
// now than y: debt/τ for a token bucket, the hits in the queue (debt/T)
// for a leaky bucket, compared exactly.
func usedMore(x, y keyImage, now int64) bool {
	dx, dy := max(x.tat-now, 0), max(y.tat-now, 0)
	px, py := x.rate(), y.rate()
	sx, sy := px.tau(), py.tau()
	if x.shaping {
		sx, sy = px.interval(), py.interval()
	}
	// dx/sx > dy/sy  ⇔  dx×sy > dy×sx
	return !wide.MulLE(dx, sy, dy, sx)
}
