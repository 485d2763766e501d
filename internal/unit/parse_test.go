package unit

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// minimal is the smallest valid service body.
const minimal = "[Service]\nExecStart=/bin/true\n"

// mustParse parses a unit that must be valid.
func mustParse(t *testing.T, name, data string) *File {
	t.Helper()
	f, err := Parse(name, []byte(data))
	if err != nil {
		t.Fatalf("Parse(%q, %q) = %v, want no error", name, data, err)
	}
	return f
}

// checkError checks that err is an *Error whose message holds every one of want.
func checkError(t *testing.T, call string, err error, want ...string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("%s = %v, want an *Error", call, err)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s = %v, want an error containing %q", call, err, w)
		}
	}
}

func TestParseFull(t *testing.T) {
	data := `# A web server.
[Unit]
Description=Web  server %i
After=docker.service
Requires=docker.service
StartLimitIntervalSec=30s
StartLimitBurst=3

[Service]
Type=exec
User=www
Group=www
WorkingDirectory=/srv/web
Environment=PORT=8080 "GREETING=hello world"
Environment='PATH=/usr/bin:/bin' PCT=100%%
EnvironmentFile=-/etc/web.env
EnvironmentFile=/etc/common.env
ExecStartPre=-/usr/bin/docker rm -f web
ExecStartPre=/usr/bin/docker pull nginx
ExecStart=/usr/bin/docker run --rm --name web \
    -p ${PORT}:80 \
    nginx
ExecStartPost=/bin/echo started ; /bin/echo "really started"
ExecStop=/usr/bin/docker stop web
ExecStopPost=-/usr/bin/docker rm web
Restart=on-failure
RestartSec=5
TimeoutStartSec=2min
TimeoutStopSec=30s
KillMode=mixed
KillSignal=SIGINT
CPUQuota=150%
MemoryMax=1G
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target

[X-Fleet]
Conflicts=web@*.service other.service
MachineMetadata=region=us-east "disk=ssd"
MachineMetadata=region=us-west
Role=frontend
`
	f := mustParse(t, "web.service", data)
	want := Service{
		Type: "exec",
		ExecStartPre: []Command{
			{Argv: []string{"/usr/bin/docker", "rm", "-f", "web"}, IgnoreFailure: true},
			{Argv: []string{"/usr/bin/docker", "pull", "nginx"}},
		},
		ExecStart: []Command{
			{Argv: []string{"/usr/bin/docker", "run", "--rm", "--name", "web", "-p", "${PORT}:80", "nginx"}},
		},
		ExecStartPost: []Command{
			{Argv: []string{"/bin/echo", "started"}},
			{Argv: []string{"/bin/echo", "really started"}},
		},
		ExecStop:           []Command{{Argv: []string{"/usr/bin/docker", "stop", "web"}}},
		ExecStopPost:       []Command{{Argv: []string{"/usr/bin/docker", "rm", "web"}, IgnoreFailure: true}},
		Environment:        []string{"PORT=8080", "GREETING=hello world", "PATH=/usr/bin:/bin", "PCT=100%"},
		EnvironmentFiles:   []EnvFile{{Path: "/etc/web.env", Optional: true}, {Path: "/etc/common.env"}},
		WorkingDirectory:   "/srv/web",
		User:               "www",
		Group:              "www",
		Restart:            "on-failure",
		RestartSec:         5 * time.Second,
		TimeoutStartSec:    2 * time.Minute,
		TimeoutStopSec:     30 * time.Second,
		KillMode:           "mixed",
		KillSignal:         "SIGINT",
		StartLimitBurst:    3,
		StartLimitInterval: 30 * time.Second,
		CPUQuotaPercent:    150,
		MemoryMax:          1 << 30,
	}
	if !reflect.DeepEqual(f.Service, want) {
		t.Errorf("Parse(web.service).Service =\n%+v\nwant\n%+v", f.Service, want)
	}
	wantFleet := Fleet{
		Conflicts:       []string{"web@*.service", "other.service"},
		MachineMetadata: []string{"region=us-east", "disk=ssd", "region=us-west"},
		Role:            "frontend",
	}
	if !reflect.DeepEqual(f.Fleet, wantFleet) {
		t.Errorf("Parse(web.service).Fleet = %+v, want %+v", f.Fleet, wantFleet)
	}
	if f.Name != "web.service" || f.Raw != data || f.Description != "Web  server %i" {
		t.Errorf("Parse(web.service) = Name %q, Description %q, Raw %q; want the name, description and text given", f.Name, f.Description, f.Raw)
	}
	if len(f.Hash) != 40 || strings.Trim(f.Hash, "0123456789abcdef") != "" {
		t.Errorf("Parse(web.service).Hash = %q, want 40 hex digits", f.Hash)
	}
	if len(f.Warnings) != 0 {
		t.Errorf("Parse(web.service).Warnings = %q, want none", f.Warnings)
	}
}

