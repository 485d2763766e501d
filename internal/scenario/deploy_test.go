package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// startedTemplate is a template "start" submitted: its file without
// [X-Update], and that section.
type startedTemplate struct {
	file, update string
}

// updateSection is the [X-Update] section a start or replace directive
// asks for (max-parallel=, min-healthy=, healthy-deadline=, canary=,
// auto-revert), "" when it asks for none.
func updateSection(a args) string {
	var b strings.Builder
	for _, o := range []struct{ key, option string }{
		{"max-parallel", "MaxParallel"}, {"min-healthy", "MinHealthyTime"}, {"healthy-deadline", "HealthyDeadline"}, {"canary", "Canary"},
	} {
		if v := a.kv[o.key]; v != "" {
			fmt.Fprintf(&b, "%s=%s\n", o.option, v)
		}
	}
	for _, p := range a.pos {
		if p == "auto-revert" {
			b.WriteString("AutoRevert=true\n")
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "\n[X-Update]\n" + b.String()
}

// cmdReplace gives a template started by "start" a new file: the same
// unit with SCENARIO_VERSION=N in its environment and the [X-Update] it
// was started with (or the one given), and with failing-check a health
// check that never passes.
//
//	replace web@ version=2 [failing-check] [max-parallel=N ...]
func (s *scenario) cmdReplace(a args) (string, error) {
	if len(a.pos) == 0 || a.kv["version"] == "" {
		return "", errors.New("replace NAME@ version=N [failing-check] [max-parallel=N] [min-healthy=D] [canary=N] [auto-revert]")
	}
	tmpl := strings.TrimSuffix(a.pos[0], "@") + "@.service"
	base, ok := s.templates[tmpl]
	if !ok {
		return "", fmt.Errorf("replace: %s was not started by start", tmpl)
	}
	file := strings.Replace(base.file, "Environment=SCENARIO=", "Environment=SCENARIO_VERSION="+a.kv["version"]+" SCENARIO=", 1)
	update := base.update
	if u := updateSection(a); u != "" {
		update = u
	}
	file += update
	failing := false
	for _, p := range a.pos[1:] {
		failing = failing || p == "failing-check"
	}
	if failing {
		file += "\n[X-Check]\nTCP=127.0.0.1:1\nInterval=200ms\nTimeout=100ms\n"
	}
	b := apiv1.Batch{Units: []apiv1.UnitChange{{Name: tmpl, File: file}}}
	err := s.ask(func(c *client.Client) error { _, err := c.ReplaceBatch(context.Background(), b); return err })
	if err != nil {
		return "", fmt.Errorf("replacing %s: %w", tmpl, err)
	}
	return fmt.Sprintf("%s replaced with version %s", tmpl, a.kv["version"]), nil
}

// cmdWaitDeployment waits until a template's latest deployment has the
// status (or, with done=N, until N of its instances are done).
//
//	wait-deployment web@ succeeded|failed|reverted|done=N [within=D]
func (s *scenario) cmdWaitDeployment(a args) (string, error) {
	if len(a.pos) == 0 {
		return "", errors.New("wait-deployment NAME@ STATUS|reverted|done=N [within=D]")
	}
	tmpl := strings.TrimSuffix(a.pos[0], "@") + "@.service"
	within, err := a.within(60 * time.Second)
	if err != nil {
		return "", err
	}
	want, done := "", -1
	if len(a.pos) > 1 {
		want = a.pos[1]
	}
	if v := a.kv["done"]; v != "" {
		if done, err = strconv.Atoi(v); err != nil {
			return "", fmt.Errorf("done=%s: %w", v, err)
		}
	}
	var d *apiv1.Deployment
	err = waitfor.Poll(within, func() error {
		return s.ask(func(c *client.Client) error {
			var err error
			if d, err = c.Deployment(context.Background(), tmpl); err != nil {
				return err
			}
			switch {
			case done >= 0 && d.Done >= done:
			case done >= 0:
				return fmt.Errorf("%d done", d.Done)
			case want == "reverted" && d.Revert && d.Status == "succeeded":
			case want != "reverted" && d.Status == want:
			default:
				return fmt.Errorf("status %s (%s)", d.Status, d.Message)
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Sprintf("FAIL: the deployment of %s: %v", tmpl, err), nil
	}
	if done >= 0 {
		return fmt.Sprintf("the deployment of %s version %d: at least %d of %d instances done", tmpl, d.ToVersion, done, len(d.Instances)), nil
	}
	if want == "reverted" {
		return fmt.Sprintf("the deployment of %s failed and was rolled back to version %d: %s", tmpl, d.ToVersion, firstClause(d.Message)), nil
	}
	return fmt.Sprintf("the deployment of %s version %d %s: %d of %d instances done", tmpl, d.ToVersion, d.Status, d.Done, len(d.Instances)), nil
}

// firstClause is a message up to its first colon past "version N": what
// failed, without the timings.
func firstClause(msg string) string {
	if i := strings.Index(msg, " was not healthy"); i >= 0 {
		return msg[:i] + " was not healthy"
	}
	return msg
}

// cmdMarkProcs starts counting, from the process table, the copies each
// unit starts and the fewest units of glob running at once.
func (s *scenario) cmdMarkProcs(a args) (string, error) {
	s.smp.mark(a.kv["glob"])
	scope := "every unit"
	if g := a.kv["glob"]; g != "" {
		scope = g
	}
	return "counting the processes of " + scope + " from now", nil
}

// checkSinceMark is "check started N glob=G" (each unit of G started N
// new copies since mark-procs) and "check min-running N" (never fewer
// than N units of the mark's glob running at once).
func (s *scenario) checkSinceMark(what string, a args) (string, error) {
	if len(a.pos) < 1 {
		return "", fmt.Errorf("check %s N", what)
	}
	n, err := strconv.Atoi(a.pos[0])
	if err != nil {
		return "", err
	}
	starts, minUp := s.smp.sinceMark()
	if minUp < 0 {
		return "", errors.New("mark-procs first")
	}
	switch what {
	case "min-running":
		if minUp < n {
			return fmt.Sprintf("FAIL: only %d units ran at one time, want at least %d", minUp, n), nil
		}
		return fmt.Sprintf("never fewer than %d units running at once", n), nil
	default: // started
		names := matchUnits(s.launched(a.kv["glob"]), a.kv["glob"])
		var bad []string
		for _, u := range names {
			if starts[u] != n {
				bad = append(bad, fmt.Sprintf("%s (%d)", u, starts[u]))
			}
		}
		if len(bad) > 0 {
			return fmt.Sprintf("FAIL: %d of %s did not start %d new copies: %s", len(bad), units(len(names)), n, strings.Join(bad, ", ")), nil
		}
		return fmt.Sprintf("each of %s started %d new copies (from the process table)", units(len(names)), n), nil
	}
}
