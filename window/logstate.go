package window

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/shardlimiter/shardlimiter/internal/statebytes"
	"github.com/shardlimiter/shardlimiter/limit"
)

// Moving a SLIDING_LOG key's state between nodes.
//
// A log is its runs, one per action (an instant and the hits recorded at
// it), and idleAt, the instant from which it equals a fresh key (its last
// action plus the period, or the minimum interval if longer, of that
// action's rule). The runs go newest first:
//
//	byte     stateVersion (1)
//	byte     kind: 4 SLIDING_LOG (limit.Algorithm's wire value)
//	uvarint  hold: idleAt − newest timestamp, ns (1 to limit.MaxPeriod)
//	uvarint  newest timestamp, Unix ns
//	uvarint  runs (1 to limit.MaxLogEntries)
//	uvarint  hits at the newest timestamp
//	runs−1 times, older and older:
//	uvarint  gap to the run after it, ns (≥ 1)
//	uvarint  hits at that instant (≥ 1)
//
// At most limit.MaxLogLimit hits in all, so at most as many runs: a peer
// cannot make a node hold more per key than a valid rule could (16 bytes
// a run), and decode allocates in proportion to the bytes it was given.
// Runs are at instants, like windows (state.go), so merging a replica's
// copy of a log into the log it came from counts each hit once.
//
// # Merge
//
// mergeLogs takes the union of the two logs, an instant in both counting
// the larger of its two hit counts (a replica's runs are copies of the
// owner's, so they are not counted twice; logs that diverged add up), and
// keeps the newest n hits of it, n the larger of the two logs' hits (the
// oldest run kept may lose part of its hits); idleAt is the later one. A
// log equivalent to a fresh key at now counts nothing.
//
// It never admits more than either log: a take counts the hits of
// the last period before max(now, newest), a suffix of the log; the
// union's suffix holds at least each log's, and cutting the union to its
// newest n keeps min(n, union's count) ≥ each log's count. The last
// action, which MinInterval is measured from, is the later one. A bound
// of n hits per key keeps each side's bound, and runs ≤ hits.

// logRun is count hits recorded at instant t.
type logRun struct{ t, n int64 }

// logImage is a SLIDING_LOG key's state as it moves between nodes: its
// runs, oldest first, and idleAt. The zero logImage is a fresh key.
type logImage struct {
	idleAt int64
	runs   []logRun
}

// hits returns how many hits the image holds.
func (s logImage) hits() int64 {
	n := int64(0)
	for _, r := range s.runs {
		n += r.n
	}
	return n
}

// freshAt reports whether the image equals a fresh key at now.
func (s logImage) freshAt(now int64) bool { return len(s.runs) == 0 || s.idleAt <= now }

func (s logImage) equal(o logImage) bool { return s.idleAt == o.idleAt && slices.Equal(s.runs, o.runs) }

// imageOfLog returns s's state: a copy of its runs, one allocation. The
// entry's mutex must be held.
func imageOfLog(s *logState) logImage {
	if s.n == 0 {
		return logImage{}
	}
	im := logImage{idleAt: s.idleAt, runs: make([]logRun, s.n)}
	for i := range im.runs {
		r := s.at(i)
		im.runs[i] = logRun{r.t, int64(r.end - r.start)}
	}
	return im
}

// setLog makes s hold im, which must be valid (decodeLog's checks). The
// entry's mutex must be held.
func setLog(s *logState, im logImage) {
	s.clear()
	if len(im.runs) > 0 {
		s.load(im.runs)
		s.idleAt = im.idleAt
	}
}

// encodeLog encodes a log that holds at least one timestamp.
func encodeLog(s logImage) []byte {
	newest := s.runs[len(s.runs)-1]
	b := make([]byte, 0, 2+4*binary.MaxVarintLen64+3*len(s.runs))
	b = append(b, stateVersion, byte(limit.SlidingLog))
	b = binary.AppendUvarint(b, uint64(s.idleAt-newest.t))
	b = binary.AppendUvarint(b, uint64(newest.t))
	b = binary.AppendUvarint(b, uint64(len(s.runs)))
	b = binary.AppendUvarint(b, uint64(newest.n))
	for i := len(s.runs) - 2; i >= 0; i-- {
		b = binary.AppendUvarint(b, uint64(s.runs[i+1].t-s.runs[i].t))
		b = binary.AppendUvarint(b, uint64(s.runs[i].n))
	}
	return b
}

