package server

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/shardlimiter/shardlimiter/transport"

	"google.golang.org/grpc"
)

// The stream methods of RateLimiter and Peers (StreamRateLimits,
// StreamForwardRateLimits): the unary call's batch, many times over one
// stream, so that a client sending batch after batch pays HTTP/2 stream
// set-up, headers and trailers once instead of per batch.
//
// The handler reads a batch, decides it, answers it and only then reads
// the next: one batch at a time per stream, answers in order, no ids. A
// client wanting several batches in flight opens several streams (a
// PeerClient keeps one per RPC slot). A batch that fails as a whole ends the
// stream with the unary call's status: nothing of it was decided. Each
// batch is counted in the metrics as a call of the unary method, so that
// the figures do not depend on how a client sends.
//
// Shutdown (Listener.GracefulStop) must neither hang on streams that sit
// idle between batches nor lose a batch already read. Every stream's
// context is made cancelable by the listener's tap; stop marks
// every stream stopping and cancels those that are idle, which ends their
// read: the client sees Canceled (grpc ends a canceled read with that
// status itself). A stream busy with a batch answers it and then ends
// with OK; so does one that reads a batch after stop, without deciding it.
// So a stream the server ends with OK or Canceled leaves the batches it
// did not answer undecided, and the client sends them again (a unary
// call, which the stopping server no longer accepts: the client then
// tries elsewhere as for any node that is down).

// streamSet tracks the open streams of one server for stop.
type streamSet struct {
	mu       sync.Mutex
	stopping bool
	open     map[*serverStream]struct{}
}

// serverStream is the state stop needs of one stream.
type serverStream struct {
	cancel context.CancelFunc // ends the stream's context: its read returns

	mu       sync.Mutex
	busy     bool // a batch has been read and is not answered yet
	stopping bool
}

func newStreamSet() *streamSet { return &streamSet{open: map[*serverStream]struct{}{}} }

// streamCancelKey is the context key under which the tap leaves the
// cancel function of a stream's context.
type streamCancelKey struct{}

// withStreamCancel returns ctx made cancelable, the cancel function kept in
// it for add. streamTap calls it for the stream methods: the handler could
// not cancel the context the transport reads with otherwise.
func withStreamCancel(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	return context.WithValue(ctx, streamCancelKey{}, cancel)
}

// add registers a stream whose context came from withStreamCancel. It
// returns nil when the set is stopping: the handler then ends at once.
func (s *streamSet) add(ctx context.Context) *serverStream {
	cancel, _ := ctx.Value(streamCancelKey{}).(context.CancelFunc)
	if cancel == nil {
		cancel = func() {} // no tap (a test's bare server): stop cannot end an idle read
	}
	st := &serverStream{cancel: cancel}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil
	}
	s.open[st] = struct{}{}
	return st
}

func (s *streamSet) remove(st *serverStream) {
	s.mu.Lock()
	delete(s.open, st)
	s.mu.Unlock()
	st.cancel()
}

// stop marks every stream stopping, now and to come, and ends the idle
// ones' reads.
func (s *streamSet) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	for st := range s.open {
		st.mu.Lock()
		st.stopping = true
		if !st.busy {
			st.cancel()
		}
		st.mu.Unlock()
	}
}

// enter marks st busy with a batch just read; false: stopping, do not
// decide it.
func (st *serverStream) enter() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopping {
		return false
	}
	st.busy = true
	return true
}

func (st *serverStream) stopped() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.stopping
}

// leave marks st idle after answering; false: stopping, end the stream.
func (st *serverStream) leave() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.busy = false
	return !st.stopping
}

// handleStream is the grpc.StreamHandler of a checksService's stream
// method.
func handleStream(streams *streamSet) grpc.StreamHandler {
	return func(srv any, ss grpc.ServerStream) error {
		s := srv.(checksService)
		st := streams.add(ss.Context())
		if st == nil {
			return nil // stopping: nothing read, nothing decided
		}
		defer streams.remove(st)
		ctx := ss.Context()
		// The tap's charge (fair.go) covers the first batch; each later
		// one is charged on its count as it is decoded.
		t, ok := claimTicket(ctx)
		if !ok {
			return transport.GRPCError(errCanceled)
		}
		if t == nil {
			t = s.newBatch().bound.connTicket(ctx, new(ticket)) // nil unless the bound is fair
		}
		// One request and one answer per stream, reused batch after batch:
		// SendMsg has encoded the answer when it returns, and the next
		// batch is read only then.
		in, answer := s.newBatch(), new(ResultBatch)
		fresh := *in
		for {
			*in = fresh
			in.ticket, in.out = t, answer
			if err := ss.RecvMsg(in); err != nil {
				in.release()
				if errors.Is(err, io.EOF) || st.stopped() {
					return nil // the client is done, or stop ended the read
				}
				return err
			}
			if !st.enter() {
				in.release()
				return nil // read after stop: not decided
			}
			out, err := s.serveChecks(ctx, in)
			in.release()
			if err != nil {
				st.leave()
				return err
			}
			err = ss.SendMsg(out)
			answer.reset()
			if !st.leave() || err != nil {
				return err
			}
		}
	}
}
