package systemddriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// subscribe has systemd send its signals and delivers the changes of
// units' org.freedesktop.systemd1.Unit properties to d.updates.
//
// On the system bus it listens on a connection of its own, with a match
// rule for exactly those signals: go-systemd's subscription matches every
// PropertiesChanged (each unit's Service, Socket ... interface too, the
// larger half of what systemd sends while units start or stop, all of it
// decoded here to be dropped) and reads each ended job's unit with a call
// of its own. Without a system bus, go-systemd talks to systemd's private
// socket, where systemd sends every signal to every connection anyway,
// and its subscription is used.
func (d *Driver) subscribe() error {
	dialCtx, cancelDial := context.WithCancel(context.Background())
	timer := time.AfterFunc(d.cfg.DialTimeout, cancelDial)
	sig, err := dbus.ConnectSystemBus(dbus.WithContext(dialCtx))
	if !timer.Stop() && err == nil {
		sig.Close()
		err = fmt.Errorf("no answer within %v", d.cfg.DialTimeout)
	}
	if err != nil {
		cancelDial()
		d.log.Info("no system bus; taking systemd's signals from the connection to systemd", "err", err)
		d.conn.SetPropertiesSubscriber(d.updates, d.errs)
		return d.conn.Subscribe()
	}
	if err := sig.AddMatchSignal(
		dbus.WithMatchInterface("org.freedesktop.DBus.Properties"),
		dbus.WithMatchMember("PropertiesChanged"),
		dbus.WithMatchPathNamespace("/org/freedesktop/systemd1/unit"),
		dbus.WithMatchArg(0, "org.freedesktop.systemd1.Unit"),
	); err != nil {
		sig.Close()
		return fmt.Errorf("add a match rule for units' signals: %w", err)
	}
	ch := make(chan *dbus.Signal, 4096)
	sig.Signal(ch)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := sig.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		CallWithContext(ctx, "org.freedesktop.systemd1.Manager.Subscribe", 0).Store(); err != nil {
		sig.Close()
		return err
	}
	d.sigconn = sig
	d.watched.Add(1)
	go d.forward(ch)
	return nil
}

// forward hands the signals of sig (subscribe) to the watcher until the
// connection closes. A signal the watcher has no room for says so on
// d.errs, which makes it read every unit.
func (d *Driver) forward(ch <-chan *dbus.Signal) {
	defer d.watched.Done()
	for s := range ch {
		if s.Name != "org.freedesktop.DBus.Properties.PropertiesChanged" || len(s.Body) < 2 {
			continue
		}
		if iface, _ := s.Body[0].(string); iface != "org.freedesktop.systemd1.Unit" {
			continue
		}
		changed, ok := s.Body[1].(map[string]dbus.Variant)
		if !ok {
			continue
		}
		select {
		case d.updates <- &sddbus.PropertiesUpdate{UnitName: unitOfPath(string(s.Path)), Changed: changed}:
		default:
			select {
			case d.errs <- errors.New("the driver's buffer of signals is full"):
			default:
			}
		}
	}
}

// unitOfPath returns the name of the unit whose object path is p:
// systemd escapes each byte other than [A-Za-z0-9] of the name as _XX.
func unitOfPath(p string) string {
	const prefix = "/org/freedesktop/systemd1/unit/"
	if len(p) < len(prefix) || p[:len(prefix)] != prefix {
		return ""
	}
	p = p[len(prefix):]
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '_' && i+3 <= len(p) {
			if v, err := strconv.ParseUint(p[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, p[i])
	}
	return string(b)
}
