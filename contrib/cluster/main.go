// Command cluster brings up a Flotilla cluster in Docker containers on this
// host, or takes it down: what `make cluster` and `make cluster-down` run.
// The work is internal/cluster's; this only reads the command line.
//
//	go run ./contrib/cluster up -n 3 -dir flotilla-cluster -binary bin/flotilla-static
//	go run ./contrib/cluster down -dir flotilla-cluster
//
// up prints its progress on standard error and, on standard output, the
// export lines of the CLI's environment, for eval in a shell.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/flotilla/flotilla/internal/cluster"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: cluster up|down [flags] (cluster up -h lists them)")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var cfg cluster.Config
	fs.StringVar(&cfg.Name, "name", "flotilla-cluster", "the Docker network's name and the containers' prefix")
	fs.StringVar(&cfg.Dir, "dir", "flotilla-cluster", "state directory: certificates, token, env")
	fs.IntVar(&cfg.N, "n", 3, "machines (up)")
	fs.StringVar(&cfg.Binary, "binary", "", "static flotilla binary to install (up)")
	fs.StringVar(&cfg.UnitFile, "unit", "contrib/systemd/flotilla.service", "systemd unit to install (up)")
	fs.StringVar(&cfg.Subnet, "subnet", "", "IPv4 /24 of the cluster's network (up; default: a free one of 172.30.10-249.0/24)")
	fs.Parse(os.Args[2:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cluster %s: unexpected arguments %q\n", os.Args[1], fs.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if os.Args[1] == "down" {
		if err := cluster.Down(ctx, cfg.Name, cfg.Dir); err != nil {
			fmt.Fprintln(os.Stderr, "cluster down:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "cluster %s removed: containers, network and %s\n", cfg.Name, cfg.Dir)
		return
	}
	if cfg.Binary == "" {
		fmt.Fprintln(os.Stderr, "cluster up: -binary is required (a CGO_ENABLED=0 build of ./cmd/flotilla)")
		os.Exit(2)
	}
	cfg.Log = os.Stderr
	c, err := cluster.Up(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster up: %v\n", err)
		if _, lerr := cluster.Load(cfg.Dir); lerr == nil {
			fmt.Fprintln(os.Stderr, "(make cluster-down removes what was made)")
		}
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "the CLI's environment, also in %s:\n", c.EnvFile)
	fmt.Print(c.Exports())
}
