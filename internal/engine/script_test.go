package engine_test

// In-process scripts of the engine (testdata/scripts/*.txt, read with
// cockroachdb/datadriven): engines, agents and an etcd, all in this process
// inside a testing/synctest bubble, so time is virtual (time.Now, timers and
// sleeps move only when every goroutine waits) and a script that waits
// minutes runs in milliseconds. etcd is internal/memetcd behind clientv3's
// own client: the engine's etcd code is the code that runs in production.
// Agents are fakes that speak agentpb on a stream handed straight to
// Engine.Connect. Each directive's output is what happened meanwhile: etcd's
// writes, each agent's messages from the leader, answers to requests; so a
// change of the engine's behaviour shows in the golden files' diff.
// docs/testing.md describes the directives.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/datadriven"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/memetcd"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/version"
	"github.com/flotilla/flotilla/proto/agentpb"
)

func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t)
			defer h.close()
			datadriven.RunTest(t, path, h.run)
		})
	})
}

// event is one thing that happened, for a directive's output.
type event struct {
	at    time.Time
	group int // 0 etcd, 1 agents' messages, 2 agents' streams, 3 answers: the order within one instant
	who   string
	text  string
	msg   *agentpb.Assignments // group 1
}

type harness struct {
	t       *testing.T
	start   time.Time
	store   *memetcd.Store
	engines map[string]*hEngine
	agents  map[string]*hAgent
	lastRev int64
	nreq    int
	// who holds each election key (by the machine its value names)
	candidates map[string]string
	views      map[string]shown // by agent

	emu sync.Mutex // engines: agents look for the leader

	mu     sync.Mutex
	events []event
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, start: time.Now(), store: memetcd.New(), engines: map[string]*hEngine{}, agents: map[string]*hAgent{}, candidates: map[string]string{}, views: map[string]shown{}}
	h.lastRev = h.store.Rev()
	return h
}

func (h *harness) note(group int, who, text string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, event{at: time.Now(), group: group, who: who, text: text})
}

func (h *harness) close() {
	for _, a := range h.agents {
		a.stop()
	}
	for _, e := range h.engines {
		e.cancel()
	}
	for _, e := range h.engines {
		<-e.done
		e.cli.Close()
	}
	h.store.Close()
	// What the engines left behind (a resignation etcd never answered)
	// gives up on its own timeout: let the bubble's time run out so
	// that every goroutine has ended when the bubble does.
	time.Sleep(time.Hour)
	synctest.Wait()
}

type hEngine struct {
	name   string
	e      *engine.Engine
	cli    *memetcd.Client
	cancel context.CancelFunc
	done   chan struct{}
	dead   atomic.Bool
	fmu    sync.Mutex
	thawed chan struct{} // non-nil while frozen
}

// setFrozen freezes the engine's streams, or thaws them.
func (e *hEngine) setFrozen(frozen bool) {
	e.fmu.Lock()
	defer e.fmu.Unlock()
	if frozen && e.thawed == nil {
		e.thawed = make(chan struct{})
	}
	if !frozen && e.thawed != nil {
		close(e.thawed)
		e.thawed = nil
	}
}

