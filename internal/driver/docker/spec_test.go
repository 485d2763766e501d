package docker

import (
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

func parse(t *testing.T, text string) *unit.File {
	t.Helper()
	f, err := unit.ParseStored("app@1.service", text)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return f
}

func TestContainerSpec(t *testing.T) {
	f := parse(t, "[X-Container]\nImage=example/app:1\nCommand=serve --port 80\nPorts=8080:80 53/udp [::1]:9090:90\n"+
		"Volumes=/srv:/srv:ro data:/data\nNetwork=host\n[Service]\nUser=app\nGroup=staff\nKillSignal=SIGQUIT\nTimeoutStopSec=infinity\n"+
		"CPUQuota=250%\nMemoryMax=1G\n")
	sp, err := containerSpec("m1", f, []string{"A=1"}, map[string]string{"extra": "x", LabelMachine: "not this"})
	if err != nil {
		t.Fatal(err)
	}
	c, h := sp.Config, sp.Host
	if c.Image != "example/app:1" || strings.Join(c.Cmd, " ") != "serve --port 80" || c.User != "app:staff" || c.StopSignal != "SIGQUIT" || *c.StopTimeout != -1 {
		t.Errorf("config %+v", c)
	}
	if c.Labels[LabelMachine] != "m1" || c.Labels[LabelUnit] != "app@1.service" || c.Labels[LabelHash] != f.Hash || c.Labels[LabelFile] != f.Raw || c.Labels["extra"] != "x" {
		t.Errorf("labels %v", c.Labels)
	}
	if h.CPUQuota != 250000 || h.CPUPeriod != 100000 || h.Memory != 1<<30 || h.MemorySwap != 1<<30 {
		t.Errorf("limits: quota %d period %d memory %d swap %d", h.CPUQuota, h.CPUPeriod, h.Memory, h.MemorySwap)
	}
	if strings.Join(h.Binds, " ") != "/srv:/srv:ro data:/data" || h.NetworkMode != "host" || h.RestartPolicy.Name != "no" {
		t.Errorf("host %+v", h)
	}
	if len(c.ExposedPorts) != 3 || len(h.PortBindings) != 3 {
		t.Errorf("ports %v bindings %v", c.ExposedPorts, h.PortBindings)
	}
	// The unit parsed again from its label is the same unit.
	g, err := unit.ParseStored(c.Labels[LabelUnit], c.Labels[LabelFile])
	if err != nil || g.Hash != f.Hash {
		t.Errorf("unit from the labels: %v, hash %s want %s", err, g.Hash, f.Hash)
	}
}

func TestCheckFile(t *testing.T) {
	for _, tc := range []struct{ text, err string }{
		{"[Service]\nExecStart=/bin/true\n", "no [X-Container] section"},
		{"[X-Container]\nImage=a\n[Service]\nWorkingDirectory=~\n", "absolute path"},
		{"[X-Container]\nImage=a\n[Service]\nWorkingDirectory=-/srv\n", ""},
	} {
		err := checkFile(parse(t, tc.text))
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: %v, want %q", tc.text, err, tc.err)
		}
	}
	if _, err := containerSpec("m", parse(t, "[X-Container]\nImage=a\n[Service]\nGroup=staff\n"), nil, nil); err == nil {
		t.Error("Group= without User= accepted")
	}
}

func TestStopTimeoutSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{0: -1, unit.Infinity: -1, time.Second: 1, 1500 * time.Millisecond: 2, 90 * time.Second: 90} {
		if got := stopTimeout(d); got != want {
			t.Errorf("stopTimeout(%s) = %d, want %d", d, got, want)
		}
	}
}

func TestContainerName(t *testing.T) {
	a, b := containerName("m1", "web@1.service"), containerName("m2", "web@1.service")
	if a == b || !strings.HasPrefix(a, "flotilla-web_1.service-") {
		t.Errorf("names %q %q", a, b)
	}
}

// TestCheckVolumes: no container may mount the daemon's data directory or
// key files, a path inside them, or a directory holding them.
func TestCheckVolumes(t *testing.T) {
	hidden := []string{"/var/lib/flotilla", "/etc/flotilla/n1-key.pem"}
	for _, tc := range []struct {
		vol string
		ok  bool
	}{
		{"/srv/www:/www", true},
		{"cache:/cache", true},
		{"/var/lib/flotilla-other:/x", true},
		{"/:/host", false},
		{"/var:/v", false},
		{"/var/lib/flotilla:/d", false},
		{"/var/lib/flotilla/etcd:/d", false},
		{"/etc/flotilla/n1-key.pem:/key:ro", false},
		{"/etc:/etc-host:ro", false},
	} {
		f := parse(t, "[X-Container]\nImage=a\nVolumes="+tc.vol+"\n")
		err := checkVolumes(f.Container, hidden)
		if (err == nil) != tc.ok {
			t.Errorf("Volumes=%s: %v, want ok=%v", tc.vol, err, tc.ok)
		}
	}
}