func TestParseDefaults(t *testing.T) {
	f := mustParse(t, "a.service", minimal)
	want := Service{
		Type:               "simple",
		ExecStart:          []Command{{Argv: []string{"/bin/true"}}},
		Restart:            "no",
		RestartSec:         100 * time.Millisecond,
		TimeoutStartSec:    90 * time.Second,
		TimeoutStopSec:     90 * time.Second,
		KillMode:           "control-group",
		KillSignal:         "SIGTERM",
		StartLimitBurst:    5,
		StartLimitInterval: 10 * time.Second,
	}
	if !reflect.DeepEqual(f.Service, want) {
		t.Errorf("Parse(%q).Service = %+v, want %+v", minimal, f.Service, want)
	}
	if got := (Service{}).Defaults(); got.ExecStart != nil || got.TimeoutStopSec != 90*time.Second || got.Type != "simple" {
		t.Errorf("Service{}.Defaults() = %+v, want the defaults", got)
	}
	// Defaults copies: changing the result leaves the original alone.
	orig := Service{ExecStart: []Command{{Argv: []string{"/bin/a"}}}, Environment: []string{"A=1"}}
	d := orig.Defaults()
	d.ExecStart[0].Argv[0] = "/bin/b"
	d.Environment[0] = "B=2"
	if orig.ExecStart[0].Argv[0] != "/bin/a" || orig.Environment[0] != "A=1" {
		t.Errorf("Service.Defaults() shares memory with its receiver")
	}
}

func TestParseSettings(t *testing.T) {
	tests := []struct {
		body  string
		check func(s Service) bool
		desc  string
	}{
		{"RestartSec=0", func(s Service) bool { return s.RestartSec == 0 }, "RestartSec 0 (explicit zero kept)"},
		{"RestartSec=1min 30s", func(s Service) bool { return s.RestartSec == 90*time.Second }, "RestartSec 90s"},
		{"RestartSec=250ms", func(s Service) bool { return s.RestartSec == 250*time.Millisecond }, "RestartSec 250ms"},
		{"RestartSec=5\nRestartSec=", func(s Service) bool { return s.RestartSec == DefaultRestartSec }, "RestartSec reset to default"},
		{"TimeoutSec=20", func(s Service) bool { return s.TimeoutStartSec == 20*time.Second && s.TimeoutStopSec == 20*time.Second }, "both timeouts 20s"},
		{"TimeoutSec=20\nTimeoutStopSec=5", func(s Service) bool { return s.TimeoutStartSec == 20*time.Second && s.TimeoutStopSec == 5*time.Second }, "start 20s, stop 5s"},
		{"TimeoutStartSec=infinity", func(s Service) bool { return s.TimeoutStartSec == Infinity }, "TimeoutStartSec Infinity"},
		{"TimeoutStopSec=0", func(s Service) bool { return s.TimeoutStopSec == Infinity }, "TimeoutStopSec 0 is Infinity"},
		{"Type=oneshot", func(s Service) bool { return s.TimeoutStartSec == Infinity }, "oneshot has no start timeout by default"},
		{"Type=oneshot\nExecStart=/bin/b", func(s Service) bool { return len(s.ExecStart) == 2 }, "oneshot with two commands"},
		{"RemainAfterExit=yes", func(s Service) bool { return s.RemainAfterExit }, "RemainAfterExit"},
		{"KillSignal=15", func(s Service) bool { return s.KillSignal == "SIGTERM" }, "KillSignal SIGTERM"},
		{"KillSignal=HUP", func(s Service) bool { return s.KillSignal == "SIGHUP" }, "KillSignal SIGHUP"},
		{"KillSignal=SIGRTMIN+3", func(s Service) bool { return s.KillSignal == "SIGRTMIN+3" }, "KillSignal SIGRTMIN+3"},
		{"CPUQuota=50%", func(s Service) bool { return s.CPUQuotaPercent == 50 }, "CPUQuota 50"},
		{"CPUQuota=250%", func(s Service) bool { return s.CPUQuotaPercent == 250 }, "CPUQuota 250"},
		{"CPUQuota=50%\nCPUQuota=", func(s Service) bool { return s.CPUQuotaPercent == 0 }, "CPUQuota reset"},
		{"MemoryMax=512M", func(s Service) bool { return s.MemoryMax == 512<<20 }, "MemoryMax 512M"},
		{"MemoryMax=1.5K", func(s Service) bool { return s.MemoryMax == 1536 }, "MemoryMax 1536"},
		{"MemoryMax=4096", func(s Service) bool { return s.MemoryMax == 4096 }, "MemoryMax 4096"},
		{"MemoryMax=2T", func(s Service) bool { return s.MemoryMax == 2<<40 }, "MemoryMax 2T"},
		{"MemoryMax=infinity", func(s Service) bool { return s.MemoryMax == 0 }, "MemoryMax unlimited"},
		{"MemoryLimit=256M", func(s Service) bool { return s.MemoryMax == 256<<20 }, "MemoryLimit applied as MemoryMax"},
		{"MemoryLimit=256M\nMemoryMax=1G", func(s Service) bool { return s.MemoryMax == 1<<30 }, "MemoryMax wins over MemoryLimit"},
		{"StartLimitBurst=0", func(s Service) bool { return s.StartLimitInterval == 0 }, "rate limit off"},
		{"StartLimitInterval=1min", func(s Service) bool { return s.StartLimitInterval == time.Minute }, "legacy [Service] StartLimitInterval"},
		{"WorkingDirectory=~", func(s Service) bool { return s.WorkingDirectory == "~" }, "WorkingDirectory ~"},
		{"Environment=A=1\nEnvironment=\nEnvironment=B=2", func(s Service) bool { return reflect.DeepEqual(s.Environment, []string{"B=2"}) }, "Environment reset"},
		{"EnvironmentFile=/a\nEnvironmentFile=\nEnvironmentFile=/b", func(s Service) bool { return len(s.EnvironmentFiles) == 1 && s.EnvironmentFiles[0].Path == "/b" }, "EnvironmentFile reset"},
		{"ExecStartPre=/bin/a\nExecStartPre=\nExecStartPre=/bin/b", func(s Service) bool { return len(s.ExecStartPre) == 1 && s.ExecStartPre[0].Argv[0] == "/bin/b" }, "ExecStartPre reset"},
		{"ExecStart=\nExecStart=/bin/other", func(s Service) bool { return len(s.ExecStart) == 1 && s.ExecStart[0].Argv[0] == "/bin/other" }, "ExecStart reset"},
		{"ExecReload=/bin/kill -HUP $MAINPID", func(s Service) bool { return len(s.ExecStart) == 1 }, "ExecReload accepted"},
		{"X-Custom=anything", func(s Service) bool { return true }, "X- option accepted"},
	}
	for _, tt := range tests {
		data := minimal + tt.body + "\n"
		if strings.HasPrefix(tt.body, "Type=oneshot") {
			data = "[Service]\nExecStart=/bin/a\n" + tt.body + "\n"
		}
		f, err := Parse("a.service", []byte(data))
		if err != nil {
			t.Errorf("Parse(%q) = %v, want %s", data, err, tt.desc)
			continue
		}
		if !tt.check(f.Service) {
			t.Errorf("Parse(%q).Service = %+v, want %s", data, f.Service, tt.desc)
		}
	}
}

