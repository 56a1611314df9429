package window

import "github.com/shardlimiter/shardlimiter/limit"

// run is one recorded action: the hits it recorded, all at instant t.
//
// The hits held are numbered in the order they were recorded, and a run
// holds those numbered (start, end]; the next run starts where it ends.
// The hits of any span of runs are then one subtraction, and finding the
// run that holds the h-th oldest hit is a binary search: a take costs
// O(log runs), never a walk of the log. Numbers are uint32 and may wrap;
// only differences mean anything, and they are at most the hits held,
// which a valid rule keeps ≤ limit.MaxLogLimit < 2³².
type run struct {
	t          int64
	start, end uint32
}

// runBytes is the size of a run, the unit of a log's memory.
const runBytes = 16

// runs is a growable circular buffer of runs, oldest first, with strictly
// increasing instants: an action at the newest run's instant joins it.
// The buffer grows by doubling, up to limit.MaxLogEntries runs (1 MiB),
// so a key that made 2 actions holds 2 runs, whatever their hits, and
// shrinks when it is mostly empty.
type runs struct {
	buf  []run // len(buf) is the capacity
	head int32 // index of the oldest run
	n    int32 // runs held
}

// keepSmall is the capacity under which a buffer never shrinks:
// reallocating tiny buffers would cost more than it saves.
const keepSmall = 8

// at returns the i-th oldest run, 0 ≤ i < n.
func (q *runs) at(i int) run { return q.buf[q.index(i)] }

// newest returns the instant of the newest run; n must be > 0.
func (q *runs) newest() int64 { return q.at(int(q.n) - 1).t }

// top returns the number of the newest hit (0 when empty).
func (q *runs) top() uint32 {
	if q.n == 0 {
		return 0
	}
	return q.at(int(q.n) - 1).end
}

// hitsFrom returns the hits of runs i to the newest, 0 ≤ i ≤ n.
func (q *runs) hitsFrom(i int) int64 {
	if i == int(q.n) {
		return 0
	}
	return int64(q.top() - q.at(i).start)
}

// firstAfter returns the index of the oldest run after instant t (n if
// none): the runs from there on are the ones after t.
func (q *runs) firstAfter(t int64) int {
	// Usually none or a few of the oldest have expired since the last take.
	lo, hi := 0, int(q.n)
	for ; lo < min(hi, 4); lo++ {
		if q.at(lo).t > t {
			return lo
		}
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if q.at(mid).t <= t {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// holding returns the index of the run that holds the h-th oldest hit
// from run i on, 1 ≤ h ≤ hitsFrom(i).
func (q *runs) holding(i int, h int64) int {
	from := q.at(i).start
	lo, hi := i, int(q.n)-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if q.at(mid).end-from < uint32(h) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// drop forgets the k oldest runs, and shrinks a buffer that has become
// mostly empty.
func (q *runs) drop(k int) {
	q.n -= int32(k)
	q.head += int32(k)
	if int(q.head) >= len(q.buf) {
		q.head -= int32(len(q.buf))
	}
	if len(q.buf) > keepSmall && int(q.n) <= len(q.buf)/4 {
		q.resize(max(2*int(q.n), keepSmall))
	}
}

// trim forgets the h oldest hits, 1 ≤ h ≤ hitsFrom(0): the runs they fill
// go, and a run they fill in part keeps the rest of its hits.
func (q *runs) trim(h int64) {
	to := q.at(0).start + uint32(h)
	k := q.holding(0, h)
	if q.at(k).end == to {
		k++
	}
	q.drop(k)
	if q.n > 0 {
		q.buf[q.head].start = to
	}
}

// push records h ≥ 1 hits at t, which must be ≥ every instant held. If
// the runs would then hold more than bound (≥ h) hits it forgets the
// oldest first (trim).
func (q *runs) push(t int64, h, bound int64) {
	if over := q.hitsFrom(0) + h - bound; over > 0 {
		q.trim(over)
	}
	start := q.top()
	if q.n > 0 && q.newest() == t {
		q.buf[q.index(int(q.n)-1)].end = start + uint32(h)
		return
	}
	if int(q.n) == len(q.buf) {
		// Every run holds a hit, so bound (≥ n+1) caps the runs too; a
		// valid rule keeps it ≤ MaxLogEntries.
		q.resize(max(min(2*len(q.buf), int(bound), limit.MaxLogEntries), int(q.n)+1))
	}
	q.buf[q.index(int(q.n))] = run{t, start, start + uint32(h)}
	q.n++
}

// index returns the position in buf of the i-th oldest run, 0 ≤ i < len(buf).
func (q *runs) index(i int) int {
	j := int(q.head) + i
	if j >= len(q.buf) {
		j -= len(q.buf)
	}
	return j
}

// resize moves the runs to a buffer of capacity c ≥ n.
func (q *runs) resize(c int) {
	buf := make([]run, c)
	if q.n > 0 {
		k := copy(buf, q.buf[q.head:min(int(q.head)+int(q.n), len(q.buf))])
		copy(buf[k:q.n], q.buf)
	}
	q.buf, q.head = buf, 0
}

// load makes q hold rs: oldest first, strictly increasing instants, each
// run at least one hit, at most limit.MaxLogEntries runs. It allocates
// once, exactly what rs needs.
func (q *runs) load(rs []logRun) {
	q.reset()
	if len(q.buf) < len(rs) {
		q.buf = make([]run, len(rs))
	}
	end := uint32(0)
	for i, r := range rs {
		q.buf[i] = run{r.t, end, end + uint32(r.n)}
		end += uint32(r.n)
	}
	q.n = int32(len(rs))
}

// reset empties the buffer, keeping a small one for reuse.
func (q *runs) reset() {
	q.head, q.n = 0, 0
	if len(q.buf) > keepSmall {
		q.buf = nil
	}
}

// heapBytes returns the bytes of the buffer.
func (q *runs) heapBytes() int64 { return int64(cap(q.buf)) * runBytes }
