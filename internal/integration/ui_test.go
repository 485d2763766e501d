package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// screenshotEnv names the variable that makes TestDashboard write its
// screenshot of the units view to docs/dashboard.png
// (FLOTILLA_UPDATE_SCREENSHOT=1 go test -run TestDashboard ./internal/integration).
// Screenshots of every view always go to the test's artifact directory,
// which go test -artifacts keeps.
const screenshotEnv = "FLOTILLA_UPDATE_SCREENSHOT"

// findBrowser returns the path of a Chromium-family browser. Without one
// the test is skipped, except under CI (CI=true), where it must run.
func findBrowser(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no headless browser: install Debian's chromium package (apt-get install chromium) to run the dashboard test"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI must not skip it")
	}
	t.Skip(msg)
	return ""
}

const dashboardHello = `[Unit]
Description=Says hello every second

[Service]
ExecStart=/bin/sh -c 'i=0; while true; do i=$((i+1)); echo "hello number $i"; sleep 1; done'
Restart=always
`

// The other units make the screenshot show every kind of row.
var dashboardUnits = map[string]string{
	"web@.service": "[Unit]\nDescription=Web server %i\n\n[Service]\nExecStart=/bin/sh -c 'echo serving %i; exec sleep 100000'\n",
	"crash.service": "[Unit]\nDescription=Exits with an error\n\n[Service]\n" +
		"ExecStart=/bin/sh -c 'echo \"fatal: /etc/crash.conf is missing\" >&2; exit 3'\n",
	"postgres.service": "[Unit]\nDescription=Database\n\n[Service]\nExecStart=/bin/sleep 100000\n\n" +
		"[X-Fleet]\nMachineMetadata=role=db\n",
	"node-exporter.service": "[Unit]\nDescription=Metrics on every machine\n\n[Service]\n" +
		"ExecStart=/bin/sleep 100000\n\n[X-Fleet]\nGlobal=true\n",
}

