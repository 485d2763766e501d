package agentpb

import "google.golang.org/grpc"

// The agent stream's HTTP/2 transport settings, the same at both ends.
//
// A leader holds one connection per machine: thousands of them, each
// carrying small messages. gRPC's defaults suit few busy connections:
//
//   - A dynamic flow-control window makes each end send a BDP probe (a
//     PING, answered by a PING) with every burst of data it receives, about
//     doubling the writes (one syscall each) on both sides; in a profile of
//     400,000 units on 4,000 agents, writes were a quarter of the leader's
//     CPU. A fixed window of WindowBytes turns the probes off; it still
//     carries a machine's full desired set (tens of KiB for hundreds of
//     units) without waiting for a window update.
//   - Each connection keeps its own write buffer (32 KiB) whether or not it
//     has anything to write; a shared one is taken from a pool while
//     writing and given back after. The pool keeps what it was given until
//     two collections have passed, and while a leader sends 10,000 agents
//     their units, nearly every connection writes at once: 32 KiB buffers
//     were 293 MB of a million-unit leader's 1.1 GB heap. They are
//     WriteBufferBytes: an agent's share of a slice of placements (a few
//     hundred units) takes two or three writes instead of one.
//   - Each connection also reads through a buffer of its own, allocated
//     when it is accepted and held for its life (32 KiB by default: 330 MB
//     of a leader holding 10,000 agents' streams). gRPC would read into
//     pooled buffers instead, only while data is there, but only from a
//     bare TCP connection, and the leader's are TLS or counted by the
//     daemon's connection limit. An agent's messages are small; one larger
//     than the buffer is read straight into its own, so ReadBufferBytes
//     costs a burst of small messages a few more reads, not a copy.

// WindowBytes is the stream's and the connection's flow-control window.
const WindowBytes = 1 << 20

// WriteBufferBytes is the size of the buffers a connection writes through.
const WriteBufferBytes = 8 << 10

// ReadBufferBytes is the size of the buffer a connection reads through.
const ReadBufferBytes = 4 << 10

// ServerTransport are the leader's gRPC server options for agent streams.
func ServerTransport() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(WindowBytes),
		grpc.InitialConnWindowSize(WindowBytes),
		grpc.SharedWriteBuffer(true),
		grpc.WriteBufferSize(WriteBufferBytes),
		grpc.ReadBufferSize(ReadBufferBytes),
	}
}

// ClientTransport are the agent's dial options for its stream.
func ClientTransport() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(WindowBytes),
		grpc.WithInitialConnWindowSize(WindowBytes),
		grpc.WithSharedWriteBuffer(true),
		grpc.WithWriteBufferSize(WriteBufferBytes),
		grpc.WithReadBufferSize(ReadBufferBytes),
	}
}
