// Package gubernatorcompat proves shardlimiter a drop-in for gubernator:
// its tests are the cases of gubernator's own functional_test.go
// (gubernator-io/gubernator v2.19.1-4) that use only its public API,
// ported as table tests and run through gubernator's Go client against
// the real shardlimiter binary, one node and three. It is a module of its
// own so that gubernator's client and its dependencies stay out of
// shardlimiter's module (and its proto registrations out of shardlimiter's
// binaries). docs/GUBERNATOR.md describes the API.
package gubernatorcompat
