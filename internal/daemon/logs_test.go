package daemon

import (
	"strings"
	"testing"

	execdriver "github.com/flotilla/flotilla/internal/driver/exec"
)

// TestLogSettings: the daemon's log settings get their defaults, "none
// kept", and errors naming the flag.
func TestLogSettings(t *testing.T) {
	base := func() Config {
		return Config{Name: "m1", DataDir: t.TempDir(), EtcdEndpoints: []string{"http://127.0.0.1:2379"}}
	}
	c := base()
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.LogMaxSize != execdriver.DefaultMaxLogBytes || c.LogMaxFiles != execdriver.DefaultMaxLogFiles {
		t.Errorf("defaults: LogMaxSize %d LogMaxFiles %d, want %d %d", c.LogMaxSize, c.LogMaxFiles, execdriver.DefaultMaxLogBytes, execdriver.DefaultMaxLogFiles)
	}
	c = base()
	c.LogMaxFiles = -1
	if err := c.validate(); err != nil || c.LogMaxFiles != 0 {
		t.Errorf("LogMaxFiles -1: %v, %d, want none kept (0)", err, c.LogMaxFiles)
	}
	for _, tt := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.LogMaxSize = 512 }, "--log-max-size 512 bytes is below the minimum of 1K"},
		{func(c *Config) { c.LogMaxFiles = 101 }, "--log-max-files 101: want 0 to 100"},
	} {
		c := base()
		tt.edit(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("validate = %v, want %q", err, tt.want)
		}
	}
}