// waitThawed waits while the engine is frozen.
func (e *hEngine) waitThawed(ctx context.Context) error {
	e.fmu.Lock()
	ch := e.thawed
	e.fmu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop stops the engine as its daemon would on SIGTERM: it resigns.
func (e *hEngine) stop() {
	e.dead.Store(true)
	e.cancel()
	<-e.done
}

// kill kills the engine's daemon: its connections drop, and it says
// nothing more to anyone (its goroutines end in the background).
func (e *hEngine) kill() {
	e.dead.Store(true)
	e.cli.Cut(true)
	e.cancel()
}

// run runs one directive and returns its output.
func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	var out strings.Builder
	say := func(format string, a ...any) { fmt.Fprintf(&out, format+"\n", a...) }
	switch d.Cmd {
	case "engine":
		name := d.CmdArgs[0].Key
		h.startEngine(t, name, d)
	case "kill":
		// A daemon killed: its connections drop and it says nothing more
		// to etcd (its lease lapses).
		e := h.engine(t, d.CmdArgs[0].Key)
		for _, name := range slices.Sorted(maps.Keys(h.agents)) {
			h.agents[name].dropIf(e)
		}
		e.kill()
		say("%s killed", e.name)
	case "stop":
		e := h.engine(t, d.CmdArgs[0].Key)
		e.stop()
		say("%s stopped", e.name)
	case "agent":
		h.startAgent(t, d)
	case "report":
		// report m1 name active [sub=running] [hash=...]
		a := h.agent(t, d.CmdArgs[0].Key)
		st := &agentpb.UnitStatus{Name: d.CmdArgs[1].Key, Load: "loaded", Active: d.CmdArgs[2].Key}
		st.Sub = subOf(st.Active)
		if st.Active == "active" {
			st.Health, st.Pid = "healthy", 1
		}
		st.SinceUnixNano = time.Now().UnixNano()
		for _, arg := range d.CmdArgs[3:] {
			switch arg.Key {
			case "sub":
				st.Sub = arg.Vals[0]
			case "hash":
				st.Hash = arg.Vals[0]
			case "health":
				st.Health = arg.Vals[0]
			}
		}
		a.report(st)
	case "unload":
		a := h.agent(t, d.CmdArgs[0].Key)
		a.unload(d.CmdArgs[1].Key)
	case "silent", "speak":
		a := h.agent(t, d.CmdArgs[0].Key)
		a.setSilent(d.Cmd == "silent")
	case "disconnect":
		a := h.agent(t, d.CmdArgs[0].Key)
		a.disconnect()
	case "connect":
		a := h.agent(t, d.CmdArgs[0].Key)
		a.connect()
	case "leave":
		a := h.agent(t, d.CmdArgs[0].Key)
		a.mu.Lock()
		a.off = true // its daemon exits
		a.mu.Unlock()
		a.send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Leave{Leave: &agentpb.Leave{}}})
	case "sick":
		// sick m1 TEXT: units whose file holds TEXT are unhealthy there.
		a := h.agent(t, d.CmdArgs[0].Key)
		a.mu.Lock()
		a.sick = append(a.sick, d.CmdArgs[1].Key)
		a.mu.Unlock()
	case "freeze", "thaw":
		// A frozen daemon: nothing gets in or out (etcd, agents); its
		// goroutines go on meanwhile, which a frozen process's do not.
		e := h.engine(t, d.CmdArgs[0].Key)
		e.cli.Cut(d.Cmd == "freeze")
		e.setFrozen(d.Cmd == "freeze")
	case "submit", "replace":
		// submit name [state=launched|loaded|inactive] with the file as input
		name := d.CmdArgs[0].Key
		text := d.Input
		if !strings.Contains(text, "[Service]") {
			text = "[Service]\nExecStart=/bin/true\n" + text
		}
		f, err := unit.Parse(name, []byte(text+"\n"))
		if err != nil {
			say("refused by unit.Parse: %v", err)
			break
		}
		c := engine.Change{Name: name, File: f, DesiredState: unit.Launched, Replace: d.Cmd == "replace"}
		if unit.IsTemplate(name) || d.Cmd == "replace" {
			c.DesiredState = "" // a template has none; a replaced unit keeps its own
		}
		opts := engine.ApplyOptions{By: "script"}
		for _, arg := range d.CmdArgs[1:] {
			switch arg.Key {
			case "state":
				c.DesiredState = unit.DesiredState(arg.Vals[0])
			case "check-index":
				n, _ := strconv.ParseInt(arg.Vals[0], 10, 64)
				opts.CheckIndex = &n
			}
		}
		h.request(d.Cmd+" "+name, func(ctx context.Context, e *engine.Engine) error { return e.ApplyWith(ctx, []engine.Change{c}, opts) })
	case "start", "stop-unit", "load", "destroy":
		var cs []engine.Change
		bad := false
		for _, arg := range d.CmdArgs {
			c := engine.Change{Name: arg.Key}
			switch d.Cmd {
			case "start":
				c.DesiredState = unit.Launched
			case "stop-unit":
				c.DesiredState = unit.Inactive
			case "load":
				c.DesiredState = unit.Loaded
			case "destroy":
				c.Destroy = true
			}
			if tmpl, r, ok, err := unit.ParseRange(arg.Key); err != nil {
				say("refused by unit.ParseRange: %v", err)
				bad = true
			} else if ok {
				c.Name, c.Range = tmpl, &r
			}
			cs = append(cs, c)
		}
		if !bad {
			h.request(d.Cmd+" "+joinArgs(d), func(ctx context.Context, e *engine.Engine) error { return e.Apply(ctx, cs) })
		}
	case "drain", "undrain":
		m := d.CmdArgs[0].Key
		par := 0
		for _, arg := range d.CmdArgs[1:] {
			if arg.Key == "max-parallel" {
				par, _ = strconv.Atoi(arg.Vals[0])
			}
		}
		h.request(d.Cmd+" "+m, func(ctx context.Context, e *engine.Engine) error {
			return e.DrainMachine(ctx, m, d.Cmd == "drain", par)
		})
	case "tag":
		// tag m1 key=value: a machine's metadata, durably.
		m := d.CmdArgs[0].Key
		patch := map[string]*string{}
		for _, arg := range d.CmdArgs[1:] {
			if len(arg.Vals) == 0 {
				patch[arg.Key] = nil
			} else {
				v := strings.Join(arg.Vals, ",")
				patch[arg.Key] = &v
			}
		}
		h.request("tag "+m, func(ctx context.Context, e *engine.Engine) error { return e.PatchMachine(ctx, m, patch) })
	case "tag-oversized":
		// tag-oversized m1 N: a metadata value of N bytes.
		m := d.CmdArgs[0].Key
		n, _ := strconv.Atoi(d.CmdArgs[1].Key)
		v := strings.Repeat("x", n)
		h.request(fmt.Sprintf("tag %s big=<%d bytes>", m, n), func(ctx context.Context, e *engine.Engine) error {
			return e.PatchMachine(ctx, m, map[string]*string{"big": &v})
		})
	case "revert":
		name := d.CmdArgs[0].Key
		v, _ := strconv.Atoi(d.CmdArgs[1].Key)
		h.request(fmt.Sprintf("revert %s %d", name, v), func(ctx context.Context, e *engine.Engine) error {
			n, err := e.Revert(ctx, name, v, engine.ApplyOptions{By: "script"}, nil)
			if err == nil {
				h.note(3, "", fmt.Sprintf("reverted %s to version %d as version %d", name, v, n))
			}
			return err
		})
	case "deployment":
		name, action := d.CmdArgs[0].Key, d.CmdArgs[1].Key
		h.request("deployment "+name+" "+action, func(ctx context.Context, e *engine.Engine) error {
			return e.ControlDeployment(ctx, name, action)
		})
	case "tick":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		time.Sleep(dur)
	case "etcd":
		switch d.CmdArgs[0].Key {
		case "put":
			// etcd put KEY VALUE: a key under the cluster's prefix, written
			// by hand
			h.store.Put(registry.DefaultPrefix+d.CmdArgs[1].Key, d.CmdArgs[2].Key)
		case "down":
			h.store.SetDown(true)
		case "up":
			h.store.SetDown(false)
		case "slow":
			dur, _ := time.ParseDuration(d.CmdArgs[1].Key)
			h.store.SetSlow(dur)
		case "fail":
			n, _ := strconv.Atoi(d.CmdArgs[1].Key)
			h.store.FailWrites(n)
		case "lose":
			n, _ := strconv.Atoi(d.CmdArgs[1].Key)
			h.store.LoseReplies(n)
		case "cut", "heal":
			e := h.engine(t, d.CmdArgs[1].Key)
			e.cli.Cut(d.CmdArgs[0].Key == "cut")
		default:
			t.Fatalf("%s: etcd down|up|slow D|fail N|lose N|cut E|heal E", d.Pos)
		}
	case "units", "machines", "leader", "dump", "versions", "deployments", "state":
		// reads: after what happened is shown
	default:
		t.Fatalf("%s: unknown directive %q", d.Pos, d.Cmd)
	}
	synctest.Wait()
	out.WriteString(h.flush())
	switch d.Cmd {
	case "units":
		h.printUnits(&out, d)
	case "machines":
		h.printMachines(&out)
	case "leader", "engine":
		h.printLeader(&out)
	case "dump":
		for _, kv := range h.store.Dump(registry.DefaultPrefix) {
			key := strings.TrimPrefix(kv.Key, registry.DefaultPrefix)
			if strings.HasPrefix(key, "election/") {
				continue // the leader directive says who leads
			}
			say("%s %s", key, summary(key, kv.Value))
		}
	case "versions":
		h.printVersions(&out, d.CmdArgs[0].Key)
	case "deployments":
		h.printDeployments(&out)
	case "state":
		h.printState(&out)
	}
	if out.Len() == 0 {
		return "ok\n"
	}
	return out.String()
}

