package window

// ring is a growable circular buffer of non-decreasing timestamps, oldest
// first. Its buffer grows by doubling up to a bound the caller passes, so a
// key that used 2 hits holds 2 slots, not Limit.
type ring struct {
	buf  []int64 // len(buf) is the capacity
	head int32   // index of the oldest timestamp
	n    int32   // timestamps held
}

// keepSmall is the capacity under which a ring never shrinks: reallocating
// tiny buffers would cost more than it saves.
const keepSmall = 8

// at returns the i-th oldest timestamp, 0 ≤ i < n.
func (q *ring) at(i int) int64 {
	j := int(q.head) + i
	if j >= len(q.buf) {
		j -= len(q.buf)
	}
	return q.buf[j]
}

// newest returns the newest timestamp; n must be > 0.
func (q *ring) newest() int64 { return q.at(int(q.n) - 1) }

// firstAfter returns the index of the oldest timestamp > t (n if none):
// the timestamps from there on are the ones after t.
func (q *ring) firstAfter(t int64) int {
	// Usually none or a few of the oldest have expired since the last take.
	lo, hi := 0, int(q.n)
	for ; lo < min(hi, 4); lo++ {
		if q.at(lo) > t {
			return lo
		}
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if q.at(mid) <= t {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// drop forgets the k oldest timestamps, and shrinks a buffer that has
// become mostly empty.
func (q *ring) drop(k int) {
	q.n -= int32(k)
	q.head += int32(k)
	if int(q.head) >= len(q.buf) {
		q.head -= int32(len(q.buf))
	}
	if len(q.buf) > keepSmall && int(q.n) <= len(q.buf)/4 {
		q.resize(max(2*int(q.n), keepSmall))
	}
}

// push appends k copies of t, which must be ≥ every timestamp held. If the
// ring would exceed bound (≥ k) it drops the oldest first.
func (q *ring) push(t int64, k, bound int) {
	if over := int(q.n) + k - bound; over > 0 {
		q.drop(over)
	}
	if need := int(q.n) + k; need > len(q.buf) {
		q.resize(min(max(need, 2*len(q.buf)), bound))
	}
	j := int(q.head) + int(q.n)
	for range k {
		if j >= len(q.buf) {
			j -= len(q.buf)
		}
		q.buf[j] = t
		j++
	}
	q.n += int32(k)
}

// resize moves the timestamps to a buffer of capacity c ≥ n.
func (q *ring) resize(c int) {
	buf := make([]int64, c)
	for i := range int(q.n) {
		buf[i] = q.at(i)
	}
	q.buf, q.head = buf, 0
}

// reset empties the ring, keeping a small buffer for reuse.
func (q *ring) reset() {
	q.head, q.n = 0, 0
	if len(q.buf) > keepSmall {
		q.buf = nil
	}
}
