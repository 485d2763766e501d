package supervisor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/flotilla/flotilla/internal/version"
)

// withProtocol is clientConfig whose supervisor, if the client starts one,
// speaks protocol p.
func withProtocol(dir string, p int) Config {
	cfg := clientConfig(dir, nil)
	cfg.Env = append(cfg.Env, envSupervisorProtocol+"="+strconv.Itoa(p))
	return cfg
}

// TestSupervisorProtocolRefused: a daemon refuses a supervisor whose
// protocol is outside its window, whether it started it or found it
// running, with an error naming both ends' protocols; one a release ahead
// is inside the window.
func TestSupervisorProtocolRefused(t *testing.T) {
	t.Parallel()
	future := version.MaxProtocolVersion + 6
	dir := newTestDir(t)
	for _, cfg := range []Config{withProtocol(dir, future), clientConfig(dir, nil)} { // started, then found
		c, err := New(cfg)
		if err == nil {
			c.Detach(context.Background())
			t.Fatalf("a client at protocol %d took a supervisor at protocol %d", version.ProtocolVersion, future)
		}
		for _, want := range []string{
			fmt.Sprintf("protocol %d)", future),
			fmt.Sprintf("this daemon (%s, protocol %d)", version.Get().Short(), version.ProtocolVersion),
			"accepts protocol " + version.ProtocolWindow().String(),
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("New's error %q does not say %q", err, want)
			}
		}
	}

	next := t.TempDir()
	t.Cleanup(func() { stopSupervisor(t, next) })
	c, err := New(withProtocol(next, version.ProtocolVersion+1))
	if err != nil {
		t.Fatalf("a supervisor one protocol ahead was refused: %v", err)
	}
	c.Detach(context.Background())
}
