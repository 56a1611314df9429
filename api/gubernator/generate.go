package gubernator

// Regenerate gubernator's API (package gubpb) with the plugin versions
// pinned in go.mod (the tool directives):
//
//	go generate ./api/gubernator
//
// Needs protoc on PATH (Debian: protobuf-compiler).
//go:generate go build -o ../../bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
//go:generate go build -o ../../bin/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
//go:generate protoc -I proto --plugin=protoc-gen-go=../../bin/protoc-gen-go --plugin=protoc-gen-go-grpc=../../bin/protoc-gen-go-grpc --go_out=gubpb --go_opt=module=github.com/shardlimiter/shardlimiter/api/gubernator/gubpb --go-grpc_out=gubpb --go-grpc_opt=module=github.com/shardlimiter/shardlimiter/api/gubernator/gubpb gubernator/gubernator.proto