func joinArgs(d *datadriven.TestData) string {
	var s []string
	for _, a := range d.CmdArgs {
		s = append(s, a.String())
	}
	return strings.Join(s, " ")
}

func subOf(active string) string {
	switch active {
	case "active":
		return "running"
	case "failed":
		return "failed"
	case "activating":
		return "start"
	case "deactivating":
		return "stop"
	}
	return "dead"
}

func (h *harness) engine(t *testing.T, name string) *hEngine {
	e := h.engines[name]
	if e == nil {
		t.Fatalf("no engine %s", name)
	}
	return e
}

func (h *harness) agent(t *testing.T, name string) *hAgent {
	a := h.agents[name]
	if a == nil {
		t.Fatalf("no agent %s", name)
	}
	return a
}

// leader is the engine that leads, the newest term's when two think they
// do (a degraded one answers reads until it learns of the other).
func (h *harness) leader() *hEngine {
	h.emu.Lock()
	defer h.emu.Unlock()
	var best *hEngine
	var bestRev int64
	for _, name := range slices.Sorted(maps.Keys(h.engines)) {
		e := h.engines[name]
		if e.dead.Load() {
			continue
		}
		if ok, rev := e.e.IsLeader(); ok && rev > bestRev {
			best, bestRev = e, rev
		}
	}
	return best
}

