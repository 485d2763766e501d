package main

import (
	"fmt"
	"net"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/auth"
)

// tlsCommand is `flotilla tls`: a cluster CA and the certificates it signs,
// without another tool (as `nomad tls` does).
func tlsCommand() *cobra.Command {
	root := &cobra.Command{Use: "tls", Short: "Make the cluster's certificate authority and certificates"}
	ca := &cobra.Command{Use: "ca", Short: "The cluster's certificate authority"}
	var caDir string
	var caDays int
	caCreate := &cobra.Command{
		Use:   "create",
		Short: "Write a new CA: ca.pem and ca-key.pem (keep ca-key.pem off the machines)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, k, err := auth.CreateCA(caDir, caDays)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\nwrote %s\n", c, k)
			return nil
		},
	}
	caCreate.Flags().StringVar(&caDir, "dir", ".", "directory to write ca.pem and ca-key.pem into")
	caCreate.Flags().IntVar(&caDays, "days", auth.DefaultCADays, "days the CA is valid")
	ca.AddCommand(caCreate)

	cert := &cobra.Command{Use: "cert", Short: "Certificates signed by the cluster's CA"}
	var (
		r        auth.CertRequest
		ips, dns string
	)
	certCreate := &cobra.Command{
		Use:   "create",
		Short: "Write NAME.pem and NAME-key.pem: a server's certificate, with --agent a machine's that only runs units, or with --client one for a person or a tool",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range splitList(ips) {
				ip := net.ParseIP(s)
				if ip == nil {
					return fmt.Errorf("--ip %q is not an IP address", s)
				}
				r.IPs = append(r.IPs, ip)
			}
			r.DNSNames = splitList(dns)
			c, k, err := auth.CreateCert(r)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\nwrote %s\n", c, k)
			return nil
		},
	}
	fs := certCreate.Flags()
	fs.StringVar(&r.CADir, "ca-dir", "", "directory holding ca.pem and ca-key.pem (required)")
	fs.StringVar(&r.Name, "name", "", "the machine's name (its --name), or the person's or tool's with --client (required)")
	fs.StringVar(&ips, "ip", "", "IP addresses the machine is reached at, IP,... (127.0.0.1 and ::1 always)")
	fs.StringVar(&dns, "dns", "", "DNS names the machine is reached at, NAME,... (localhost and --name always)")
	fs.BoolVar(&r.Client, "client", false, "a certificate for a person or a tool using the API: it cannot serve or pass for a machine")
	fs.BoolVar(&r.Agent, "agent", false, "the certificate of a machine that only runs units (daemon --servers): no engine, no etcd member, no access to etcd")
	fs.StringVar(&r.OutDir, "out", ".", "directory to write NAME.pem and NAME-key.pem into")
	fs.IntVar(&r.Days, "days", auth.DefaultCertDays, "days the certificate is valid")
	certCreate.MarkFlagRequired("ca-dir")
	certCreate.MarkFlagRequired("name")
	cert.AddCommand(certCreate)
	root.AddCommand(ca, cert)
	return root
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
