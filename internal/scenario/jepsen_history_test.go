package scenario

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// opStatus is how an operation ended, in Jepsen's words: ok (it happened),
// fail (it certainly did not) or info (it may or may not have happened: a
// write that timed out, or whose answer does not say nothing changed).
type opStatus int

const (
	opOK opStatus = iota
	opFail
	opInfo
)

func (st opStatus) String() string { return [...]string{"ok", "fail", "info"}[st] }

// jop is one operation of the history: a client's read (GET) or write
// (PUT desiredState) of one unit's desired state through one daemon.
type jop struct {
	id      int
	process int    // porcupine's ClientId: a worker's, a new one after each info
	worker  int    // the client goroutine
	node    string // the daemon it was sent to
	key     string // the unit
	write   bool
	value   string // written, or read (ok reads)
	call    time.Duration
	ret     time.Duration // since the run began; 0 until it returned
	status  opStatus
	tagged  bool   // answered with X-Flotilla-Etcd-Unreachable-Since
	answer  string // status code and error, for failures
}

func (o *jop) String() string {
	what := "read " + o.key
	if o.write {
		what = fmt.Sprintf("write %s=%s", o.key, o.value)
	}
	var res string
	switch {
	case o.status == opOK && o.write:
		res = "ok"
	case o.status == opOK:
		res = "-> " + o.value
	default:
		res = o.status.String() + ": " + o.answer
	}
	switch {
	case o.tagged && o.write:
		res += " [tagged]"
	case o.tagged:
		res += " [tagged: set aside]"
	}
	return fmt.Sprintf("%8.3fs..%-9s p%-3d %-3s %-26s %s", o.call.Seconds(), retString(o.ret, o.status), o.process, o.node, what, res)
}

func retString(ret time.Duration, st opStatus) string {
	if st == opInfo {
		return "?"
	}
	return fmt.Sprintf("%.3fs", ret.Seconds())
}

// event is one nemesis action on the history's clock.
type event struct {
	at   time.Duration
	what string
}

// history is what the clients did and what the nemesis did, on one clock
// (time since start, monotonic).
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []*jop
	evs   []event
}

func (h *history) now() time.Duration { return time.Since(h.start) }

// invoke records an operation's call and returns it, to be completed.
func (h *history) invoke(o *jop) *jop {
	h.mu.Lock()
	defer h.mu.Unlock()
	o.id = len(h.ops)
	o.call = h.now()
	h.ops = append(h.ops, o)
	return o
}

// complete records how an operation ended.
func (h *history) complete(o *jop, st opStatus, value string, tagged bool, answer string) {
	ret := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	o.ret, o.status, o.tagged, o.answer = ret, st, tagged, answer
	if st == opOK && !o.write {
		o.value = value
	}
}

// add appends operations made outside invoke, already complete.
func (h *history) add(ops []*jop) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range ops {
		o.id = len(h.ops)
		h.ops = append(h.ops, o)
	}
}

func (h *history) event(format string, args ...any) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := h.now()
	h.evs = append(h.evs, event{at: at, what: fmt.Sprintf(format, args...)})
	return at
}

// snapshot returns the operations and events recorded so far (the
// operations are shared: read them only once their clients stopped).
func (h *history) snapshot() ([]*jop, []event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*jop(nil), h.ops...), append([]event(nil), h.evs...)
}

// firstWriteAfter returns when the first write invoked at or after t was
// acknowledged, and whether one was.
func (h *history) firstWriteAfter(t time.Duration) (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	best, ok := time.Duration(0), false
	for _, o := range h.ops {
		if o.write && o.status == opOK && o.ret > 0 && o.call >= t && (!ok || o.ret < best) {
			best, ok = o.ret, true
		}
	}
	return best, ok
}

// The register model: one unit's desired state. A partition is one key;
// its state is the desired state, or anyState at the start of a window cut
// from the middle of a history (the state there is not known).
type regInput struct {
	write bool
	value string
}

const anyState = ""

