package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/version"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// agentConn is one agent's stream. Assignments for it are queued in
// pending and sent by the term's senders (sendPool; in the etcd registry
// mode, by the machine's writer), so the loop never blocks on a slow
// agent: a unit changed twice before the agent read it is sent once.
// What is queued is the unit's record (records are never changed once
// published): the sender makes the assignment, off the term's lock, which
// a million units stopped at once held for the making of a million.
type agentConn struct {
	machine string
	// since is when the stream was opened (the Hello's arrival, the
	// engine's clock): set once, before the connection is shared.
	since time.Time
	// heardNano and sentNano are when the agent was last heard and last
	// sent anything (Unix nanoseconds of the engine's clock): heartbeats
	// take no lock.
	heardNano, sentNano atomic.Int64
	mu                  sync.Mutex
	full                bool                // the next send is the full set
	pending             map[string]*unitRec // nil value: removed
	destroyed           map[string]bool     // removed because destroyed: the agent drops their logs
	wake                chan struct{}
	done                chan struct{}
	once                sync.Once
	// agentTTL is the leader's, told to the agent with each full set.
	agentTTL time.Duration
	// in holds the agent's reports until the leader's state takes them.
	in inbox
	// toldHeartbeat is the heartbeat interval the agent was last told
	// (nanoseconds; heartbeat.go).
	toldHeartbeat atomic.Int64
	// hold is the term's: while it is on, queued assignments do not wake
	// the sender (see wakeHold).
	hold *wakeHold
	// byHash: the agent takes files by key (Hello.files_by_hash); texts
	// holds the key this stream gave each text it sent, by the text's
	// content key (take).
	byHash bool
	texts  map[string]string
	// hello is the agent's Hello, for the sum of the desired set it holds
	// (sendFull), set before the loop sees the stream; unchanged, under mu,
	// says the full set to send is that one (take).
	hello     *agentpb.Hello
	unchanged bool
	// pool serves the stream's sends (nil: its writer takes wake); its
	// place there is sendState, under the pool's lock.
	pool      *sendPool
	sendState sendState
	// out is the stream's sending end while its handler runs, under
	// sendMu, which a send holds.
	sendMu sync.Mutex
	out    *streamOut
}

// maxSentFiles bounds the file texts an agent keeps by key for a stream:
// past it the leader starts the table again (files_reset). Each is a text
// a template's instances share, so a machine holds a few.
const maxSentFiles = 256

// wakeHold gathers the streams that assignments were queued for while a
// pass applies a slice of placements, so that each agent's sender wakes
// once for the slice and sends its units in one message. Woken one by
// one, a sender took each unit as it was queued: an agent got its units of
// a slice in as many messages, and a million units took a message a unit
// on both sides. The loop's.
type wakeHold struct {
	on    bool
	conns map[*agentConn]struct{}
}

// start holds wakes until release.
func (h *wakeHold) start() { h.on = true }

// release ends the hold and returns the streams to wake.
func (h *wakeHold) release() map[*agentConn]struct{} {
	h.on = false
	conns := h.conns
	h.conns = nil
	return conns
}

func wakeAll(conns map[*agentConn]struct{}) {
	for c := range conns {
		signalConn(c)
	}
}

// wakeSender wakes c's sender, or records it to wake once the hold ends.
// It runs on the loop.
func (c *agentConn) wakeSender() {
	if c.hold != nil && c.hold.on {
		if c.hold.conns == nil {
			c.hold.conns = map[*agentConn]struct{}{}
		}
		c.hold.conns[c] = struct{}{}
		return
	}
	signalConn(c)
}

