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
// knows its commit and commit time from the build information Go records,
// and go install MODULE@VERSION its release or, from a pseudo-version, its
// commit. A build with -buildvcs=false outside a release knows neither.
package version

import (
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// devVersion is the version of a build that no release stamped.
const devVersion = "0.1.0-dev"

// Set with -ldflags -X; see the package comment.
var (
	version = devVersion
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

// Get returns the running binary's build information. It is read once: a
// leader checks every agent's Hello against it, and the parse is garbage
// for a collector that has a large heap to mark.
func Get() Info { return get() }

var get = sync.OnceValue(func() Info {
	in := Info{Version: version, Commit: commit, BuildDate: date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		fromBuildInfo(&in, bi)
	}
	return in
})

// pseudoVersion matches the end of a Go module pseudo-version
// (v0.0.0-20250102030405-abcdef123456, maybe +dirty): the commit's time and
// the first 12 digits of its hash.
var pseudoVersion = regexp.MustCompile(`[-.]([0-9]{14})-([0-9a-f]{12})(\+dirty)?$`)

// fromBuildInfo fills what -ldflags did not set from what Go records in
// the binary: the vcs settings of a build in a checkout, else the module
// version of go install MODULE@VERSION (a release tag, or a
// pseudo-version that names the commit and its time).
func fromBuildInfo(in *Info, bi *debug.BuildInfo) {
	defer fromModuleVersion(in, bi.Main.Version)
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

// fromModuleVersion fills what is still unknown from the main module's
// version v: "(devel)" or "" for a build in a checkout, else what go
// install built.
func fromModuleVersion(in *Info, v string) {
	if v == "" || v == "(devel)" {
		return
	}
	if m := pseudoVersion.FindStringSubmatch(v); m != nil {
		if in.Commit == "" {
			in.Commit, in.Modified = m[2], m[3] != ""
		}
		if t, err := time.Parse("20060102150405", m[1]); err == nil && in.BuildDate == "" {
			in.BuildDate = t.Format(time.RFC3339)
		}
		return
	}
	if in.Version == devVersion {
		in.Version = strings.TrimSuffix(strings.TrimPrefix(v, "v"), "+dirty") // a release tag
	}
}
