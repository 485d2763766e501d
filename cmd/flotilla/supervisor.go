package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/daemon"
	"github.com/flotilla/flotilla/internal/supervisor"
)

// supervisorCommand is the machine's supervisor, which the daemon starts
// from its own binary (`flotilla supervisor --dir DIR`, not meant to be
// run by hand), and `flotilla supervisor stop`, which ends it.
func supervisorCommand() *cobra.Command {
	var dir, logLevel, handover string
	var hidden []string
	var idleExit time.Duration
	var fallbackFD int
	cmd := &cobra.Command{
		Use:   "supervisor",
		Short: "The machine's supervisor, which runs its units (started by the daemon); supervisor stop ends it",
		Long: `The machine's supervisor runs the units of the exec driver, so that they
outlive the daemon: the daemon starts it as "flotilla supervisor --dir
<data-dir>/units" when none runs, and a daemon restarted on the data dir
adopts its units. It ends by itself when its directory is removed (stopping
its units), or when it has had no units and no daemon connected for
--idle-exit (10 minutes).

"flotilla supervisor stop --data-dir DIR" stops a machine's units and its
supervisor once its daemon is stopped (docs/cluster.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return errors.New("--dir is required: the daemon starts the supervisor of <data-dir>/units itself; to stop one, run flotilla supervisor stop --data-dir DIR")
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			if idleExit == 0 {
				idleExit = -1 // never
			}
			return supervisor.Serve(supervisor.ServeConfig{Dir: dir, Version: daemon.Version, Logger: log, Inaccessible: hidden, IdleExit: idleExit,
				Handover: handover, HandoverFallbackFD: fallbackFD})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "state directory: units' logs and pid files, the socket")
	cmd.Flags().StringArrayVar(&hidden, "inaccessible", nil, "a path no unit may see (the daemon's data directory, key files); repeatable")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().DurationVar(&idleExit, "idle-exit", supervisor.DefaultIdleExit, "end once there have been no units and no daemon connected for this long (0: never)")
	// Given by a supervisor that re-executes itself into a new binary.
	cmd.Flags().StringVar(&handover, "handover", "", "adopt the units a previous image of this process handed over in this file")
	cmd.Flags().IntVar(&fallbackFD, "handover-fallback-fd", 0, "descriptor of the previous image's binary, executed again if the handover cannot be adopted")
	cmd.Flags().MarkHidden("handover")
	cmd.Flags().MarkHidden("handover-fallback-fd")
	cmd.MarkFlagDirname("dir")
	completeValues(cmd, "log-level", "debug", "info", "warn", "error")
	cmd.AddCommand(supervisorStopCommand())
	return cmd
}

func supervisorStopCommand() *cobra.Command {
	var dataDir string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "stop --data-dir DIR",
		Short: "Stop a machine's units and its supervisor, once its daemon is stopped",
		Long: `Stop every unit the supervisor of a data dir runs, each gracefully (its
ExecStop=, then SIGTERM; SIGKILL after --timeout), then the supervisor
itself: what a daemon leaves running when it stops without
--stop-units-on-exit. It refuses while a daemon runs on the data dir, which
would start a supervisor and its units again: stop that daemon first.
Nothing to stop is not an error.`,
		Example: `  flotilla supervisor stop --data-dir flotilla-dev
  flotilla supervisor stop --data-dir /var/lib/flotilla --timeout 30s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return errors.New("--data-dir is required: the data dir of the daemon or flotilla dev whose units to stop")
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout %v: want a positive duration", timeout)
			}
			if fi, err := os.Stat(dataDir); err != nil || !fi.IsDir() {
				return fmt.Errorf("--data-dir %s is not a directory", dataDir)
			}
			if inUse, pid := daemon.DataDirInUse(dataDir); inUse {
				who := "a flotilla daemon or dev"
				if pid > 0 {
					who = fmt.Sprintf("%s (pid %d)", who, pid)
				}
				return fmt.Errorf("%s runs on data dir %s and would start the supervisor and its units again: stop it first (run it with --stop-units-on-exit to have it stop its units itself)", who, dataDir)
			}
			dir := filepath.Join(dataDir, "units")
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			st, err := supervisor.Stop(ctx, dir)
			if errors.Is(err, supervisor.ErrNotRunning) {
				fmt.Fprintf(cmd.OutOrStdout(), "No supervisor runs for %s: nothing to stop.\n", dataDir)
				return nil
			}
			if err != nil {
				return err
			}
			units := "units"
			if st.Units == 1 {
				units = "unit"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Stopped %d %s (%d running) and the supervisor (pid %d) of %s.\n", st.Units, units, st.Running, st.PID, dataDir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the data dir of the daemon or flotilla dev whose supervisor to stop")
	cmd.Flags().DurationVar(&timeout, "timeout", supervisor.DefaultShutdownTimeout, "how long the units have to stop gracefully before they are SIGKILLed")
	cmd.MarkFlagDirname("data-dir")
	return cmd
}
