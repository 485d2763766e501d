package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/flotilla/flotilla/internal/version"
)

// genManCommand writes a man page per command of root (hidden; make man).
func genManCommand(root *cobra.Command) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "gen-man --dir DIR",
		Short:  "Write the man pages of flotilla and its commands to DIR (for make man)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("--dir: %w", err)
			}
			in := version.Get()
			h := &doc.GenManHeader{Title: "FLOTILLA", Section: "1", Source: "Flotilla " + in.Version, Manual: "Flotilla Manual"}
			// The commit's date, not today's, so that a build of a commit
			// always writes the same pages.
			if t, err := time.Parse(time.RFC3339, in.BuildDate); err == nil {
				t = t.UTC()
				h.Date = &t
			} else {
				t := time.Unix(0, 0).UTC()
				h.Date = &t
			}
			root.DisableAutoGenTag = true
			return doc.GenManTree(root, h, dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "man", "directory to write flotilla.1, flotilla-start.1, ... to")
	return cmd
}
