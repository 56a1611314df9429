package cell

import (
	"encoding/binary"
	"errors"

	"github.com/shardlimiter/shardlimiter/table"
)

// Moving one key's state between nodes (handoff, replication, snapshots):
//
//	byte    stateVersion (1)
//	varint  tat, Unix ns (zigzag)
//
// The tat is an instant, as the other algorithms move theirs: an import
// is idempotent, at the price of trusting the nodes' clocks to agree. Of
// two states of a key the later tat wins: it has consumed more, whatever
// rule the next call brings.

const stateVersion = 1

var errState = errors.New("cell: malformed key state")

func encode(tat int64) []byte {
	return binary.AppendVarint([]byte{stateVersion}, tat)
}

func decode(b []byte) (int64, error) {
	if len(b) < 2 || b[0] != stateVersion {
		return 0, errState
	}
	tat, n := binary.Varint(b[1:])
	if n <= 0 || n != len(b)-1 || tat <= 0 {
		return 0, errState
	}
	return tat, nil
}

// Export returns key's encoded state at now (Unix ns); ok is false when
// the key is absent or its tat is past (a fresh key).
func (c *Table) Export(key string, now int64) (state []byte, ok bool) {
	e := c.t.Peek(key)
	if e == nil {
		return nil, false
	}
	return exportEntry(e, now)
}

// ExportChanged drains up to max keys marked changed and calls fn with
// each one's state at now as Export returns it, skipping those Export
// would not return; it returns how many keys it drained.
func (c *Table) ExportChanged(max int, now int64, fn func(key string, state []byte)) int {
	return c.t.DrainChangedEntries(max, func(key string, e *table.Entry[int64]) {
		if st, ok := exportEntry(e, now); ok {
			fn(key, st)
		}
	})
}

func exportEntry(e *table.Entry[int64], now int64) (state []byte, ok bool) {
	e.Mu.Lock()
	tat := e.State
	dead := e.Dead()
	e.Mu.Unlock()
	if dead || tat <= now {
		return nil, false
	}
	return encode(tat), true
}

// Import merges an exported state into key at now (Unix ns), keeping the
// later tat; see limit.StateMover.
func (c *Table) Import(key string, state []byte, now int64, mark bool) error {
	in, err := decode(state)
	if err != nil {
		return err
	}
	if in <= now {
		return nil
	}
	e := c.lockLive(key, now)
	changed := in > e.State
	if changed {
		e.State = in
	}
	e.Mu.Unlock()
	if changed && mark {
		c.t.MarkChanged(key, e)
	}
	return nil
}
