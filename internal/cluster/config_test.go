package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpRefusesBadConfig: Up names what is wrong before it makes anything.
func TestUpRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "flotilla")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	held := filepath.Join(dir, "held")
	os.Mkdir(held, 0o700)
	os.WriteFile(filepath.Join(held, stateFile), []byte("{}"), 0o600)
	good := Config{N: 3, Dir: filepath.Join(dir, "state"), Binary: bin, UnitFile: bin}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.N = 0 }, "N=0: a cluster has 1 to 32 machines"},
		{func(c *Config) { c.N = 33 }, "N=33"},
		{func(c *Config) { c.Name = "My_Cluster" }, `cluster name "My_Cluster": only a-z, 0-9 and '-'`},
		{func(c *Config) { c.Dir = "" }, "no state directory"},
		{func(c *Config) { c.Dir = held }, "already holds a cluster"},
		{func(c *Config) { c.Binary = filepath.Join(dir, "none") }, "the flotilla binary"},
		{func(c *Config) { c.UnitFile = dir }, "the unit file"},
		{func(c *Config) { c.Subnet = "10.1.0.0/16" }, "want a /24"},
		{func(c *Config) { c.Subnet = "fd00::/64" }, "want an IPv4 /24"},
	} {
		cfg := good
		tc.edit(&cfg)
		_, err := Up(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Up(%+v) = %v, want an error with %q", cfg, err, tc.want)
		}
	}
	if _, err := os.Stat(good.Dir); !os.IsNotExist(err) {
		t.Errorf("a refused Up made %s", good.Dir)
	}
}

// TestExports: the lines eval reads, quoted where the shell needs it.
func TestExports(t *testing.T) {
	c := &Cluster{Nodes: []Node{{Name: "n1", IP: "10.0.0.11"}, {Name: "n2", IP: "10.0.0.12"}},
		CAFile: "/s/ca/ca.pem", Cert: "/s/certs/admin.pem", Key: "/a b/admin-key.pem", Token: "flt_x-Y"}
	want := `export FLOTILLA_ENDPOINT=https://10.0.0.11:7480,https://10.0.0.12:7480
export FLOTILLA_CA_FILE=/s/ca/ca.pem
export FLOTILLA_CERT_FILE=/s/certs/admin.pem
export FLOTILLA_KEY_FILE='/a b/admin-key.pem'
export FLOTILLA_TOKEN=flt_x-Y
`
	if got := c.Exports(); got != want {
		t.Errorf("Exports() =\n%s\nwant\n%s", got, want)
	}
}

// TestDownLeavesOtherDirectories: Down removes a state directory, never a
// directory that holds something else.
func TestDownLeavesOtherDirectories(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "precious"), []byte("x"), 0o600)
	if err := removeState(dir); err == nil || !strings.Contains(err.Error(), "not a cluster's state directory") {
		t.Errorf("removeState(%s) = %v, want a refusal", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "precious")); err != nil {
		t.Error(err)
	}
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o700)
	os.WriteFile(filepath.Join(state, stateFile), []byte("{}"), 0o600)
	if err := removeState(state); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", state, err)
	}
}
