package unit

import (
	"slices"
	"testing"
)

func TestParseKinds(t *testing.T) {
	tests := []struct {
		name, data string
		drivers    DriverSet
		triggers   string
		machineOf  []string
	}{
		{"web.service", "[Service]\nExecStart=/bin/web\n", DriverExec | DriverSystemd, "", nil},
		{"web.service", "[Service]\nType=forking\nExecStart=/usr/sbin/webd\nPIDFile=/run/webd.pid\n", DriverSystemd, "", nil},
		{"web.service", "[Service]\nType=notify\nExecStart=/bin/web\n", DriverExec | DriverSystemd, "", nil},
		{"web.service", "[X-Container]\nImage=web:1\n", DriverDocker, "", nil},
		{"backup.timer", "[Timer]\nOnCalendar=daily\nPersistent=true\n", DriverSystemd, "backup.service", []string{"backup.service"}},
		{"backup.timer", "[Timer]\nOnBootSec=5min\nUnit=other.service\n", DriverSystemd, "other.service", []string{"other.service"}},
		{"backup@1.timer", "[Timer]\nOnActiveSec=10s\n", DriverSystemd, "backup@1.service", []string{"backup@1.service"}},
		{"backup@.timer", "[Timer]\nOnActiveSec=10s\n", DriverSystemd, "backup@.service", nil},
		{"web.socket", "[Socket]\nListenStream=8080\n", DriverSystemd, "web.service", []string{"web.service"}},
		{"web.socket", "[Socket]\nListenStream=8080\nAccept=yes\n", DriverSystemd, "web@.service", nil},
		{"web.socket", "[Socket]\nListenStream=8080\n[X-Fleet]\nMachineID=m1\n", DriverSystemd, "web.service", nil},
		{"web.socket", "[Socket]\nListenStream=8080\n[X-Fleet]\nGlobal=true\n", DriverSystemd, "web.service", nil},
		{"spool.path", "[Path]\nPathChanged=/var/spool/x\n", DriverSystemd, "spool.service", []string{"spool.service"}},
		{"mnt-data.mount", "[Mount]\nWhat=/dev/vdb\nWhere=/mnt/data\nType=ext4\n", DriverSystemd, "", nil},
		{"mnt-data.automount", "[Automount]\nWhere=/mnt/data\n", DriverSystemd, "", nil},
		{"swapfile.swap", "[Swap]\nWhat=/swapfile\n", DriverSystemd, "", nil},
		{"app.target", "[Unit]\nWants=web.service\n", DriverSystemd, "", nil},
		{"j@.socket", "[Socket]\nListenStream=/run/j.%i\nService=j@%i.service\n", DriverSystemd, "j@%i.service", nil},
		{"j@a.socket", "[Socket]\nListenStream=/run/j.%i\nService=j@%i.service\n", DriverSystemd, "j@a.service", []string{"j@a.service"}},
		{"bye.service", "[Unit]\nSuccessAction=exit-force\n", DriverSystemd, "", nil},
	}
	for _, tt := range tests {
		f, err := Parse(tt.name, []byte(tt.data))
		if err != nil {
			t.Errorf("Parse(%s, %q) = %v", tt.name, tt.data, err)
			continue
		}
		if got := f.Drivers(); got != tt.drivers {
			t.Errorf("Parse(%s, %q).Drivers() = %v, want %v", tt.name, tt.data, got, tt.drivers)
		}
		if f.Triggers != tt.triggers {
			t.Errorf("Parse(%s, %q).Triggers = %q, want %q", tt.name, tt.data, f.Triggers, tt.triggers)
		}
		if !slices.Equal(f.Fleet.MachineOf, tt.machineOf) {
			t.Errorf("Parse(%s, %q).Fleet.MachineOf = %q, want %q", tt.name, tt.data, f.Fleet.MachineOf, tt.machineOf)
		}
	}
}

