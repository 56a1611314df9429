// Package client implements a Go client of shardlimiter that sends each
// check straight to the node that owns its key, and merges the checks of
// concurrent callers into shared calls.
//
// # Model
//
// A Client is configured with a few addresses of the cluster
// (Config.Targets: in Kubernetes the Service name is enough). It watches
// one node's ring over the Cluster service (a server-streaming RPC,
// shardlimiter.v1.Cluster/WatchMembers on the client port: the node sends
// its ring once at start and again on every change) and rebuilds the same
// snapshot with package ring. Each check then goes to its owner, found by
// its unique key exactly as the nodes route it, over a connection the
// client keeps to each member's client gRPC address. A group of chained
// checks shares a key, hence an owner, and stays together.
//
// Routing is an optimization, never a condition of correctness: the node
// that receives a check routes it again by its own ring and forwards it,
// once, to the owner when the client's ring was stale. When the client has
// no ring yet (or the nodes do not serve Cluster, or Config.NoRouting is
// set) every check goes to the targets. When an owner cannot be reached
// (the connection fails or times out), the client suspends it for a
// second and sends its checks to another live node, which forwards them
// or decides them as its fail policy says; the client reports an error
// only when no node could answer. A check retried this way after a timeout
// may have been counted by the owner too: the retry errs toward admitting
// less, never more.
//
// # Coalescing
//
// Per node, concurrent calls share RPCs by the rule of the nodes' own
// forwarding (dial.BatchClient): a call is sent at once while one of
// Config.MaxInFlight RPCs to that node is free, so an idle client adds no
// latency; while all are busy, the checks of the calls arriving meanwhile
// wait and leave together in the next RPC, up to Config.MaxBatch checks.
// Under load many Check calls of one check each become few RPCs of many
// checks, which is what a node answers most cheaply. Each RPC slot keeps a
// stream open to its node (RateLimiter.StreamRateLimits), so that an RPC
// is one message each way with no call set-up; a node without the stream
// method gets unary GetRateLimits calls.
//
// # Leases
//
// With Config.Leases the client decides the checks of its hot keys itself.
// A key checked more often than Config.LeaseThreshold times a second gets
// a lease: its owner takes a share of the key's capacity out of the key,
// exactly as if those hits had been admitted, and hands it to the client
// (shardlimiter.v1.Leases/Lease on the client port, served by api/lease).
// Check then admits from the lease with one atomic compare-and-swap and no
// RPC; a check that finds the lease short goes to the owner as before. A
// lease is asked for with the key's recent rate times 200 ms, renewed in
// the background (never in a check's path) once half of it is spent or
// near its end, and what is left is given back, and credited to the key,
// when it expires (about 400 ms after the request, before the owner's
// 500 ms) and on Close. A key over its limit gets a deny lease instead:
// the client refuses its checks locally until it ends. A node that does
// not own the key names its owner, and the client asks there.
//
// The cluster never admits more than the owner alone would: every hit the
// client admits was debited first. What a lease costs is the other way: a
// client that crashes (or whose release is lost) leaves its unused hits
// debited until the bucket refills, under-admission of at most its leases.
// Leases serve Check and the items of CheckBatch that are TOKEN_BUCKET
// checks with hits and a rule given (Rule.Limit > 0), without warm-up or
// behavior flags, outside a chained group; other checks go to the owners,
// a peek included. Leases need the
// ring (not NoRouting) and nodes that grant them to clients: --leases,
// and client certificates (mTLS) or --client-leases. A node that refuses
// (PermissionDenied; LeaseStats().Err) is not asked again for 30 s.
//
// # Concurrency and lifecycle
//
// A Client is safe for concurrent use. New starts one goroutine, the ring
// watch (none with NoRouting), and a second, the lease sweep, with
// Config.Leases; lease calls run in goroutines of their own while in
// flight, and gRPC keeps its own per connection; RPC senders run only
// while calls are in flight. Close gives back the leases, stops all of
// them and returns once they have exited. Every call accepted before Close is
// answered: by its result, or by ErrClosed; none is left waiting.
package client
