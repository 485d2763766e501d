package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/waitfor"
)

func TestReplace(t *testing.T) {
	c := start(t)
	put := func(path string, ch apiv1.UnitChange) (int, apiv1.Unit, string) {
		t.Helper()
		b, _ := json.Marshal(ch)
		resp, body := c.do(t, "PUT", path, string(b))
		var u apiv1.Unit
		json.Unmarshal([]byte(body), &u)
		return resp.StatusCode, u, body
	}
	v1 := "[Service]\nExecStart=/bin/sleep 100\n"
	v2 := "[Service]\nExecStart=/bin/sleep 200\n"
	code, u1, body := put("/v1/units/r.service", apiv1.UnitChange{File: v1, DesiredState: "launched"})
	if code != 200 {
		t.Fatalf("PUT r.service: %d %s", code, body)
	}
	waitState := func(hash string) {
		t.Helper()
		waitfor.Until(t, 10*time.Second, "r.service running the file of hash "+hash, func() error {
			u, err := c.eng.Unit("r.service")
			if err != nil {
				return err
			}
			if u.State == nil || u.State.Hash != hash || u.State.Active != "active" {
				return fmt.Errorf("state %+v", u.State)
			}
			return nil
		})
	}
	waitState(u1.Hash)
	if code, _, body := put("/v1/units/r.service", apiv1.UnitChange{File: v2}); code != 409 || !strings.Contains(body, "replace") {
		t.Errorf("PUT a changed file without ?replace: %d %s, want 409 that mentions replacing", code, body)
	}
	if code, _, body := put("/v1/units/r.service?replace=perhaps", apiv1.UnitChange{File: v2}); code != 400 || !strings.Contains(body, "perhaps") {
		t.Errorf("PUT ?replace=perhaps: %d %s, want 400 naming the value", code, body)
	}
	code, u2, body := put("/v1/units/r.service?replace=true", apiv1.UnitChange{File: v2})
	if code != 200 || u2.Hash == u1.Hash || u2.DesiredState != "launched" || u2.Machine != "m1" {
		t.Fatalf("PUT ?replace=true: %d %s, want 200, a new hash, still launched on m1", code, body)
	}
	waitState(u2.Hash) // restarted where it ran, with the new file

	// New constraints place it again: no machine has disk=ssd.
	v3 := v2 + "[X-Fleet]\nMachineMetadata=disk=ssd\n"
	b, _ := json.Marshal(apiv1.Batch{Units: []apiv1.UnitChange{{Name: "r.service", File: v3}}})
	if resp, body := c.do(t, "POST", "/v1/batch?replace=true", string(b)); resp.StatusCode != 200 {
		t.Fatalf("POST /v1/batch?replace=true: %d %s", resp.StatusCode, body)
	}
	waitfor.Until(t, 10*time.Second, "r.service with new constraints unplaced with a reason naming disk", func() error {
		u, err := c.eng.Unit("r.service")
		if err != nil {
			return err
		}
		if u.Machine != "" || !strings.Contains(u.Reason, "disk") {
			return fmt.Errorf("%+v", u)
		}
		return nil
	})
}
