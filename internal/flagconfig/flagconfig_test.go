package flagconfig

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// tree is a small command tree like flotilla's: a persistent flag on the
// root, a daemon with flags of several types, and a CLI verb.
type tree struct {
	root, daemon, list *cobra.Command
	endpoint           string
	dataDir, metadata  string
	ttl                time.Duration
	maxOps             int
	embed              bool
	endpoints, remove  []string
	fields             string
}

func newTree() *tree {
	t := &tree{}
	t.root = &cobra.Command{Use: "flotilla"}
	t.root.PersistentFlags().StringVar(&t.endpoint, "endpoint", "http://127.0.0.1:7480", "")
	t.daemon = &cobra.Command{Use: "daemon", RunE: func(*cobra.Command, []string) error { return nil }}
	fs := t.daemon.Flags()
	fs.StringVar(&t.dataDir, "data-dir", "", "")
	fs.StringVar(&t.metadata, "metadata", "", "")
	fs.DurationVar(&t.ttl, "agent-ttl", 20*time.Second, "")
	fs.IntVar(&t.maxOps, "etcd-max-txn-ops", 128, "")
	fs.BoolVar(&t.embed, "etcd-embed", false, "")
	fs.StringSliceVar(&t.endpoints, "etcd-endpoints", nil, "")
	fs.String("config", "", "")
	t.list = &cobra.Command{Use: "list-units", RunE: func(*cobra.Command, []string) error { return nil }}
	t.list.Flags().StringVar(&t.fields, "fields", "unit,machine", "")
	t.list.Flags().StringSliceVar(&t.remove, "remove", nil, "")
	t.root.AddCommand(t.daemon, t.list)
	return t
}

func (t *tree) run(s *Sources, args ...string) error {
	t.root.SetArgs(args)
	t.root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return s.Check(cmd, &bytes.Buffer{}) }
	t.root.SilenceErrors, t.root.SilenceUsage = true, true
	return t.root.Execute()
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{"data-dir": "FLOTILLA_DATA_DIR", "endpoint": "FLOTILLA_ENDPOINT", "etcd-max-txn-ops": "FLOTILLA_ETCD_MAX_TXN_OPS"} {
		if got := EnvName("FLOTILLA", in); got != want {
			t.Errorf("EnvName(FLOTILLA, %q) = %q, want %q", in, got, want)
		}
	}
}

func TestFromEnv(t *testing.T) {
	tr := newTree()
	s := fromEnv(tr.root, []string{
		"FLOTILLA_ENDPOINT=http://10.0.0.1:7480", "FLOTILLA_DATA_DIR=/var/lib/flotilla", "FLOTILLA_AGENT_TTL=30s",
		"FLOTILLA_ETCD_ENDPOINTS=http://a:2379,http://b:2379", "FLOTILLA_FIELDS=unit", "HOME=/root",
	})
	if err := tr.run(s, "daemon", "--agent-ttl", "40s"); err != nil {
		t.Fatal(err)
	}
	if tr.endpoint != "http://10.0.0.1:7480" || tr.dataDir != "/var/lib/flotilla" || tr.ttl != 40*time.Second ||
		strings.Join(tr.endpoints, " ") != "http://a:2379 http://b:2379" || tr.fields != "unit" {
		t.Errorf("after env and --agent-ttl 40s: endpoint %q, data-dir %q, agent-ttl %v, etcd-endpoints %q, fields %q; want the environment's but agent-ttl 40s",
			tr.endpoint, tr.dataDir, tr.ttl, tr.endpoints, tr.fields)
	}
}

