package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
)

// statusJournalLines is how many journal lines status shows, as systemctl.
const statusJournalLines = 10

func newStatusCommand(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status UNIT...",
		Short: "Output the status of one or more units in the cluster",
		Long: `Output the status of one or more units in the manner of systemctl status: the
state the unit's machine reports, its health (as its machine judges it: by
its [X-Check], else healthy while active, which a Type=notify unit is once
it sent READY=1, and unhealthy after a WatchdogSec= timeout), its main PID,
the machine, and the last lines of its journal. Fails if a unit does not
exist.

With --output json, print the units as the API returns them.`,
		Example:      `  flotilla status hello.service`,
		Args:         unitArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			return e.status(ctx, nameArgs(args))
		}),
	}
}

func (e *env) status(ctx context.Context, names []string) error {
	known, err := e.fetchUnits(ctx, names)
	if err != nil {
		return err
	}
	var (
		units   []apiv1.Unit
		missing []string
	)
	for _, n := range names {
		if u, ok := known[n]; ok {
			units = append(units, u)
		} else {
			missing = append(missing, n)
		}
	}
	if e.json {
		if units == nil {
			units = []apiv1.Unit{}
		}
		if err := writeJSON(e.out, units); err != nil {
			return err
		}
		return statusResult(units, missing)
	}
	machines := newMachineCache(e.c)
	for i, u := range units {
		if i > 0 {
			fmt.Fprintln(e.out)
		}
		writeStatus(e.out, u, machines.legend(ctx, u.Machine, true), e.g.clock(), time.Local)
		if u.Machine == "" {
			continue
		}
		if err := e.copyJournal(ctx, u.Name, client.JournalOptions{Lines: statusJournalLines}, true); err != nil {
			fmt.Fprintf(e.errOut, "WARNING: %v\n", err)
		}
	}
	return statusResult(units, missing)
}

// statusResult is how status ends: an error naming the missing units, or
// an *inactiveError naming those shown that are not active (exit code 3,
// as systemctl status).
func statusResult(units []apiv1.Unit, missing []string) error {
	if err := notFound(missing); err != nil {
		return err
	}
	var inactive []string
	for _, u := range units {
		switch {
		case u.State == nil:
			inactive = append(inactive, u.Name+" (no machine reports it)")
		case u.State.Active != "active":
			inactive = append(inactive, u.Name+" ("+dash(u.State.Active)+")")
		}
	}
	if inactive != nil {
		return &inactiveError{units: inactive}
	}
	return nil
}

// writeStatus writes the systemctl-like status of u; machine is the legend
// of its machine.
func writeStatus(w io.Writer, u apiv1.Unit, machine string, now time.Time, loc *time.Location) {
	if u.Description != "" {
		fmt.Fprintf(w, "● %s - %s\n", u.Name, u.Description)
	} else {
		fmt.Fprintf(w, "● %s\n", u.Name)
	}
	st := u.State
	if st == nil {
		fmt.Fprintf(w, "   Loaded: -\n   Active: -\n")
	} else {
		fmt.Fprintf(w, "   Loaded: %s\n", dash(st.Load))
		fmt.Fprintf(w, "   Active: %s\n", activeLine(st, now, loc))
		if st.Health != "" {
			fmt.Fprintf(w, "   Health: %s\n", st.Health)
		}
		if st.PID > 0 {
			fmt.Fprintf(w, " Main PID: %d\n", st.PID)
		}
		if st.Message != "" {
			fmt.Fprintf(w, "   Status: %q\n", st.Message)
		}
	}
	fmt.Fprintf(w, "  Machine: %s\n", machine)
	if u.Reason != "" {
		fmt.Fprintf(w, "   Reason: %s\n", u.Reason)
	}
	fmt.Fprintf(w, "  Desired: %s\n", dash(u.DesiredState))
	if p := cutOffPolicy(u); p != "" {
		fmt.Fprintf(w, "   Policy: %s\n", p)
	}
	for i, h := range u.History {
		label := "          "
		if i == 0 {
			label = "  History:"
		}
		when := h.Time
		if t, err := time.Parse(time.RFC3339Nano, h.Time); err == nil {
			when = t.In(loc).Format("Mon 2006-01-02 15:04:05 MST")
		}
		fmt.Fprintf(w, "%s %s %s\n", label, when, h.Event)
	}
}

// cutOffPolicy describes what happens to u when its machine is cut off.
func cutOffPolicy(u apiv1.Unit) string {
	after := u.LostAfter
	if after == "" {
		after = "the agent TTL"
	}
	switch {
	case u.Global:
		return ""
	case u.Singleton:
		return "singleton: killed on its machine after " + after + " cut off, then started elsewhere"
	case u.LostAfter == "infinity":
		return "kept running when its machine is cut off; never replaced"
	case u.LostAfter != "":
		return "kept running when its machine is cut off; replaced elsewhere after " + after
	}
	return ""
}

