package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// watcher polls the leader's view of the instances of a template while a
// deployment runs: the fewest healthy at once, and each instance's runs
// (machine and PID) as they came.
type watcher struct {
	mu         sync.Mutex
	minHealthy int
	runs       map[string][]string
	stop       chan struct{}
	done       chan struct{}
}

func watch(t *testing.T, leader func() *engine.Engine, prefix string, n int) *watcher {
	w := &watcher{minHealthy: n, runs: map[string][]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			e := leader()
			if e == nil {
				continue
			}
			us, err := e.Units(nil)
			if err != nil {
				continue
			}
			healthy := 0
			w.mu.Lock()
			for _, u := range us {
				if !strings.HasPrefix(u.Name, prefix+"@") || unit.IsTemplate(u.Name) {
					continue
				}
				s := u.State
				if s == nil || s.Active != "active" || s.PID == 0 {
					continue
				}
				if s.Health == "healthy" && s.Hash == u.Hash {
					healthy++
				}
				run := fmt.Sprintf("%s/%d", u.Machine, s.PID)
				if r := w.runs[u.Name]; len(r) == 0 || r[len(r)-1] != run {
					w.runs[u.Name] = append(r, run)
				}
			}
			if len(w.runs) >= n { // counted once every instance has been seen
				w.minHealthy = min(w.minHealthy, healthy)
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.finish)
	return w
}

func (w *watcher) finish() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// deployTemplate is a template rolled MaxParallel instances at a time.
func deployTemplate(version int, extra string) string {
	return fmt.Sprintf("[Service]\nExecStart=/bin/sleep %d\n%s[X-Update]\nMaxParallel=2\nMinHealthyTime=300ms\nHealthyDeadline=5s\n", 1000+version, extra)
}

func waitDeployment(t *testing.T, leader func() *engine.Engine, tmpl string, status string) engine.DeploymentInfo {
	t.Helper()
	var d engine.DeploymentInfo
	waitfor.Until(t, 30*time.Second, "the deployment of "+tmpl+" "+status, func() error {
		e := leader()
		if e == nil {
			return fmt.Errorf("no leader")
		}
		var err error
		if d, err = e.Deployment(tmpl); err != nil {
			return err
		}
		if d.Status != status {
			return fmt.Errorf("status %s (%s), %d of %d done", d.Status, d.Message, d.Done, len(d.Instances))
		}
		return nil
	})
	return d
}

// startInstances submits tmpl's file and launches n instances, waiting
// until they are active.
func startInstances(t *testing.T, e *engine.Engine, tmpl, file string, n int) {
	t.Helper()
	ctx := context.Background()
	if err := e.Apply(ctx, []engine.Change{{Name: tmpl, File: parse(t, tmpl, file)}}); err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(ctx, []engine.Change{{Name: tmpl, Range: &unit.Range{From: 1, To: n}, DesiredState: unit.Launched}}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 20*time.Second, "instances active", func() error {
		_, err := allActive(e, n+1)
		return err
	})
}

// deployCluster starts an engine that leads and three sim agents.
func deployCluster(t *testing.T) *testEngine {
	cli := newEtcd(t)
	e := startEngine(t, cli, "grpc", "e1")
	for i := range 3 {
		startAgent(t, cli, "grpc", fmt.Sprintf("m%d", i))
	}
	waitLeader(t, e)
	waitMachines(t, e.Engine, 3)
	return e
}

// TestDeploymentRolls: a template with 10 running instances given a new
// file with MaxParallel=2 is rolled by the leader: never fewer than 8
// healthy, each instance restarted exactly once, the deployment succeeded.
func TestDeploymentRolls(t *testing.T) { inBubble(t, testDeploymentRolls) }

func testDeploymentRolls(t *testing.T) {
	e := deployCluster(t)
	startInstances(t, e.Engine, "web@.service", deployTemplate(1, ""), 10)
	w := watch(t, func() *engine.Engine { return e.Engine }, "web", 10)
	waitfor.True(t, 5*time.Second, "every instance watched", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return len(w.runs) == 10 })

	if err := e.Apply(context.Background(), []engine.Change{{Name: "web@.service", File: parse(t, "web@.service", deployTemplate(2, "")), Replace: true}}); err != nil {
		t.Fatal(err)
	}
	d := waitDeployment(t, func() *engine.Engine { return e.Engine }, "web@.service", registry.DeploySucceeded)
	waitfor.Until(t, 10*time.Second, "10 healthy", func() error {
		if n := healthyCount(e.Engine, "web"); n != 10 {
			return fmt.Errorf("%d healthy", n)
		}
		return nil
	})
	w.finish()
	if w.minHealthy < 8 {
		t.Errorf("%d instances were healthy at one time, want at least 8", w.minHealthy)
	}
	for name, runs := range w.runs {
		if len(runs) != 2 {
			t.Errorf("%s ran as %v: want 2 runs (restarted once)", name, runs)
		}
	}
	if len(d.Instances) != 10 || d.Done != 10 || d.FromVersion != 1 || d.ToVersion != 2 {
		t.Errorf("deployment %+v", d.Deployment)
	}
	us, _ := e.Units(nil)
	for _, u := range us {
		if unit.IsInstance(u.Name) && u.State.Hash != u.Hash {
			t.Errorf("%s runs %s, its file is %s", u.Name, u.State.Hash, u.Hash)
		}
	}
}