func newAgentConn(machine string) *agentConn {
	return &agentConn{machine: machine, pending: map[string]*unitRec{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (c *agentConn) close() { c.once.Do(func() { close(c.done) }) }

func (c *agentConn) heard() time.Time { return unixNano(c.heardNano.Load()) }
func (c *agentConn) sent() time.Time  { return unixNano(c.sentNano.Load()) }

func unixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (c *agentConn) queue(name string, r *unitRec) {
	c.mu.Lock()
	c.pending[name] = r
	if r != nil {
		delete(c.destroyed, name) // made again since
	}
	c.mu.Unlock()
	c.wakeSender()
}

// queueDestroyed queues the removal of a unit that was destroyed.
func (c *agentConn) queueDestroyed(name string) {
	c.mu.Lock()
	c.pending[name] = nil
	if c.destroyed == nil {
		c.destroyed = map[string]bool{}
	}
	c.destroyed[name] = true
	c.mu.Unlock()
	c.wakeSender()
}

func signalConn(c *agentConn) {
	if c.pool != nil {
		c.pool.ready(c)
		return
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// push queues an assignment (nil: removal) for the machine's agent, if it is
// connected. It runs on the loop.
func (m *machineRec) push(name string, r *unitRec) {
	if m.conn != nil {
		m.conn.queue(name, r)
	}
}

// pushDestroyed queues the removal of a destroyed unit for the machine's
// agent, if it is connected. It runs on the loop.
func (m *machineRec) pushDestroyed(name string) {
	if m.conn != nil {
		m.conn.queueDestroyed(name)
	}
}

// take returns the message to send, or nil when nothing is pending.
func (c *agentConn) take(rev int64) *agentpb.EngineMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 && !c.full && len(c.destroyed) == 0 {
		return nil
	}
	as := &agentpb.Assignments{Full: c.full, LeaderRev: rev}
	if c.full {
		as.AgentTtlMs = c.agentTTL.Milliseconds()
	}
	if c.full && c.unchanged {
		// The agent keeps the set it has: what is pending are changes to
		// it, removals named.
		as.Unchanged, c.unchanged = true, false
	}
	if c.full || len(c.texts) >= maxSentFiles {
		as.FilesReset = !c.full && c.byHash
		c.texts = nil
	}
	var memo struct { // the last file and text sent by key
		file         *unit.File
		shared       bool
		content, key string
	}
	for name, r := range c.pending {
		if r == nil {
			if !c.full || as.Unchanged {
				as.Removed = append(as.Removed, name)
			}
			continue
		}
		a := assignment(r)
		if c.byHash && r.content != "" { // an instance: its template's text
			if r.content == memo.content { // instances of a template come together
				a.File, a.FileKey = "", memo.key
			} else {
				memo.content, memo.key = r.content, c.sendByKey(as, a, r.content)
			}
			a.Hash = "" // the agent hashes the file as it parses it
		}
		as.Units = append(as.Units, a)
	}
	for name := range c.destroyed {
		as.Destroyed = append(as.Destroyed, name)
	}
	sort.Strings(as.Destroyed)
	c.full = false
	c.pending = map[string]*unitRec{}
	c.destroyed = nil
	return &agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: as}}
}

// sendByKey leaves a's file out, naming it by a key of this stream's, and
// sends its text in as's files unless this stream sent it already: the
// files of instances, each its template's text (specifiers are expanded
// where it is parsed, from the instance's name), whose content key is
// content. A machine running a thousand instances gets their file once. The
// key is a number the leader gives each text it sends on the stream,
// shorter than any content hash (many a unit file is shorter than one).
// Callers hold c.mu.
func (c *agentConn) sendByKey(as *agentpb.Assignments, a *agentpb.Assignment, content string) string {
	key, ok := c.texts[content]
	if !ok {
		if c.texts == nil {
			c.texts = map[string]string{}
		}
		key = strconv.Itoa(len(c.texts) + 1)
		c.texts[content] = key
		if as.Files == nil {
			as.Files = map[string]string{}
		}
		as.Files[key] = a.File
	}
	a.File, a.FileKey = "", key
	return key
}

// Connect serves one agent's stream while this engine leads.
func (e *Engine) Connect(stream agentpb.Engine_ConnectServer) error {
	t := e.leaderOnceLoaded(stream.Context())
	if t == nil {
		return status.Error(codes.FailedPrecondition, "not the leader")
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if err := e.protocolAllowed(hello.GetMachine()); err != nil {
		return err
	}
	if err := checkHello(hello); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := e.helloAllowed(stream.Context(), hello.Machine); err != nil {
		return err
	}
	if hello.LeaderRev != 0 && hello.LeaderRev != t.info.Rev {
		return status.Errorf(codes.FailedPrecondition, "stale leader revision %d; the leader's is %d", hello.LeaderRev, t.info.Rev)
	}
	conn, err := t.attach(hello)
	if errors.Is(err, errTermOver) {
		return status.Error(codes.Unavailable, "leadership term ended")
	}
	if err != nil {
		e.log.Warn("refused an agent's Hello", "machine", hello.Machine.Id, "err", err)
		return status.Error(codes.AlreadyExists, err.Error())
	}
	defer t.detach(conn)
	conn.byHash = hello.FilesByHash // before its sends are served, below
	t.streams.Add(1)
	defer t.streams.Add(-1)
	t.lastAttach.Store(time.Now().UnixNano())
	e.cfg.Metrics.AgentStreams.Inc()
	defer e.cfg.Metrics.AgentStreams.Dec()
	log := e.log.With("agent", conn.machine, "leader_rev", t.info.Rev)
	log.Debug("agent connected", "units", len(hello.Units))

	// The stream is read on a goroutine of its own and written by the
	// term's senders; this one waits for its end. The reader ends once
	// this handler returns (the stream's context ends with it), if not
	// before.
	recvErr := make(chan error, 1)
	go func() { recvErr <- t.recvLoop(stream, conn) }()
	err = t.wait(stream, conn, recvErr)
	switch {
	case errors.Is(err, errLeft):
		log.Info("machine left the cluster; its units are placed elsewhere")
		return nil
	case isClosed(conn.done):
		return status.Error(codes.Aborted, "replaced by a newer stream from the same machine")
	case t.ctx.Err() != nil:
		return status.Error(codes.Unavailable, "leadership term ended")
	}
	log.Debug("agent stream ended", "err", err)
	return err
}

// recvLoop reads the agent's messages until the stream fails or the
// machine leaves (errLeft).
func (t *term) recvLoop(stream agentpb.Engine_ConnectServer, conn *agentConn) error {
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		if u := msg.GetUpdate(); u != nil {
			if err := checkUpdate(u); err != nil {
				return status.Errorf(codes.InvalidArgument, "machine %s: %v", conn.machine, err)
			}
		}
		if msg.GetLeave() != nil {
			t.leave(conn)
			return errLeft
		}
		t.received(conn, msg)
	}
}

// protocolAllowed refuses a Hello whose agent protocol is outside this
// leader's window (agentpb.CodeIncompatible), naming both ends' releases
// and protocols. It is checked first: a Hello of a far newer protocol may
// not even be shaped as this leader expects.
func (e *Engine) protocolAllowed(m *agentpb.Machine) error {
	if m == nil {
		return nil // checkHello says what is missing
	}
	if err := e.checkProtocol(m); err != nil {
		e.log.Warn("refused an agent's Hello", "machine", m.Id, "err", err)
		return status.Error(agentpb.CodeIncompatible, err.Error())
	}
	return nil
}

// checkProtocol returns an error naming both ends when machine m's agent
// protocol is outside this leader's window.
func (e *Engine) checkProtocol(m *agentpb.Machine) error {
	self := version.Peer{What: "leader " + e.cfg.Machine, Release: version.Get().Short(), Protocol: version.ProtocolVersion}
	peer := version.Peer{What: "machine " + m.Id, Release: m.Version, Protocol: version.PeerProtocol(m.Protocol)}
	return version.CheckProtocol(self, version.ProtocolWindow(), peer)
}

// helloAllowed refuses a Hello from a peer that may not speak for m
// (Config.AuthorizeAgent): another machine's agent, one whose certificate
// the cluster's CA did not sign, or one claiming an IP or API address its
// certificate does not cover (the leader sends reads of its units' journals
// there). It is checked before the stream touches any state, so a refused
// Hello cuts no agent off and learns nothing of the machine's units.
func (e *Engine) helloAllowed(ctx context.Context, m *agentpb.Machine) error {
	if e.cfg.AuthorizeAgent == nil {
		return nil
	}
	if err := e.cfg.AuthorizeAgent(ctx, m.Id, m.Ip, m.ApiAddr); err != nil {
		e.log.Warn("refused an agent's Hello", "machine", m.Id, "err", err)
		return status.Errorf(codes.PermissionDenied, "hello as machine %q refused: %v", m.Id, err)
	}
	return nil
}

// streamOut is a stream's sending end, which its handler gives the
// term's senders: its interval between heartbeats and the timer that
// readies it for the next, and where a failed send is told.
type streamOut struct {
	stream      agentpb.Engine_ConnectServer
	interval    time.Duration
	enginesSent uint64
	hb          *time.Timer
	hbDue       atomic.Bool
	failed      chan error
}

// wait gives the stream's sends to the term's senders and waits until it
// is replaced or the term ends (nil), a send fails, or the reader ends
// (recvErr, with its error). No send is under way or begins once it
// returns.
func (t *term) wait(stream agentpb.Engine_ConnectServer, c *agentConn, recvErr <-chan error) error {
	o := &streamOut{stream: stream, interval: t.heartbeat(), failed: make(chan error, 1)}
	o.hb = time.AfterFunc(o.interval, func() {
		o.hbDue.Store(true)
		signalConn(c)
	})
	c.sendMu.Lock()
	c.out = o
	c.sendMu.Unlock()
	signalConn(c) // whatever was queued before
	var err error
	select {
	case <-c.done:
	case err = <-o.failed:
	case err = <-recvErr:
	case <-t.ctx.Done():
	case <-stream.Context().Done():
		err = stream.Context().Err()
	}
	c.sendMu.Lock()
	c.out = nil
	c.sendMu.Unlock()
	o.hb.Stop()
	return err
}

// serveStream sends the agent on c its assignments, or a heartbeat when
// one is due and nothing else is to be sent, each stamped with the
// leader's monotonic send time: the agent times its singleton units'
// deadline from it. Nothing is sent while the term's lease is not known
// to be held (a deposed leader must not renew anyone's deadline) or while
// the agent has been silent for muteAfter (a frozen agent would read the
// queued messages late; the leader's count of the machine's cut-off time
// starts from the last message it sent). The term's senders call it
// (sendPool), never twice at once for one stream.
func (t *term) serveStream(c *agentConn) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	o := c.out
	if o == nil {
		return // not yet handed over (the handler readies it), or ended
	}
	if !t.maySpeak(c) {
		if o.hbDue.Swap(false) {
			o.hb.Reset(o.interval)
		}
		return
	}
	msg := c.take(t.info.Rev)
	if msg == nil {
		if !o.hbDue.Swap(false) {
			return
		}
		msg = &agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{UnixNano: t.e.cfg.Now().UnixNano()}}}
	}
	if err := t.sendOn(c, o, msg); err != nil {
		c.out = nil // no more sends: the handler ends the stream
		o.failed <- err
		return
	}
	o.hbDue.Store(false)
	o.hb.Reset(o.interval)
}

