package agentpb

import "google.golang.org/grpc/codes"

// CodeIncompatible is the status a leader ends an agent's stream with when
// the agent's protocol version (Machine.protocol) is outside the leader's
// window; the message names both versions. FailedPrecondition and the
// other codes the stream ends with mean something else (another term, a
// name in use), so the agent tells this one apart by its own code.
const CodeIncompatible = codes.OutOfRange
