package unit

import (
	"strings"
	"testing"
)

// TestRootNeeds: each way a unit file runs as root or gets root's powers
// back is named; a plain unit of another user, and units that run no
// process of their own, need nothing.
func TestRootNeeds(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       string // a part of the one reason; "" for none
	}{
		{"a.service", "[Service]\nExecStart=/bin/true\nUser=app\n", ""},
		{"a.service", "[Service]\nExecStart=/bin/true\nUser=app\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE\nAmbientCapabilities=\n", ""},
		{"a.service", "[Service]\nExecStart=/bin/true\n", "User= is not set"},
		{"a.service", "[Service]\nExecStart=/bin/true\nUser=0\n", "User=0 is root"},
		{"a.service", "[Service]\nExecStart=-+/bin/true\nUser=app\n", `"+" prefix`},
		{"a.service", "[Service]\nType=oneshot\nExecStart=/bin/true ; @!!/bin/id id\nUser=app\n", `"!!" prefix`},
		{"a.service", "[Service]\nExecStart=/bin/true\nExecStopPost=:!/bin/id\nUser=app\n", "ExecStopPost=!..."},
		{"a.service", "[Service]\nExecStart=/bin/true\nUser=app\nAmbientCapabilities=CAP_SYS_ADMIN\n", "AmbientCapabilities=CAP_SYS_ADMIN"},
		{"a.service", "[Service]\nExecStart=/bin/true\nUser=app\nPermissionsStartOnly=true\n", "PermissionsStartOnly=true"},
		{"a.service", "[Service]\nExecStart=/bin/true\nUser=app\nGroup=0\n", "Group=0"},
		{"a.service", "[Service]\nExecStart=/bin/true\nUser=app\nSupplementaryGroups=disk\n", "SupplementaryGroups=disk"},
		{"a.socket", "[Socket]\nListenStream=127.0.0.1:9\n", ""},
		{"a.socket", "[Socket]\nListenStream=127.0.0.1:9\nExecStartPre=/bin/true\n", "User= is not set"},
		{"a.timer", "[Timer]\nOnCalendar=daily\n", ""},
		{"a.swap", "[Swap]\nWhat=/dev/sdb\n", "a .swap unit"},
		{"a.service", "[Service]\nUser=app\n[X-Container]\nImage=a\nNetwork=host\n", "Network=host"},
		{"a.service", "[Service]\nUser=app\n[X-Container]\nImage=a\nVolumes=/etc:/etc:ro\n", "Volumes=/etc:/etc"},
		{"a.service", "[Service]\nUser=app\n[X-Container]\nImage=a\nVolumes=data:/data\n", ""},
	} {
		f, err := Parse(tc.name, []byte(tc.file))
		if err != nil {
			t.Fatalf("%s %q: %v", tc.name, tc.file, err)
		}
		got := RootNeeds(f)
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("RootNeeds(%q) = %q, want none", tc.file, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
			t.Errorf("RootNeeds(%q) = %q, want one naming %q", tc.file, got, tc.want)
		}
	}
}