// sendOn sends msg on o's stream with the leader's send time and heartbeat
// interval, and the engines' addresses when they changed since the stream
// was last told. Callers hold c.sendMu.
func (t *term) sendOn(c *agentConn, o *streamOut, msg *agentpb.EngineMessage) error {
	withEngines(msg, &t.engines, &o.enginesSent)
	now := t.e.cfg.Now()
	msg.SentMonoNano = int64(t.e.cfg.Mono())
	// Every message tells the interval; a shorter one counts once sent, a
	// longer one once the agent can have read it (muteAfterFor takes the
	// longer of the two meanwhile).
	o.interval = t.heartbeat()
	msg.HeartbeatMs = max(o.interval.Milliseconds(), 1)
	if told := time.Duration(c.toldHeartbeat.Load()); o.interval > told || told == 0 {
		c.toldHeartbeat.Store(int64(o.interval))
	}
	c.sentNano.Store(now.UnixNano())
	err := o.stream.Send(msg)
	c.toldHeartbeat.Store(int64(o.interval))
	return err
}

// maySpeak reports whether the leader may send c anything now: its lease
// is known to be held and the agent has spoken within muteAfter.
func (t *term) maySpeak(c *agentConn) bool {
	now := t.e.cfg.Now()
	if t.el != nil && !t.el.Valid(time.Now()) {
		return false
	}
	return now.Sub(c.heard()) <= t.muteAfterFor(c)
}

