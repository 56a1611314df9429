// Package transport is what both ends of shardlimiter's own services share:
// their names (protocol.go), the [Checker] a server hands its batches to,
// the errors that classify a failed call and the gRPC and HTTP codes they
// are answered with ([Code], [HTTPStatus], [GRPCError]), the gRPC [Codec]
// and the interfaces of messages that encode themselves, the bounds of a
// message and the keepalive both ends agree on, the stand-in mark of a
// forwarded batch, and the conversions of the messages that are not
// batches (key states, inspections, the ring of the Cluster service).
//
// The two sides live in packages of their own, which never import each
// other: transport/server (the listeners on which each API registers, the
// admission and the fair bound, TLS, listener metrics) and transport/dial
// (the batching peer client, its streams, the state client, the plain
// client). The wire format of a batch of checks, of results and of a
// state push is package transport/wire's; the generated types of the
// other messages are transport/pb's. Each API is a package of its own
// (api/native, api/inspect, api/peers, api/gubernator, rls) that registers
// itself on a listener.
//
// The model is a batch in, a batch out. A server converts each wire request
// to a [limit.Check], hands the checks that converted to a Checker (the
// node) and answers every item in order: the Checker's [limit.Result] for
// the items it saw, a per-item error for those that did not convert.
// Protobuf types stop at the transport and API packages; everything
// outside speaks the limit vocabulary.
//
// Everything here is safe for concurrent use and starts nothing.
package transport
