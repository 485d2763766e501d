package machine

import "time"

// DefaultTTL is how long a machine may go unheard before its units are
// started elsewhere when nothing sets it ([X-Fleet] LostAfter=, the
// daemon's --agent-ttl): the agent's heartbeat is a third of it, so two
// lost heartbeats are survived. Every default of the agent TTL is this one.
const DefaultTTL = 20 * time.Second
