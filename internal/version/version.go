// Package version says which build of Flotilla is running: its version, the
// commit it was built from, when, and with which Go.
//
// A release build stamps them with the linker (make build and make release
// do):
//
//	go build -ldflags "-X github.com/flotilla/flotilla/internal/version.version=0.2.0
//	  -X github.com/flotilla/flotilla/internal/version.commit=$(git rev-parse HEAD)
//	  -X github.com/flotilla/flotilla/internal/version.date=2025-01-02T03:04:05Z"
//
// A plain go build from a git checkout (with -buildvcs, Go's default) still
// knows its commit and commit time from the build information Go records.
package version

import (
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X; see the package comment.
var (
	version = "0.1.0-dev"
	commit  string
	date    string
)

// Info describes a build.
type Info struct {
	// Version is the release, e.g. 0.2.0, or 0.1.0-dev for a development build.
	Version string `json:"version"`
	// Commit is the git commit the binary was built from; "" if unknown.
	Commit string `json:"commit"`
	// Modified is true when the working tree had uncommitted changes (known
	// only from Go's build information, not from -ldflags).
	Modified bool `json:"modified,omitempty"`
	// BuildDate is when the build's source was committed (release builds use
	// the commit time, so that two builds of a commit are identical), RFC
	// 3339; "" if unknown.
	BuildDate string `json:"buildDate"`
	// GoVersion is the Go release that compiled the binary, e.g. go1.26.8.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH, e.g. linux/amd64.
	Platform string `json:"platform"`
}

// Get returns the running binary's build information.
func Get() Info {
	in := Info{Version: version, Commit: commit, BuildDate: date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		fromBuildInfo(&in, bi)
	}
	return in
}

// fromBuildInfo fills what -ldflags did not set from the vcs settings Go
// records in the binary.
func fromBuildInfo(in *Info, bi *debug.BuildInfo) {
	stamped := in.Commit != ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if !stamped {
				in.Commit = s.Value
			}
		case "vcs.time":
			if in.BuildDate == "" {
				in.BuildDate = s.Value
			}
		case "vcs.modified":
			if !stamped {
				in.Modified = s.Value == "true"
			}
		}
	}
}
