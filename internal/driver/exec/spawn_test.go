package execdriver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWorkingDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	tests := []struct {
		wd, want string
		err      bool
	}{
		{"", "/", false},
		{"~", dir, false},
		{dir, dir, false},
		{"-" + filepath.Join(dir, "missing"), "/", false},
		{filepath.Join(dir, "missing"), "", true},
		{file, "", true},
		{"relative", "", true},
	}
	for _, tt := range tests {
		got, err := workingDir(tt.wd, dir)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("workingDir(%q) = %q, %v; want %q, error %v", tt.wd, got, err, tt.want, tt.err)
		}
	}
}

func TestLookupIdentity(t *testing.T) {
	if id, err := lookupIdentity("", "", 1000, 1000); err != nil || id.cred != nil {
		t.Errorf("no User=/Group=: %+v, %v; want no credential", id, err)
	}
	if _, err := lookupIdentity("no-such-user-xyz", "", 0, 0); err == nil || !strings.Contains(err.Error(), "no-such-user-xyz") {
		t.Errorf("unknown user: error %v, want one naming the user", err)
	}
	if _, err := lookupIdentity("", "no-such-group-xyz", 0, 0); err == nil || !strings.Contains(err.Error(), "no-such-group-xyz") {
		t.Errorf("unknown group: error %v, want one naming the group", err)
	}
	// Not root: another user cannot be had.
	if _, err := lookupIdentity("root", "", 1000, 1000); err == nil || !strings.Contains(err.Error(), "root") {
		t.Errorf("User=root as uid 1000: error %v, want one saying root is needed", err)
	}
	// Not root: one's own user is fine, and needs no credential.
	if id, err := lookupIdentity("nobody", "", 65534, 65534); err != nil || id.cred != nil || id.name != "nobody" {
		t.Errorf("User=nobody as nobody: %+v, %v; want no credential", id, err)
	}
	// Root becomes the user, with its primary group.
	if id, err := lookupIdentity("nobody", "", 0, 0); err != nil || id.cred == nil || id.cred.Uid != 65534 || id.cred.Gid != 65534 {
		t.Errorf("User=nobody as root: %+v, %v; want uid and gid 65534", id, err)
	}
	id, err := lookupIdentity("0", "", 0, 0)
	if err != nil || id.name != "root" {
		t.Errorf("User=0: %+v, %v; want user root", id, err)
	}
}
