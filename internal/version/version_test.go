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
