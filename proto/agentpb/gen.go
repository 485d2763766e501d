// Package agentpb holds the agent stream's protocol buffers and gRPC service.
// Regenerate with `go generate ./proto/...` (needs protoc on PATH; the
// protoc-gen-go plugins are pinned as tools in go.mod).
package agentpb

//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative agent.proto"