// decodeLog decodes a log and checks that a take can start from it:
// strictly older runs down to instant 0 at the earliest, the newest at
// most MaxTime, at most limit.MaxLogEntries runs and limit.MaxLogLimit
// hits, and idleAt after the newest by at most a valid period.
func decodeLog(b []byte) (logImage, error) {
	r := statebytes.NewReader(b, errState)
	if v, k := r.Byte(), r.Byte(); r.Err() != nil || v != stateVersion || k != byte(limit.SlidingLog) {
		return logImage{}, fmt.Errorf("%w: header %#x %#x for %v", errState, v, k, limit.SlidingLog)
	}
	hold, newest, runs, hits := r.Uvarint(), r.Uvarint(), r.Uvarint(), r.Uvarint()
	switch {
	case r.Err() != nil:
		return logImage{}, r.Err()
	case hold < 1 || hold > uint64(limit.MaxPeriod) || newest > MaxTime:
		return logImage{}, fmt.Errorf("%w: newest %d, held %d", errState, newest, hold)
	case runs < 1 || runs > limit.MaxLogEntries || runs > uint64(r.Len()/2+1):
		// Every older run takes 2 bytes at least: a short message cannot
		// make decode allocate much.
		return logImage{}, fmt.Errorf("%w: %d runs in %d bytes", errState, runs, r.Len())
	}
	rs := make([]logRun, runs)
	t, total := int64(newest), int64(0)
	for i := len(rs) - 1; ; i-- {
		if hits < 1 || hits > uint64(limit.MaxLogLimit-total) {
			return logImage{}, fmt.Errorf("%w: %d hits after %d", errState, hits, total)
		}
		rs[i] = logRun{t, int64(hits)}
		total += int64(hits)
		if i == 0 {
			break
		}
		gap := r.Uvarint()
		hits = r.Uvarint()
		if r.Err() != nil {
			return logImage{}, r.Err()
		}
		if gap < 1 || gap > uint64(t) {
			return logImage{}, fmt.Errorf("%w: gap %d before instant %d", errState, gap, t)
		}
		t -= int64(gap)
	}
	if err := r.End(); err != nil {
		return logImage{}, err
	}
	return logImage{idleAt: int64(newest + hold), runs: rs}, nil
}

// mergeLogs returns the log that has consumed more of a and b at now (see
// "Merge" above); a itself when that is a.
func mergeLogs(a, b logImage, now int64) logImage {
	switch {
	case b.freshAt(now):
		return a
	case a.freshAt(now):
		return b
	}
	all := make([]logRun, 0, len(a.runs)+len(b.runs))
	i, j := 0, 0
	for i < len(a.runs) || j < len(b.runs) {
		switch {
		case j == len(b.runs) || i < len(a.runs) && a.runs[i].t < b.runs[j].t:
			all = append(all, a.runs[i])
			i++
		case i == len(a.runs) || b.runs[j].t < a.runs[i].t:
			all = append(all, b.runs[j])
			j++
		default:
			all = append(all, logRun{a.runs[i].t, max(a.runs[i].n, b.runs[j].n)})
			i, j = i+1, j+1
		}
	}
	// Keep the newest n hits.
	n, total := max(a.hits(), b.hits()), int64(0)
	k := len(all)
	for k > 0 && total < n {
		k--
		total += all[k].n
	}
	all = all[k:]
	if over := total - n; over > 0 {
		all[0].n -= over
	}
	m := logImage{idleAt: max(a.idleAt, b.idleAt), runs: all}
	if m.equal(a) {
		return a
	}
	return m
}