// errLeft ends the stream of an agent that left the cluster.
var errLeft = errors.New("the machine left the cluster")

// attach registers an agent's stream and queues its full desired set, unless
// the machine's name is held by another live daemon (nameInUse): the loop
// decides (attachInput), and the stream waits for its answer.
func (t *term) attach(h *agentpb.Hello) (*agentConn, error) {
	at := t.e.cfg.Now()
	conn := t.newConn(h.Machine.Id, at)
	conn.pool = t.senders
	conn.hello = &agentpb.Hello{WantsCount: h.WantsCount, WantsDigest: h.WantsDigest} // not the states: garbage once taken
	res := make(chan error, 1)
	t.inbox.put(&attachInput{pm: h.Machine, units: h.Units, conn: conn, at: at, check: true, res: res})
	select {
	case err := <-res:
		if err != nil {
			return nil, err
		}
		return conn, nil
	case <-t.ctx.Done():
		return nil, errTermOver
	}
}

// newConn makes the stream of machine id's agent, heard at.
func (t *term) newConn(id string, at time.Time) *agentConn {
	conn := newAgentConn(id)
	conn.since = at
	conn.hold = &t.hold
	conn.agentTTL = t.e.cfg.AgentTTL
	conn.heardNano.Store(at.UnixNano())
	return conn
}