// activeLine is systemctl's Active: value, e.g.
// "active (running) since Wed 2024-05-01 12:00:01 UTC; 2min 3s ago".
func activeLine(st *apiv1.UnitState, now time.Time, loc *time.Location) string {
	s := dash(st.Active)
	switch {
	case st.Active == "failed" && st.Result != "":
		s += " (Result: " + st.Result + ")"
	case st.Sub != "":
		s += " (" + st.Sub + ")"
	}
	if st.Since == "" {
		return s
	}
	since, err := time.Parse(time.RFC3339, st.Since)
	if err != nil {
		return s + " since " + st.Since
	}
	return s + " since " + since.In(loc).Format("Mon 2006-01-02 15:04:05 MST") + "; " + ago(now.Sub(since))
}

// ago says how long ago something happened, as systemd does.
func ago(d time.Duration) string {
	const (
		day   = 24 * time.Hour
		week  = 7 * day
		month = 2629800 * time.Second // 30.44 days
		year  = 31557600 * time.Second
	)
	n := func(d, unit time.Duration) int64 { return int64(d / unit) }
	switch {
	case d < 0:
		return "in the future"
	case d >= year:
		return fmt.Sprintf("%s %s ago", plural(n(d, year), "year"), plural(n(d%year, month), "month"))
	case d >= month:
		return fmt.Sprintf("%s %s ago", plural(n(d, month), "month"), plural(n(d%month, day), "day"))
	case d >= week:
		return fmt.Sprintf("%s %s ago", plural(n(d, week), "week"), plural(n(d%week, day), "day"))
	case d >= 2*day:
		return fmt.Sprintf("%s ago", plural(n(d, day), "day"))
	case d >= 25*time.Hour:
		return fmt.Sprintf("1 day %dh ago", n(d-day, time.Hour))
	case d >= 6*time.Hour:
		return fmt.Sprintf("%dh ago", n(d, time.Hour))
	case d >= time.Hour:
		return fmt.Sprintf("%dh %dmin ago", n(d, time.Hour), n(d%time.Hour, time.Minute))
	case d >= 5*time.Minute:
		return fmt.Sprintf("%dmin ago", n(d, time.Minute))
	case d >= time.Minute:
		return fmt.Sprintf("%dmin %ds ago", n(d, time.Minute), n(d%time.Minute, time.Second))
	case d >= time.Second:
		return fmt.Sprintf("%ds ago", n(d, time.Second))
	}
	return "just now"
}

func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// copyJournal copies the journal of a unit to the output until it ends or
// ctx is done; blank puts an empty line before it, as systemctl status does.
func (e *env) copyJournal(ctx context.Context, name string, o client.JournalOptions, blank bool) error {
	rc, err := e.c.Journal(ctx, name, o)
	if apiNotFound(err) {
		// The unit runs nowhere: say that it does not exist if so, as
		// status does.
		if _, uerr := e.c.Unit(ctx, name); apiNotFound(uerr) {
			return notFound([]string{name})
		}
	}
	if err != nil {
		return fmt.Errorf("journal of %s: %w", name, err)
	}
	defer rc.Close()
	if blank {
		fmt.Fprintln(e.out)
	}
	if _, err := io.Copy(e.out, rc); err != nil && ctx.Err() == nil {
		return fmt.Errorf("read journal of %s: %w", name, err)
	}
	return nil
}

func newJournalCommand(g *Globals) *cobra.Command {
	var (
		lines  int
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "journal [flags] UNIT",
		Short: "Print the journal of a unit in the cluster",
		Long: `Print the last lines of the log of a unit, as its machine keeps it. With
--follow, keep printing new lines until interrupted.`,
		Example: `  flotilla journal hello.service
  flotilla journal -n 100 -f hello.service`,
		Args:         oneUnitArg,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			if lines < 0 {
				return fmt.Errorf("invalid --lines %d: must be 0 or more", lines)
			}
			err := e.copyJournal(ctx, unitName(args[0]), client.JournalOptions{Lines: lines, Follow: follow}, false)
			if err != nil && ctx.Err() != nil {
				return nil // interrupted: a clean end of a followed journal
			}
			return err
		}),
	}
	cmd.Flags().IntVarP(&lines, "lines", "n", 10, "number of recent log lines to print")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines as they are written")
	return cmd
}

func newCatCommand(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cat UNIT",
		Short: "Output the unit file of a unit in the cluster",
		Long: `Output the unit file of a unit exactly as it was submitted. With --output
json, print the unit as the API returns it.`,
		Example:      `  flotilla cat hello.service`,
		Args:         oneUnitArg,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			u, err := e.c.Unit(ctx, unitName(args[0]))
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.out, u)
			}
			_, err = io.WriteString(e.out, u.File)
			return err
		}),
	}
}

// apiNotFound reports whether err is the API saying that a thing does not
// exist (not a server that does not serve the API, client.IsNotFound's
// bare 404).
func apiNotFound(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Code == "not_found"
}
