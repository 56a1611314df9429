package transport

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the standard codec we delegate to
	"google.golang.org/grpc/mem"
)

// codec is the gRPC codec of the server (grpc.ForceServerCodecV2) and of our
// clients (grpc.ForceCodecV2 on each call). The wire format is the standard
// proto one and the content-subtype stays "proto", so that peers, grpcurl
// and generated clients see no difference; only the Go side changes: the
// messages of messages.go and State.Push's (state.go) are encoded and
// decoded by package wire, and everything else (health, reflection,
// State.Pull, any message we do not know) goes to grpc's standard proto
// codec unchanged. It holds no state and is safe for concurrent use.
type codec struct {
	std encoding.CodecV2
}

// codecName is the content-subtype of the standard codec.
const codecName = "proto"

// theCodec is shared by the servers and the clients.
var theCodec = newCodec()

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
	case wireMessage:
		return marshalSized(m)
	case *encodedRequest:
		return m.buffers(), nil
	}
	return c.std.Marshal(v)
}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(wireReply)
	if !ok {
		return c.std.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return m.decode(buf.ReadOnlyData()) // copies what it keeps: buf is freed
}

// marshalSized encodes m into a buffer of its exact size, pooled when large
// enough to be worth it (as the standard codec does).
func marshalSized(m wireMessage) (mem.BufferSlice, error) {
	size := m.size()
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := m.appendTo(make([]byte, 0, size))
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	b, err := m.appendTo((*buf)[:0])
	if err == nil && len(b) != size {
		err = fmt.Errorf("transport: encoded %d bytes, sized %d", len(b), size)
	}
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}
