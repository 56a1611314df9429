package dial

import (
	"google.golang.org/grpc/mem"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/wire"
)

// The messages of the checks services as this package's clients hand them
// to transport's codec: Go types of ours, encoded and decoded by package
// wire, so that no generated message is built per item. The server's side
// is transport/server/messages.go.
//
//	checksRequest → request (encoded)    resultsReply ← answer (decoded)
//	encodedRequest (a PeerClient batch, already encoded)

// checksRequest is a request of checks, encoded as gRPC sends it (Client).
type checksRequest struct {
	checks []limit.Check
}

// Size is the length of the encoding (transport.Encoder).
func (r *checksRequest) Size() int { return wire.SizeChecks(r.checks) }

// AppendTo appends the encoding to b (transport.Encoder).
func (r *checksRequest) AppendTo(b []byte) ([]byte, error) {
	return wire.AppendChecks(b, r.checks, nil)
}

// encodedRequest is a request already in wire form: the concatenation of
// parts, each a run of items encoded by wire.AppendChecks.
type encodedRequest struct {
	parts [][]byte
}

// Buffers returns the parts for gRPC without copying them; they are not
// pooled, so the memory stays valid for as long as gRPC holds it.
func (r *encodedRequest) Buffers() mem.BufferSlice {
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

// Decode decodes the answer (transport.Decoder).
func (r *resultsReply) Decode(data []byte) (err error) {
	r.results, err = wire.DecodeResults(data, r.forward, r.max, r.results)
	return err
}
