package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "abc123"},
		{Key: "vcs.time", Value: "2025-01-02T03:04:05Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	for _, tc := range []struct {
		name string
		in   Info
		want Info
	}{
		{"not stamped: all from Go's build info", Info{}, Info{Commit: "abc123", BuildDate: "2025-01-02T03:04:05Z", Modified: true}},
		{"stamped by -ldflags: kept", Info{Commit: "def456", BuildDate: "2024-12-31T00:00:00Z"}, Info{Commit: "def456", BuildDate: "2024-12-31T00:00:00Z"}},
		{"commit stamped, date not", Info{Commit: "def456"}, Info{Commit: "def456", BuildDate: "2025-01-02T03:04:05Z"}},
	} {
		got := tc.in
		fromBuildInfo(&got, vcs)
		if got != tc.want {
			t.Errorf("%s: fromBuildInfo(%+v) = %+v, want %+v", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestGet(t *testing.T) {
	in := Get()
	if in.Version == "" || in.GoVersion != runtime.Version() || in.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("Get() = %+v, want a version, Go %s on %s/%s", in, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
}

// TestFromModuleVersion: a binary of go install MODULE@VERSION has no vcs
// settings, only the module's version: a release tag, or a pseudo-version
// naming the commit and its time.
func TestFromModuleVersion(t *testing.T) {
	dev := Info{Version: devVersion}
	for _, tc := range []struct {
		main string
		in   Info
		want Info
	}{
		{"(devel)", dev, dev},
		{"", dev, dev},
		{"v0.0.0-20261127161255-ef5351e1a2b3", dev, Info{Version: devVersion, Commit: "ef5351e1a2b3", BuildDate: "2026-11-27T16:12:55Z"}},
		{"v0.2.1-0.20261127161255-ef5351e1a2b3+dirty", dev, Info{Version: devVersion, Commit: "ef5351e1a2b3", BuildDate: "2026-11-27T16:12:55Z", Modified: true}},
		{"v0.2.0-rc.1.0.20261127161255-ef5351e1a2b3", dev, Info{Version: devVersion, Commit: "ef5351e1a2b3", BuildDate: "2026-11-27T16:12:55Z"}},
		{"v0.2.0", dev, Info{Version: "0.2.0"}},
		{"v0.2.0", Info{Version: "0.3.0", Commit: "def456"}, Info{Version: "0.3.0", Commit: "def456"}}, // -ldflags win
		{"v0.0.0-20261127161255-ef5351e1a2b3", Info{Version: devVersion, Commit: "def456", BuildDate: "2024-12-31T00:00:00Z"}, Info{Version: devVersion, Commit: "def456", BuildDate: "2024-12-31T00:00:00Z"}},
	} {
		got := tc.in
		fromBuildInfo(&got, &debug.BuildInfo{Main: debug.Module{Path: "github.com/flotilla/flotilla", Version: tc.main}})
		if got != tc.want {
			t.Errorf("fromBuildInfo(%+v, main %q) = %+v, want %+v", tc.in, tc.main, got, tc.want)
		}
	}
}
