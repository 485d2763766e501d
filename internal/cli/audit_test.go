package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/audit"
)

// TestAuditCommand: flotilla audit reads a daemon's audit log, filtered by
// --token (ID or name) and --since, as a table or JSON lines.
func TestAuditCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := audit.Open(audit.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, r := range []audit.Record{
		{Time: now.Add(-48 * time.Hour), TokenID: "3f2a9c0d11e4b7a5", TokenName: "alice", Remote: "10.0.0.9:5123", Method: "POST", Route: "/v1/batch", Units: []string{"old.service"}, Status: 200, Outcome: "ok"},
		{Time: now.Add(-time.Hour), TokenID: "3f2a9c0d11e4b7a5", TokenName: "alice", Cert: "alice", Remote: "10.0.0.9:5124", Method: "PUT", Route: "/v1/units/web.service", Units: []string{"web.service"}, Status: 200, Outcome: "ok"},
		{Time: now.Add(-time.Minute), TokenID: "77aa", TokenName: "ci", Remote: "10.0.0.7:4000", Method: "DELETE", Route: "/v1/units/db.service", Status: 403, Outcome: "refused", Error: "token ci has role read"},
	} {
		if err := l.Record(r); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()

	out := runWriter(t.Context(), t, nil, new(strings.Builder), "audit", "--audit-log", path, "--since", "24h", "--token", "alice").mustSucceed(t).out
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "alice (3f2a9c0d11e4b7a5)") ||
		!strings.Contains(lines[1], "PUT /v1/units/web.service") || !strings.Contains(lines[1], "web.service") {
		t.Errorf("audit --since 24h --token alice =\n%s\nwant the header and the PUT of web.service", out)
	}
	out = runWriter(t.Context(), t, nil, new(strings.Builder), "audit", "--audit-log", path, "--token", "77aa", "-o", "json").mustSucceed(t).out
	var r audit.Record
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Outcome != "refused" || r.Route != "/v1/units/db.service" {
		t.Errorf("audit --token 77aa -o json = %s (%v), want the refused DELETE", out, err)
	}
	runWriter(t.Context(), t, nil, new(strings.Builder), "audit", "--audit-log", path, "--since", "yesterday").mustFail(t, "--since")
	t.Setenv(AuditLogEnv, "")
	runWriter(t.Context(), t, nil, new(strings.Builder), "audit").mustFail(t, "--audit-log")
}
