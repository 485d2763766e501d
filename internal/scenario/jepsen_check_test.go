package scenario

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// testHistory builds a one-key history from lines "w VALUE CALL RET STATUS" and
// "r VALUE CALL RET [tagged]" (times in ms, STATUS ok|fail|info; an info
// write's RET is ignored).
func testHistory(t *testing.T, lines ...string) []*jop {
	t.Helper()
	var ops []*jop
	for i, l := range lines {
		f := strings.Fields(l)
		ms := func(s string) time.Duration {
			d, err := time.ParseDuration(s + "ms")
			if err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			return d
		}
		o := &jop{id: i, process: i, node: "n1", key: "k", write: f[0] == "w", value: f[1], call: ms(f[2]), ret: ms(f[3])}
		if len(f) > 4 {
			switch f[4] {
			case "fail":
				o.status = opFail
			case "info":
				o.status, o.ret = opInfo, 0
			case "tagged":
				o.tagged = true
			}
		}
		ops = append(ops, o)
	}
	return ops
}

// TestJepsenCheck checks the checker on small histories: what it takes as a
// violation, what it sets aside, and the window it shows.
func TestJepsenCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ops     []string
		want    porcupine.CheckResult
		strict  porcupine.CheckResult // with every failed write indeterminate
		windowN int                   // operations in the window shown
	}{
		{name: "sequential", want: porcupine.Ok,
			ops: []string{"w loaded 0 10", "r loaded 20 30", "w launched 40 50", "r launched 60 70"}},
		{name: "stale read", want: porcupine.Illegal, strict: porcupine.Illegal, windowN: 2,
			ops: []string{"w loaded 0 10", "r loaded 20 30", "w launched 40 50", "r loaded 60 70"}},
		{name: "stale read tagged is set aside", want: porcupine.Ok,
			ops: []string{"w loaded 0 10", "w launched 40 50", "r loaded 60 70 tagged", "r launched 80 90"}},
		{name: "concurrent read may see either", want: porcupine.Ok,
			ops: []string{"w loaded 0 10", "w launched 20 50", "r loaded 30 40", "r launched 60 70"}},
		{name: "indeterminate write may land late", want: porcupine.Ok,
			ops: []string{"w launched 10 20 info", "r inactive 30 40", "r launched 50 60"}},
		{name: "indeterminate write lands once", want: porcupine.Illegal, strict: porcupine.Illegal, windowN: 3,
			ops: []string{"w launched 10 20 info", "r launched 30 40", "r inactive 50 60"}},
		{name: "failed write seen", want: porcupine.Illegal, strict: porcupine.Ok, windowN: 1,
			ops: []string{"w launched 10 20 fail", "r launched 30 40"}},
		{name: "false acknowledgement of a no-op", want: porcupine.Illegal, strict: porcupine.Illegal, windowN: 2,
			ops: []string{"w loaded 0 10", "r loaded 15 18", "w launched 20 30", "w loaded 40 50", "r launched 60 70"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := testHistory(t, tc.ops...)
			v := checkKey(ops, "k", "inactive")
			if v.result != tc.want {
				t.Fatalf("checkKey = %s, want %s", v.result, tc.want)
			}
			if tc.want != porcupine.Illegal {
				return
			}
			if v.strict != tc.strict {
				t.Errorf("with every failed write indeterminate: %s, want %s", v.strict, tc.strict)
			}
			var checked int
			for _, o := range v.window {
				if o.status != opFail && !o.tagged {
					checked++
				}
			}
			if checked != tc.windowN {
				t.Errorf("window %v..%v has %d operations checked, want %d:\n%s", v.from, v.to, checked, tc.windowN, describeWindow(v, nil))
			}
		})
	}
}

// TestJepsenWindow checks that a violation late in a long history is shown
// in a small window, and that the window is sound: cut from the middle,
// it still is not linearizable on its own.
func TestJepsenWindow(t *testing.T) {
	var lines []string
	states := []string{"loaded", "launched", "inactive"}
	for i := range 300 {
		at := i * 100
		v := states[i%3]
		lines = append(lines, "w "+v+" "+strconv.Itoa(at)+" "+strconv.Itoa(at+40), "r "+v+" "+strconv.Itoa(at+50)+" "+strconv.Itoa(at+90))
	}
	// A read of the value before the last write, after it returned.
	lines = append(lines, "r "+states[1]+" 30000 30010")
	ops := testHistory(t, lines...)
	v := checkKey(ops, "k", "inactive")
	if v.result != porcupine.Illegal {
		t.Fatalf("checkKey = %s, want Illegal", v.result)
	}
	if v.from < 29*time.Second || v.to == math.MaxInt64 || len(v.window) > 4 {
		t.Fatalf("window %v..%v with %d operations, want a few at the end:\n%s", v.from, v.to, len(v.window), describeWindow(v, nil))
	}
	if !illegal(checkedOps(v.window, "k", false), anyState, v.from, v.to) {
		t.Errorf("the window alone is linearizable:\n%s", describeWindow(v, nil))
	}
	if _, err := writeVisualization(t.TempDir(), "w", v, "inactive", []event{{at: 29 * time.Second, what: "a fault"}}); err != nil {
		t.Errorf("writeVisualization: %v", err)
	}
}
