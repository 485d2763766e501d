// Command flotilla is Flotilla's one binary: the daemon (flotilla daemon),
// a one-machine cluster for development (flotilla dev), and the fleetctl-style
// CLI (flotilla start, list-units, ...). It only parses flags and wires the
// packages under internal/.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/cli"
	"github.com/flotilla/flotilla/internal/daemon"
)

func main() {
	root := &cobra.Command{
		Use:           "flotilla",
		Short:         "Flotilla schedules systemd units across a cluster",
		Version:       daemon.Version,
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	cli.AddCommands(root)
	root.AddCommand(devCommand(), daemonCommand(), supervisorCommand())
	root.AddCommand(benchCommand(), benchAgentsCommand())
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
