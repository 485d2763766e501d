package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/audit"
)

// AuditLogEnv is the environment variable that gives flotilla audit its
// --audit-log.
const AuditLogEnv = "FLOTILLA_AUDIT_LOG"

func newAuditCommand(g *Globals) *cobra.Command {
	var (
		path, since, token string
	)
	cmd := &cobra.Command{
		Use:   "audit --audit-log PATH [--since 24h|TIME] [--token ID|NAME]",
		Short: "Show a daemon's audit log: every write and refused request, and who made it",
		Long: `Show the audit log a daemon writes with --audit-log PATH (and its rotated
files, PATH.1 ...), oldest first: every write and every refused request,
with the token's name and ID (never its secret), the client certificate's
name, the remote address, the route, the units and the outcome. It reads
the file on this host: run it where the daemon runs (the leader's log has
every write, forwarded ones included).

--since takes a duration back from now (24h) or a time (RFC 3339);
--token a token's ID or name. With --output json, one record a line.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				path = os.Getenv(AuditLogEnv)
			}
			if path == "" {
				return fmt.Errorf("--audit-log: give the daemon's --audit-log PATH (or $%s)", AuditLogEnv)
			}
			f := audit.Filter{Token: token}
			if since != "" {
				if d, err := time.ParseDuration(since); err == nil && d >= 0 {
					f.Since = time.Now().Add(-d)
				} else if t, err := time.Parse(time.RFC3339, since); err == nil {
					f.Since = t
				} else {
					return fmt.Errorf("--since %q: want a duration such as 24h or a time such as 2026-11-27T12:00:00Z", since)
				}
			}
			out := cmd.OutOrStdout()
			if g.Output == outputJSON {
				enc := json.NewEncoder(out)
				enc.SetEscapeHTML(false)
				return audit.Read(path, f, func(r audit.Record) error { return enc.Encode(r) })
			}
			tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tTOKEN\tCERT\tREMOTE\tREQUEST\tUNITS\tSTATUS\tOUTCOME")
			err := audit.Read(path, f, func(r audit.Record) error {
				tok := "-"
				if r.TokenID != "" {
					tok = r.TokenID
					if r.TokenName != "" {
						tok = r.TokenName + " (" + r.TokenID + ")"
					}
				}
				units := strings.Join(r.Units, ",")
				if r.More > 0 {
					units += fmt.Sprintf(" and %d more", r.More)
				}
				outcome := r.Outcome
				if r.Error != "" {
					outcome += ": " + r.Error
				}
				_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s %s\t%s\t%d\t%s\n", r.Time.UTC().Format(time.RFC3339), tok, dash(r.Cert),
					r.Remote, r.Method, r.Route, dash(units), r.Status, outcome)
				return err
			})
			if ferr := tw.Flush(); err == nil {
				err = ferr
			}
			return err
		},
	}
	cmd.Flags().StringVar(&path, "audit-log", "", "the daemon's --audit-log file (default $"+AuditLogEnv+")")
	cmd.Flags().StringVar(&since, "since", "", "only records from this long ago (24h) or this time (RFC 3339) on")
	cmd.Flags().StringVar(&token, "token", "", "only records of the token with this ID or name")
	return cmd
}
