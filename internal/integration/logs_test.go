package integration

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestUnitLogs: --log-max-size and --log-max-files reach the units' logs, a
// unit's [X-Fleet] LogMaxFiles= overrides them, a stopped unit keeps its
// log, and a destroyed one's log is removed.
func TestUnitLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	n1 := newLeadingNode(t, func(int) []string { return []string{"--log-max-size", "1K", "--log-max-files", "2"} })
	const chatty = `[Service]
ExecStart=/bin/sh -c 'i=0; while [ $i -lt 200 ]; do echo line $i of %s; i=$((i+1)); done; exec sleep 600'
TimeoutStopSec=5
`
	dir := t.TempDir()
	keep := writeUnit(t, dir, "keep.service", fmt.Sprintf(chatty, "keep"))
	gone := writeUnit(t, dir, "gone.service", fmt.Sprintf(chatty, "gone")+"[X-Fleet]\nLogMaxFiles=4\n")
	mustCLI(t, n1, "start", keep, gone)
	logs := filepath.Join(n1.dir, "units", "logs")
	files := func(name string) string {
		m, _ := filepath.Glob(filepath.Join(logs, name+".log*"))
		for i := range m {
			m[i] = strings.TrimPrefix(m[i], filepath.Join(logs, name+".log"))
		}
		return strings.Join(m, " ")
	}
	waitfor.Until(t, 20*time.Second, "rotated logs", func() error {
		if got := files("keep.service"); got != " .1 .2" {
			return fmt.Errorf("keep.service's log files %q, want the current one, .1 and .2 (--log-max-files 2)", got)
		}
		if got := files("gone.service"); got != " .1 .2 .3 .4" {
			return fmt.Errorf("gone.service's log files %q, want the current one and .1 to .4 (LogMaxFiles=4)", got)
		}
		return nil
	})
	if fi, err := os.Stat(filepath.Join(logs, "keep.service.log.1")); err != nil || fi.Size() > 1024 {
		t.Errorf("keep.service.log.1: %v, want at most 1K (--log-max-size 1K)", err)
	}

	mustCLI(t, n1, "stop", "keep.service")
	mustCLI(t, n1, "destroy", "gone.service")
	waitfor.Until(t, 20*time.Second, "the destroyed unit's log removed", func() error {
		if got := files("gone.service"); got != "" {
			return fmt.Errorf("gone.service's log files %q after destroy, want none", got)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(logs, "keep.service.log")); errors.Is(err, fs.ErrNotExist) {
		t.Error("a stopped unit's log was removed")
	}
	if out := mustCLI(t, n1, "journal", "keep.service"); !strings.Contains(out, "line 199 of keep") {
		t.Errorf("journal keep.service after stop = %q, want its last line", out)
	}
}