func healthyCount(e *engine.Engine, prefix string) int {
	us, err := e.Units(nil)
	if err != nil {
		return -1
	}
	n := 0
	for _, u := range us {
		if strings.HasPrefix(u.Name, prefix+"@") && !unit.IsTemplate(u.Name) && u.State != nil && u.State.Active == "active" && u.State.Health == "healthy" {
			n++
		}
	}
	return n
}

// TestDeploymentCanaryReverts: a new file whose canary never turns healthy
// (its check fails) fails the deployment, which AutoRevert= rolls back:
// the 10 instances never leave their file, never fewer than 10 healthy,
// the canary is gone and the template has its first file again.
func TestDeploymentCanaryReverts(t *testing.T) { inBubble(t, testDeploymentCanaryReverts) }

func testDeploymentCanaryReverts(t *testing.T) {
	e := deployCluster(t)
	strategy := "Canary=1\nAutoRevert=true\nHealthyDeadline=2s\n"
	v1 := deployTemplate(1, "") + strategy
	startInstances(t, e.Engine, "web@.service", v1, 10)
	w := watch(t, func() *engine.Engine { return e.Engine }, "web", 10)
	waitfor.True(t, 5*time.Second, "every instance watched", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return len(w.runs) == 10 })

	bad := deployTemplate(2, "") + strategy + "[X-Check]\nTCP=127.0.0.1:1\nInterval=100ms\nTimeout=50ms\n"
	if err := e.Apply(context.Background(), []engine.Change{{Name: "web@.service", File: parse(t, "web@.service", bad), Replace: true}}); err != nil {
		t.Fatal(err)
	}
	d := waitDeployment(t, func() *engine.Engine { return e.Engine }, "web@.service", registry.DeploySucceeded)
	w.finish()
	if !d.Revert || !strings.Contains(d.Message, "rolls back the failed deployment of version 2: canary web@11.service was not healthy") {
		t.Errorf("the deployment after the failure: %+v", d.Deployment)
	}
	if w.minHealthy < 10 {
		t.Errorf("%d instances were healthy at one time, want 10", w.minHealthy)
	}
	for name, runs := range w.runs {
		if name == "web@11.service" {
			continue
		}
		if len(runs) != 1 {
			t.Errorf("%s ran as %v: want 1 run", name, runs)
		}
	}
	if _, ok := w.runs["web@11.service"]; !ok {
		t.Errorf("the canary web@11.service never ran")
	}
	waitfor.Until(t, 10*time.Second, "the canary destroyed", func() error {
		if _, err := e.Unit("web@11.service"); err == nil {
			return fmt.Errorf("web@11.service is still there")
		}
		return nil
	})
	vs, err := e.Versions("web@.service")
	if err != nil {
		t.Fatal(err)
	}
	cur := vs.Versions[len(vs.Versions)-1]
	if cur.Change != "reverted to 1" || cur.By != "deployment" || !strings.Contains(cur.File, "sleep 1001") {
		t.Errorf("template after the revert: %+v", cur)
	}
}

