// Package supervisorpb holds the protocol between the daemon and the
// machine's supervisor process (internal/supervisor). Regenerate with
// `go generate ./proto/...` (needs protoc on PATH; the protoc-gen-go plugins
// are pinned as tools in go.mod).
package supervisorpb

//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative supervisor.proto"
