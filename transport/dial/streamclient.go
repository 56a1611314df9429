package dial

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlimiter/shardlimiter/transport"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// A PeerClient sends its batches on long-lived streams (the stream methods,
// streamserver.go) rather than one unary call each: a stream per RPC slot,
// taken by a sender for one batch and given back once it is answered, so
// that a batch costs one message each way and no stream set-up. A stream
// whose exchange failed is dropped; the next batch opens another.
//
// A batch falls back to the unary call when the stream could not carry it
// and nothing of it was decided: the node has no stream method (an older
// version: Unimplemented, after which the client uses unary calls only), or
// the stream ended before answering with OK or Canceled (the node is
// stopping, see streamserver.go). A
// node that is stopping refuses the unary call too, and the batch fails
// as any call to a node that is down.

// clientStream is one open stream of a PeerClient, used by one sender at a
// time.
type clientStream struct {
	cs     grpc.ClientStream
	cancel context.CancelFunc // ends the stream
	// timer cancels the stream when an exchange outlasts the client's
	// Timeout; armed per exchange, so it is allocated once per stream.
	timer *time.Timer
	used  bool // has answered a batch: Unimplemented cannot come from it
}

// streamPool holds a PeerClient's idle streams.
type streamPool struct {
	unaryOnly atomic.Bool // the node has no stream method
	mu        sync.Mutex
	idle      []*clientStream
}

// errFallback: the stream did not carry the batch and nothing of it was
// decided; send it as a unary call.
var errFallback = errors.New("transport: stream did not carry the batch")

// streamDesc and streamMethod of the PeerClient's service.
func (c *PeerClient) streamMethod() (*grpc.StreamDesc, string) {
	if c.api {
		return &pb.RateLimiter_ServiceDesc.Streams[0], transport.StreamRateLimitsMethod
	}
	return &pb.Peers_ServiceDesc.Streams[0], transport.StreamForwardMethod
}

// takeStream returns an idle stream, or a new one (not yet open: its
// opening is part of the first exchange, under the same timer).
//
// Idle streams are dropped when the connection is not ready: they belonged
// to a connection that has gone (the node restarted, say), and a batch
// sent on one would fail without reaching anybody.
func (c *PeerClient) takeStream() *clientStream {
	p := &c.streams
	if c.conn.GetState() != connectivity.Ready {
		c.closeStreams()
		return &clientStream{}
	}
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		st := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return st
	}
	p.mu.Unlock()
	return &clientStream{}
}

// putStream gives back a stream that answered its batch.
func (c *PeerClient) putStream(st *clientStream) {
	p := &c.streams
	p.mu.Lock()
	if len(p.idle) < c.maxInFlight && c.closing.Err() == nil {
		p.idle = append(p.idle, st)
		st = nil
	}
	p.mu.Unlock()
	if st != nil {
		st.cancel()
	}
}

// exchange sends b on a stream and reads its answer into b.reply. It
// returns errFallback when the batch should go as a unary call instead,
// and otherwise what the unary call would have: nil, or an error that
// classify understands. parent ends the exchange as it would the RPC.
func (c *PeerClient) exchange(parent context.Context, b *batch) error {
	st := c.takeStream()
	if st.cs == nil {
		if err := c.openStream(st); err != nil {
			return err
		}
	} else {
		st.timer.Reset(c.timeout)
	}
	stop := func() bool { return true }
	if parent != c.closing && parent.Done() != nil {
		stop = context.AfterFunc(parent, st.cancel)
	}
	sendErr := st.cs.SendMsg(&b.req)
	err := sendErr
	if err == nil || errors.Is(err, io.EOF) {
		// io.EOF: the stream had ended, the batch was not sent; RecvMsg
		// gives the stream's status.
		err = st.cs.RecvMsg(&b.reply)
	}
	ended := !stop() // parent ended: the stream is canceled
	timedOut := !st.timer.Stop()
	if err == nil {
		st.used = true
		if ended || timedOut {
			st.cancel() // answered in time, but the stream is gone
		} else {
			c.putStream(st)
		}
		return nil
	}
	st.cancel()
	return c.failed(st, err, sendErr, ended, timedOut)
}

// openStream opens st's stream, bounded by the client's timeout (st.timer
// cancels it) and ended by Close; a stand-in client marks it so.
func (c *PeerClient) openStream(st *clientStream) error {
	ctx, cancel := context.WithCancel(c.closing)
	st.cancel = cancel
	if c.standin {
		ctx = metadata.AppendToOutgoingContext(ctx, transport.StandinHeader, "1")
	}
	st.timer = time.AfterFunc(c.timeout, cancel)
	desc, method := c.streamMethod()
	cs, err := c.conn.NewStream(ctx, desc, method, grpc.ForceCodecV2(transport.Codec))
	if err != nil {
		timedOut := !st.timer.Stop()
		cancel()
		return streamErr(err, timedOut)
	}
	st.cs = cs
	return nil
}

// failed classifies the failure err of a batch on st, whose send returned
// sendErr: errFallback when the batch was surely not decided (the caller
// sends it again as a unary call), else the batch's error. ended: the
// caller's context ended; timedOut: the client's timeout did.
func (c *PeerClient) failed(st *clientStream, err, sendErr error, ended, timedOut bool) error {
	if !st.used && status.Code(err) == codes.Unimplemented {
		c.streams.unaryOnly.Store(true)
		return errFallback
	}
	if errors.Is(err, io.EOF) {
		return errFallback // the server ended the stream with OK before reading the batch
	}
	if !ended && !timedOut && c.closing.Err() == nil {
		switch status.Code(err) {
		case codes.Canceled:
			// The server cancels only idle streams (grpc reports the
			// canceled read itself): the batch was not read.
			return errFallback
		case codes.Unavailable:
			if st.used && errors.Is(sendErr, io.EOF) {
				// The connection died while the stream was idle (the
				// node restarted, say): the batch was never sent.
				return errFallback
			}
		}
	}
	return streamErr(err, timedOut)
}

// streamErr is the error of a failed exchange as the unary call would have
// failed: DeadlineExceeded when the timer ended it.
func streamErr(err error, timedOut bool) error {
	if timedOut {
		return status.Error(codes.DeadlineExceeded, "transport: no answer within the timeout: "+err.Error())
	}
	return err
}

// closeStreams ends the idle streams (at Close, the busy ones end with
// closing).
func (c *PeerClient) closeStreams() {
	p := &c.streams
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, st := range idle {
		st.cancel()
	}
}
