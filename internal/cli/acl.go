package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/auth"
)

func newACLCommand(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "acl", Short: "The API tokens of a cluster run with --acl"}
	cmd.AddCommand(&cobra.Command{
		Use:   "bootstrap",
		Short: "Make the cluster's first admin token (once; its secret is printed on the last line)",
		Long: `Make the cluster's first admin token. It works once in the life of the
cluster; later, an admin makes tokens with flotilla token create.

The secret is printed on the last line (with --output json, in the key
"token") and is not stored: keep it.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, _ []string) error {
			t, err := e.c.ACLBootstrap(ctx)
			if err != nil {
				return err
			}
			return printNewToken(e, t)
		}),
	})
	return cmd
}

func newTokenCommand(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Make, list and revoke API tokens (role admin)"}
	var req apiv1.TokenRequest
	var runAs string
	create := &cobra.Command{
		Use:   "create --role read|write|admin [--name N] [--run-as USER,...] [--ttl 720h]",
		Short: "Make a token; its secret is printed on the last line",
		Long: `Make an API token. Roles: read (lists, status, cat, journal, state,
events); write (also submit, load, start, stop, unload, destroy, restart,
set-metadata, drain); admin (also the scheduler's settings and tokens).

--run-as lists the users (User=) a write token's units may run as, or
'*' for any user including root, which an admin token always may. A unit
that would run as root (no User=, User=root) or get root's powers back
("+" and "!" command prefixes, AmbientCapabilities=, [X-Container]
Network=host or a host path in Volumes=) is refused with 403 from a token
that may not run units as root (docs/security.md).

With --ttl the token is refused (401) once that long has passed, and the
streams it opened end.

The secret is printed on the last line (with --output json, in the key
"token") and is not stored: keep it.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, _ []string) error {
			if _, err := auth.ParseRole(req.Role); err != nil {
				return fmt.Errorf("--role: %w", err)
			}
			req.RunAs = auth.ParseRunAs(runAs)
			if req.TTL != "" {
				if d, err := time.ParseDuration(req.TTL); err != nil || d <= 0 {
					return fmt.Errorf("--ttl %q: want a positive duration such as 720h", req.TTL)
				}
			}
			t, err := e.c.CreateToken(ctx, req)
			if err != nil {
				return err
			}
			return printNewToken(e, t)
		}),
	}
	create.Flags().StringVar(&req.Role, "role", "", "read, write or admin (required)")
	create.Flags().StringVar(&req.Name, "name", "", "what the token is for, shown by token list")
	create.Flags().StringVar(&runAs, "run-as", "", "the users the token's units may run as: USER,... or '*' for any, root included (write, admin)")
	create.Flags().StringVar(&req.TTL, "ttl", "", "how long the token lasts, such as 720h (default: until revoked)")
	create.MarkFlagRequired("role")
	list := &cobra.Command{
		Use:          "list",
		Short:        "List the tokens (never their secrets)",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, _ []string) error {
			l, err := e.c.Tokens(ctx)
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.out, l.Tokens)
			}
			tw := tabwriter.NewWriter(e.out, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tROLE\tRUN-AS\tCREATED\tEXPIRES")
			for _, t := range l.Tokens {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, dash(t.Name), t.Role, dash(strings.Join(t.RunAs, ",")), t.Created, dash(t.Expires))
			}
			return tw.Flush()
		}),
	}
	revoke := &cobra.Command{
		Use:          "revoke ID",
		Short:        "Revoke a token: requests carrying it are refused from now on",
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("token revoke takes exactly one token ID (from flotilla token list), got %d", len(args))
			}
			t, err := e.c.RevokeToken(ctx, args[0])
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.out, t)
			}
			fmt.Fprintf(e.out, "Revoked token %s (%s, role %s)\n", t.ID, dash(t.Name), t.Role)
			return nil
		}),
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

// printNewToken prints a new token with its secret on the last line.
func printNewToken(e *env, t *apiv1.NewToken) error {
	if e.json {
		return writeJSON(e.out, t)
	}
	fmt.Fprintf(e.out, "ID:      %s\nName:    %s\nRole:    %s\nRun as:  %s\nCreated: %s\n", t.ID, dash(t.Name), t.Role, dash(strings.Join(t.RunAs, ",")), t.Created)
	if t.Expires != "" {
		fmt.Fprintf(e.out, "Expires: %s\n", t.Expires)
	}
	fmt.Fprintf(e.out, "Secret (shown once, not stored; send it as --token or $%s):\n%s\n", TokenEnv, t.Secret)
	return nil
}
