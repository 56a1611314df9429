// Package native implements shardlimiter's own client API,
// shardlimiter.v1: RateLimiter (GetRateLimits and its stream) and Cluster
// (the ring, for the Go client) on the client gRPC listener, and POST
// /v1/GetRateLimits on the HTTP listener.
//
// It registers itself on the listeners it is given (Register,
// RegisterHTTP), as handlers do on a ServeMux; the listeners of package
// transport/server do the admission, the codec and the metrics. A batch
// goes to a transport.Checker (the node) and its answers come back in
// order, one per item; an item that does not convert is answered with its
// error in place and never reaches the Checker. Protobuf types stop here.
package native

import (
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// Register registers RateLimiter, answered by c, on the client listener l,
// and Cluster when members is not nil.
func Register(l *server.Listener, c transport.Checker, members MembershipSource) {
	l.RegisterChecks(&pb.RateLimiter_ServiceDesc, c, server.Clients)
	if members != nil {
		l.Register(&pb.Cluster_ServiceDesc, &clusterServer{src: members, stop: l.Stopping()})
	}
}
