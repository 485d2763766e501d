package daemon

import (
	"log/slog"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
)

// notifySystemd sends state (sddaemon.SdNotifyReady, SdNotifyStopping, ...)
// to systemd when it runs the daemon as a Type=notify service
// (contrib/systemd/flotilla.service) and does nothing otherwise.
// NOTIFY_SOCKET stays set for later notifications; units do not inherit it,
// as the exec driver gives them an environment of their own.
func notifySystemd(log *slog.Logger, state string) {
	sent, err := sddaemon.SdNotify(false, state)
	switch {
	case err != nil:
		log.Warn("notify systemd", "state", state, "err", err)
	case sent:
		log.Debug("notified systemd", "state", state)
	}
}