// TestDeploymentSurvivesLeader: the leader is stopped mid-deployment; the
// next one finishes it, restarting no instance twice.
func TestDeploymentSurvivesLeader(t *testing.T) { inBubble(t, testDeploymentSurvivesLeader) }

func testDeploymentSurvivesLeader(t *testing.T) {
	cli := newEtcd(t)
	e1 := startEngine(t, cli, "grpc", "e1")
	waitLeader(t, e1)
	e2 := startEngine(t, cli, "grpc", "e2")
	for i := range 3 {
		startAgent(t, cli, "grpc", fmt.Sprintf("m%d", i))
	}
	waitMachines(t, e1.Engine, 3)
	slow := "[Service]\nExecStart=/bin/sleep %d\n[X-Update]\nMaxParallel=1\nMinHealthyTime=500ms\n"
	startInstances(t, e1.Engine, "web@.service", fmt.Sprintf(slow, 1), 6)
	leader := func() *engine.Engine {
		if l := leaderOf(e1, e2); l != nil {
			return l.Engine
		}
		return nil
	}
	w := watch(t, leader, "web", 6)
	waitfor.True(t, 5*time.Second, "every instance watched", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return len(w.runs) == 6 })
	if err := e1.Apply(context.Background(), []engine.Change{{Name: "web@.service", File: parse(t, "web@.service", fmt.Sprintf(slow, 2)), Replace: true}}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 20*time.Second, "two instances done", func() error {
		d, err := e1.Deployment("web@.service")
		if err != nil || d.Done < 2 {
			return fmt.Errorf("%+v %v", d.Deployment, err)
		}
		return nil
	})
	e1.stop()
	waitLeader(t, e2)
	d := waitDeployment(t, leader, "web@.service", registry.DeploySucceeded)
	w.finish()
	for name, runs := range w.runs {
		if len(runs) != 2 {
			t.Errorf("%s ran as %v: want 2 runs", name, runs)
		}
	}
	if d.Done != 6 {
		t.Errorf("deployment %+v", d.Deployment)
	}
}

// TestDeploymentPlainUnit: a unit of its own replaced is watched as a
// deployment of one: a healthy file succeeds; one whose check fails is
// reverted (AutoRevert=), the unit back on its former file.
func TestDeploymentPlainUnit(t *testing.T) { inBubble(t, testDeploymentPlainUnit) }

func testDeploymentPlainUnit(t *testing.T) {
	cli := newEtcd(t)
	e := startEngine(t, cli, "grpc", "e1")
	startAgent(t, cli, "grpc", "m1")
	waitLeader(t, e)
	waitMachines(t, e.Engine, 1)
	ctx := context.Background()
	file := func(n int, extra string) *unit.File {
		return parse(t, "db.service", fmt.Sprintf("[Service]\nExecStart=/bin/sleep %d\n%s[X-Update]\nMinHealthyTime=200ms\nHealthyDeadline=2s\nAutoRevert=true\n", n, extra))
	}
	if err := e.Apply(ctx, []engine.Change{{Name: "db.service", File: file(1, ""), DesiredState: unit.Launched}}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "db.service active", func() error { _, err := allActive(e.Engine, 1); return err })
	if err := e.Apply(ctx, []engine.Change{{Name: "db.service", File: file(2, ""), Replace: true}}); err != nil {
		t.Fatal(err)
	}
	d := waitDeployment(t, func() *engine.Engine { return e.Engine }, "db.service", registry.DeploySucceeded)
	if d.ToVersion != 2 || len(d.Instances) != 1 || d.Revert {
		t.Fatalf("deployment of db.service: %+v", d.Deployment)
	}
	bad := file(3, "[X-Check]\nTCP=127.0.0.1:1\nInterval=100ms\nTimeout=50ms\n")
	if err := e.Apply(ctx, []engine.Change{{Name: "db.service", File: bad, Replace: true}}); err != nil {
		t.Fatal(err)
	}
	d = waitDeployment(t, func() *engine.Engine { return e.Engine }, "db.service", registry.DeploySucceeded)
	if !d.Revert || d.ToVersion != 4 {
		t.Fatalf("after the failing file: %+v", d.Deployment)
	}
	if u, err := e.Unit("db.service"); err != nil || !strings.Contains(u.File, "sleep 2") {
		t.Fatalf("db.service after the revert: %q %v", u.File, err)
	}
}