func TestParseKindErrors(t *testing.T) {
	tests := []struct {
		name, data string
		want       []string
	}{
		{"a.timer", "[Service]\nExecStart=/bin/true\n", []string{"[Service] ExecStart=", "a .timer unit has no [Service] section; its options go in [Timer]"}},
		{"a.timer", "[Timer]\nPersistent=yes\n", []string{"a .timer unit needs at least one of OnCalendar="}},
		{"a.timer", "[Timer]\nOnActiveSec=soon\n", []string{"[Timer] OnActiveSec=", "soon"}},
		{"a.timer", "[Timer]\nOnActiveSec=1s\nUnit=a.timer\n", []string{"cannot trigger itself"}},
		{"a.timer", "[Timer]\nOnActiveSec=1s\nUnit=a.device\n", []string{`unit type ".device" is not supported`}},
		{"a.timer", "[Timer]\nOnActiveSec=1s\nListenStream=80\n", []string{"unknown option in [Timer]; ListenStream= belongs in [Socket]"}},
		{"a.socket", "[Socket]\nAccept=yes\n", []string{"a .socket unit needs at least one of ListenStream="}},
		{"a.path", "[Path]\nUnit=b.service\n", []string{"a .path unit needs at least one of PathExists="}},
		{"a.target", "[Service]\nExecStart=/bin/true\n", []string{"a .target unit has no [Service] section"}},
		{"mnt-data.mount", "[Mount]\nWhere=/mnt/data\n", []string{"a .mount unit needs What="}},
		{"mnt-data.mount", "[Mount]\nWhat=/dev/vdb\nWhere=/mnt/other\n", []string{`must be named "mnt-other.mount"`}},
		{"mnt-data.mount", "[Mount]\nWhat=/dev/vdb\nWhere=mnt/data\n", []string{"not an absolute path"}},
		{"a.swap", "[Swap]\nPriority=1\n", []string{"a .swap unit needs What="}},
		{"a.service", "[X-Container]\nCommand=/bin/x\n", []string{"[X-Container] Image=", "missing; a container unit names the image"}},
		{"a.service", "[X-Container]\nImage=a b\n", []string{"takes one image name, not 2 words"}},
		{"a.service", "[Service]\nExecStart=/bin/x\n[X-Container]\nImage=a\n", []string{"[Service] ExecStart=", "not used for a container unit"}},
		{"a.service", "[Service]\nType=forking\n[X-Container]\nImage=a\n", []string{"Type=forking is not supported for a container unit"}},
		{"a.service", "[X-Container]\nImage=a\nPorts=80:http\n", []string{`"http" is not a port number`}},
		{"a.service", "[X-Container]\nImage=a\nPorts=80/sctp\n", []string{`protocol "sctp"`}},
		{"a.service", "[X-Container]\nImage=a\nPorts=nowhere:80:80\n", []string{`"nowhere" is not an IP address`}},
		{"a.service", "[X-Container]\nImage=a\nVolumes=/data\n", []string{"want source:target[:ro|rw]"}},
		{"a.service", "[X-Container]\nImage=a\nVolumes=/data:/d:rx\n", []string{`mode "rx"`}},
		{"a.service", "[X-Container]\nImage=a\nVolumes=./data:/d\n", []string{"must be absolute"}},
		{"a.service", "[X-Container]\nImage=a\nPull=always\n", []string{"unknown option in [X-Container]"}},
		{"a.timer", "[Timer]\nOnActiveSec=1s\n[X-Container]\nImage=a\n", []string{"a .timer unit has no [X-Container] section"}},
	}
	for _, tt := range tests {
		_, err := Parse(tt.name, []byte(tt.data))
		checkError(t, "Parse("+tt.name+", "+quote(tt.data)+")", err, tt.want...)
	}
}

func TestParseContainer(t *testing.T) {
	f, err := Parse("web@7.service", []byte(`[Service]
Environment=PORT=80
MemoryMax=64M
Restart=on-failure
[X-Container]
Image=registry.local/web:1.2
Command=/web --id %i "--name=a b"
Ports=8080:80 127.0.0.1:9090:90/udp 53/udp [::1]:7:7
Volumes=/srv/web:/data:ro named:/cache
Network=host
`))
	if err != nil {
		t.Fatal(err)
	}
	c := f.Container
	if c == nil || c.Image != "registry.local/web:1.2" || c.Network != "host" {
		t.Fatalf("Container = %+v", c)
	}
	if want := []string{"/web", "--id", "7", "--name=a b"}; !slices.Equal(c.Command, want) {
		t.Errorf("Command = %q, want %q", c.Command, want)
	}
	wantPorts := []Port{{"", 8080, 80, "tcp"}, {"127.0.0.1", 9090, 90, "udp"}, {"", 0, 53, "udp"}, {"::1", 7, 7, "tcp"}}
	if !slices.Equal(c.Ports, wantPorts) {
		t.Errorf("Ports = %+v, want %+v", c.Ports, wantPorts)
	}
	wantVols := []Volume{{"/srv/web", "/data", true}, {"named", "/cache", false}}
	if !slices.Equal(c.Volumes, wantVols) {
		t.Errorf("Volumes = %+v, want %+v", c.Volumes, wantVols)
	}
	if f.Service.MemoryMax != 64<<20 || f.Service.Restart != "on-failure" {
		t.Errorf("Service = %+v", f.Service)
	}
	g, err := Parse("web@7.service", []byte("[X-Container]\nImage=registry.local/web:1.3\n"))
	if err != nil || g.Hash == f.Hash {
		t.Errorf("another image: %v, hash %s (first %s)", err, g.Hash, f.Hash)
	}
}

func TestParseDrivers(t *testing.T) {
	set, err := ParseDrivers("exec, docker")
	if err != nil || set != DriverExec|DriverDocker || set.String() != "exec,docker" {
		t.Errorf("ParseDrivers(exec, docker) = %v, %v", set, err)
	}
	for _, bad := range []string{"", "exec,exec", "podman"} {
		if _, err := ParseDrivers(bad); err == nil {
			t.Errorf("ParseDrivers(%q) = nil error", bad)
		}
	}
	if !DriverSet(0).Runs(DriverExec) || DriverSet(0).Runs(DriverSystemd) {
		t.Error("a machine naming no driver should run exec units only")
	}
	if !DriverSim.Runs(DriverDocker) || DriverExec.Runs(DriverDocker) || !(DriverExec | DriverDocker).Runs(DriverDocker) {
		t.Error("Runs is wrong")
	}
	if got := DriversFromNames([]string{"systemd", "future"}); got != DriverSystemd {
		t.Errorf("DriversFromNames = %v", got)
	}
}

func TestDriversReason(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  DriverSet
		want string
	}{
		{"a.timer", DriverSystemd, "a machine with the systemd driver (.timer units run under systemd)"},
		{"a.service", DriverSystemd, "a machine with the systemd driver (Type=forking services run under systemd)"},
		{"a.service", DriverDocker, "a machine with the docker driver (the unit has an [X-Container] section)"},
		{"a.service", DriverExec | DriverSystemd, "a machine with the exec or systemd driver"},
	} {
		if got := DriversReason(tt.name, tt.set); got != tt.want {
			t.Errorf("DriversReason(%s, %v) = %q, want %q", tt.name, tt.set, got, tt.want)
		}
	}
}
