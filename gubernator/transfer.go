package gubernator

import (
	"encoding/binary"
	"errors"
	"math"
	"time"

	"github.com/shardlimiter/shardlimiter/table"
)

// Moving one key's Item between nodes (handoff and replication).
//
//	byte     stateVersion (1)
//	byte     kind (Token 1, Leaky 2)
//	byte     flags: 1 = Over
//	varint   limit, duration, burst, remaining, anchor, expire_at (zigzag)
//	8 bytes  level, float64 bits, little endian
//
// Instants are Unix milliseconds, as the Item holds them: an import is
// idempotent, at the price of trusting the nodes' clocks to agree (as the
// other algorithms do).
//
// # Merge: the state that has consumed more wins
//
// When two states of a key meet, a state that is fresh at now (expired)
// yields to the other; of two live states the one with the smaller share
// of its capacity left wins (remaining/limit for a token bucket,
// level/burst for a leaky bucket), and a tie keeps the receiver's. The
// winner is kept whole: its window, its balance, its stored status.

const stateVersion = 1

var errState = errors.New("gubernator: malformed key state")

func encode(it *Item) []byte {
	b := make([]byte, 0, 3+6*binary.MaxVarintLen64+8)
	var flags byte
	if it.Over {
		flags = 1
	}
	b = append(b, stateVersion, byte(it.Kind), flags)
	for _, v := range [...]int64{it.Limit, it.Duration, it.Burst, it.Remaining, it.Anchor, it.ExpireAt} {
		b = binary.AppendVarint(b, v)
	}
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(it.Level))
}

func decode(b []byte) (Item, error) {
	if len(b) < 3 || b[0] != stateVersion || (b[1] != byte(Token) && b[1] != byte(Leaky)) || b[2] > 1 {
		return Item{}, errState
	}
	it := Item{Kind: Kind(b[1]), Over: b[2] == 1}
	b = b[3:]
	for _, p := range [...]*int64{&it.Limit, &it.Duration, &it.Burst, &it.Remaining, &it.Anchor, &it.ExpireAt} {
		v, n := binary.Varint(b)
		if n <= 0 {
			return Item{}, errState
		}
		*p, b = v, b[n:]
	}
	if len(b) != 8 {
		return Item{}, errState
	}
	it.Level = math.Float64frombits(binary.LittleEndian.Uint64(b))
	if math.IsNaN(it.Level) || math.IsInf(it.Level, 0) {
		return Item{}, errState
	}
	return it, nil
}

// left is the share of its capacity an item has left.
func left(it *Item) float64 {
	if it.Kind == Leaky {
		if it.Burst <= 0 {
			return 0
		}
		return it.Level / float64(it.Burst)
	}
	if it.Limit <= 0 {
		return 0
	}
	return float64(it.Remaining) / float64(it.Limit)
}

// merge returns the state key should hold when local meets in at now (ms).
func merge(local, in Item, now int64) Item {
	switch {
	case in.Expired(now):
		return local
	case local.Expired(now):
		return in
	case left(&in) < left(&local):
		return in
	}
	return local
}

// Export returns key's encoded state at now (Unix ns); ok is false when
// the key is absent or fresh at now.
func (g *Table) Export(key string, now int64) (state []byte, ok bool) {
	e := g.t.Peek(key)
	if e == nil {
		return nil, false
	}
	return exportEntry(e, now)
}

// ExportChanged drains up to max keys marked changed, as Changed does, and
// calls fn with each one's state at now (Unix ns) as Export returns it,
// skipping those Export would not return; it returns how many keys it
// drained. It reads each state through the entry the change list holds,
// not through a second lookup of the key. Safe for concurrent use.
func (g *Table) ExportChanged(max int, now int64, fn func(key string, state []byte)) int {
	return g.t.DrainChangedEntries(max, func(key string, e *table.Entry[Item]) {
		if st, ok := exportEntry(e, now); ok {
			fn(key, st)
		}
	})
}

// exportEntry is Export of the key whose entry is e.
func exportEntry(e *table.Entry[Item], now int64) (state []byte, ok bool) {
	e.Mu.Lock()
	it := e.State
	dead := e.Dead()
	e.Mu.Unlock()
	if dead || it.Expired(now/int64(time.Millisecond)) {
		return nil, false
	}
	return encode(&it), true
}

// Import merges an exported state into key at now (Unix ns), keeping the
// state that has consumed more; see limit.StateMover.
func (g *Table) Import(key string, state []byte, now int64, mark bool) error {
	in, err := decode(state)
	if err != nil {
		return err
	}
	ms := now / int64(time.Millisecond)
	if in.Expired(ms) {
		return nil
	}
	e := g.lockLive(key, now)
	m := merge(e.State, in, ms)
	changed := m != e.State
	e.State = m
	e.Mu.Unlock()
	if changed && mark {
		g.t.MarkChanged(key, e)
	}
	return nil
}
