package systemddriver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/systemdtest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// daemonUnits are the units TestDaemon submits: Debian-style services of
// each Type=, a timer with its service, and a socket-activated service.
var daemonUnits = map[string]string{
	"web.service": `[Unit]
Description=prints a line every 300ms
[Service]
ExecStart=/bin/sh -c 'i=0; while true; do i=$((i+1)); echo web line $i; sleep 0.3; done'
Restart=always
`,
	"ready.service": `[Service]
Type=notify
NotifyAccess=all
ExecStart=/bin/sh -c 'sleep 1; systemd-notify --ready; exec sleep infinity'
`,
	"forker.service": `[Service]
Type=forking
PIDFile=/run/forker.pid
ExecStart=/bin/sh -c 'sleep infinity & echo $! > /run/forker.pid'
`,
	"setup.service": `[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/echo set up
`,
	"beat.service": `[Service]
Type=oneshot
ExecStart=/bin/sh -c 'echo beat >> /run/beats'
`,
	"beat.timer": `[Timer]
OnActiveSec=1s
OnUnitActiveSec=2s
AccuracySec=10ms
`,
	"greet.service": `[Service]
ExecStart=` + testBinary + ` -test.run=^TestHelperProcess$
Environment=` + helperEnv + `=sockecho
`,
	"greet.socket": `[Socket]
ListenStream=127.0.0.1:7998
`,
}

// TestDaemon runs flotilla dev --driver systemd as a service of the
// container's systemd and drives it with the CLI: units run as systemd
// runs them, a restart of the daemon restarts none of them (same MainPID),
// and journal -f follows a unit's journald entries.
func TestDaemon(t *testing.T) {
	if os.Getenv(insideEnv) == "1" || os.Getenv(helperEnv) != "" {
		t.Skip("already inside")
	}
	c := systemdtest.Start(t)
	dir := t.TempDir()
	c.CopyIn(systemdtest.BuildStatic(t, dir, "github.com/flotilla/flotilla/cmd/flotilla", "flotilla", false), "/usr/local/bin/flotilla")
	c.CopyIn(systemdtest.BuildStatic(t, dir, ".", "systemd.test", true), testBinary)
	c.Must("mkdir", "-p", "/units")
	for name, text := range daemonUnits {
		c.WriteFile("/units/"+name, text)
	}

	startDaemon := func() {
		t.Helper()
		c.Must("systemd-run", "--unit", "flotilla-dev", "--property", "KillMode=mixed",
			"/usr/local/bin/flotilla", "dev", "--driver", "systemd", "--data-dir", "/var/lib/flotilla-dev")
		waitfor.Until(t, 30*time.Second, "the daemon answering", func() error {
			_, err := c.Exec("flotilla", "list-machines")
			return err
		})
	}
	startDaemon()

	c.Must("flotilla", "load", "/units/beat.service", "/units/greet.service")
	c.Must("flotilla", "start", "/units/web.service", "/units/ready.service", "/units/forker.service",
		"/units/setup.service", "/units/beat.timer", "/units/greet.socket")
	want := map[string]string{
		"web.service": "active/running", "ready.service": "active/running", "forker.service": "active/running",
		"setup.service": "active/exited", "beat.timer": "active/waiting", "greet.socket": "active/listening",
		"greet.service": "inactive/dead",
	}
	listUnits := func() (map[string]string, error) {
		out, err := c.Exec("flotilla", "list-units", "--output", "json")
		if err != nil {
			return nil, err
		}
		var rows []struct{ Unit, Active, Sub string }
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return nil, fmt.Errorf("list-units: %w: %s", err, out)
		}
		got := map[string]string{}
		for _, r := range rows {
			got[r.Unit] = r.Active + "/" + r.Sub
		}
		return got, nil
	}
	check := func(want map[string]string) func() error {
		return func() error {
			got, err := listUnits()
			if err != nil {
				return err
			}
			for n, w := range want {
				if got[n] != w {
					return fmt.Errorf("list-units: %s is %q, want %q (all: %v)", n, got[n], w, got)
				}
			}
			return nil
		}
	}
	waitfor.Until(t, 20*time.Second, "the units as wanted", check(want))
	waitfor.Until(t, 10*time.Second, "the timer to run beat.service twice", func() error {
		b, _ := c.Exec("cat", "/run/beats")
		if n := strings.Count(b, "beat"); n < 2 {
			return fmt.Errorf("the timer ran beat.service %d times, want 2", n)
		}
		return nil
	})
	if out := c.Must("bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/7998; cat <&3"); !strings.HasPrefix(out, "hello from ") {
		t.Errorf("greet.socket answered %q, want hello from greet.service", out)
	}
	// Once its service runs, systemd shows the socket running too.
	want["greet.service"], want["greet.socket"] = "active/running", "active/running"
	waitfor.Until(t, 10*time.Second, "greet.socket and greet.service running", check(want))

	running := []string{"web.service", "ready.service", "forker.service", "greet.service"}
	pids := func() map[string]string {
		m := map[string]string{}
		for _, n := range running {
			m[n] = strings.TrimSpace(c.Must("systemctl", "show", "-P", "MainPID", n))
		}
		return m
	}
	before := pids()

	// The daemon stops and starts again: systemd kept the units; the new
	// daemon adopts them as they are.
	c.Must("systemctl", "stop", "flotilla-dev")
	if after := pids(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("main PIDs after the daemon stopped = %v, want %v", after, before)
	}
	startDaemon()
	waitfor.Until(t, 20*time.Second, "the units as wanted after the restart", check(want))
	if after := pids(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("main PIDs after the daemon restarted = %v, want %v", after, before)
	}
	for _, n := range running {
		if r := strings.TrimSpace(c.Must("systemctl", "show", "-P", "NRestarts", n)); r != "0" {
			t.Errorf("%s restarted %s times", n, r)
		}
	}
	if st := c.Must("flotilla", "status", "web.service"); !strings.Contains(st, before["web.service"]) {
		t.Errorf("flotilla status web.service does not show its main PID %s:\n%s", before["web.service"], st)
	}

	// journal -f follows the unit's journald entries.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := c.Command(ctx, nil, "flotilla", "journal", "-f", "--lines", "1", "web.service")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var lines []string
	for len(lines) < 4 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "web line ") {
			lines = append(lines, sc.Text())
		}
	}
	cancel()
	cmd.Wait()
	if len(lines) < 4 || lines[0] == lines[3] {
		t.Errorf("journal -f gave %q, want 4 successive lines of web.service", lines)
	}

	// destroy removes the unit from systemd.
	c.Must("flotilla", "destroy", "web.service")
	waitfor.Until(t, 20*time.Second, "web.service gone from systemd", func() error {
		if ls := strings.TrimSpace(c.Must("systemctl", "show", "-P", "LoadState", "web.service")); ls != "not-found" {
			return fmt.Errorf("web.service is %s in systemd after destroy, want not-found", ls)
		}
		return nil
	})
}
