package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/registry"
)

// TestStepDeployment reads a deployment's instances as a line each (name,
// then flags: n new, h healthy (for the given ms), r replaced (ms ago), x
// not existing, s stopped) and checks what one step decides.
func TestStepDeployment(t *testing.T) {
	now := time.Unix(1000, 0)
	base := registry.Deployment{Unit: "web@.service", Status: registry.DeployRunning, Progress: now.Add(-time.Second),
		Instances: []string{"web@1.service", "web@2.service", "web@3.service", "web@4.service"},
		Strategy:  registry.DeployStrategy{MaxParallel: 2, MinHealthyTimeMs: 1000, HealthyDeadlineMs: 5000, ProgressDeadlineMs: 60000}}
	for _, tc := range []struct {
		name  string
		d     func(*registry.Deployment)
		insts string // "1:h 2:h ..." flags per instance
		want  string
	}{
		{"starts two at once", nil, "1:h 2:h 3:h 4:h", "replace [web@1.service web@2.service]"},
		{"an unhealthy old instance uses the budget", nil, "1:h 2: 3:h 4:h", "replace [web@1.service]"},
		{"two in flight: waits", nil, "1:n,h100,r200 2:n,r100 3:h 4:h", "wake 900ms"},
		{"one done, one in flight: one more", nil, "1:n,h1500,r2000 2:n,r100 3:h 4:h", "replace [web@3.service] done 1"},
		{"a stopped instance: its file at once", nil, "1:s 2:h 3:h 4:h", "replace [web@1.service web@2.service web@3.service]"},
		{"all done", nil, "1:n,h2000 2:n,h2000 3:n,h2000 4:x", "succeeded done 4"},
		{"late: fails", nil, "1:n,r6000 2:h 3:h 4:h", "failed: web@1.service was not healthy for 1s within 5s of being replaced"},
		{"late with AutoRevert: reverts", func(d *registry.Deployment) { d.Strategy.AutoRevert = true }, "1:n,r6000 2:h 3:h 4:h", "failed: web@1.service was not healthy for 1s within 5s of being replaced; revert"},
		{"no progress: fails", func(d *registry.Deployment) { d.Progress = now.Add(-2 * time.Minute) }, "1:n,r100 2:n,r100 3:h 4:h", "failed: no instance became healthy in 1m0s (0 of 4 done)"},
		{"paused: nothing", func(d *registry.Deployment) { d.Status = registry.DeployPaused }, "1:h 2:h 3:h 4:h", ""},
		{"canary: made first", func(d *registry.Deployment) { d.Strategy.Canary = 1 }, "1:h 2:h 3:h 4:h", "canaries [web@5.service]"},
		{"canary healthy: waits for promotion", func(d *registry.Deployment) { d.Strategy.Canary, d.Canaries = 1, []string{"web@5.service"} },
			"1:h 2:h 3:h 4:h 5:n,h1500,r2000", "waiting-for-promotion"},
		{"canary healthy, AutoPromote: rolls", func(d *registry.Deployment) {
			d.Strategy.Canary, d.Canaries, d.Strategy.AutoPromote = 1, []string{"web@5.service"}, true
		}, "1:h 2:h 3:h 4:h 5:n,h1500,r2000", "replace [web@1.service web@2.service] promoted"},
		{"canary late: fails, destroys it", func(d *registry.Deployment) { d.Strategy.Canary, d.Canaries = 1, []string{"web@5.service"} },
			"1:h 2:h 3:h 4:h 5:n,r6000", "failed: canary web@5.service was not healthy for 1s within 5s of starting; destroy [web@5.service]"},
		{"succeeded: canaries destroyed", func(d *registry.Deployment) {
			d.Canaries, d.Promoted, d.Strategy.Canary = []string{"web@5.service"}, true, 1
		},
			"1:n,h2000 2:n,h2000 3:n,h2000 4:n,h2000 5:n,h2000", "succeeded done 4; destroy [web@5.service]"},
		{"stagger: one at a time", func(d *registry.Deployment) { d.Strategy.StaggerMs = 500 }, "1:h 2:h 3:h 4:h", "replace [web@1.service]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := base
			d.Instances = append([]string(nil), base.Instances...)
			if tc.d != nil {
				tc.d(&d)
			}
			st := stepDeployment(d, readInsts(t, tc.insts), now)
			if got := describeStep(d, st); got != tc.want {
				t.Fatalf("step: %q, want %q", got, tc.want)
			}
		})
	}
}

func readInsts(t *testing.T, s string) map[string]deployInst {
	out := map[string]deployInst{}
	for _, f := range strings.Fields(s) {
		name, flags, _ := strings.Cut(f, ":")
		in := deployInst{exists: true, launched: true}
		for _, fl := range strings.Split(flags, ",") {
			var n int
			switch {
			case fl == "":
			case fl == "n":
				in.isNew = true
			case fl == "x":
				in.exists = false
			case fl == "s":
				in.launched = false
			case fl == "h":
				in.healthy, in.healthyFor = true, time.Hour
			case strings.HasPrefix(fl, "h"):
				fmt.Sscanf(fl, "h%d", &n)
				in.healthy, in.healthyFor = true, time.Duration(n)*time.Millisecond
			case strings.HasPrefix(fl, "r"):
				fmt.Sscanf(fl, "r%d", &n)
				in.replacedFor = time.Duration(n) * time.Millisecond
			default:
				t.Fatalf("flag %q", fl)
			}
		}
		out["web@"+name+".service"] = in
	}
	return out
}

func describeStep(d registry.Deployment, st deployStep) string {
	var parts []string
	if len(st.replace) > 0 {
		parts = append(parts, fmt.Sprint("replace ", st.replace))
	}
	if len(st.canaries) > 0 {
		parts = append(parts, fmt.Sprint("canaries ", st.canaries))
	}
	if st.rec.Status != d.Status {
		s := st.rec.Status
		if st.rec.Status == registry.DeployFailed {
			s += ": " + st.rec.Message
		}
		parts = append(parts, s)
	}
	if st.rec.Promoted != d.Promoted {
		parts = append(parts, "promoted")
	}
	if st.rec.Done != d.Done {
		parts = append(parts, fmt.Sprint("done ", st.rec.Done))
	}
	if len(parts) == 0 && st.wake > 0 {
		parts = append(parts, fmt.Sprint("wake ", st.wake))
	}
	out := strings.Join(parts, " ")
	if st.revert {
		out += "; revert"
	}
	if len(st.destroy) > 0 {
		out += fmt.Sprint("; destroy ", st.destroy)
	}
	return out
}
