package peer

// TableShare is the part of a node's memory budget (Config.MaxMemory) that
// its tables may hold together. The rest is for what the tables do not
// count: the garbage collector's headroom between two collections (the
// process sets its soft memory limit to the whole budget), requests and
// answers in flight, connection buffers, goroutine stacks and the runtime.
// Measured with floods of long keys and large logs at --max-memory 256MiB
// (docs/PERFORMANCE.md, "Memory budget"), half keeps the resident size
// under the budget plus its stated margin.
const TableShare = 0.5

// TableBudget returns the bytes the tables may hold under a node budget of
// maxMemory bytes.
func TableBudget(maxMemory int64) int64 { return int64(float64(maxMemory) * TableShare) }

// MemoryStats reports what the tables hold against their budget.
type MemoryStats struct {
	// Budget is the tables' byte budget; 0 when there is none.
	Budget int64 `json:"budget_bytes"`
	// Held is what the tables are charged for now.
	Held int64 `json:"held_bytes"`
}

// Memory returns the tables' bytes against their budget.
func (n *Node) Memory() MemoryStats {
	var s MemoryStats
	for _, l := range n.limiters {
		s.Held += l.Bytes()
	}
	if n.budget != nil {
		s.Budget = n.budget.Max()
	}
	return s
}
