// Command flotilla is Flotilla's one binary: the daemon (flotilla daemon),
// a one-machine cluster for development (flotilla dev), and the fleetctl-style
// CLI (flotilla start, list-units, ...). It only parses flags and wires the
// packages under internal/.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/cli"
	"github.com/flotilla/flotilla/internal/flagconfig"
	"github.com/flotilla/flotilla/internal/version"
)

// envPrefix starts the environment variable of every flag: FLOTILLA_DATA_DIR
// sets --data-dir.
const envPrefix = "FLOTILLA"

func main() {
	os.Exit(run(os.Args[1:]))
}

// run runs the command of args and returns its exit code (docs/cli.md).
func run(args []string) int {
	root := &cobra.Command{
		Use:   "flotilla",
		Short: "Flotilla schedules systemd units across a cluster",
		Long: `Flotilla schedules systemd units across a cluster.

Every flag can also be set by the environment variable FLOTILLA_<FLAG>, the
flag's name in capitals with '-' as '_' (FLOTILLA_ENDPOINT for --endpoint);
a flag on the command line wins. Exit codes: 0 success, 1 error, 2 a unit
could not be placed or failed to start, 3 status of a unit that is not
active, 4 the cluster is unreachable or has no leader, 5 plan found changes, 6 a
deployment failed (docs/cli.md).`,
		Version:       version.Get().Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	src := flagconfig.New(envPrefix)
	cli.AddCommands(root)
	root.AddCommand(devCommand(src), daemonCommand(src), supervisorCommand(), dockerFenceCommand())
	root.AddCommand(benchCommand(), benchAgentsCommand(), genManCommand(root))
	root.AddCommand(tlsCommand())
	src.FromEnv(root, os.Environ())
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		return src.Check(cmd, cmd.ErrOrStderr())
	}
	root.SetArgs(args)
	err := root.Execute()
	if err != nil && err.Error() != "" { // "": the command said its outcome (plan)
		fmt.Fprintln(root.ErrOrStderr(), "Error:", err)
	}
	return cli.ExitCode(err)
}
