package transport

// Regenerate the protobuf and gRPC code with the plugin versions pinned in
// go.mod (the tool directives):
//
//	go generate ./transport
//
// Needs protoc on PATH (Debian: protobuf-compiler).
//go:generate go build -o ../bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
//go:generate go build -o ../bin/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
//go:generate protoc -I proto --plugin=protoc-gen-go=../bin/protoc-gen-go --plugin=protoc-gen-go-grpc=../bin/protoc-gen-go-grpc --go_out=pb --go_opt=module=github.com/shardlimiter/shardlimiter/transport/pb --go-grpc_out=pb --go-grpc_opt=module=github.com/shardlimiter/shardlimiter/transport/pb shardlimiter/v1/shardlimiter.proto shardlimiter/v1/state.proto shardlimiter/v1/cluster.proto shardlimiter/v1/inspect.proto shardlimiter/v1/lease.proto
