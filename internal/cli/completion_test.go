package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/daemon/daemontest"
)

// TestCompletion: cobra's completion protocol (what the bash, zsh and fish
// scripts of `flotilla completion` call) completes unit names and machines
// from a real cluster, and --fields and --output values.
func TestCompletion(t *testing.T) {
	api := daemontest.Start(t, daemontest.Machine{ID: "m1"}).URL
	dir := t.TempDir()
	var files []string
	for _, name := range []string{"web@.service", "web@1.service", "db.service"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("[Service]\nExecStart=/bin/sleep 1000\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	if code, _, stderr := flotilla(t, api, append([]string{"submit"}, files...)...); code != 0 {
		t.Fatalf("submit: exit %d: %s", code, stderr)
	}
	if code, _, stderr := flotilla(t, api, "load", "--block-timeout", "30s", files[2]); code != 0 {
		t.Fatalf("load: exit %d: %s", code, stderr)
	}
	for _, tc := range []struct {
		args []string
		want string // the completions, one per line, then the directive
	}{
		{[]string{"status", ""}, "db.service\tloaded\nweb@.service\tinactive\nweb@1.service\tinactive\n:4\n"},
		{[]string{"unload", "web"}, "web@.service\tinactive\nweb@1.service\tinactive\n:4\n"},
		{[]string{"stop", "web"}, "web@1.service\tinactive\n:4\n"},  // a template cannot be stopped
		{[]string{"start", "web"}, "web@1.service\tinactive\n:4\n"}, // nor started
		{[]string{"destroy", "db.service", ""}, "web@.service\tinactive\nweb@1.service\tinactive\n:4\n"},
		{[]string{"cat", "db.service", ""}, ":4\n"},
		{[]string{"start", "d"}, "db.service\tloaded\n:4\n"},
		{[]string{"start", "./"}, ":0\n"}, // a path: the shell completes files
		{[]string{"start", "x"}, ":0\n"},  // no such unit: perhaps a file
		{[]string{"set-metadata", ""}, "m1\t127.0.0.1, 1 units\n:4\n"},
		{[]string{"set-metadata", "m1", ""}, ":4\n"},
		{[]string{"drain", ""}, "m1\t127.0.0.1, 1 units\n:4\n"},
		{[]string{"drain", "m1", ""}, ":4\n"},
		{[]string{"list-units", "--fields", ""}, "unit\nmachine\nload\nactive\nsub\nhash\nreason\nhealth\n:6\n"},
		{[]string{"list-unit-files", "--fields", "unit,d"}, "unit,dstate\nunit,desc\n:6\n"},
		{[]string{"list-machines", "--fields", "machine,ip,"}, "machine,ip,metadata\n"},
		{[]string{"list-units", "-o", ""}, "table\ttable with a legend\njson\tJSON as the API returns it\n:4\n"},
		{[]string{"sta"}, "start\t"},
	} {
		_, out, _ := flotilla(t, api, append([]string{cobra.ShellCompRequestCmd}, tc.args...)...)
		if !strings.HasPrefix(out, tc.want) {
			t.Errorf("flotilla __complete %q:\n%s\nwant it to begin:\n%s", tc.args, out, tc.want)
		}
	}
}
