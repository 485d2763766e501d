package scenario

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// mainCmdline is the command line of every scenario unit's main process
// (ExecStart=/bin/sleep infinity). A unit's other processes (ExecStop=)
// share its environment but not this command line, so a copy of a unit is
// a process with this command line and the unit's marker in its
// environment.
const mainCmdline = "/bin/sleep\x00infinity\x00"

// unitCopy is one running copy of a unit: its main process and the node
// whose network namespace it runs in.
type unitCopy struct {
	pid  int
	node string
}

// sampler reads /proc every 50 ms for the whole scenario and keeps, per
// unit, the most copies seen at once, how long two or more ran, the longest
// time none ran (once one had run), and each copy's start and end.
type sampler struct {
	marker string
	nodeOf func(ino uint64) string
	start  time.Time
	tl     *timeline

	mu       sync.Mutex
	cur      map[string][]unitCopy
	max      map[string]int
	maxNodes map[string][]string
	overlap  map[string]time.Duration
	nowhere  map[string]time.Duration // longest
	zeroFrom map[string]time.Time
	last     time.Time
	scans    int
	// Since mark: the copies each unit started (nil before mark), and
	// the fewest units of markGlob running at once.
	starts   map[string]int
	markGlob string
	minUp    int

	stop chan struct{}
	done chan struct{}
}

func newSampler(marker string, nodeOf func(uint64) string, tl *timeline) *sampler {
	s := &sampler{marker: marker, nodeOf: nodeOf, tl: tl, start: time.Now(),
		cur: map[string][]unitCopy{}, max: map[string]int{}, maxNodes: map[string][]string{},
		overlap: map[string]time.Duration{}, nowhere: map[string]time.Duration{}, zeroFrom: map[string]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go s.loop()
	return s
}

func (s *sampler) loop() {
	defer close(s.done)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			s.sample()
		}
	}
}

func (s *sampler) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// scan reads the copies of every unit of this scenario now.
func (s *sampler) scan() map[string][]unitCopy {
	copies := map[string][]unitCopy{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || string(cl) != mainCmdline {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		var mark, unit string
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("SCENARIO=")); ok {
				mark = string(v)
			} else if v, ok := bytes.CutPrefix(kv, []byte("SCENARIO_UNIT=")); ok {
				unit = string(v)
			}
		}
		if mark != s.marker || unit == "" {
			continue
		}
		if st := procState(pid); st == 0 || st == 'Z' {
			continue
		}
		node := "?"
		if ino, err := nsInode(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil {
			node = s.nodeOf(ino)
		}
		copies[unit] = append(copies[unit], unitCopy{pid: pid, node: node})
	}
	for _, cs := range copies {
		sort.Slice(cs, func(i, j int) bool {
			return cs[i].node < cs[j].node || cs[i].node == cs[j].node && cs[i].pid < cs[j].pid
		})
	}
	return copies
}

func (s *sampler) sample() {
	copies := s.scan()
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scans++
	var dt time.Duration
	if !s.last.IsZero() {
		dt = now.Sub(s.last)
	}
	s.last = now
	units := map[string]bool{}
	for u := range copies {
		units[u] = true
	}
	for u := range s.cur {
		units[u] = true
	}
	for u := range units {
		old, cs := s.cur[u], copies[u]
		for _, c := range cs {
			if !hasPID(old, c.pid) {
				s.tl.addAt(now, "%s started on %s (pid %d)", u, c.node, c.pid)
				if s.starts != nil {
					s.starts[u]++
				}
			}
		}
		for _, c := range old {
			if !hasPID(cs, c.pid) {
				s.tl.addAt(now, "%s ended on %s (pid %d)", u, c.node, c.pid)
			}
		}
		if len(cs) > s.max[u] {
			s.max[u] = len(cs)
			s.maxNodes[u] = nodesOf(cs)
		}
		if len(old) > 1 && len(cs) > 1 {
			s.overlap[u] += dt
		}
		switch {
		case len(cs) == 0 && len(old) > 0:
			s.zeroFrom[u] = now
		case len(cs) > 0 && len(old) == 0 && !s.zeroFrom[u].IsZero():
			if d := now.Sub(s.zeroFrom[u]); d > s.nowhere[u] {
				s.nowhere[u] = d
			}
			delete(s.zeroFrom, u)
		}
		if len(cs) == 0 {
			delete(s.cur, u)
		} else {
			s.cur[u] = cs
		}
	}
	if s.starts != nil {
		up := len(matchUnits(sortedKeys(s.cur), s.markGlob))
		if s.minUp < 0 || up < s.minUp {
			if s.minUp >= 0 {
				s.tl.addAt(now, "fewest of %s running so far: %d", s.markGlob, up)
			}
			s.minUp = up
		}
	}
}