func (h *harness) startEngine(t *testing.T, name string, d *datadriven.TestData) {
	if old := h.engines[name]; old != nil && !old.dead.Load() {
		t.Fatalf("%s: engine %s runs", d.Pos, name)
	}
	cfg := engine.Config{Machine: name, ElectionTTL: 2 * time.Second, AgentTTL: 10 * time.Second,
		GRPCAddr: name + ":7000", APIAddr: name + ":8080", Logger: slog.New(&logNotes{h: h, engine: name, verbose: testLogger(t)})}
	for _, arg := range d.CmdArgs[1:] {
		v, _ := time.ParseDuration(arg.Vals[0])
		switch arg.Key {
		case "ttl":
			cfg.ElectionTTL = v
		case "agent-ttl":
			cfg.AgentTTL = v
		default:
			t.Fatalf("%s: engine option %s", d.Pos, arg.Key)
		}
	}
	cli := h.store.Client(context.Background(), name)
	cfg.Client = cli.Client
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatalf("%s: %v", d.Pos, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	he := &hEngine{name: name, e: e, cli: cli, cancel: cancel, done: make(chan struct{})}
	go func() { e.Run(ctx); close(he.done) }()
	h.emu.Lock()
	if old := h.engines[name]; old != nil {
		<-old.done // a killed engine's goroutines are gone before its name is reused
		old.cli.Close()
	}
	h.engines[name] = he
	h.emu.Unlock()
}

// request runs a request on the leader, answered now or later.
func (h *harness) request(what string, f func(context.Context, *engine.Engine) error) {
	h.nreq++
	n := h.nreq
	le := h.leader()
	if le == nil {
		h.note(3, "", fmt.Sprintf("#%d %s: no leader", n, what))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	done := make(chan struct{})
	go func() {
		defer cancel()
		defer close(done)
		err := f(ctx, le.e)
		if err != nil {
			h.note(3, "", fmt.Sprintf("#%d %s: %s", n, what, errText(err)))
		} else {
			h.note(3, "", fmt.Sprintf("#%d %s: ok", n, what))
		}
	}()
	synctest.Wait()
	select {
	case <-done:
	default:
		h.note(3, "", fmt.Sprintf("#%d %s: waiting", n, what))
	}
}

// errText is an error as the output shows it: the engine's errors begin
// with their kind (engine.ErrConflict's "conflict: ...").
func errText(err error) string {
	return err.Error()
}

// flush returns what happened since the last directive: events in time
// order; within one instant etcd's writes (by revision), then each agent's
// messages (agents by name, messages as they came), then answers.
func (h *harness) flush() string {
	for _, w := range h.store.Writes(h.lastRev) {
		h.lastRev = w.Rev
		// One transaction is one change: its ops are shown by key, not
		// in the order the engine happened to list them.
		slices.SortStableFunc(w.Events, func(a, b memetcd.Event) int { return strings.Compare(a.Key, b.Key) })
		for _, ev := range w.Events {
			key := strings.TrimPrefix(ev.Key, registry.DefaultPrefix)
			var line string
			if strings.HasPrefix(key, "election/") {
				if !ev.Delete {
					var in struct{ Machine string }
					json.Unmarshal(ev.Value, &in)
					h.candidates[key] = in.Machine
				}
				key = "election/<" + h.candidates[key] + ">" // its lease ID is not worth reading
			}
			if ev.Delete {
				line = fmt.Sprintf("rev %d %s: del %s", w.Rev, orExpiry(w.Client), key)
			} else {
				line = fmt.Sprintf("rev %d %s: put %s %s", w.Rev, orExpiry(w.Client), key, summary(key, ev.Value))
			}
			h.mu.Lock()
			h.events = append(h.events, event{at: w.At, group: 0, text: line})
			h.mu.Unlock()
		}
	}
	h.mu.Lock()
	evs := h.events
	h.events = nil
	h.mu.Unlock()
	sort.SliceStable(evs, func(i, j int) bool {
		a, b := evs[i], evs[j]
		if !a.at.Equal(b.at) {
			return a.at.Before(b.at)
		}
		if a.group != b.group {
			return a.group < b.group
		}
		if a.group == 1 {
			return a.who < b.who // and as they came
		}
		if a.group >= 2 {
			return a.text < b.text
		}
		return false // etcd: by revision, as noted
	})
	var out strings.Builder
	for i := 0; i < len(evs); i++ {
		ev := evs[i]
		if ev.group == 1 {
			msgs := []*agentpb.Assignments{ev.msg}
			for i+1 < len(evs) && evs[i+1].group == 1 && evs[i+1].who == ev.who && evs[i+1].at.Equal(ev.at) {
				i++
				msgs = append(msgs, evs[i].msg)
			}
			if h.views[ev.who] == nil {
				h.views[ev.who] = shown{}
			}
			ev.text = messages(ev.who, h.views[ev.who], msgs)
		}
		fmt.Fprintf(&out, "%s %s\n", stamp(ev.at.Sub(h.start)), ev.text)
	}
	return out.String()
}

// shown is what the output has said an agent holds: unit to desired
// state (and hash).
type shown map[string]string

// messages says what the messages an agent got in one instant changed:
// the engine batches what it sends as its goroutines happen to meet, so
// two messages or one are the same change. A full set is shown whole.
func messages(who string, view shown, msgs []*agentpb.Assignments) string {
	before := maps.Clone(view)
	full := false
	touched := map[string]bool{}
	destroyed := map[string]bool{}
	for _, as := range msgs {
		if as.Full {
			full = true
			clear(view)
		}
		for _, u := range as.Units {
			v := u.DesiredState
			if u.Global {
				v += "(global)"
			}
			view[u.Name] = v + "@" + u.Hash
			touched[u.Name] = true
		}
		for _, n := range as.Removed {
			delete(view, n)
			touched[n] = true
		}
		for _, n := range as.Destroyed {
			destroyed[n] = true
		}
	}
	if full {
		for n := range view {
			touched[n] = true
		}
		for n := range before {
			touched[n] = true
		}
	}
	var assign, remove []string
	for _, n := range slices.Sorted(maps.Keys(touched)) {
		if v, ok := view[n]; ok {
			assign = append(assign, n+"="+strings.Split(v, "@")[0])
		} else if _, was := before[n]; was || !full {
			remove = append(remove, n)
		}
	}
	var parts []string
	if full {
		parts = append(parts, "full")
	}
	if len(assign) > 0 {
		parts = append(parts, "assign "+strings.Join(assign, " "))
	}
	if len(remove) > 0 {
		parts = append(parts, "remove "+strings.Join(remove, " "))
	}
	if len(destroyed) > 0 {
		parts = append(parts, "destroyed "+strings.Join(slices.Sorted(maps.Keys(destroyed)), " "))
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing new")
	}
	return who + " <- " + strings.Join(parts, "; ")
}

func stamp(d time.Duration) string {
	return fmt.Sprintf("[%6.2fs]", d.Seconds())
}

func orExpiry(client string) string {
	if client == "" {
		return "lease expired"
	}
	return client
}

// summary shortens a value for the output: a unit's file is shown by its
// size (the script that submitted it shows it whole) and hashes by their
// first 7 digits.
func summary(key string, v []byte) string {
	if strings.HasPrefix(key, "files/") {
		return fmt.Sprintf("(%d bytes)", len(v))
	}
	var x any
	if json.Unmarshal(v, &x) != nil {
		return short(string(v), 300)
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(scrub("", x))
	return short(strings.TrimSpace(b.String()), 300)
}

func scrub(key string, x any) any {
	switch x := x.(type) {
	case map[string]any:
		for k, v := range x {
			x[k] = scrub(k, v)
		}
	case []any:
		for i, v := range x {
			x[i] = scrub(key, v)
		}
	case string:
		if key == "file" {
			return fmt.Sprintf("<%d bytes>", len(x))
		}
		if (len(x) == 32 || len(x) == 40) && strings.Trim(x, "0123456789abcdef") == "" {
			return x[:7]
		}
	}
	return x
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (h *harness) printLeader(out *strings.Builder) {
	le := h.leader()
	if le == nil {
		fmt.Fprintln(out, "leader: none")
	} else {
		fmt.Fprintf(out, "leader: %s\n", le.name)
	}
	h.emu.Lock()
	defer h.emu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(h.engines)) {
		if e := h.engines[name]; !e.dead.Load() && e.e.Refused() != nil {
			fmt.Fprintf(out, "%s refuses to lead: %v\n", name, e.e.Refused())
		}
	}
}

func (h *harness) printUnits(out *strings.Builder, d *datadriven.TestData) {
	le := h.leader()
	if le == nil {
		fmt.Fprintln(out, "no leader")
		return
	}
	us, err := le.e.Units(nil)
	if err != nil {
		fmt.Fprintf(out, "units: %v\n", err)
		return
	}
	if len(us) == 0 {
		fmt.Fprintln(out, "no units")
	}
	for _, u := range us {
		line := fmt.Sprintf("%s %s on=%s current=%s", u.Name, u.DesiredState, orDash(u.Machine), u.CurrentState)
		if u.State != nil {
			line += " active=" + u.State.Active
		}
		if u.MovingFrom != "" {
			line += " moving-from=" + u.MovingFrom
		}
		if u.Reason != "" {
			line += " reason=" + strconv.Quote(u.Reason)
		}
		fmt.Fprintln(out, line)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (h *harness) printMachines(out *strings.Builder) {
	le := h.leader()
	if le == nil {
		fmt.Fprintln(out, "no leader")
		return
	}
	ms, err := le.e.Machines()
	if err != nil {
		fmt.Fprintf(out, "machines: %v\n", err)
		return
	}
	for _, m := range ms {
		line := fmt.Sprintf("%s units=%d", m.ID, m.Units)
		if len(m.Metadata) > 0 {
			var kv []string
			for _, k := range slices.Sorted(maps.Keys(m.Metadata)) {
				kv = append(kv, k+"="+m.Metadata[k])
			}
			line += " metadata=" + strings.Join(kv, ",")
		}
		if m.Leader {
			line += " leader"
		}
		if m.Draining {
			line += fmt.Sprintf(" draining max-parallel=%d", m.MaxParallel)
		}
		fmt.Fprintln(out, line)
	}
}

func (h *harness) printVersions(out *strings.Builder, name string) {
	le := h.leader()
	if le == nil {
		fmt.Fprintln(out, "no leader")
		return
	}
	v, err := le.e.Versions(name)
	if err != nil {
		fmt.Fprintf(out, "versions: %s\n", errText(err))
		return
	}
	for _, ver := range v.Versions {
		line := fmt.Sprintf("v%d %s by %s at %s", ver.Version.Version, ver.Change, ver.By, stamp(ver.Time.Sub(h.start)))
		if ver.Tag != "" {
			line += " tag=" + ver.Tag
		}
		if ver.Current {
			line += " (current)"
		}
		fmt.Fprintln(out, line)
	}
}

func (h *harness) printDeployments(out *strings.Builder) {
	le := h.leader()
	if le == nil {
		fmt.Fprintln(out, "no leader")
		return
	}
	ds, err := le.e.Deployments()
	if err != nil {
		fmt.Fprintf(out, "deployments: %s\n", errText(err))
		return
	}
	if len(ds) == 0 {
		fmt.Fprintln(out, "no deployments")
	}
	for _, d := range ds {
		fmt.Fprintf(out, "%s v%d->v%d %s done=%d/%d healthy=%d running=%d new=%s", d.Unit, d.FromVersion, d.ToVersion, d.Status, d.Done,
			len(d.Instances), d.Healthy, d.Running, strings.Join(d.NewInstances, ","))
		if d.Revert {
			fmt.Fprint(out, " revert")
		}
		if d.Message != "" {
			fmt.Fprintf(out, " message=%q", d.Message)
		}
		fmt.Fprintln(out)
	}
}

func (h *harness) printState(out *strings.Builder) {
	le := h.leader()
	if le == nil {
		fmt.Fprintln(out, "no leader")
		return
	}
	if since, ok := le.e.EtcdUnreachableSince(); ok {
		fmt.Fprintf(out, "degraded: etcd unreachable since %s\n", stamp(since.Sub(h.start)))
	} else {
		fmt.Fprintln(out, "etcd reachable")
	}
}

// hAgent is a machine's agent: it keeps one stream to the leader, says
// Hello with the units it runs, heartbeats, and reports what the script
// says (or, with auto, runs what it is assigned at once).
type hAgent struct {
	h      *harness
	name   string
	md     map[string]string
	auto   bool
	silent bool
	off    bool // disconnected by the script: does not reconnect

	mu     sync.Mutex
	units  map[string]*agentpb.UnitStatus
	hashes map[string]string // the hash of each assignment
	wanted map[string]string // the desired state of each assignment
	pid    int32
	phase  time.Duration // of its ticks
	// delay is how long it takes to carry out assignments: about 100ms,
	// a little more for each agent, so that two agents' reports never
	// come at the same instant (where which goroutine goes first would
	// decide what the output says).
	delay  time.Duration
	sick   []string // units whose file holds one of these are unhealthy
	stream *fakeStream
	on     *hEngine
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	acts   chan *agentpb.Assignments
	wg     sync.WaitGroup
}

func (h *harness) startAgent(t *testing.T, d *datadriven.TestData) {
	name := d.CmdArgs[0].Key
	a := &hAgent{h: h, name: name, md: map[string]string{}, units: map[string]*agentpb.UnitStatus{}, hashes: map[string]string{}, wanted: map[string]string{},
		wake: make(chan struct{}, 1), acts: make(chan *agentpb.Assignments, 1024)}
	for _, arg := range d.CmdArgs[1:] {
		switch arg.Key {
		case "auto":
			a.auto = true
		case "runs":
			// runs=a.service,b.service: units it has running at Hello
			for _, u := range arg.Vals {
				a.units[u] = &agentpb.UnitStatus{Name: u, Load: "loaded", Active: "active", Sub: "running", Applied: string(unit.Launched)}
			}
		default:
			if len(arg.Vals) == 0 {
				t.Fatalf("%s: agent option %s", d.Pos, arg.Key)
			}
			a.md[arg.Key] = arg.Vals[0]
		}
	}
	a.phase = 450*time.Millisecond + time.Duration(len(h.agents))*10*time.Millisecond
	a.delay = 103*time.Millisecond + time.Duration(len(h.agents))*2*time.Millisecond
	h.agents[name] = a
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.wg.Add(2)
	go a.run()
	go a.work()
}

func (a *hAgent) stop() {
	a.cancel()
	a.wg.Wait()
}

func (a *hAgent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// run keeps a stream to the leader: it connects when there is one, and
// again a second after a stream ends.
func (a *hAgent) run() {
	defer a.wg.Done()
	// The agent's own clock has its own phase: its ticks (heartbeats, and
	// looking for the leader) fall between the engine's, never at the
	// same instant, where which goroutine goes first would decide what
	// the output says.
	phase := time.After(a.phase)
	var hb <-chan time.Time
	for a.ctx.Err() == nil {
		a.mu.Lock()
		st, off := a.stream, a.off
		a.mu.Unlock()
		le := a.h.leader()
		if st != nil && le != nil && a.onEngine() != le {
			// The agent learns of a new leader (from etcd, or from the
			// engines it asks) and moves its stream there.
			st.why.Store("leaves " + a.onEngine().name + " for the new leader " + le.name)
			st.close()
			<-st.ended
			a.mu.Lock()
			st = a.stream
			a.mu.Unlock()
		}
		if st == nil && !off && le != nil {
			a.open(le)
		}
		select {
		case <-a.ctx.Done():
		case <-a.wake:
		case <-phase:
			t := time.NewTicker(time.Second)
			defer t.Stop()
			hb, phase = t.C, nil
		case <-hb:
			a.mu.Lock()
			silent := a.silent
			a.mu.Unlock()
			if !silent {
				a.send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{UnixNano: time.Now().UnixNano()}}})
			}
		}
	}
	a.mu.Lock()
	s := a.stream
	a.mu.Unlock()
	if s != nil {
		s.close()
		<-s.ended
	}
}

func (a *hAgent) onEngine() *hEngine {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.on
}

func (a *hAgent) open(le *hEngine) {
	ctx, cancel := context.WithCancel(a.ctx)
	s := &fakeStream{ctx: ctx, cancel: cancel, a: a, on: le, in: make(chan *agentpb.AgentMessage, 1024), ended: make(chan struct{})}
	hello := &agentpb.Hello{Machine: &agentpb.Machine{Id: a.name, Ip: "10.0.0." + strings.TrimLeft(a.name, "abcdefghijklmnopqrstuvwxyz"),
		Metadata: a.md, ApiAddr: a.name + ":8080", Version: version.Get().Short(), Protocol: int32(version.ProtocolVersion)}}
	a.mu.Lock()
	for _, n := range slices.Sorted(maps.Keys(a.units)) {
		hello.Units = append(hello.Units, a.units[n])
	}
	a.stream, a.on = s, le
	a.mu.Unlock()
	s.in <- &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Hello{Hello: hello}}
	go func() {
		err := le.e.Connect(s)
		cancel()
		// Forgotten before ended is closed: run, woken by it, opens the
		// next stream at once only if it finds none (it found this one
		// still, under load, and waited a second for its next tick).
		a.mu.Lock()
		if a.stream == s {
			a.stream, a.on = nil, nil
		}
		a.mu.Unlock()
		close(s.ended)
		if why, ok := s.why.Load().(string); ok {
			a.h.note(2, a.name, fmt.Sprintf("%s: %s", a.name, why))
		} else {
			a.h.note(2, a.name, fmt.Sprintf("%s: stream to %s ended: %s", a.name, le.name, streamErr(err)))
		}
		go func() {
			select {
			case <-time.After(time.Second + a.phase):
				a.poke()
			case <-a.ctx.Done():
			}
		}()
	}()
}

func streamErr(err error) string {
	if err == nil {
		return "ok"
	}
	if s, ok := status.FromError(err); ok {
		return s.Code().String() + ": " + s.Message()
	}
	return err.Error()
}

// dropIf drops the agent's stream if it is to e (e's process died).
func (a *hAgent) dropIf(e *hEngine) {
	a.mu.Lock()
	s := a.stream
	on := a.on
	a.mu.Unlock()
	if s != nil && on == e {
		s.why.Store("lost its stream to " + e.name + " (the daemon died)")
		s.close()
		<-s.ended
	}
}

func (a *hAgent) disconnect() {
	a.mu.Lock()
	a.off = true
	s := a.stream
	a.mu.Unlock()
	if s != nil {
		s.why.Store("disconnected")
		s.close()
		<-s.ended
	}
}

func (a *hAgent) connect() {
	a.mu.Lock()
	a.off = false
	a.mu.Unlock()
	a.poke()
}

func (a *hAgent) setSilent(silent bool) {
	a.mu.Lock()
	a.silent = silent
	a.mu.Unlock()
}

func (a *hAgent) send(m *agentpb.AgentMessage) {
	a.mu.Lock()
	s := a.stream
	a.mu.Unlock()
	if s == nil {
		return
	}
	select {
	case s.in <- m:
	case <-s.ctx.Done():
	}
}

// report sets a unit's state and tells the leader.
func (a *hAgent) report(st *agentpb.UnitStatus) {
	a.mu.Lock()
	if st.Hash == "" {
		st.Hash = a.hashes[st.Name]
	}
	st.Applied = a.wanted[st.Name]
	a.units[st.Name] = st
	silent := a.silent
	a.mu.Unlock()
	if !silent {
		a.send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Update{Update: &agentpb.StatusUpdate{Units: []*agentpb.UnitStatus{st}}}})
	}
}

