package server

import (
	"errors"
	"sync"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/wire"
)

// The messages of the checks services as gRPC hands them to transport's
// codec: Go types of ours, encoded and decoded by package wire, so that no
// generated message is built per item. The client's side is
// transport/dial/messages.go.
//
//	checkBatch ← request (decoded)    ResultBatch → answer (encoded)
//
// Unary interceptors of the checks services see these types.

// checkBatch is the request of the two services, as the server decoded it.
type checkBatch struct {
	max    int          // items allowed; more fails the call before they are decoded
	n      int          // items in the request
	checks *wire.Checks // the items, converted; pooled, given back by release
	err    error        // the request is malformed, too large or shed: answer this
	bound  *InFlight    // the server's in-flight bound; nil: none
	// internal: a batch of the Peers service, which may hold what only
	// nodes send each other (wire.Checks.Internal).
	internal bool
	// out, when set, is the memory the answer is built in (a stream's,
	// reused from batch to batch); nil: a new one.
	out    *ResultBatch
	held   int64   // units of bound taken for this call, given back by release
	ticket *ticket // the call's charge of a fair bound (fair.go), instead of held
	own    ticket  // the ticket of a call the tap did not charge
}

// decode fills b from the wire. It never fails: a bad request is recorded
// in b.err, for the handler to answer with InvalidArgument (gRPC would turn
// a codec error into Internal), as is a refusal for overload.
//
// Admission comes first, on the item count alone (a scan of the framing):
// a node past its bound refuses a batch without decoding it, so that
// refusals cost next to nothing while it is overloaded. A call charged at
// its headers (ticket) settles that charge to its count.
func (b *checkBatch) Decode(data []byte) error {
	if b.ticket != nil {
		if n, err := wire.CountChecks(data); err == nil && n <= b.max && !b.ticket.settle(int64(n)) {
			b.n, b.err = n, errShed
			return nil
		}
	} else if b.bound != nil {
		if n, err := wire.CountChecks(data); err == nil && n <= b.max {
			units := int64(max(n, 1))
			if !b.bound.TryAcquire(units) {
				b.n, b.err = n, errShed
				return nil
			}
			b.held = units
		}
	}
	b.checks = GetChecks()
	b.checks.Internal = b.internal
	var err error
	b.n, err = wire.DecodeChecks(data, b.max, b.checks)
	switch {
	case errors.Is(err, wire.ErrTooMany):
		b.err = &transport.BatchError{N: b.n, Max: b.max}
	case err != nil:
		b.err = &transport.MalformedError{Err: err}
	}
	return nil
}

// release gives the converted items back to the pool and the units back
// to the bound.
func (b *checkBatch) release() {
	b.ticket.release()
	if b.held != 0 {
		b.bound.Release(b.held)
		b.held = 0
	}
	if b.checks != nil {
		PutChecks(b.checks)
		b.checks = nil
	}
}

// checksPool holds the per-call memory of the servers' decoded batches.
var checksPool = sync.Pool{New: func() any { return new(wire.Checks) }}

// GetChecks returns an empty batch of checks from the pool of the
// listeners' decoded batches; give it back with PutChecks.
func GetChecks() *wire.Checks {
	c := checksPool.Get().(*wire.Checks)
	c.Internal = false
	return c
}

// PutChecks returns c to the pool; c must not be used afterwards.
func PutChecks(c *wire.Checks) {
	c.Reset() // drops the strings for the collector
	if cap(c.Checks) <= 4*transport.DefaultMaxBatch {
		checksPool.Put(c)
	}
}

// ResultBatch is the answer of a checks service: Results[i] answers item i
// of the request and Limits[i] is its limit, echoed. Owner, when set
// (Peers), decided the batch and is named once instead of in every item.
type ResultBatch struct {
	Results []limit.Result
	Limits  []int64
	Owner   string

	failed  []limit.Result // the memory of Results when an item failed (Batches.decide)
	decided []limit.Result // the memory a transport.CheckerInto answers into
	pooled  bool           // from answers: back to it once encoded (Encoded)
}

// answers holds the answers of unary calls, given back by the codec once
// encoded (Encoded), so that the memory of 1000 results is not allocated
// per call. A stream keeps one answer of its own instead.
var answers = sync.Pool{New: func() any { return &ResultBatch{pooled: true} }}

// getAnswer returns an empty answer from answers.
func getAnswer() *ResultBatch { return answers.Get().(*ResultBatch) }

// putAnswer gives a back to answers, unless it came from elsewhere or
// holds the memory of a batch far beyond the default bound.
func putAnswer(a *ResultBatch) {
	if !a.pooled {
		return
	}
	a.reset()
	if cap(a.decided) <= 4*transport.DefaultMaxBatch && cap(a.failed) <= 4*transport.DefaultMaxBatch {
		answers.Put(a)
	}
}

// decidedMemory returns a's memory for n results of a transport.CheckerInto,
// zeroed: no result of an earlier answer shows through an item the checker
// does not write.
func (a *ResultBatch) decidedMemory(n int) []limit.Result {
	a.decided = resized(a.decided, n)
	clear(a.decided)
	return a.decided
}

// reset drops the strings of the answer for the collector, keeping its
// memory for the next one.
func (a *ResultBatch) reset() {
	clear(a.failed)
	clear(a.decided)
	a.Results, a.Owner = nil, ""
}

// Size is the length of the encoding (transport.Encoder).
func (a *ResultBatch) Size() int { return wire.SizeResults(a.Results, a.Limits, a.Owner) }

// SizeBound bounds the length of the encoding (transport.Bounded).
func (a *ResultBatch) SizeBound() int { return wire.BoundResults(a.Results, a.Owner) }

// AppendTo appends the encoding to b (transport.Encoder).
func (a *ResultBatch) AppendTo(b []byte) ([]byte, error) {
	return wire.AppendResults(b, a.Results, a.Limits, a.Owner)
}

// Encoded gives an answer of a unary call back to answers
// (transport.Reusable); a stream's answer, or one of Decide, is left
// alone.
func (a *ResultBatch) Encoded() { putAnswer(a) }
