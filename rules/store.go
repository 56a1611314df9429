package rules

import "sync/atomic"

// Store holds the current Set. Load and Swap are safe for concurrent use
// and take no lock: a request reads the Set once and uses that one
// throughout, while a reload swaps in a new one.
type Store struct{ p atomic.Pointer[Set] }

// NewStore returns a Store holding s (which may be nil: no rules).
func NewStore(s *Set) *Store {
	st := &Store{}
	st.p.Store(s)
	return st
}

// Load returns the current Set; nil when there is none.
func (st *Store) Load() *Set { return st.p.Load() }

// Swap makes s the current Set and returns the one it replaces.
func (st *Store) Swap(s *Set) *Set { return st.p.Swap(s) }
