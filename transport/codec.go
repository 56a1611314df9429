package transport

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the standard codec we delegate to
	"google.golang.org/grpc/mem"

	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// The gRPC codecs of this package. The wire format is the standard proto
// one (the content-subtype stays "proto"); only the Go side changes: the
// hot messages are encoded and decoded by hand (wire*.go) and everything
// else — health, reflection, any message we do not know — goes to the
// standard proto codec unchanged.

// codecName is the name the codecs report: the content-subtype of the
// standard codec, so that peers see no difference.
const codecName = "proto"

// stdCodec is grpc's registered proto codec.
func stdCodec() encoding.CodecV2 {
	c := encoding.GetCodecV2(codecName)
	if c == nil {
		panic("transport: grpc's proto codec is not registered") // imported above
	}
	return c
}

// serverCodec is installed on the GRPCServer with grpc.ForceServerCodecV2.
// Requests of the two services arrive as *checkBatch (see services.go).
// It is safe for concurrent use: every call gets its own encoder.
type serverCodec struct {
	std encoding.CodecV2
}

func newServerCodec() *serverCodec { return &serverCodec{std: stdCodec()} }

func (c *serverCodec) Name() string { return codecName }

func (c *serverCodec) Marshal(v any) (mem.BufferSlice, error) {
	var e responseEncoder
	switch m := v.(type) {
	case *pb.GetRateLimitsResponse:
		return marshalSized(e.sizeGet(m), func(b []byte) ([]byte, error) { return e.appendGet(b, m) })
	case *pb.ForwardRateLimitsResponse:
		return marshalSized(e.sizeForward(m), func(b []byte) ([]byte, error) { return e.appendForward(b, m) })
	}
	return c.std.Marshal(v)
}

func (c *serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	in, ok := v.(*checkBatch)
	if !ok {
		return c.std.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	in.decode(buf.ReadOnlyData()) // copies the strings it keeps: buf is freed
	return nil
}

// clientCodec is passed by Client and PeerClient on each call with
// grpc.ForceCodecV2: requests go out as encoded by request.go, answers are
// decoded into a resultsReply (reply.go).
type clientCodec struct {
	std encoding.CodecV2
}

// theClientCodec is shared by every client; it holds no state.
var theClientCodec = &clientCodec{std: stdCodec()}

func (c *clientCodec) Name() string { return codecName }

func (c *clientCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *checksRequest:
		return marshalSized(sizeChecks(m.checks), func(b []byte) ([]byte, error) { return appendChecks(b, m.checks, nil) })
	case *encodedRequest:
		return m.buffers(), nil
	}
	return c.std.Marshal(v)
}

func (c *clientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*resultsReply)
	if !ok {
		return c.std.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return r.decode(buf.ReadOnlyData()) // copies what it keeps: buf is freed
}

// marshalSized allocates size bytes, pooled when large enough to be worth
// it (as the standard codec does), and lets fill append the message.
func marshalSized(size int, fill func([]byte) ([]byte, error)) (mem.BufferSlice, error) {
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := fill(make([]byte, 0, size))
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	b, err := fill((*buf)[:0])
	if err == nil && len(b) != size {
		err = fmt.Errorf("transport: encoded %d bytes, sized %d", len(b), size)
	}
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}
