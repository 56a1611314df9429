package dial

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlimiter/shardlimiter/transport"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/wire"
)

// The batcher of PeerClient: how concurrent callers share RPCs.
//
// Each Forward call becomes a call (its checks encoded for the wire, its results,
// a done channel) and one segment in pending, the queue of checks accepted
// but not sent. There are maxInFlight RPC slots. The rule is:
//
//   - a send starts at once while a slot is free: the caller that finds one
//     sends its own checks in its own goroutine (no hand-off, no timer, no
//     added latency when the owner is idle);
//   - while every slot is busy, new checks wait in pending;
//   - a sender whose RPC returns keeps its slot if pending is not empty and
//     sends the next batch: up to maxBatch checks taken from the front of
//     pending, whatever calls they belong to. That is where the checks of
//     concurrent callers merge. A batch ends at a group boundary (see
//     limit.Check.Chained): a group cut in two would reach the owner as two
//     broken groups, both refused as invalid. So a batch may hold up to
//     limit.MaxGroup-1 checks fewer than maxBatch; one that would be empty
//     is cut anyway (maxBatch below limit.MaxGroup, or an over-long chain,
//     invalid at the owner either way), so every batch makes progress.
//
// Hence the invariant, true whenever mu is free: pending is empty unless all
// slots are busy. An inline sender whose RPC returns hands its slot to a new
// goroutine when there is more to send, so that a caller never works for
// others after its own checks are answered. Goroutines exist per busy slot,
// never per check.
//
// Every accepted check is in exactly one place: in pending, in exactly one
// batch, or answered. A segment leaves pending only by being taken into a
// batch (answered by that RPC's outcome), failed by Close, or dropped by
// abandon when its caller has gone. A call's done is closed once, by whoever
// answers its last check; nobody ever sends on it.

// call is one Forward: its checks in wire form and their answers.
type call struct {
	// encoded holds the checks as request items (wire.AppendChecks); check
	// i is encoded[offs[i]:offs[i+1]], so any run of checks is a slice of it.
	encoded []byte
	offs    []int
	// chained[i] is checks[i].Chained; nil when no check is (the usual case).
	chained []bool
	results []limit.Result
	// left counts checks not yet answered; whoever takes it to zero closes done.
	left atomic.Int64
	done chan struct{}
	err  atomic.Pointer[error] // first failure
}

// newCall encodes checks in the caller's goroutine: the encoding runs in
// parallel across callers and the call does not retain the caller's slice.
// It fails only for a check proto could not encode either (a string that
// is not UTF-8). The call comes from callPool: Forward gives it back once
// answered (putCall), its results excepted, which the caller keeps.
func newCall(checks []limit.Check) (*call, error) {
	n := len(checks)
	if n > 0 && checks[n-1].Chained {
		// Batches merge calls: a chain left open would join the next
		// caller's first check and fail its group at the owner.
		return nil, errOpenChain
	}
	cl := callPool.Get().(*call)
	cl.offs = slices.Grow(cl.offs[:0], n+1)[:n+1]
	cl.results = make([]limit.Result, n)
	cl.done = make(chan struct{})
	var err error
	if cl.encoded, err = wire.AppendChecks(slices.Grow(cl.encoded[:0], wire.SizeChecks(checks)), checks, cl.offs); err != nil {
		putCall(cl)
		return nil, err
	}
	for i := range checks {
		if checks[i].Chained {
			if cl.chained == nil {
				cl.chained = make([]bool, n)
			}
			cl.chained[i] = true
		}
	}
	cl.left.Store(int64(n))
	return cl, nil
}

// callPool holds answered calls for reuse: their encoding buffers and
// offsets, about half of what a forward allocated.
var callPool = sync.Pool{New: func() any { return new(call) }}

// maxPooledEncoding bounds the encoding buffer a pooled call keeps.
const maxPooledEncoding = 64 << 10