func (a *hAgent) unload(name string) {
	a.mu.Lock()
	delete(a.units, name)
	silent := a.silent
	a.mu.Unlock()
	if !silent {
		a.send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Update{Update: &agentpb.StatusUpdate{Removed: []string{name}}}})
	}
}

// received notes a message from the leader and, for an auto agent, acts
// on it: a launched unit becomes active, a loaded one inactive, a removed
// one goes.
func (a *hAgent) received(m *agentpb.EngineMessage) {
	as := m.GetAssignments()
	if as == nil {
		return // heartbeats are not shown
	}
	a.h.mu.Lock()
	a.h.events = append(a.h.events, event{at: time.Now(), group: 1, who: a.name, msg: as})
	a.h.mu.Unlock()

	a.mu.Lock()
	defer a.mu.Unlock()
	want := map[string]bool{}
	for _, u := range as.Units {
		a.hashes[u.Name] = u.Hash
		a.wanted[u.Name] = u.DesiredState
		want[u.Name] = true
	}
	if a.auto {
		select {
		case a.acts <- as:
		default:
			panic("agent " + a.name + ": too many assignments queued")
		}
	}
}

// work carries out an auto agent's assignments a.delay after they came (a
// unit takes a moment to start or stop: it is active after it was
// assigned, not at the same instant).
func (a *hAgent) work() {
	defer a.wg.Done()
	for {
		select {
		case as := <-a.acts:
			select {
			case <-time.After(a.delay):
			case <-a.ctx.Done():
				return
			}
			a.apply(as)
			for more := true; more; { // what came meanwhile is carried out with it
				select {
				case as := <-a.acts:
					a.apply(as)
				default:
					more = false
				}
			}
		case <-a.ctx.Done():
			return
		}
	}
}

