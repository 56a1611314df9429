// Package resp serves the Redis protocol (RESP2, and RESP3 after HELLO 3)
// on a listener of its own (--resp-addr, docs/REDIS.md): redis-cell's
// CL.THROTTLE with that module's semantics (an algorithm of its own,
// limit.Cell, decided by the key's owner like every check), SL.CHECK for
// shardlimiter's own algorithms and the rules files' rules by name, and
// what Redis clients send on connect and in pools (PING, ECHO, HELLO,
// AUTH, CLIENT, COMMAND, INFO, SELECT 0, QUIT).
//
// RESP is parsed and written by github.com/tidwall/redcon, behind a guard
// of this package (guard.go) that bounds what a connection may send and
// buffer, since redcon bounds nothing. Commands that a client pipelines
// are answered in order, and the checks among them decided as batches
// (up to Limits.MaxBatch each) through the node, so a pipeline costs the
// node what a gRPC batch does. Each connection is one party of the client
// listeners' fair in-flight bound (transport/server's Party): a batch
// that does not fit is answered with an error at once, never queued.
//
// The package meets the node through transport.Checker alone; package
// main hands it the node and wires the listener. A Server is safe for
// concurrent use; Serve runs until Close, which returns once every
// connection's goroutine has ended.
package resp
