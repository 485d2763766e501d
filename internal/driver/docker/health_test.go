package docker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/flotilla/flotilla/internal/unit"
)

// healthImage builds, from the tests' image, one whose HEALTHCHECK runs
// `/app exit CODE` every second.
func healthImage(t *testing.T, cli *client.Client, base string, code int) string {
	t.Helper()
	tag := fmt.Sprintf("%s-health%d", base, code)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return tag
	}
	dockerfile := fmt.Sprintf("FROM %s\nHEALTHCHECK --interval=1s --timeout=1s --retries=1 CMD [\"/app\", \"exit\", \"%d\"]\n", base, code)
	if err := buildContext(ctx, cli, tag, []contextFile{{"Dockerfile", 0o644, []byte(dockerfile)}}); err != nil {
		t.Fatalf("build %s: %v", tag, err)
	}
	return tag
}

// TestImageHealthcheck: a container whose image has a HEALTHCHECK reports
// its health with its status (unknown while starting, then healthy or
// unhealthy as the probe says); one without reports none.
func TestImageHealthcheck(t *testing.T) {
	h := newHarness(t)
	d := h.driver()
	for _, c := range []struct {
		name, image, want string
	}{
		{"good.service", healthImage(t, h.cli, h.image, 0), "healthy"},
		{"bad.service", healthImage(t, h.cli, h.image, 1), "unhealthy"},
	} {
		f, err := unit.ParseStored(c.name, "[X-Container]\nImage="+c.image+"\nCommand=run\n")
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Load(f); err != nil {
			t.Fatal(err)
		}
		if err := d.Start(c.name); err != nil {
			t.Fatal(err)
		}
		h.wait(d, c.name, 30*time.Second, "health "+c.want, func(s unit.Status) bool { return s.Active == "active" && s.Health == c.want })
	}
	plain := h.unitFile("plain.service", "Command=run\n")
	if err := d.Load(plain); err != nil {
		t.Fatal(err)
	}
	if err := d.Start("plain.service"); err != nil {
		t.Fatal(err)
	}
	st := h.wait(d, "plain.service", 30*time.Second, "active", func(s unit.Status) bool { return s.Active == "active" })
	if st.Health != "" {
		t.Errorf("a container without HEALTHCHECK reports health %q", st.Health)
	}
}
