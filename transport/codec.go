package transport

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the standard codec we delegate to
	"google.golang.org/grpc/mem"
)

// codec is the gRPC codec of the servers (grpc.ForceServerCodecV2) and of
// the clients (grpc.ForceCodecV2 on each call) of packages server and dial. The wire format is the standard
// proto one and the content-subtype stays "proto", so that peers, grpcurl
// and generated clients see no difference; only the Go side changes: a message that
// is an [Encoder], [Encoded] or [Decoder] (the batches of server/messages.go
// and dial/messages.go, State.Push's) is encoded or decoded by itself,
// through package wire, and everything else (health, reflection,
// State.Pull, any message we do not know) goes to grpc's standard proto
// codec unchanged. It holds no state and is safe for concurrent use.
type codec struct {
	std encoding.CodecV2
}

// codecName is the content-subtype of the standard codec.
const codecName = "proto"

// Codec is shared by the servers and the clients.
var Codec encoding.CodecV2 = newCodec()

// Encoder is a message that encodes itself (through package wire).
type Encoder interface {
	// Size is the length of the encoding, exactly.
	Size() int
	AppendTo(b []byte) ([]byte, error)
}

// Encoded is a message already in wire form.
type Encoded interface {
	// Buffers returns the encoding; gRPC holds them until it has sent them.
	Buffers() mem.BufferSlice
}

// Bounded is an [Encoder] that can bound the length of its encoding more
// cheaply than it can size it exactly: the codec then encodes it once, into
// a buffer of the bound, instead of sizing it first.
type Bounded interface {
	Encoder
	// SizeBound is at least the length of the encoding. A bound too
	// small costs a larger buffer, not a wrong encoding.
	SizeBound() int
}

// Reusable is a [Bounded] message whose memory is reused once it is
// encoded: the codec calls Encoded once its encoding is made (or has
// failed), and the message must not be read after that. A message that
// gRPC never marshals (the call ended first) is simply not reused.
type Reusable interface {
	Bounded
	Encoded()
}

// Decoder is a message that decodes itself. Decode must copy what it
// keeps of data, which is freed when it returns.
type Decoder interface {
	Decode(data []byte) error
}

func newCodec() *codec {
	std := encoding.GetCodecV2(codecName)
	if std == nil {
		panic("transport: grpc's proto codec is not registered") // imported above
	}
	return &codec{std: std}
}

func (c *codec) Name() string { return codecName }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case Bounded:
		out, err := marshalBounded(m)
		if d, ok := m.(Reusable); ok {
			d.Encoded()
		}
		return out, err
	case Encoder:
		return marshalSized(m)
	case Encoded:
		return m.Buffers(), nil
	}
	return c.std.Marshal(v)
}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(Decoder)
	if !ok {
		return c.std.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return m.Decode(data[0].ReadOnlyData()) // copies what it keeps
	}
	// A message of several frames is copied into one buffer of our pool,
	// which does not clear it first (bufpool.go): the copy overwrites
	// every byte that Decode reads.
	buf := bufs.Get(data.Len())
	defer bufs.Put(buf)
	data.CopyTo(*buf)
	return m.Decode(*buf) // copies what it keeps: buf goes back to the pool
}

// minPooled is the smallest encoding marshalInto takes from the codec's
// buffer pool (bufpool.go). The standard codec pools from 1 KiB up; an answer of a few dozen
// items is smaller, and a pooled buffer saves it two of its three
// allocations (the bytes, and their boxing as a mem.Buffer) and gives the
// bytes back once sent.
const minPooled = 256

// marshalSized encodes m into a buffer of its exact size.
func marshalSized(m Encoder) (mem.BufferSlice, error) { return marshalInto(m, m.Size(), true) }

// marshalBounded encodes m once into a buffer of its bound: no sizing pass.
func marshalBounded(m Bounded) (mem.BufferSlice, error) {
	return marshalInto(m, m.SizeBound(), false)
}

// marshalInto encodes m into a buffer of n bytes, pooled when large enough
// to be worth it. With exact, n is m's size and an encoding of another
// length is an error; else n is a bound, and an encoding that outgrew it
// is returned in the array it grew into, the pooled buffer going back to
// the pool at once: the answer is right either way.
func marshalInto(m Encoder, n int, exact bool) (mem.BufferSlice, error) {
	if n < minPooled {
		b, err := m.AppendTo(make([]byte, 0, n))
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := &bufs // not cleared: the buffer is cut to what AppendTo wrote (bufpool.go)
	buf := pool.Get(n)
	b, err := m.AppendTo((*buf)[:0])
	if err == nil && exact && len(b) != n {
		err = fmt.Errorf("transport: encoded %d bytes, sized %d", len(b), n)
	}
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	if cap(b) != cap(*buf) { // grew: b is a new array
		pool.Put(buf)
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}