// TestDashboard drives the dashboard of a real `flotilla dev` in headless
// Chromium: the units view shows a unit the CLI started as active (from the
// event stream: units started after the page loaded appear without a
// reload), an unplaced unit with its reason, the unit page its file and
// journal, the machines view the machine and its leader badge.
func TestDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts flotilla dev and a browser")
	}
	browser := findBrowser(t)

	nd := startDev(t, "--metadata", "region=eu-west,disk=ssd")

	dir := t.TempDir()
	mustCLI(t, nd, "start", writeUnit(t, dir, "hello.service", dashboardHello))
	var files []string
	for name, body := range dashboardUnits {
		files = append(files, writeUnit(t, dir, name, body))
	}
	mustCLI(t, nd, append([]string{"submit"}, files...)...)
	mustCLI(t, nd, "start", "--no-block", "web@1.service", "web@2.service", "web@3.service",
		"crash.service", "postgres.service", "node-exporter.service")
	mustCLI(t, nd, "load", "--no-block", "web@4.service")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.NoSandbox, // tests run as root in CI
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1360, 860),
		chromedp.UserDataDir(t.TempDir()),
	)...)
	defer cancelAlloc() // kills the browser if closing it did not
	bctx, closeBrowser := chromedp.NewContext(allocCtx)
	defer closeBrowser()

	// Any script error fails the test. Listen also starts the browser.
	var (
		mu        sync.Mutex
		jsProblem []string
	)
	err := chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			jsProblem = append(jsProblem, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				jsProblem = append(jsProblem, "console.error: "+strings.Join(args, " "))
			}
		}
	})
	if err != nil {
		t.Fatalf("starting %s: %v", browser, err)
	}

	base := "http://" + nd.api
	step := func(what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, timeout)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			tctx, cancel := context.WithTimeout(bctx, 5*time.Second)
			defer cancel()
			page, _ := chromedp.Run(tctx, chromedp.Text(chromedp.CSS("body")))
			t.Fatalf("%s: %v\npage text:\n%s", what, err, page)
		}
	}
	text := func(sel string) string {
		t.Helper()
		tctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		s, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return s
	}
	// Every view is kept as an artifact (go test -artifacts), for the record.
	shot := func(name string) []byte {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot of %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(t.ArtifactDir(), name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		return png
	}
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }
	until := func(js string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](js, chromedp.WithPollingTimeout(0))(ctx, tg)
			return err
		})
	}

	// "/" redirects to the dashboard; the units view shows hello.service
	// active and the event stream connected.
	step("open the units view", time.Minute,
		chromedp.Navigate(base+"/"),
		visible(`#live.on`),
		visible(`tr[data-unit="hello.service"][data-state="active"]`))
	step("unplaced unit with its reason", 30*time.Second,
		visible(`tr[data-unit="postgres.service"][data-state="unplaced"]`),
		visible(`tr[data-reason-for="postgres.service"]`))
	if r := text(`tr[data-reason-for="postgres.service"]`); !strings.Contains(r, "role=db") {
		t.Errorf("reason shown for postgres.service = %q, want it to name role=db", r)
	}

	// Live: a unit started now appears, and then turns active, without a
	// reload (the mark set on the page survives).
	step("mark the page", 10*time.Second, chromedp.Evaluate[chromedp.Void](`window.flotillaTestMark = 42`))
	mustCLI(t, nd, "start", writeUnit(t, dir, "late.service", strings.ReplaceAll(dashboardHello, "hello", "late")))
	step("a unit started after the page loaded shows up active", 30*time.Second,
		visible(`tr[data-unit="late.service"][data-state="active"]`),
		until(`window.flotillaTestMark === 42`))

	// Filtering happens on the server.
	step("filter by glob", 30*time.Second,
		chromedp.SendKeys(chromedp.CSS(`input.filter`), "web@"),
		chromedp.WaitNotPresent(chromedp.CSS(`tr[data-unit="hello.service"]`)),
		visible(`tr[data-unit="web@1.service"]`))
	if n := text(`.toolbar .count`); !strings.HasSuffix(n, "of 5") { // web@.service and web@1..4
		t.Errorf("count with filter web@ = %q, want … of 5", n)
	}

	// The unit page: its file, history and journal.
	step("open the unit page", 30*time.Second,
		chromedp.Navigate(base+"/ui/#/unit/hello.service"),
		visible(`.unit-title .badge.ok`),
		until(`document.querySelector("pre.file").textContent.includes("ExecStart=/bin/sh")`),
		until(`document.querySelector("pre.journal").textContent.includes("hello number")`))
	if h := text(`ol.history`); !strings.Contains(h, "now") {
		t.Errorf("state history = %q, want the current state first", h)
	}
	shot("unit")

	// The machines view: the machine, its metadata and the leader badge.
	step("open the machines view", 30*time.Second,
		chromedp.Navigate(base+"/ui/#/machines"),
		visible(`tr[data-machine="dev"] .badge.leader`))
	if m := text(`tr[data-machine="dev"]`); !strings.Contains(m, "region=eu-west") {
		t.Errorf("machine row = %q, want its metadata region=eu-west", m)
	}
	shot("machines")

	// The screenshot: the units view once every unit has settled.
	step("settle", time.Minute,
		chromedp.Navigate(base+"/ui/#/units"),
		visible(`tr[data-unit="web@3.service"][data-state="active"]`),
		visible(`tr[data-unit="crash.service"][data-state="failed"]`),
		visible(`tr[data-unit="late.service"][data-state="active"]`),
		until(`document.querySelector("tr.flash") === null`)) // the row highlights faded
	png := shot("units")
	if os.Getenv(screenshotEnv) != "" {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "dashboard.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote docs/dashboard.png")
	}

	if err := chromedp.Cancel(bctx); err != nil { // closes the browser
		t.Logf("closing the browser: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range jsProblem {
		t.Errorf("dashboard script: %s", p)
	}
}
