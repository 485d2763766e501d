// Package cli implements flotilla's fleetctl-style commands: submit, load,
// start, stop, unload, restart, destroy, list-units, list-unit-files,
// list-machines, set-metadata, status, journal and cat. They talk to a
// cluster through package client.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/auth"
)

// DefaultEndpoint is where the commands look for the API when neither
// --endpoint nor $FLOTILLA_ENDPOINT say otherwise (cmd/flotilla sets every
// flag from its $FLOTILLA_<FLAG>).
const DefaultEndpoint = "http://127.0.0.1:7480"

// EndpointEnv names the environment variable holding the default endpoint.
const EndpointEnv = "FLOTILLA_ENDPOINT"

// FleetctlEndpointEnv is fleetctl's variable for its endpoint, honoured
// when EndpointEnv is unset, so that fleet users' environments work.
const FleetctlEndpointEnv = "FLEETCTL_ENDPOINT"

// Environment variables holding the defaults of --token, --ca-file,
// --cert-file and --key-file.
const (
	TokenEnv    = "FLOTILLA_TOKEN"
	CAFileEnv   = "FLOTILLA_CA_FILE"
	CertFileEnv = "FLOTILLA_CERT_FILE"
	KeyFileEnv  = "FLOTILLA_KEY_FILE"
)

// leaderRetry is how long a request refused for want of a leader (an
// election under way, as for a second after a restart) is sent again
// before the command gives up with ExitUnavailable, as etcdctl rides out
// an election within its 5s --command-timeout.
const leaderRetry = 5 * time.Second

// Output formats of --output.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// Globals holds the flags shared by all commands.
type Globals struct {
	Endpoint       string
	Output         string
	RequestTimeout time.Duration
	// Token is the API token (--token); CAFile, CertFile and KeyFile are
	// the TLS files of an https endpoint (--ca-file, --cert-file, --key-file).
	Token                     string
	CAFile, CertFile, KeyFile string

	// pollMin and pollMax bound the interval between polls while waiting
	// for units; zero means 100ms and 1s.
	pollMin, pollMax time.Duration
	// now returns the current time; nil means time.Now.
	now func() time.Time
}

// AddCommands registers the global flags (--endpoint, --output/-o,
// --request-timeout) as persistent flags of root, adds the commands,
// teaches cobra's completion command their unit names, machines, --fields
// and --output values, and has root's -v and --version print what the
// version command prints.
func AddCommands(root *cobra.Command) {
	g := &Globals{}
	g.AddFlags(root.PersistentFlags())
	root.AddCommand(Commands(g)...)
	g.addCompletions(root)
	setVersion(root)
}

// AddFlags registers the global flags in fs, bound to g.
func (g *Globals) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&g.Endpoint, "endpoint", DefaultEndpoint, "URL of the Flotilla API (http://HOST:PORT, https://..., or a unix socket as unix:///PATH or /PATH); a comma-separated list is tried in order: the first that answers is used, and the next ones when it stops answering or cannot reach the leader; $"+EndpointEnv+", else $"+FleetctlEndpointEnv+", sets the default")
	fs.StringVarP(&g.Output, "output", "o", outputTable, "output format of list, set-metadata, status and cat commands: table or json")
	fs.DurationVar(&g.RequestTimeout, "request-timeout", client.DefaultTimeout, "time allowed for a single API request (0 means no limit)")
	// The token's default is read in clientOptions, so that help output
	// never prints the secret.
	fs.StringVar(&g.Token, "token", "", "API token of a cluster run with --acl (default $"+TokenEnv+")")
	fs.StringVar(&g.CAFile, "ca-file", os.Getenv(CAFileEnv), "CA certificate to verify an https endpoint with; $"+CAFileEnv+" sets the default")
	fs.StringVar(&g.CertFile, "cert-file", os.Getenv(CertFileEnv), "client certificate for an https endpoint (flotilla tls cert create --client); $"+CertFileEnv+" sets the default")
	fs.StringVar(&g.KeyFile, "key-file", os.Getenv(KeyFileEnv), "key of --cert-file; $"+KeyFileEnv+" sets the default")
}

// clientOptions are the client options the global flags ask for.
func (g *Globals) clientOptions() ([]client.Option, error) {
	opts := []client.Option{client.WithTimeout(g.RequestTimeout), client.WithUserAgent("flotilla-cli"), client.WithRetry(leaderRetry)}
	token := g.Token
	if token == "" {
		token = os.Getenv(TokenEnv)
	}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	if g.CAFile != "" || g.CertFile != "" || g.KeyFile != "" {
		tc, err := auth.ClientConfig(auth.Files{CA: g.CAFile, Cert: g.CertFile, Key: g.KeyFile})
		if err != nil {
			return nil, fmt.Errorf("--ca-file, --cert-file, --key-file: %w", err)
		}
		opts = append(opts, client.WithTLS(tc))
	}
	return opts, nil
}

