package window

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/shardlimiter/shardlimiter/internal/statebytes"
	"github.com/shardlimiter/shardlimiter/limit"
)

// Moving one key's state between nodes (handoff and replication).
//
// FIXED_WINDOW and SLIDING_WINDOW keys are a cell: the window its counts
// belong to, as a slot exponent g and a slot (see "Window identity" in
// slot.go), and its counts. Encoded:
//
//	byte     stateVersion (1)
//	byte     kind: 2 FIXED_WINDOW, 3 SLIDING_WINDOW (limit.Algorithm's
//	         wire value)
//	uvarint  g, the slot exponent: ⌊log2 period⌋, at most 49
//	uvarint  slot: the window's end >> g
//	uvarint  prev (SLIDING_WINDOW only): hits counted in the window before
//	uvarint  cur: hits counted in the window
//
// Varints are minimal, so a state has exactly one encoding. The receiving
// node needs no rule: the slot names the window on the epoch-aligned grid
// every node shares, and a take maps it onto its own rule's windows as it
// maps a stored cell (cell.at). Windows are instants by contract (aligned
// to multiples of the period since the Unix epoch), so the slot is one
// too, and an import is idempotent: a replica that receives the same state
// twice, or late, counts it once. Clocks that disagree by Δ shift where
// the nodes put window boundaries by Δ; no window ever counts more than
// Limit on the node that decides.
//
// SLIDING_LOG keys are encoded in logstate.go.
//
// # Merge: the state that has consumed more wins
//
// When two cells of one key meet (mergeFixed, mergeSliding), the merged
// cell never admits more than either: a check at any later instant, with
// nothing taken in between, is admitted from it only if it is admitted
// from both, and a sequence of checks of one size admits no more hits from
// it than from either (mixed sizes are monotone for no algorithm: see the
// bucket package).
//
//   - A cell equivalent to a fresh key at now (its window over, under any
//     period of its octave) counts nothing: the other one wins.
//   - FIXED_WINDOW, the same window: the larger count. A take in that
//     window admits when count + hits ≤ Limit, so the larger count admits a
//     subset, and stays larger after the same take.
//   - FIXED_WINDOW, different windows: the later one. With clocks that
//     agree, the later window is the current or a past one at the
//     receiver's now, so the earlier one is over: no take from now on
//     counts it. (A later window still ahead of the receiver's clock comes
//     from a node whose clock is ahead: the receiver then counts in that
//     window, as that node does, and the earlier window's hits lapse when
//     they lapse there.)
//   - SLIDING_WINDOW, the same window: the larger of each count. The
//     estimate prev×rem/p + cur grows with both.
//   - SLIDING_WINDOW, different windows: the later one, whose previous
//     window also takes the other cell's current count when that may be
//     the window just before (slots one or two apart: a period of octave g
//     spans one or two slots). Aligned to the same window, each count is
//     the larger of the two, so the estimate is too. Two slots apart may
//     also be two windows of a period of exactly 2^g: counting the older
//     cell then only errs on the safe side.
//   - Cells of different octaves (the period changed to another octave on
//     one node): the later window. A take under either octave's rule
//     restarts a cell of the other octave anyway.
//
// The merge returns its first argument itself when that has consumed at
// least as much, so that a merge that changes nothing is seen as such.

// stateVersion is the first byte of an encoded state.
const stateVersion = 1

var errState = errors.New("window: malformed key state")

// maxSlot returns the largest slot at exponent g that a take can store:
// the end of the window of the longest period of the octave at MaxTime.
// Any slot up to it keeps the window arithmetic of cell.at inside int64.
func maxSlot(g int64) int64 { return (MaxTime + maxPeriodOf(g)) >> g }

// encodeCell encodes a FIXED_WINDOW (kind limit.FixedWindow) or
// SLIDING_WINDOW cell.
func encodeCell(kind limit.Algorithm, c cell) []byte {
	b := make([]byte, 0, 2+4*binary.MaxVarintLen64)
	b = append(b, stateVersion, byte(kind))
	b = binary.AppendUvarint(b, uint64(c.g))
	b = binary.AppendUvarint(b, uint64(c.slot))
	if kind == limit.SlidingWindow {
		b = binary.AppendUvarint(b, uint64(c.prev))
	}
	return binary.AppendUvarint(b, uint64(c.cur))
}

// decodeCell decodes a cell of the given kind and checks that a take can
// start from it: a slot exponent of some valid period, a slot a take can
// reach, counts up to maxCount, and something counted.
func decodeCell(b []byte, kind limit.Algorithm) (cell, error) {
	r := statebytes.NewReader(b, errState)
	if v, k := r.Byte(), r.Byte(); r.Err() != nil || v != stateVersion || k != byte(kind) {
		return cell{}, fmt.Errorf("%w: header %#x %#x for %v", errState, v, k, kind)
	}
	g, slot := r.Uvarint(), r.Uvarint()
	var prev uint64
	if kind == limit.SlidingWindow {
		prev = r.Uvarint()
	}
	cur := r.Uvarint()
	if err := r.End(); err != nil {
		return cell{}, err
	}
	switch {
	case g > maxSlotExp || slot > uint64(maxSlot(int64(g))):
		return cell{}, fmt.Errorf("%w: slot %d at exponent %d", errState, slot, g)
	case prev > maxCount || cur > maxCount || prev == 0 && cur == 0:
		return cell{}, fmt.Errorf("%w: counts %d, %d", errState, prev, cur)
	}
	return cell{g: int64(g), slot: int64(slot), prev: int64(prev), cur: int64(cur)}, nil
}

// later reports whether b's window starts after a's.
func later(b, a cell) bool { return b.slot<<b.g > a.slot<<a.g }

// mergeFixed returns the FIXED_WINDOW cell that has consumed more of a and
// b at now (see "Merge" above); a itself when that is a.
func mergeFixed(a, b cell, now int64) cell {
	switch {
	case freshFixed(b, now):
		return a
	case freshFixed(a, now):
		return b
	case a.g == b.g && a.slot == b.slot:
		if b.cur > a.cur {
			return b
		}
		return a
	case later(b, a):
		return b
	}
	return a
}

// mergeSliding returns the SLIDING_WINDOW cell that has consumed more of a
// and b at now (see "Merge" above); a itself when that is a.
func mergeSliding(a, b cell, now int64) cell {
	switch {
	case freshSliding(b, now):
		return a
	case freshSliding(a, now):
		return b
	case a.g == b.g && a.slot == b.slot:
		return cell{g: a.g, slot: a.slot, prev: max(a.prev, b.prev), cur: max(a.cur, b.cur)}
	}
	newer, older := a, b
	if later(b, a) {
		newer, older = b, a
	}
	if newer.g == older.g && newer.slot-older.slot <= 2 {
		newer.prev = max(newer.prev, older.cur)
	}
	return newer
}