func TestParseUnitSection(t *testing.T) {
	f := mustParse(t, "a.service", "[Unit]\nDescription=first\nDescription=second\nStartLimitIntervalSec=0\nStartLimitBurst=10\n"+minimal)
	if f.Description != "second" || f.Service.StartLimitInterval != 0 || f.Service.StartLimitBurst != 10 {
		t.Errorf("Parse([Unit] ...) = Description %q, StartLimitInterval %v, StartLimitBurst %d; want second, 0, 10",
			f.Description, f.Service.StartLimitInterval, f.Service.StartLimitBurst)
	}
}

func TestParseExec(t *testing.T) {
	tests := []struct {
		value  string
		want   []Command
		warned string // in a warning, if any
	}{
		{`/bin/echo a b`, []Command{{Argv: []string{"/bin/echo", "a", "b"}}}, ""},
		{`echo bare`, []Command{{Argv: []string{"echo", "bare"}}}, ""},
		{`/bin/echo "a b" 'c d'`, []Command{{Argv: []string{"/bin/echo", "a b", "c d"}}}, ""},
		{`/bin/echo "it's" 'say "hi"'`, []Command{{Argv: []string{"/bin/echo", "it's", `say "hi"`}}}, ""},
		{`/bin/echo a"b c"d`, []Command{{Argv: []string{"/bin/echo", "ab cd"}}}, ""},
		{`/bin/echo ""`, []Command{{Argv: []string{"/bin/echo", ""}}}, ""},
		{`/bin/echo \"x\" \\ \t \x41 \101 \u00e9 \s`, []Command{{Argv: []string{"/bin/echo", `"x"`, `\`, "\t", "A", "A", "é", " "}}}, ""},
		{`/bin/echo "a\nb"`, []Command{{Argv: []string{"/bin/echo", "a\nb"}}}, ""},
		{`/bin/echo $HOME ${USER} $$`, []Command{{Argv: []string{"/bin/echo", "$HOME", "${USER}", "$$"}}}, ""},
		{`/bin/echo 100%% %i %n`, []Command{{Argv: []string{"/bin/echo", "100%", "", "a.service"}}}, ""}, // systemd expands unit-name specifiers
		{`/bin/a ; /bin/b x`, []Command{{Argv: []string{"/bin/a"}}, {Argv: []string{"/bin/b", "x"}}}, ""},
		{`/bin/echo \; ";" x`, []Command{{Argv: []string{"/bin/echo", ";", ";", "x"}}}, ""},
		{`-/bin/false`, []Command{{Argv: []string{"/bin/false"}, IgnoreFailure: true}}, ""},
		{`"-/bin/false" x`, []Command{{Argv: []string{"/bin/false", "x"}, IgnoreFailure: true}}, ""},
		{`-@/bin/sleep sleeper 5`, []Command{{Argv: []string{"/bin/sleep", "5"}, IgnoreFailure: true}}, `"@" prefix is not honoured`},
		{`:/bin/echo $X`, []Command{{Argv: []string{"/bin/echo", "$X"}}}, `":" prefix is not honoured`},
		{`+/bin/id`, []Command{{Argv: []string{"/bin/id"}}}, `"+" prefix is not honoured`},
		{`!/bin/id`, []Command{{Argv: []string{"/bin/id"}}}, `"!" prefix is not honoured`},
		{`!!/bin/id`, []Command{{Argv: []string{"/bin/id"}}}, `"!!" prefix is not honoured`},
		{`-:+/bin/id`, []Command{{Argv: []string{"/bin/id"}, IgnoreFailure: true}}, `"+" prefix is not honoured`},
		{`%h/bin/run`, []Command{{Argv: []string{"%h/bin/run"}}}, ""},
	}
	for _, tt := range tests {
		data := "[Service]\nType=oneshot\nExecStart=" + tt.value + "\n"
		f, err := Parse("a.service", []byte(data))
		if err != nil {
			t.Errorf("Parse(%q) = %v, want no error", data, err)
			continue
		}
		if !reflect.DeepEqual(f.Service.ExecStart, tt.want) {
			t.Errorf("Parse(%q).Service.ExecStart = %+v, want %+v", data, f.Service.ExecStart, tt.want)
		}
		warnings := strings.Join(f.Warnings, "\n")
		if tt.warned == "" && warnings != "" || !strings.Contains(warnings, tt.warned) {
			t.Errorf("Parse(%q).Warnings = %q, want a warning containing %q", data, f.Warnings, tt.warned)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		data string
		want []string // in the error message
	}{
		// Syntax.
		{"Description=x\n[Unit]\n" + minimal, []string{"line 1:", `"Description=x" comes before any [Section] header`}},
		{"[Unit\n" + minimal, []string{"line 1:", `has no closing "]"`}},
		{"[Unit] x\n" + minimal, []string{"line 1:", `unexpected "x" after section header [Unit]`}},
		{minimal + "Restart\n", []string{"line 3:", `"Restart" is not an option assignment`}},
		{minimal + "=x\n", []string{"line 3:", "no option name"}},
		{minimal + "Environment=A=" + strings.Repeat("x", 2100) + "\n", []string{"line 3 is 2114 bytes long; the maximum is 2047"}},
		{minimal + "Environment=A=1\rB=2\n", []string{"line 3:", "carriage return"}},
		{minimal + "Environment=A=\x00\n", []string{"line 3:", "NUL byte"}},
		{minimal + "Environment=A=\xff\n", []string{"line 3:", "not valid UTF-8"}},
		{"[Service]\nExecStart=/bin/a \\\n# note\n  --flag\n", []string{"line 3:", "comment inside the value of ExecStart= continued from line 2"}},

		// Sections and options.
		{"[Foo]\n" + minimal, []string{"line 1:", "unknown section [Foo]", "Flotilla units have"}},
		{"[X-Flet]\nGlobal=true\n" + minimal, []string{"unknown section [X-Flet]; did you mean [X-Fleet]?"}},
		{"[service]\nExecStart=/bin/true\n", []string{"unknown section [service]; did you mean [Service]?"}},
		{"[Socket]\nListenStream=80\n" + minimal, []string{"a .service unit has no [Socket] section; its options go in [Service]"}},
		{minimal + "ExecStrat=/bin/x\n", []string{"[Service] ExecStrat=:", "line 3:", "unknown option in [Service]; did you mean ExecStart=?"}},
		{minimal + "execstart=/bin/x\n", []string{"did you mean ExecStart=?"}},
		{minimal + "Restrat=always\n", []string{"did you mean Restart=?"}},
		{minimal + "Bogus=1\n", []string{"[Service] Bogus=:", "unknown option in [Service]"}},
		{"[Unit]\nDescriptoin=x\n" + minimal, []string{"[Unit] Descriptoin=:", "did you mean Description=?"}},
		{"[Unit]\nExecStart=/bin/x\n" + minimal, []string{"[Unit] ExecStart=:", "ExecStart= belongs in [Service]"}},
		{minimal + "Description=x\n", []string{"Description= belongs in [Unit]"}},
		{minimal + "WantedBy=multi-user.target\n", []string{"WantedBy= belongs in [Install]"}},
		{minimal + "MachineOf=db.service\n", []string{"MachineOf= belongs in [X-Fleet]"}},
		{minimal + "X-Conflicts=db.service\n", []string{"[Service] X-Conflicts=:", "belongs in [X-Fleet], spelled Conflicts="}},
		{"[Install]\nWantedby=multi-user.target\n" + minimal, []string{"did you mean WantedBy=?"}},
		{minimal + "[X-Fleet]\nMachineId=abc\n", []string{"[X-Fleet] MachineId=:", "did you mean MachineID=?"}},
		{minimal + "[X-Fleet]\nConflict=a.service\n", []string{"did you mean Conflicts=?"}},
		{minimal + "[X-Fleet]\nX-ConditionMachineOff=a.service\n", []string{"did you mean MachineOf=?"}},
		{minimal + "[X-Fleet]\nX-ConditionMachineBootID=abc\n", []string{"no longer supported"}},
		{minimal + "[X-Fleet]\nRestart=always\n", []string{"Restart= belongs in [Service]"}},
		{minimal + "[X-Fleet]\nWeight=3\n", []string{"unknown option in [X-Fleet] (want one of"}},

		// ExecStart rules.
		{"[Unit]\nDescription=x\n", []string{"[Service] ExecStart=:", "missing; a service needs exactly one ExecStart="}},
		{"[Service]\nType=simple\n", []string{"missing; a service needs exactly one ExecStart="}},
		{minimal + "ExecStart=/bin/b\n", []string{"line 3:", "2 commands, but only Type=oneshot"}},
		{"[Service]\nExecStart=/bin/a ; /bin/b\n", []string{"2 commands, but only Type=oneshot"}},
		{"[Service]\nExecStart=/bin/a\nExecStart=\n", []string{"missing"}},
		{"[Service]\nType=oneshot\n", []string{"needs an ExecStart= or an ExecStop= command"}},
		{"[Service]\nType=oneshot\nExecStop=/bin/stop\n", []string{"without ExecStart= needs RemainAfterExit=yes"}},
		{"[Service]\nType=oneshot\nExecStart=/bin/a\nRestart=always\n", []string{"[Service] Restart=:", "Restart=always is not allowed for Type=oneshot"}},

		// Exec lines.
		{"[Service]\nExecStart=/bin/echo \"unterminated\n", []string{"[Service] ExecStart=:", "unterminated quote"}},
		{"[Service]\nExecStart=/bin/echo 'x\n", []string{"unterminated quote"}},
		{"[Service]\nExecStart=/bin/echo \\d\n", []string{`invalid escape sequence "\\d"`}},
		{"[Service]\nExecStart=/bin/echo \\x0\n", []string{"incomplete escape sequence"}},
		{"[Service]\nExecStart=/bin/echo \\xzz\n", []string{"invalid escape sequence"}},
		{"[Service]\nExecStart=/bin/echo \\x00\n", []string{"NUL character"}},
		{"[Service]\nExecStart=/bin/echo \\uD800\n", []string{"not a valid Unicode character"}},
		{"[Service]\nExecStart=/bin/echo x\\ \n", []string{"trailing backslash"}},
		{"[Service]\nExecStart=bin/sleep 1\n", []string{`program "bin/sleep" must be an absolute path`}},
		{"[Service]\nExecStart=--/bin/sleep 1\n", []string{`program "-/bin/sleep" must be an absolute path`}},
		{"[Service]\nExecStart=$CMD arg\n", []string{"cannot be a variable"}},
		{"[Service]\nExecStart=-\n", []string{"missing the program to run"}},
		{"[Service]\nExecStart=@/bin/sleep\n", []string{`"@" prefix needs the argv[0]`}},
		{"[Service]\nType=oneshot\nExecStart=; /bin/a\n", []string{`empty command before ";"`}},
		{"[Service]\nType=oneshot\nExecStart=/bin/a ;\n", []string{`empty command after ";"`}},
		{"[Service]\nType=oneshot\nExecStart=/bin/a ; ; /bin/b\n", []string{`empty command before ";"`}},
		{"[Service]\nExecStart=/bin/a\nExecStop=/bin/echo 'x\n", []string{"[Service] ExecStop=:", "unterminated"}},
		{"[Service]\nExecStart=/bin/a\nExecReload=\"\n", []string{"[Service] ExecReload=:", "unterminated"}},

		// Values.
		{minimal + "Type=daemon\n", []string{"[Service] Type=:", `invalid value "daemon"`, "simple, exec, forking, oneshot"}},
		{minimal + "Restart=sometimes\n", []string{`invalid value "sometimes"`, "on-failure"}},
		{minimal + "KillMode=all\n", []string{`invalid value "all"`, "control-group"}},
		{minimal + "KillSignal=sigterm\n", []string{`unknown signal "sigterm"; did you mean SIGTERM?`}},
		{minimal + "KillSignal=99\n", []string{"invalid signal number"}},
		{minimal + "RemainAfterExit=maybe\n", []string{`invalid boolean "maybe"`}},
		{minimal + "RestartSec=5 parsecs\n", []string{`unknown unit "parsecs"`}},
		{minimal + "RestartSec=soon\n", []string{`invalid time span "soon"`}},
		{minimal + "RestartSec=-5\n", []string{"negative time span"}},
		{minimal + "RestartSec=infinity\n", []string{"must be a finite time span"}},
		{minimal + "TimeoutStopSec=100000000y\n", []string{"too long"}},
		{"[Unit]\nStartLimitIntervalSec=often\n" + minimal, []string{"[Unit] StartLimitIntervalSec=:", "invalid time span"}},
		{"[Unit]\nStartLimitBurst=-1\n" + minimal, []string{"[Unit] StartLimitBurst=:", "invalid number"}},
		{"[Unit]\nStartLimitBurst=99999999999\n" + minimal, []string{"too large"}},
		{minimal + "CPUQuota=150\n", []string{`invalid percentage "150"`}},
		{minimal + "CPUQuota=0%\n", []string{"must be more than 0%"}},
		{minimal + "CPUQuota=abc%\n", []string{"invalid percentage"}},
		{minimal + "MemoryMax=50%\n", []string{"[Service] MemoryMax=:", `percentage "50%" is not supported`}},
		{minimal + "MemoryMax=512MB\n", []string{`unknown suffix "MB"`, "did you mean 512M?"}},
		{minimal + "MemoryMax=512m\n", []string{"did you mean 512M?"}},
		{minimal + "MemoryMax=0\n", []string{"at least 1 byte"}},
		{minimal + "MemoryMax=lots\n", []string{`invalid size "lots"`}},
		{minimal + "MemoryMax=99999E\n", []string{"too large"}},
		{minimal + "Environment=FOO\n", []string{"[Service] Environment=:", `"FOO" is not an assignment`}},
		{minimal + "Environment=A=1 B\n", []string{`"B" is not an assignment`}},
		{minimal + "Environment=1A=x\n", []string{`invalid variable name "1A"`}},
		{minimal + "Environment=A-B=x\n", []string{`invalid variable name "A-B"`}},
		{minimal + "Environment==x\n", []string{`invalid variable name ""`}},
		{minimal + "Environment=\"A=1\n", []string{"unterminated quote"}},
		{minimal + "EnvironmentFile=etc/env\n", []string{`"etc/env" is not an absolute path`}},
		{minimal + "EnvironmentFile=-etc/env\n", []string{`"etc/env" is not an absolute path`}},
		{minimal + "WorkingDirectory=srv\n", []string{`"srv" is not an absolute path`}},
		{minimal + "User=a b\n", []string{"spaces and control characters"}},

		// [X-Fleet] values.
		{minimal + "[X-Fleet]\nGlobal=sure\n", []string{"[X-Fleet] Global=:", `invalid boolean "sure"`}},
		{minimal + "[X-Fleet]\nMachineID=a b\n", []string{"[X-Fleet] MachineID=:", "takes one value, not 2"}},
		{minimal + "[X-Fleet]\nRole=a b\n", []string{"takes one value"}},
		{minimal + "[X-Fleet]\nMachineOf=db\n", []string{"[X-Fleet] MachineOf=:", `invalid unit name "db"`}},
		{minimal + "[X-Fleet]\nReplaces=db.device\n", []string{"[X-Fleet] Replaces=:", `unit type ".device" is not supported`}},
		{minimal + "[X-Fleet]\nConflicts=web[.service\n", []string{`invalid pattern "web[.service"`}},
		{minimal + "[X-Fleet]\nMachineMetadata=region\n", []string{`metadata "region" is not a key=value pair`}},
		{minimal + "[X-Fleet]\nMachineMetadata=region=us disk\n", []string{`metadata "disk" is not a key=value pair`}},
		{minimal + "[X-Fleet]\nMachineMetadata==us\n", []string{"empty key"}},
		{minimal + "[X-Fleet]\nMachineMetadata=region=\n", []string{"empty value"}},
		{minimal + "[X-Fleet]\nMachineMetadata=a=b=c\n", []string{`may not contain "=" or ","`}},
		{minimal + "[X-Fleet]\nMachineMetadata=\"a\n", []string{"unterminated quote"}},
		{minimal + "[X-Fleet]\nMachineOf=db.service\nConflicts=db*\n", []string{"MachineOf=db.service matches Conflicts=db*"}},
	}
	for _, tt := range tests {
		_, err := Parse("a.service", []byte(tt.data))
		checkError(t, "Parse("+quote(tt.data)+")", err, append(tt.want, "a.service: ")...)
	}
}

func TestParseFleetCombinations(t *testing.T) {
	set := map[string]string{
		"MachineID": "MachineID=0123456789abcdef",
		"MachineOf": "MachineOf=db.service",
		"Conflicts": "Conflicts=web*.service",
		"Global":    "Global=true",
		"Replaces":  "Replaces=old.service",
	}
	invalid := [][2]string{
		{"MachineID", "MachineOf"},
		{"MachineID", "Conflicts"},
		{"MachineID", "Global"},
		{"MachineID", "Replaces"},
		{"Global", "MachineOf"},
		{"Global", "Replaces"},
		{"Conflicts", "Replaces"},
	}
	for _, pair := range invalid {
		for _, order := range [][2]string{pair, {pair[1], pair[0]}} {
			data := minimal + "[X-Fleet]\n" + set[order[0]] + "\n" + set[order[1]] + "\n"
			_, err := Parse("a.service", []byte(data))
			checkError(t, "Parse("+quote(data)+")", err, "[X-Fleet]", "line 5:", pair[0]+"= cannot be used with "+pair[1]+"=")
		}
	}
	valid := [][2]string{
		{"Global", "Conflicts"},
		{"MachineOf", "Conflicts"},
		{"MachineOf", "Replaces"},
	}
	for _, pair := range valid {
		data := minimal + "[X-Fleet]\n" + set[pair[0]] + "\n" + set[pair[1]] + "\n"
		if _, err := Parse("a.service", []byte(data)); err != nil {
			t.Errorf("Parse(%q) = %v, want no error", data, err)
		}
	}
	// Global=false is no Global.
	data := minimal + "[X-Fleet]\nGlobal=false\nMachineID=abc\n"
	if _, err := Parse("a.service", []byte(data)); err != nil {
		t.Errorf("Parse(%q) = %v, want no error", data, err)
	}
}

func TestParseFleet(t *testing.T) {
	tests := []struct {
		body string
		want Fleet
	}{
		{"MachineID=abc", Fleet{MachineID: "abc"}},
		{"MachineID=abc\nMachineID=def", Fleet{MachineID: "def"}},
		{"MachineID=abc\nMachineID=", Fleet{}},
		{"MachineOf=a.service b.service\nMachineOf=c.service a.service", Fleet{MachineOf: []string{"a.service", "b.service", "c.service"}}},
		{"MachineOf=a.service\nMachineOf=\nMachineOf=b.service", Fleet{MachineOf: []string{"b.service"}}},
		{`MachineMetadata="region=us east" disk=ssd`, Fleet{MachineMetadata: []string{"region=us east", "disk=ssd"}}},
		{"Global=yes", Fleet{Global: true}},
		{"Global=on\nGlobal=0", Fleet{}},
		{"Replaces=old.service", Fleet{Replaces: []string{"old.service"}}},
		{"Role=db", Fleet{Role: "db"}},
		{"Conflicts=a*.service\nConflicts=b?.service", Fleet{Conflicts: []string{"a*.service", "b?.service"}}},
	}
	for _, tt := range tests {
		data := minimal + "[X-Fleet]\n" + tt.body + "\n"
		f, err := Parse("a.service", []byte(data))
		if err != nil {
			t.Errorf("Parse(%q) = %v, want no error", data, err)
			continue
		}
		if !reflect.DeepEqual(normFleet(f.Fleet), normFleet(tt.want)) {
			t.Errorf("Parse(%q).Fleet = %+v, want %+v", data, f.Fleet, tt.want)
		}
	}
}

// normFleet makes empty lists nil, for comparing.
func normFleet(f Fleet) Fleet {
	for _, l := range []*[]string{&f.MachineOf, &f.MachineMetadata, &f.Conflicts, &f.Replaces} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	return f
}

func TestParseDeprecatedFleet(t *testing.T) {
	tests := []struct {
		old, new string
		value    string
		check    func(Fleet) bool
	}{
		{"X-ConditionMachineID", "MachineID", "abc", func(f Fleet) bool { return f.MachineID == "abc" }},
		{"X-ConditionMachineOf", "MachineOf", "db.service", func(f Fleet) bool { return reflect.DeepEqual(f.MachineOf, []string{"db.service"}) }},
		{"X-ConditionMachineMetadata", "MachineMetadata", "region=us", func(f Fleet) bool { return reflect.DeepEqual(f.MachineMetadata, []string{"region=us"}) }},
		{"X-Conflicts", "Conflicts", "web*", func(f Fleet) bool { return reflect.DeepEqual(f.Conflicts, []string{"web*"}) }},
	}
	for _, tt := range tests {
		data := minimal + "[X-Fleet]\n" + tt.old + "=" + tt.value + "\n"
		f, err := Parse("a.service", []byte(data))
		if err != nil {
			t.Errorf("Parse(%q) = %v, want no error", data, err)
			continue
		}
		if !tt.check(f.Fleet) {
			t.Errorf("Parse(%q).Fleet = %+v, want %s=%s", data, f.Fleet, tt.new, tt.value)
		}
		if len(f.Warnings) != 1 || !strings.Contains(f.Warnings[0], tt.old+"=") || !strings.Contains(f.Warnings[0], "use "+tt.new+"=") || !strings.Contains(f.Warnings[0], "line 4:") {
			t.Errorf("Parse(%q).Warnings = %q, want one naming %s= and %s= on line 4", data, f.Warnings, tt.old, tt.new)
		}
		// The deprecated spelling means the same, so it hashes the same.
		g := mustParse(t, "a.service", minimal+"[X-Fleet]\n"+tt.new+"="+tt.value+"\n")
		if f.Hash != g.Hash {
			t.Errorf("Parse(%s=%s).Hash = %s, want %s, the hash of %s=%s", tt.old, tt.value, f.Hash, g.Hash, tt.new, tt.value)
		}
	}
	// A deprecated spelling combines with the current one.
	f := mustParse(t, "a.service", minimal+"[X-Fleet]\nX-Conflicts=a*\nConflicts=b*\n")
	if !reflect.DeepEqual(f.Fleet.Conflicts, []string{"a*", "b*"}) {
		t.Errorf("Parse(X-Conflicts=a*, Conflicts=b*).Fleet.Conflicts = %q, want [a* b*]", f.Fleet.Conflicts)
	}
}

func TestParseWarnings(t *testing.T) {
	tests := []struct {
		body string
		want string
	}{
		{"Type=dbus", "line 3: [Service] Type=: the exec driver runs Type=dbus services as Type=simple"},
		{"Type=idle", "Type=idle services as Type=simple"},
		{"KillMode=none", "KillMode=none is deprecated"},
		{"CPUQuota=12.5%", "12.5% is rounded to 13%"},
		{"CPUShares=512", "[Service] CPUShares=: obsolete and ignored by systemd; use CPUWeight="},
		{"MemoryLimit=1G", "[Service] MemoryLimit=: deprecated; it is applied as MemoryMax="},
		{"WorkingDirectory=-/srv", `the "-" prefix is not honoured`},
		{"# comment \\\nExecStop=/bin/x", "line 3: the comment ends in a backslash, so lines 4-4 are part of it"},
	}
	for _, tt := range tests {
		data := minimal + tt.body + "\n"
		f, err := Parse("a.service", []byte(data))
		if err != nil {
			t.Errorf("Parse(%q) = %v, want no error", data, err)
			continue
		}
		if len(f.Warnings) != 1 || !strings.Contains(f.Warnings[0], tt.want) {
			t.Errorf("Parse(%q).Warnings = %q, want one containing %q", data, f.Warnings, tt.want)
		}
	}
	// Options no driver acts on are accepted quietly.
	data := "[Unit]\nAfter=network.target\nConditionPathExists=/etc/x\n[Service]\nExecStart=/bin/x\nProtectSystem=strict\nLimitNOFILE=1024\nCPUWeight=50\nExecReload=/bin/kill -HUP $MAINPID\n[Install]\nWantedBy=multi-user.target\n"
	if f := mustParse(t, "a.service", data); len(f.Warnings) != 0 {
		t.Errorf("Parse(%q).Warnings = %q, want none", data, f.Warnings)
	}
}

func TestParseSize(t *testing.T) {
	pad := "# " + strings.Repeat("x", 1000) + "\n"
	body := minimal
	for len(body)+len(pad) <= MaxFileSize {
		body += pad
	}
	mustParse(t, "a.service", body)
	big := body + pad
	_, err := Parse("a.service", []byte(big))
	checkError(t, "Parse(<oversized file>)", err, "a.service: unit file is "+strconv.Itoa(len(big))+" bytes; the limit is 262144 bytes (256 KiB)")
}

func TestParseName(t *testing.T) {
	_, err := Parse("web.device", []byte(minimal))
	checkError(t, `Parse("web.device")`, err, `unit type ".device" is not supported`)
}

func TestParseLineContinuation(t *testing.T) {
	data := "[Service]\nExecStart=/bin/echo a \\\n  b \\\n\n  c\nType=simple\n"
	_, err := Parse("a.service", []byte(data))
	// The blank line ends the value, so "c" is a line of its own, as in
	// go-systemd.
	checkError(t, "Parse("+quote(data)+")", err, "line 5:", `"c" is not an option assignment`)

	data = "[Service]\r\nExecStart=/bin/echo a \\\r\n  b\r\nRestart=always\r\n"
	f := mustParse(t, "a.service", data)
	if want := []string{"/bin/echo", "a", "b"}; !reflect.DeepEqual(f.Service.ExecStart[0].Argv, want) || f.Service.Restart != "always" {
		t.Errorf("Parse(%q) = ExecStart %q, Restart %q; want %q, always", data, f.Service.ExecStart[0].Argv, f.Service.Restart, want)
	}
}

func TestParseEnvironment(t *testing.T) {
	tests := []struct {
		value string
		want  []string
	}{
		{"A=1", []string{"A=1"}},
		{"A=1 B=2", []string{"A=1", "B=2"}},
		{"A=", []string{"A="}},
		{"_x9=y", []string{"_x9=y"}},
		{`"A=a b" 'B=c d'`, []string{"A=a b", "B=c d"}},
		{`A="a b"`, []string{"A=a b"}},
		{`A=x=y`, []string{"A=x=y"}},
		{`A=$B ${C}`, nil}, // "${C}" is not an assignment
		{`A=$B`, []string{"A=$B"}},
		{`A=a\sb C=\x41`, []string{"A=a b", "C=A"}},
		{`PCT=100%% I=%i N=%n`, []string{"PCT=100%", "I=", "N=a.service"}}, // a.service has no instance
		{`ONE='one' "TWO='two two' too" THREE=`, []string{"ONE=one", "TWO='two two' too", "THREE="}},
	}
	for _, tt := range tests {
		data := minimal + "Environment=" + tt.value + "\n"
		f, err := Parse("a.service", []byte(data))
		if tt.want == nil {
			if err == nil {
				t.Errorf("Parse(%q) = %q, nil, want an error", data, f.Service.Environment)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q) = %v, want no error", data, err)
			continue
		}
		if !reflect.DeepEqual(f.Service.Environment, tt.want) {
			t.Errorf("Parse(%q).Service.Environment = %q, want %q", data, f.Service.Environment, tt.want)
		}
	}
}

func TestParseIgnoredOptions(t *testing.T) {
	// systemd ignores options prefixed "X-" in its sections, and so do we.
	data := "[Unit]\nX-Owner=team-web\n" + minimal + "X-Note=a  b\n[Install]\nX-Whatever=1\n"
	f := mustParse(t, "a.service", data)
	if len(f.Warnings) != 0 {
		t.Errorf("Parse(%q).Warnings = %q, want none", data, f.Warnings)
	}
	if g := mustParse(t, "a.service", minimal); g.Hash == f.Hash {
		t.Errorf("Parse(%q).Hash = %s, want it to differ from the hash without the X- options", data, f.Hash)
	}
}

func TestParseFleetLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString(minimal + "[X-Fleet]\n")
	for i := range maxFleetValues {
		b.WriteString("Conflicts=c" + strconv.Itoa(i) + "\n")
	}
	mustParse(t, "a.service", b.String())
	b.WriteString("Conflicts=one-more\n")
	_, err := Parse("a.service", []byte(b.String()))
	checkError(t, "Parse(<257 Conflicts=>)", err, "[X-Fleet] Conflicts=:", "too many values; the limit is 256")
}

func TestParseWatchdogAndNotifyAccess(t *testing.T) {
	tests := []struct {
		body     string
		watchdog time.Duration
		access   string // NotifyAccessOf
	}{
		{"", 0, "none"},
		{"Type=notify", 0, "main"},
		{"Type=notify-reload", 0, "main"},
		{"WatchdogSec=30", 30 * time.Second, "main"},
		{"WatchdogSec=1min 30s", 90 * time.Second, "main"},
		{"WatchdogSec=500ms\nWatchdogSec=", 0, "none"},
		{"WatchdogSec=0", 0, "none"},
		{"WatchdogSec=infinity", 0, "none"},
		{"Type=notify\nNotifyAccess=all", 0, "all"},
		{"NotifyAccess=exec", 0, "exec"},
		{"Type=notify\nNotifyAccess=none", 0, "none"},
	}
	for _, tt := range tests {
		data := minimal + tt.body + "\n"
		f, err := Parse("a.service", []byte(data))
		if err != nil {
			t.Errorf("Parse(%q) = %v", data, err)
			continue
		}
		if f.Service.WatchdogSec != tt.watchdog || NotifyAccessOf(&f.Service) != tt.access {
			t.Errorf("Parse(%q): WatchdogSec %v, NotifyAccessOf %q; want %v, %q", data, f.Service.WatchdogSec, NotifyAccessOf(&f.Service), tt.watchdog, tt.access)
		}
		if len(f.Warnings) != 0 {
			t.Errorf("Parse(%q).Warnings = %q, want none", data, f.Warnings)
		}
	}
	for body, want := range map[string]string{
		"WatchdogSec=5x":      "[Service] WatchdogSec=: line 3: invalid time span",
		"NotifyAccess=people": `[Service] NotifyAccess=: line 3: invalid value "people" (want none, main, exec, all)`,
	} {
		_, err := Parse("a.service", []byte(minimal+body+"\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", body, err, want)
		}
	}
}