// Commands returns the commands, bound to the flags in g.
func Commands(g *Globals) []*cobra.Command {
	return []*cobra.Command{
		newSubmitCommand(g),
		newStateCommand(g, loadVerb()),
		newStateCommand(g, startVerb()),
		newStateCommand(g, stopVerb()),
		newStateCommand(g, unloadVerb()),
		newRestartCommand(g),
		newDestroyCommand(g),
		newListUnitsCommand(g),
		newListUnitFilesCommand(g),
		newListMachinesCommand(g),
		newSetMetadataCommand(g),
		newDrainCommand(g),
		newStatusCommand(g),
		newJournalCommand(g),
		newCatCommand(g),
		newACLCommand(g),
		newTokenCommand(g),
		newAuditCommand(g),
		newVersionCommand(g),
		newHistoryCommand(g),
		newRevertCommand(g),
		newTagCommand(g),
		newPlanCommand(g),
		newDeploymentCommand(g),
	}
}

// env is what a running command works with.
type env struct {
	c      *client.Client
	out    io.Writer
	errOut io.Writer
	json   bool
	g      *Globals
	// checkIndex is the command's --check-index, for its first write
	// (batch); nil without one.
	checkIndex *int64
	// update is the command's --update: [X-Update] options overriding
	// the templates' own for the deployments it starts.
	update map[string]string
}

// setup validates the global flags and returns the command's environment
// and a context that ends on SIGINT or SIGTERM; the caller must call stop.
func (g *Globals) setup(cmd *cobra.Command) (e *env, ctx context.Context, stop context.CancelFunc, err error) {
	switch g.Output {
	case outputTable, outputJSON:
	default:
		return nil, nil, nil, fmt.Errorf("invalid --output %q: want %s or %s", g.Output, outputTable, outputJSON)
	}
	if g.RequestTimeout < 0 {
		return nil, nil, nil, fmt.Errorf("invalid --request-timeout %s: must not be negative", g.RequestTimeout)
	}
	opts, err := g.clientOptions()
	if err != nil {
		return nil, nil, nil, err
	}
	errOut := cmd.ErrOrStderr()
	var warnOnce sync.Once
	opts = append(opts, client.WithEtcdWarning(func(since string) {
		warnOnce.Do(func() {
			fmt.Fprintf(errOut, "warning: etcd unreachable since %s; showing the leader's memory (writes are refused until etcd is back)\n", since)
		})
	}))
	endpoint := g.Endpoint
	if f := cmd.Flags().Lookup("endpoint"); f != nil && !f.Changed && os.Getenv(EndpointEnv) == "" {
		if v := os.Getenv(FleetctlEndpointEnv); v != "" {
			endpoint = v
		}
	}
	ctx, stop = signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	c, err := firstAnswering(ctx, endpoint, opts)
	if err != nil {
		stop()
		return nil, nil, nil, err // it names the endpoint
	}
	return &env{
		c:      c,
		out:    cmd.OutOrStdout(),
		errOut: errOut,
		json:   g.Output == outputJSON,
		g:      g,
	}, ctx, stop, nil
}

// firstAnswering returns a client of the comma-separated list of
// endpoints, using the first that answers, as fleetctl and etcdctl try
// theirs in order; the client tries the next ones when the one in use
// stops answering or cannot reach the leader (client.New). A single
// endpoint is returned unprobed: its first request says whether it answers.
func firstAnswering(ctx context.Context, list string, opts []client.Option) (*client.Client, error) {
	n := 0
	for ep := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(ep) != "" {
			n++
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("--endpoint %q names no endpoint", list)
	}
	c, err := client.New(list, opts...)
	if err != nil {
		return nil, fmt.Errorf("--endpoint: %w", err)
	}
	if n == 1 {
		return c, nil
	}
	_, err = c.Status(ctx)
	var ae *client.APIError
	switch {
	case err == nil || errors.As(err, &ae):
		return c, nil // it answered, even if with an error
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("none of the %d endpoints of --endpoint answers:\n%w", n, err)
}

// runE returns a cobra RunE that sets the command's environment up and
// runs fn in it.
func (g *Globals) runE(fn func(ctx context.Context, e *env, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		e, ctx, stop, err := g.setup(cmd)
		if err != nil {
			return err
		}
		defer stop()
		return fn(ctx, e, args)
	}
}

func (g *Globals) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// unitArgs requires at least one UNIT argument.
func unitArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no units given (usage: %s)", cmd.UseLine())
	}
	return nil
}

// oneUnitArg requires exactly one UNIT argument.
func oneUnitArg(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%s takes exactly one unit, got %d (usage: %s)", cmd.Name(), len(args), cmd.UseLine())
	}
	return nil
}