// TestFromEnvListReplaced: a list flag set in the environment is replaced,
// not appended to, by the command line.
func TestFromEnvListReplaced(t *testing.T) {
	tr := newTree()
	s := fromEnv(tr.root, []string{"FLOTILLA_REMOVE=a,b"})
	if err := tr.run(s, "list-units", "--remove", "c"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(tr.remove, ",") != "c" {
		t.Errorf("--remove = %q, want [c]", tr.remove)
	}
}

func TestFromEnvErrors(t *testing.T) {
	tr := newTree()
	s := fromEnv(tr.root, []string{"FLOTILLA_AGENT_TTL=soon", "FLOTILLA_DATADIR=/x"})
	// list-units has no --agent-ttl: the bad variable does not concern it.
	var warn bytes.Buffer
	if err := s.Check(tr.list, &warn); err != nil {
		t.Errorf("Check(list-units) = %v, want nil", err)
	}
	if !strings.Contains(warn.String(), "$FLOTILLA_DATADIR is set but no command has a flag --datadir") {
		t.Errorf("Check warned %q, want a warning naming $FLOTILLA_DATADIR", warn.String())
	}
	err := tr.run(s, "daemon")
	if err == nil || !strings.Contains(err.Error(), `$FLOTILLA_AGENT_TTL: invalid value "soon" for --agent-ttl`) {
		t.Errorf("daemon with FLOTILLA_AGENT_TTL=soon: %v, want an error naming the variable and value", err)
	}
	// The command line overrides the bad variable.
	tr = newTree()
	s = fromEnv(tr.root, []string{"FLOTILLA_AGENT_TTL=soon"})
	if err := tr.run(s, "daemon", "--agent-ttl", "1m"); err != nil {
		t.Errorf("daemon --agent-ttl 1m with FLOTILLA_AGENT_TTL=soon: %v, want nil", err)
	}
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "flotilla.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadFile: the file sets what neither the command line nor the
// environment set; lists become comma-separated values.
func TestLoadFile(t *testing.T) {
	tr := newTree()
	s := fromEnv(tr.root, []string{"FLOTILLA_DATA_DIR=/from/env"})
	p := writeFile(t, `# a comment
data-dir: /from/file
agent-ttl: 1m
etcd-max-txn-ops: 64
etcd-embed: true
etcd-endpoints:
  - http://a:2379
  - http://b:2379
metadata: [role=web, az=eu-1]
`)
	if err := tr.run(s, "daemon", "--etcd-max-txn-ops", "32"); err != nil {
		t.Fatal(err)
	}
	if err := s.LoadFile(tr.daemon.LocalFlags(), p, "config"); err != nil {
		t.Fatal(err)
	}
	if tr.dataDir != "/from/env" || tr.ttl != time.Minute || tr.maxOps != 32 || !tr.embed ||
		strings.Join(tr.endpoints, " ") != "http://a:2379 http://b:2379" || tr.metadata != "role=web,az=eu-1" {
		t.Errorf("got data-dir %q, agent-ttl %v, max-txn-ops %d, embed %v, endpoints %q, metadata %q; want /from/env, 1m, 32, true, [a b], role=web,az=eu-1",
			tr.dataDir, tr.ttl, tr.maxOps, tr.embed, tr.endpoints, tr.metadata)
	}
	var out bytes.Buffer
	if err := s.Print(&out, tr.daemon.LocalFlags(), "config"); err != nil {
		t.Fatal(err)
	}
	want := `agent-ttl: 1m0s # ` + p + `:3
data-dir: /from/env # $FLOTILLA_DATA_DIR
etcd-embed: true # ` + p + `:5
etcd-endpoints: ['http://a:2379', 'http://b:2379'] # ` + p + `:6
etcd-max-txn-ops: 32 # flag --etcd-max-txn-ops
metadata: role=web,az=eu-1 # ` + p + `:9
`
	if out.String() != want {
		t.Errorf("Print:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestPrintReadsBack: what Print writes, LoadFile reads to the same values.
func TestPrintReadsBack(t *testing.T) {
	tr := newTree()
	s := fromEnv(tr.root, nil)
	if err := tr.run(s, "daemon", "--data-dir", "yes", "--metadata", "a: b", "--etcd-endpoints", "http://x:1,http://y:2"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := s.Print(&out, tr.daemon.LocalFlags(), "config"); err != nil {
		t.Fatal(err)
	}
	tr2 := newTree()
	s2 := fromEnv(tr2.root, nil)
	if err := tr2.run(s2, "daemon"); err != nil {
		t.Fatal(err)
	}
	if err := s2.LoadFile(tr2.daemon.LocalFlags(), writeFile(t, out.String()), "config"); err != nil {
		t.Fatalf("LoadFile of Print's output:\n%s\n%v", out.String(), err)
	}
	if tr2.dataDir != "yes" || tr2.metadata != "a: b" || strings.Join(tr2.endpoints, ",") != "http://x:1,http://y:2" || tr2.ttl != 20*time.Second {
		t.Errorf("read back data-dir %q, metadata %q, endpoints %q, agent-ttl %v from\n%s", tr2.dataDir, tr2.metadata, tr2.endpoints, tr2.ttl, out.String())
	}
}

func TestLoadFileErrors(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"data-dir: /x\ndata-dri: /y\n", `:2: unknown key "data-dri": keys are the flags of the command without "--"; did you mean "data-dir"?`},
		{"agent-ttl: 20\n", `:1: agent-ttl: invalid value "20": time: missing unit in duration "20"`},
		{"\n\netcd-max-txn-ops: many\n", `:3: etcd-max-txn-ops: invalid value "many"`},
		{"etcd-embed: yes\n", `:1: etcd-embed: invalid value "yes"`},
		{"data-dir: /x\ndata-dir: /y\n", `:2: key "data-dir" repeats the one on line 1`},
		{"config: other.yaml\n", `:1: unknown key "config"`},
		{"data-dir:\n", `:1: data-dir: no value`},
		{"metadata:\n  role: web\n", `:1: metadata: want a value or a list of values, got a mapping`},
		{"- data-dir\n", `:1: want a mapping of flag names to values`},
		{"data-dir: [unclosed\n", `line 1: did not find expected ',' or ']'`},
	} {
		tr := newTree()
		s := fromEnv(tr.root, nil)
		if err := tr.run(s, "daemon"); err != nil {
			t.Fatal(err)
		}
		p := writeFile(t, tc.file)
		err := s.LoadFile(tr.daemon.LocalFlags(), p, "config")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), p) {
			t.Errorf("LoadFile(%q) = %v, want an error starting with the path and containing %q", tc.file, err, tc.want)
		}
	}
	tr := newTree()
	s := fromEnv(tr.root, nil)
	if err := s.LoadFile(tr.daemon.LocalFlags(), filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("LoadFile(missing) = %v, want an error naming the file", err)
	}
	if err := s.LoadFile(tr.daemon.LocalFlags(), writeFile(t, "# nothing\n")); err != nil {
		t.Errorf("LoadFile(only a comment) = %v, want nil", err)
	}
}

func fromEnv(root *cobra.Command, environ []string) *Sources {
	s := New("FLOTILLA")
	s.FromEnv(root, environ)
	return s
}
