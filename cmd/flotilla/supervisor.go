package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/daemon"
	"github.com/flotilla/flotilla/internal/supervisor"
)

// supervisorCommand is the machine's supervisor, which the daemon starts
// from its own binary; it is not meant to be run by hand.
func supervisorCommand() *cobra.Command {
	var dir, logLevel string
	var hidden []string
	cmd := &cobra.Command{
		Use:    "supervisor",
		Short:  "Run the machine's units for its daemons (started by the daemon)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			return supervisor.Serve(supervisor.ServeConfig{Dir: dir, Version: daemon.Version, Logger: log, Inaccessible: hidden})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "state directory: units' logs and pid files, the socket")
	cmd.Flags().StringArrayVar(&hidden, "inaccessible", nil, "a path no unit may see (the daemon's data directory, key files); repeatable")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