func (a *hAgent) apply(as *agentpb.Assignments) {
	a.mu.Lock()
	defer a.mu.Unlock()
	want := map[string]bool{}
	for _, u := range as.Units {
		want[u.Name] = true
	}
	now := time.Now().UnixNano()
	var upd agentpb.StatusUpdate
	for _, u := range as.Units {
		st := &agentpb.UnitStatus{Name: u.Name, Hash: u.Hash, Load: "loaded", Active: "inactive", Sub: "dead", Applied: u.DesiredState, SinceUnixNano: now}
		if u.DesiredState == string(unit.Launched) {
			st.Active, st.Sub, st.Health = "active", "running", "healthy"
			for _, text := range a.sick {
				if strings.Contains(u.File, text) {
					st.Health = "unhealthy"
				}
			}
			a.pid++
			st.Pid = a.pid
		}
		if old := a.units[u.Name]; old != nil && old.Hash == st.Hash && old.Applied == st.Applied {
			continue // it has it already, in whatever state it is: nothing restarts it
		}
		a.units[u.Name] = st
		upd.Units = append(upd.Units, st)
	}
	gone := as.Removed
	if as.Full {
		gone = nil
		for _, n := range slices.Sorted(maps.Keys(a.units)) {
			if !want[n] {
				gone = append(gone, n)
			}
		}
	}
	for _, n := range gone {
		if a.units[n] != nil {
			delete(a.units, n)
			upd.Removed = append(upd.Removed, n)
		}
	}
	if a.silent || (len(upd.Units) == 0 && len(upd.Removed) == 0) || a.stream == nil {
		return
	}
	select {
	case a.stream.in <- &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Update{Update: &upd}}:
	default:
	}
}