// mark starts counting each unit's new copies, and the fewest units of
// glob running at once, from now.
func (s *sampler) mark(glob string) {
	s.sample() // the copies running now are not new
	s.mu.Lock()
	s.starts, s.markGlob = map[string]int{}, glob
	s.minUp = len(matchUnits(sortedKeys(s.cur), glob))
	s.mu.Unlock()
}

// sinceMark returns the copies each unit started and the fewest of the
// mark's units running at once since mark.
func (s *sampler) sinceMark() (map[string]int, int) {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.starts == nil {
		return nil, -1 // not marked
	}
	out := make(map[string]int, len(s.starts))
	for u, n := range s.starts {
		out[u] = n
	}
	return out, s.minUp
}

func hasPID(cs []unitCopy, pid int) bool {
	for _, c := range cs {
		if c.pid == pid {
			return true
		}
	}
	return false
}

func nodesOf(cs []unitCopy) []string {
	var ns []string
	for _, c := range cs {
		ns = append(ns, c.node)
	}
	return ns
}

// copies returns the copies of unit seen by a scan made now.
func (s *sampler) now() map[string][]unitCopy {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]unitCopy, len(s.cur))
	for u, cs := range s.cur {
		out[u] = append([]unitCopy(nil), cs...)
	}
	return out
}

// unitFigures is what the sampler measured of one unit.
type unitFigures struct {
	max      int
	maxNodes []string
	overlap  time.Duration
	nowhere  time.Duration
}

func (s *sampler) figures(unit string) unitFigures {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := unitFigures{max: s.max[unit], maxNodes: s.maxNodes[unit], overlap: s.overlap[unit], nowhere: s.nowhere[unit]}
	if from := s.zeroFrom[unit]; !from.IsZero() && time.Since(from) > f.nowhere {
		f.nowhere = time.Since(from) // still nowhere
	}
	return f
}

// timeline records what the scenario did and what the sampler saw, with
// times since the scenario began, for the figures (never for the golden
// output, which must not depend on timing).
type timeline struct {
	start time.Time
	mu    sync.Mutex
	lines []string
	fault time.Time
	what  string
}

func (tl *timeline) add(format string, args ...any) { tl.addAt(time.Now(), format, args...) }

func (tl *timeline) addAt(at time.Time, format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	line := fmt.Sprintf("%7.2fs  ", at.Sub(tl.start).Seconds()) + fmt.Sprintf(format, args...)
	if !tl.fault.IsZero() && at.After(tl.fault) {
		line += fmt.Sprintf("  (+%.2fs after %s)", at.Sub(tl.fault).Seconds(), tl.what)
	}
	tl.lines = append(tl.lines, line)
}

// faultAt marks a fault: later lines say how long after it they came.
func (tl *timeline) faultAt(what string) {
	tl.mu.Lock()
	tl.fault, tl.what = time.Now(), what
	tl.mu.Unlock()
	tl.add("FAULT %s", what)
}

func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.lines, "\n")
}

// matchUnits returns the names matching glob (all when glob is ""), sorted.
func matchUnits(names []string, glob string) []string {
	var out []string
	for _, n := range names {
		if ok, _ := path.Match(glob, n); glob == "" || ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
