package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/flotilla/flotilla/client"
)

// Exit codes of flotilla commands (docs/cli.md).
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitError: any other failure (bad flags or input, a unit that does
	// not exist, a refused change, a timeout of --block-timeout, ...).
	ExitError = 1
	// ExitNotStarted: a unit could not be placed or failed to start, as
	// `nomad job run` returns 2 when it cannot place.
	ExitNotStarted = 2
	// ExitInactive: status showed a unit that is not active, as
	// `systemctl status` returns 3.
	ExitInactive = 3
	// ExitUnavailable: the cluster could not be reached or has no leader.
	ExitUnavailable = 4
	// ExitPlanChanges: plan found changes (and every unit can be placed;
	// some that cannot is ExitNotStarted, none at all ExitOK).
	ExitPlanChanges = 5
	// ExitDeploymentFailed: the deployment a command followed failed,
	// was aborted, or was rolled back.
	ExitDeploymentFailed = 6
)

// ExitCode is the exit code of a command that returned err.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if es, ok := errors.AsType[*exitStatus](err); ok {
		return es.code
	}
	if _, ok := errors.AsType[*deploymentError](err); ok {
		return ExitDeploymentFailed
	}
	var we *waitError
	if errors.As(err, &we) {
		if we.notStarted {
			return ExitNotStarted
		}
		return ExitError
	}
	var ie *inactiveError
	if errors.As(err, &ie) {
		return ExitInactive
	}
	// A network error reaching the cluster is 4; one listening (a daemon's
	// --api-addr in use) is the daemon's own failure to run: 1.
	var ne *net.OpError
	if client.IsUnavailable(err) || errors.As(err, &ne) && ne.Op != "listen" || errors.Is(err, context.DeadlineExceeded) {
		return ExitUnavailable
	}
	return ExitError
}

// inactiveError ends a status that showed units that are not active.
type inactiveError struct {
	units []string // "name (state)"
}

func (e *inactiveError) Error() string {
	if len(e.units) == 1 {
		return "unit is not active: " + e.units[0]
	}
	return fmt.Sprintf("%d units are not active: %s", len(e.units), strings.Join(e.units, ", "))
}