// putCall gives back cl, all of whose checks have been answered (done is
// closed: no batch refers to its encoding any more) and whose results
// have been taken by its caller. A call abandoned by its caller is not
// given back (a batch in flight may still answer into it), nor one whose
// batch failed (gRPC may still hold its encoding, queued unsent).
func putCall(cl *call) {
	if cap(cl.encoded) > maxPooledEncoding {
		cl.encoded = nil
	}
	cl.encoded, cl.offs, cl.chained = cl.encoded[:0], cl.offs[:0], nil
	cl.results, cl.done = nil, nil
	cl.err.Store(nil)
	callPool.Put(cl)
}

var errOpenChain = errors.New("transport: the last check of a call is chained to nothing")

// cut returns where a batch that has room for cl's checks up to hi, taking
// them from lo, should end: hi when no group spans it, else the start of
// the group that does. It returns lo when that group starts at lo or
// before (it does not fit), and hi when no group start is found within
// limit.MaxGroup-1 checks back (a chain too long to be valid).
func (cl *call) cut(lo, hi int) int {
	if cl.chained == nil {
		return hi
	}
	for p := hi; p > hi-limit.MaxGroup && p >= lo; p-- {
		if p == lo || !cl.chained[p-1] {
			return p
		}
	}
	return hi
}

// encodedRun returns the encoded checks [lo, hi).
func (cl *call) encodedRun(lo, hi int) []byte { return cl.encoded[cl.offs[lo]:cl.offs[hi]] }

// answered records that n more checks of cl have their result.
func (cl *call) answered(n int) {
	if cl.left.Add(-int64(n)) == 0 {
		close(cl.done)
	}
}

func (cl *call) failure() error {
	if p := cl.err.Load(); p != nil {
		return *p
	}
	return nil
}

// segment is the checks [lo, hi) of a call.
type segment struct {
	call   *call
	lo, hi int
}

// fail answers the segment's checks with err.
func (s segment) fail(err error) {
	r := limit.Result{Error: err.Error(), Reason: limit.Unavailable}
	for i := s.lo; i < s.hi; i++ {
		s.call.results[i] = r
	}
	s.call.err.CompareAndSwap(nil, &err)
	s.call.answered(s.hi - s.lo)
}