// nameInUse returns an error naming the daemon that holds machine pm.Id if
// it is live (its stream open and heard within muteAfter) and is another
// instance (another data dir: another machine took the same name). A
// daemon restarted on the same data dir has the same instance and takes
// its machine over, as does one whose old stream is not live. Daemons that
// do not say their instance (older versions) are not compared. It runs on
// the loop.
func (t *term) nameInUse(pm *agentpb.Machine, now time.Time) error {
	m := t.machines[pm.Id]
	if m == nil || m.conn == nil || !t.reachable(m, now) {
		return nil
	}
	if m.info.Instance == "" || pm.Instance == "" || m.info.Instance == pm.Instance {
		return nil
	}
	return fmt.Errorf("machine name %q is already in use by a live daemon (IP %s, API %s, instance %s; this daemon is instance %s): give this one another --name, or stop that one first",
		pm.Id, orNone(m.info.IP), orNone(m.info.APIAddr), m.info.Instance, pm.Instance)
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// attachLocked registers conn, the stream of machine pm heard at, with the
// states it reports. It runs on the loop (attachInput), which pokes itself.
func (t *term) attachLocked(pm *agentpb.Machine, units []*agentpb.UnitStatus, conn *agentConn, at time.Time) {
	m := t.machine(pm.Id)
	if m.conn != nil {
		m.conn.close()
	}
	m.left = false
	m.conn = conn
	m.lastSeen = at
	m.info = machineInfo(pm)
	eachState(m, func(name string, _ storedStatus) { t.viewChanged(name) })
	// Each reported state keeps when its Active state was first seen, if
	// the machine reported the same before; every other state is dropped.
	sts := t.attachScratch(len(units))
	defer clear(sts) // no reference kept to the Hello's strings
	// The states are looked up by the machine's own list of units (slots)
	// rather than through the record of each in t.units: two lookups a
	// state in a map of a million were a fifth of a new leader's loop
	// while 10,000 agents came back.
	slots := t.slotsOf(m)
	defer clear(slots)
	for i, s := range units {
		t.viewChanged(s.Name)
		sts[i] = fromProto(pm.Id, s)
		if p, ok := stateIn(m, slots, s.Name); ok && p.active() == sts[i].Active {
			sts[i].Observed = unixNano(p.observed)
		} else {
			sts[i].Observed = m.lastSeen
		}
	}
	clearStates(m)
	for _, st := range sts {
		putStateIn(m, slots, st)
	}
	// The loop sends the full desired set (scheduled and global units) as
	// soon as it runs: deciding which global units fit needs the scheduler.
	m.needFull = true
	t.machineEvent(pm.Id, true)
}

// attachScratch returns the loop's slice for a Hello's n states, reused
// from Hello to Hello: 10,000 agents reconnecting to a new leader of a
// million units made a million states' worth of it, garbage for a
// collector with a large heap to mark.
func (t *term) attachScratch(n int) []agentStatus {
	if cap(t.scratchStates) < n {
		t.scratchStates = make([]agentStatus, n)
	}
	return t.scratchStates[:n]
}

// leave has the loop unregister a machine whose agent left the cluster
// (leaveInput). The caller closes conn.
func (t *term) leave(conn *agentConn) {
	t.inbox.put(&leaveInput{conn: conn})
}

// detach closes a stream that ended and has the loop unregister it.
func (t *term) detach(conn *agentConn) {
	conn.close()
	t.inbox.put(&detachInput{conn: conn, at: t.e.cfg.Now()})
}

func (t *term) received(conn *agentConn, msg *agentpb.AgentMessage) {
	now := t.e.cfg.Now()
	prev := conn.heard()
	conn.heardNano.Store(now.UnixNano())
	if now.Sub(prev) > t.muteAfterFor(conn) {
		// The agent speaks again after a silence: the leader speaks to it
		// again, and the next pass sees the machine reachable.
		signalConn(conn)
		t.poke()
	}
	if u := msg.GetUpdate(); u != nil {
		t.report(conn, u) // applied by the inbox's goroutine (inbox.go)
	}
}

// intern returns the canonical copy of s.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

func machineInfo(pm *agentpb.Machine) MachineInfo {
	return MachineInfo{ID: pm.Id, IP: pm.Ip, Metadata: pm.Metadata, APIAddr: pm.ApiAddr, Version: pm.Version, Protocol: version.PeerProtocol(pm.Protocol),
		CPUPercent: pm.CpuPercent, MemoryBytes: pm.MemoryBytes, Drivers: unit.DriversFromNames(pm.Drivers), Instance: pm.Instance}
}

// fromProto converts a reported status. The strings that take few values
// across units (hash, states, result) are interned: the leader holds a
// status per unit, and a million copies of "active" cost 16 MB.
func fromProto(machine string, s *agentpb.UnitStatus) agentStatus {
	st := agentStatus{Applied: intern(s.Applied), Status: unit.Status{
		Name: s.Name, Hash: intern(s.Hash), Machine: machine, Load: intern(s.Load), Active: intern(s.Active), Sub: intern(s.Sub),
		PID: int(s.Pid), Result: intern(cutText(s.Result)), Message: cutText(s.Message), Health: intern(s.Health),
	}}
	if s.SinceUnixNano != 0 {
		st.Since = time.Unix(0, s.SinceUnixNano)
	}
	return st
}