// fakeStream is the engine's end of an agent's stream.
type fakeStream struct {
	ctx    context.Context
	cancel context.CancelFunc
	a      *hAgent
	in     chan *agentpb.AgentMessage
	ended  chan struct{}
	on     *hEngine
	why    atomic.Value // string: why the agent's side ended the stream, if it did
}

func (s *fakeStream) close() { s.cancel() }

func (s *fakeStream) Send(m *agentpb.EngineMessage) error {
	if err := s.on.waitThawed(s.ctx); err != nil {
		return err
	}
	if s.ctx.Err() != nil {
		return status.FromContextError(s.ctx.Err()).Err()
	}
	s.a.received(m)
	return nil
}

func (s *fakeStream) Recv() (*agentpb.AgentMessage, error) {
	if err := s.on.waitThawed(s.ctx); err != nil {
		return nil, io.EOF
	}
	select {
	case m := <-s.in:
		if err := s.on.waitThawed(s.ctx); err != nil {
			return nil, io.EOF
		}
		return m, nil
	case <-s.ctx.Done():
		return nil, io.EOF
	}
}

func (s *fakeStream) Context() context.Context     { return s.ctx }
func (s *fakeStream) SetHeader(metadata.MD) error  { return nil }
func (s *fakeStream) SendHeader(metadata.MD) error { return nil }
func (s *fakeStream) SetTrailer(metadata.MD)       {}
func (s *fakeStream) SendMsg(any) error            { return errors.New("fakeStream: SendMsg") }
func (s *fakeStream) RecvMsg(any) error            { return errors.New("fakeStream: RecvMsg") }

// logNotes shows what an engine logs at warning level and above, and its
// elections, in the output (and logs everything under -v).
type logNotes struct {
	h       *harness
	engine  string
	attrs   []slog.Attr
	verbose *slog.Logger
}

func (l *logNotes) Enabled(context.Context, slog.Level) bool { return true }

func (l *logNotes) Handle(ctx context.Context, r slog.Record) error {
	if l.verbose != nil {
		l.verbose.Handler().WithAttrs(l.attrs).Handle(ctx, r)
	}
	if r.Level < slog.LevelWarn && r.Message != "elected leader" {
		return nil
	}
	text := l.engine + " logs: " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "load_ms", "took_ms":
		default:
			text += " " + a.String()
		}
		return true
	})
	l.h.note(3, l.engine, text)
	return nil
}

func (l *logNotes) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logNotes{h: l.h, engine: l.engine, attrs: append(slices.Clone(l.attrs), attrs...), verbose: l.verbose}
}

func (l *logNotes) WithGroup(string) slog.Handler { return l }