// batch is the checks of one RPC. Pooled with its slices.
type batch struct {
	segs  []segment
	req   encodedRequest // the segments' wire runs, in order
	reply resultsReply   // the owner's answers, decoded
	n     int
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

// startLocked fills free slots from pending. The first batch is returned for
// the caller to send inline; any further one (a call larger than maxBatch)
// gets a goroutine.
func (c *PeerClient) startLocked() (inline *batch) {
	for len(c.pending) > 0 && c.inFlight < c.maxInFlight {
		b := c.takeLocked()
		c.inFlight++
		c.sends.Add(1)
		if inline == nil {
			inline = b
		} else {
			go c.run(b)
		}
	}
	return inline
}

// takeLocked takes up to maxBatch checks from the front of pending,
// splitting a segment if it does not fit whole, between two groups.
func (c *PeerClient) takeLocked() *batch {
	b := batchPool.Get().(*batch)
	room, k := c.maxBatch, 0
	for ; k < len(c.pending) && room > 0; k++ {
		s := &c.pending[k]
		if n := s.hi - s.lo; n > room {
			end := s.call.cut(s.lo, s.lo+room)
			if end == s.lo && b.n == 0 {
				end = s.lo + room // never an empty batch
			}
			if end > s.lo {
				b.segs = append(b.segs, segment{call: s.call, lo: s.lo, hi: end})
				b.n += end - s.lo
				s.lo = end
			}
			break // s stays in pending with what is left
		}
		b.segs = append(b.segs, *s)
		b.n += s.hi - s.lo
		room -= s.hi - s.lo
	}
	rest := copy(c.pending, c.pending[k:])
	clear(c.pending[rest:])
	c.pending = c.pending[:rest]
	return b
}

// nextLocked is called by a sender whose RPC returned: it keeps the slot
// for the next batch, or frees it when nothing is pending (always the case
// once closed).
func (c *PeerClient) nextLocked() *batch {
	if len(c.pending) > 0 {
		return c.takeLocked()
	}
	c.inFlight--
	return nil
}

// runInline sends b in the caller's goroutine, then hands the slot on to a
// goroutine if more is pending.
func (c *PeerClient) runInline(ctx context.Context, b *batch) {
	c.send(ctx, b)
	c.mu.Lock()
	next := c.nextLocked()
	c.mu.Unlock()
	if next != nil {
		go c.run(next) // inherits the slot and the sends count
		return
	}
	c.sends.Done()
}

// run sends b, then keeps the slot while pending has checks.
func (c *PeerClient) run(b *batch) {
	defer c.sends.Done()
	for b != nil {
		c.send(c.closing, b)
		c.mu.Lock()
		b = c.nextLocked()
		c.mu.Unlock()
	}
}

// abandon drops cl's pending segments: its caller has gone. Segments in
// flight still complete into cl, which nobody reads any more.
func (c *PeerClient) abandon(cl *call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.pending[:0]
	for _, s := range c.pending {
		if s.call != cl {
			kept = append(kept, s)
		}
	}
	clear(c.pending[len(kept):])
	c.pending = kept
}

// send performs one RPC for b, on a stream (streamclient.go) or as a unary
// call, and answers its checks, then recycles b. parent is the caller's
// context for an inline send, else c.closing; the RPC ends at Timeout, when
// parent ends, or when Close is called.
func (c *PeerClient) send(parent context.Context, b *batch) {
	for _, s := range b.segs {
		b.req.parts = append(b.req.parts, s.call.encodedRun(s.lo, s.hi))
	}
	b.reply.forward, b.reply.max = !c.api, b.n
	start := time.Now()
	err := errFallback
	if !c.streams.unaryOnly.Load() {
		err = c.exchange(parent, b) // streamclient.go
	}
	if err == errFallback {
		err = c.unary(parent, b)
	}
	elapsed := time.Since(start)

	kind := -1
	if err == nil && len(b.reply.results) != b.n {
		err = fmt.Errorf("transport: owner answered %d of %d checks", len(b.reply.results), b.n)
	}
	if err != nil {
		kind, err = c.classify(parent, err)
		for _, s := range b.segs {
			s.fail(err)
		}
	} else {
		b.deliver(b.reply.results)
	}
	c.metrics.peerRPC(b.n, elapsed, kind)

	clear(b.segs)
	clear(b.req.parts)
	clear(b.reply.results) // drop the strings for the collector
	b.segs, b.req.parts, b.reply.results, b.n = b.segs[:0], b.req.parts[:0], b.reply.results[:0], 0
	batchPool.Put(b)
}

// unary sends b as one unary call.
func (c *PeerClient) unary(parent context.Context, b *batch) error {
	method := pb.Peers_ForwardRateLimits_FullMethodName
	if c.api { // a BatchClient (batchclient.go)
		method = pb.RateLimiter_GetRateLimits_FullMethodName
	}
	ctx, cancel := context.WithTimeout(parent, c.timeout)
	defer cancel()
	if c.standin {
		ctx = metadata.AppendToOutgoingContext(ctx, transport.StandinHeader, "1")
	}
	if parent != c.closing {
		defer context.AfterFunc(c.closing, cancel)()
	}
	return c.conn.Invoke(ctx, method, &b.req, &b.reply, grpc.ForceCodecV2(transport.Codec))
}

// deliver answers b's checks from the owner's results, in order (the
// decoder has already given items without an owner the response's owner).
func (b *batch) deliver(results []limit.Result) {
	off := 0
	for _, s := range b.segs {
		off += copy(s.call.results[s.lo:s.hi], results[off:])
		s.call.answered(s.hi - s.lo)
	}
}
