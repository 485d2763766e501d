package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/driver/docker"
)

// dockerFenceCommand is the docker driver's fence watchdog, which the
// driver starts from the daemon's binary when a Singleton unit gets a
// deadline; it is not meant to be run by hand.
func dockerFenceCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "docker-fence",
		Short:  "Kill fenced containers at their deadline (started by the docker driver)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			return docker.ServeFence(context.Background(), dir, log)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the docker driver's state directory")
	cmd.MarkFlagRequired("dir")
	return cmd
}