func registerModel(init string) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return init },
		Step: func(state, input, output any) (bool, any) {
			in := input.(regInput)
			if in.write {
				return true, in.value
			}
			got := output.(string)
			return state.(string) == anyState || state.(string) == got, got
		},
		DescribeOperation: func(input, output any) string {
			in := input.(regInput)
			if in.write {
				return "write " + in.value
			}
			return "read -> " + output.(string)
		},
		DescribeState: func(state any) string {
			if state.(string) == anyState {
				return "(any)"
			}
			return state.(string)
		},
		DescribeOperationMetadata: func(info any) string {
			if o, ok := info.(*jop); ok {
				return o.String()
			}
			return ""
		},
	}
}

// checkedOps returns what porcupine is given of one key's operations: ok
// reads not tagged, and every write that did not certainly fail (ok, or
// info with a return time of infinity). With strict, a write that failed is
// taken as info too, whatever its answer said.
func checkedOps(ops []*jop, key string, strict bool) []*jop {
	var out []*jop
	for _, o := range ops {
		if o.key != key {
			continue
		}
		switch {
		case o.write && (o.status != opFail || strict):
		case !o.write && o.status == opOK && !o.tagged:
		default:
			continue
		}
		out = append(out, o)
	}
	return out
}

// porcupineOps turns operations into porcupine's, the calls and returns
// clipped to the window [from, to]: an operation still running at to (a
// read: dropped; a write: it may land any time after its call), or running
// at from (a read: dropped; a write: it may land any time from from on,
// or never, as seen from the window).
func porcupineOps(ops []*jop, from, to time.Duration) []porcupine.Operation {
	var out []porcupine.Operation
	for _, o := range ops {
		if o.call > to {
			continue
		}
		ret := o.ret
		if o.status != opOK {
			ret = math.MaxInt64
		}
		call := o.call
		if ret < from {
			continue // before the window: its effect is in the window's unknown start
		}
		if call < from || ret > to {
			if !o.write {
				continue
			}
			if call < from {
				call = from
			}
			ret = math.MaxInt64
		}
		var output any = ""
		if !o.write {
			output = o.value
		}
		out = append(out, porcupine.Operation{ClientId: o.process, Input: regInput{write: o.write, value: o.value},
			Call: int64(call), Output: output, Return: int64(ret), Metadata: o})
	}
	return out
}

// keyVerdict is the check of one key.
type keyVerdict struct {
	key    string
	result porcupine.CheckResult
	ops    int
	// For a violation: the smallest window found, its operations, and
	// whether it holds even when every failed write is taken as info.
	from, to time.Duration
	window   []*jop
	strict   porcupine.CheckResult
	vis      string // the visualization file, if written
}

// checkTimeout bounds each porcupine search; a search that times out gives
// Unknown, reported as such.
const checkTimeout = 2 * time.Minute

// checkKey checks one key's history for linearizability from init, and
// for a violation finds the smallest window that still shows it.
func checkKey(ops []*jop, key, init string) keyVerdict {
	kops := checkedOps(ops, key, false)
	v := keyVerdict{key: key, ops: len(kops)}
	end := time.Duration(math.MaxInt64)
	v.result = porcupine.CheckOperationsTimeout(registerModel(init), porcupineOps(kops, 0, end), checkTimeout)
	if v.result != porcupine.Illegal {
		return v
	}
	v.strict = porcupine.CheckOperationsTimeout(registerModel(init), porcupineOps(checkedOps(ops, key, true), 0, end), checkTimeout)
	v.from, v.to = smallestWindow(kops, init)
	// The window's operations as checked, and for the reader its tagged
	// reads and failed writes too (marked so).
	for _, o := range ops {
		if o.key == key && o.call <= v.to && (o.status == opInfo || o.ret >= v.from) && (o.write || o.status == opOK) {
			v.window = append(v.window, o)
		}
	}
	return v
}

// illegal reports whether the window [from, to] of ops is certainly not
// linearizable: from the start of the history (from = 0) the state is init,
// later it is unknown.
func illegal(ops []*jop, init string, from, to time.Duration) bool {
	if from > 0 {
		init = anyState
	}
	return porcupine.CheckOperationsTimeout(registerModel(init), porcupineOps(ops, from, to), checkTimeout) == porcupine.Illegal
}

