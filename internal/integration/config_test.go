package integration

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDaemonConfigErrors: a bad configuration is refused before anything
// starts, with a message naming what is wrong and a non-zero exit.
func TestDaemonConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"daemon", "--etcd-embed"}, "--data-dir is required"},
		{[]string{"daemon", "--data-dir", dir}, "no etcd"},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--etcd-endpoints", "http://127.0.0.1:1"}, "exclude each other"},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--metadata", "role"}, "--metadata"},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--name", "bad name"}, `--name: machine name "bad name"`},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--registry", "zookeeper"}, `--registry "zookeeper"`},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--driver", "podman"}, `--driver "podman": driver: unknown driver "podman" (want exec, systemd, docker, sim)`},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--driver", "exec,sim"}, "the sim driver runs alone"},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--public-ip", "localhost"}, "--public-ip"},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--etcd-initial-cluster", "n2=http://127.0.0.1:1", "--name", "n1"}, "does not include this member"},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--capacity-cpu", "many"}, "--capacity-cpu"},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--log-level", "loud"}, "--log-level"},
		{[]string{"dev", "--data-dir", dir, "--api-addr", "nowhere"}, "--api-addr"},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--agent-ttl", "8s", "--election-ttl", "5s"}, "use at least 13s"},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--election-ttl", "500ms"}, "at least 1s"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, flotillaBin, tc.args...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("flotilla %s = %v, %q; want a failure naming %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
}
