package execdriver

import (
	"testing"

	"github.com/flotilla/flotilla/internal/driver/service"
)

func TestActiveSub(t *testing.T) {
	tests := []struct {
		p           phase
		result      string
		active, sub string
	}{
		{phaseDead, "", "inactive", "dead"},
		{phaseDead, service.ResultSuccess, "inactive", "dead"},
		{phaseDead, service.ResultExitCode, "failed", "failed"},
		{phaseDead, service.ResultStartLimitHit, "failed", "failed"},
		{phaseStartPre, service.ResultSuccess, "activating", "start-pre"},
		{phaseRunning, service.ResultSuccess, "active", "running"},
		{phaseExited, service.ResultSuccess, "active", "exited"},
		{phaseStopSigterm, service.ResultExitCode, "deactivating", "stop-sigterm"},
		{phaseStopSigkill, service.ResultSuccess, "deactivating", "stop-sigkill"},
		{phaseAutoRestart, service.ResultExitCode, "activating", "auto-restart"},
	}
	for _, tt := range tests {
		if a, s := activeSub(tt.p, tt.result); a != tt.active || s != tt.sub {
			t.Errorf("activeSub(%d, %q) = %s/%s, want %s/%s", tt.p, tt.result, a, s, tt.active, tt.sub)
		}
	}
}
