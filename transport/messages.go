package transport

import (
	"errors"
	"sync"

	"google.golang.org/grpc/mem"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/internal/wire"
)

// The messages of RateLimiter and Peers as gRPC hands them to our codec
// (codec.go): Go types of ours, encoded and decoded by package wire, so
// that no generated message is built per item.
//
//	server: checkBatch    ← request  (decoded)    resultBatch  → answer (encoded)
//	client: checksRequest → request  (encoded)    resultsReply ← answer (decoded)
//	        encodedRequest (a PeerClient batch, already encoded)
//
// Unary interceptors of the two services see these types.

// wireMessage is a message the codec encodes through package wire.
type wireMessage interface {
	size() int
	appendTo(b []byte) ([]byte, error)
}

// wireReply is a message the codec decodes through package wire. decode
// must copy what it keeps of data.
type wireReply interface {
	decode(data []byte) error
}

// DefaultMaxBatch is the default bound on items per call (--max-batch).
const DefaultMaxBatch = 1000

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
	held     int64   // units of bound taken for this call, given back by release
	ticket   *ticket // the call's charge of a fair bound (fair.go), instead of held
	own      ticket  // the ticket of a call the tap did not charge
}

// decode fills b from the wire. It never fails: a bad request is recorded
// in b.err, for the handler to answer with InvalidArgument (gRPC would turn
// a codec error into Internal), as is a refusal for overload.
//
// Admission comes first, on the item count alone (a scan of the framing):
// a node past its bound refuses a batch without decoding it, so that
// refusals cost next to nothing while it is overloaded. A call charged at
// its headers (ticket) settles that charge to its count.
func (b *checkBatch) decode(data []byte) error {
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
	b.checks = getChecks()
	b.checks.Internal = b.internal
	var err error
	b.n, err = wire.DecodeChecks(data, b.max, b.checks)
	switch {
	case errors.Is(err, wire.ErrTooMany):
		b.err = &batchError{n: b.n, max: b.max}
	case err != nil:
		b.err = &malformedError{err}
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
		putChecks(b.checks)
		b.checks = nil
	}
}

// checksPool holds the per-call memory of the servers' decoded batches.
var checksPool = sync.Pool{New: func() any { return new(wire.Checks) }}

func getChecks() *wire.Checks {
	c := checksPool.Get().(*wire.Checks)
	c.Internal = false
	return c
}

// putChecks returns c to the pool; c must not be used afterwards.
func putChecks(c *wire.Checks) {
	c.Reset() // drops the strings for the collector
	if cap(c.Checks) <= 4*DefaultMaxBatch {
		checksPool.Put(c)
	}
}

// resultBatch is the answer of the two services: results[i] answers item i
// of the request and limits[i] is its limit, echoed. owner, when set
// (Peers), decided the batch and is named once instead of in every item.
type resultBatch struct {
	results []limit.Result
	limits  []int64
	owner   string
}

func (a *resultBatch) size() int { return wire.SizeResults(a.results, a.limits, a.owner) }

func (a *resultBatch) appendTo(b []byte) ([]byte, error) {
	return wire.AppendResults(b, a.results, a.limits, a.owner)
}

// checksRequest is a request of checks, encoded as gRPC sends it (Client).
type checksRequest struct {
	checks []limit.Check
}

func (r *checksRequest) size() int { return wire.SizeChecks(r.checks) }

func (r *checksRequest) appendTo(b []byte) ([]byte, error) {
	return wire.AppendChecks(b, r.checks, nil)
}

// encodedRequest is a request already in wire form: the concatenation of
// parts, each a run of items encoded by wire.AppendChecks.
type encodedRequest struct {
	parts [][]byte
}

// buffers returns the parts for gRPC without copying them; they are not
// pooled, so the memory stays valid for as long as gRPC holds it.
func (r *encodedRequest) buffers() mem.BufferSlice {
	out := make(mem.BufferSlice, 0, len(r.parts))
	for _, p := range r.parts {
		if len(p) > 0 {
			out = append(out, mem.SliceBuffer(p))
		}
	}
	return out
}

// resultsReply is the answer our clients read.
type resultsReply struct {
	// forward: the answer is a ForwardRateLimitsResponse, else a
	// GetRateLimitsResponse.
	forward bool
	// max bounds the items: an answer with more is refused before anything
	// is allocated for them.
	max     int
	results []limit.Result // the items, in order; the memory is reused across decodes
}

func (r *resultsReply) decode(data []byte) (err error) {
	r.results, err = wire.DecodeResults(data, r.forward, r.max, r.results)
	return err
}
