package daemon

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/metrics"
)

// certWarnBefore is how long before its certificate or CA expires a daemon
// starts warning, at start and after each reload (as the shipped alert
// FlotillaCertificateExpiring does from flotilla_cert_expiry_seconds).
const certWarnBefore = 30 * 24 * time.Hour

// reloadCerts publishes when the daemon's certificate and CA expire, and
// reads the certificate and key again from their files at each signal on
// reload (SIGHUP), as etcd's members and Nomad's agents do, so a renewed
// certificate is used without a restart: new connections, served and
// dialed, present it; open ones keep theirs; the embedded etcd member reads
// the files at each handshake by itself. A certificate that does not load
// or check (another machine's, not the CA's, expired) is refused with the
// reason, and the one loaded is kept. Without TLS a signal is logged and
// otherwise ignored.
func reloadCerts(ctx context.Context, log *slog.Logger, creds *auth.Credentials, ms *metrics.Set, reload <-chan os.Signal) {
	publish := func() {
		if creds == nil {
			return
		}
		machine, ca := creds.Expires(), creds.CAExpires()
		ms.CertExpiry.WithLabelValues("machine").Set(float64(machine.Unix()))
		ms.CertExpiry.WithLabelValues("ca").Set(float64(ca.Unix()))
		for _, c := range []struct {
			what, file string
			at         time.Time
		}{{"certificate", creds.Files.Cert, machine}, {"CA", creds.Files.CA, ca}} {
			if left := time.Until(c.at); left < certWarnBefore {
				log.Warn("the daemon's "+c.what+" expires soon: renew it, then send the daemon SIGHUP (a CA needs a restart)",
					"file", c.file, "expires", c.at.UTC().Format(time.RFC3339), "days_left", int(left.Hours()/24))
			}
		}
	}
	publish()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reload:
		}
		if creds == nil {
			log.Info("reload requested, but the daemon runs without --tls-cert: nothing to reload")
			continue
		}
		if err := creds.Reload(); err != nil {
			log.Error("cannot reload the certificate; keeping the one loaded", "err", err)
			continue
		}
		log.Info("reloaded the certificate", "file", creds.Files.Cert, "expires", creds.Expires().UTC().Format(time.RFC3339))
		publish()
	}
}
