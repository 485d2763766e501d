package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/version"
)

func newVersionCommand(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version of this binary",
		Long: `Print which build of Flotilla this binary is: its version, the git commit it
was built from, the build date (the commit's time, for reproducible builds)
and the Go version and platform. It does not talk to the cluster: GET
/v1/status tells a daemon's version, and the flotilla_build_info metric
every daemon's build.

With --output json, print an object with version, commit, buildDate,
goVersion and platform.`,
		Example: `  flotilla version
  flotilla version -o json`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := version.Get()
			switch g.Output {
			case outputJSON:
				return writeJSON(cmd.OutOrStdout(), in)
			case outputTable:
				writeVersion(cmd.OutOrStdout(), in)
				return nil
			}
			return fmt.Errorf("invalid --output %q: want %s or %s", g.Output, outputTable, outputJSON)
		},
	}
}

// writeVersion prints in as `flotilla version` does.
func writeVersion(w io.Writer, in version.Info) {
	commit := dash(in.Commit)
	if in.Commit == "" {
		commit += " (not recorded: build with make build, or go build in a git checkout without -buildvcs=false)"
	}
	if in.Modified {
		commit += " (modified)"
	}
	fmt.Fprintf(w, "Flotilla %s\nCommit:     %s\nBuild date: %s\nGo version: %s %s\n", in.Version, commit, dash(in.BuildDate), in.GoVersion, in.Platform)
}

// setVersion has root's -v and --version print what `flotilla version`
// prints.
func setVersion(root *cobra.Command) {
	in := version.Get()
	if root.Version == "" {
		root.Version = in.Version
	}
	var b strings.Builder
	writeVersion(&b, in)
	// A template: its text is quoted as a Go string, so that nothing in
	// it is taken for an action.
	root.SetVersionTemplate("{{" + strconv.Quote(b.String()) + "}}")
}