// smallestWindow narrows a violation down: the earliest end (a call time)
// at which the history up to there is already not linearizable, then the
// latest start at which the window is still not. Both are sound: a window
// clipped as porcupineOps does is linearizable whenever the whole history
// is, so a window that is not shows a real violation. Cutting more only
// removes constraints, so each search is a bisection.
func smallestWindow(ops []*jop, init string) (from, to time.Duration) {
	var calls, ends []time.Duration
	for _, o := range ops {
		calls = append(calls, o.call)
		ends = append(ends, o.call)
		if o.status == opOK {
			ends = append(ends, o.ret)
		}
	}
	sort.Slice(calls, func(i, j int) bool { return calls[i] < calls[j] })
	sort.Slice(ends, func(i, j int) bool { return ends[i] < ends[j] })
	// The earliest end (a call or a return) with the history up to there
	// illegal.
	i := sort.Search(len(ends), func(i int) bool { return illegal(ops, init, 0, ends[i]) })
	if i == len(ends) {
		to = math.MaxInt64 // illegal only with every operation
	} else {
		to = ends[i]
	}
	// The latest start (a call) with the window illegal.
	n := len(calls)
	if to < math.MaxInt64 {
		n, _ = slices.BinarySearch(calls, to+1)
	}
	j := sort.Search(n, func(j int) bool { return illegal(ops, init, calls[n-1-j], to) })
	if j == n {
		return 0, to // only from the start, where the state is known
	}
	return calls[n-1-j], to
}

// writeVisualization writes porcupine's HTML view of a window, the
// nemesis's events as annotations, and returns its path.
func writeVisualization(dir, name string, v keyVerdict, init string, evs []event) (string, error) {
	m := registerModel(init)
	if v.from > 0 {
		m = registerModel(anyState)
	}
	ops := porcupineOps(checkedOps(v.window, v.key, false), v.from, v.to)
	// One row per process in the window, numbered from 0.
	rows := map[int]int{}
	for i := range ops {
		r, ok := rows[ops[i].ClientId]
		if !ok {
			r = len(rows)
			rows[ops[i].ClientId] = r
		}
		ops[i].ClientId = r
	}
	_, info := porcupine.CheckOperationsVerbose(m, ops, checkTimeout)
	var ann []porcupine.Annotation
	for _, e := range evs {
		ann = append(ann, porcupine.Annotation{Tag: "nemesis", Start: int64(e.at), Description: e.what})
	}
	for _, o := range v.window {
		if o.tagged {
			ann = append(ann, porcupine.Annotation{Tag: "tagged reads (set aside)", Start: int64(o.call), End: int64(o.ret),
				Description: "-> " + o.value, Details: o.String()})
		}
	}
	info.AddAnnotations(ann)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".html")
	return path, porcupine.VisualizePath(m, info, path)
}

// describeWindow prints a violation's window: the nemesis's events from the
// last one before it to its end, and its operations in call order.
func describeWindow(v keyVerdict, evs []event) string {
	var b strings.Builder
	to := "the end"
	if v.to < math.MaxInt64 {
		to = fmt.Sprintf("%.3fs", v.to.Seconds())
	}
	fmt.Fprintf(&b, "%s is not linearizable: smallest window %.3fs..%s, %d operations", v.key, v.from.Seconds(), to, len(v.window))
	switch v.strict {
	case porcupine.Illegal:
		b.WriteString(" (also when every failed write is taken as indeterminate)")
	case porcupine.Ok:
		b.WriteString(" (only because a write answered \"nothing was changed\" or 4xx is taken as not done: with every failed write indeterminate it is linearizable)")
	default:
		fmt.Fprintf(&b, " (with every failed write indeterminate: %s)", v.strict)
	}
	b.WriteString("\n  nemesis:\n")
	first := 0
	for i, e := range evs {
		if e.at <= v.from {
			first = i
		}
	}
	for _, e := range evs[min(first, len(evs)):] {
		if e.at > v.to {
			break
		}
		fmt.Fprintf(&b, "    %8.3fs  %s\n", e.at.Seconds(), e.what)
	}
	b.WriteString("  operations (call..return, process, daemon asked, what, result):\n")
	for _, o := range v.window {
		fmt.Fprintf(&b, "    %s\n", o)
	}
	return b.String()
}
