package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/scheduler"
)

// sampleUnits is a cluster state: a running unit, a global-like unit on
// two machines, an unplaceable unit and an idle one.
func sampleData() ([]apiv1.Unit, []apiv1.UnitState, []apiv1.Machine) {
	const hash = "0123456789abcdef0123456789abcdef01234567"
	units := []apiv1.Unit{
		{Name: "web.service", Hash: hash, DesiredState: "launched", CurrentState: "launched", Machine: m1, Description: "Web"},
		{Name: "db.service", Hash: "fedcba9", DesiredState: "launched", CurrentState: "inactive", Reason: "no machine matches MachineMetadata=role=db"},
		{Name: "idle.service", Hash: "", DesiredState: "inactive", CurrentState: "inactive"},
		{Name: "mon.service", Hash: hash, DesiredState: "launched", CurrentState: "launched"},
	}
	states := []apiv1.UnitState{
		{Name: "web.service", Machine: m1, Hash: hash, Load: "loaded", Active: "active", Sub: "running", Health: "unhealthy"},
		{Name: "mon.service", Machine: m2, Hash: hash, Load: "loaded", Active: "failed", Sub: "failed"},
		{Name: "mon.service", Machine: m1, Hash: hash, Load: "loaded", Active: "active", Sub: "running", Health: "healthy"},
		{Name: "gone.service", Machine: "ffffffffffff", Hash: hash, Load: "loaded", Active: "deactivating", Sub: "stop-sigterm"},
	}
	return units, states, testMachines
}

func table[T any](t *testing.T, all []field[T], spec string, rows []T, full, noLegend bool) string {
	t.Helper()
	fields, err := parseFields(spec, all)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := writeTable(&b, fields, rows, full, noLegend); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestUnitsTable(t *testing.T) {
	units, states, machines := sampleData()
	rows := unitRows(units, states, machines)
	for _, tc := range []struct {
		name, fields   string
		full, noLegend bool
		want           string
	}{
		{
			name: "default", fields: defaultUnitFields,
			want: `UNIT		MACHINE				ACTIVE		SUB		HEALTH
db.service	-				-		-		-
gone.service	ffffffff...			deactivating	stop-sigterm	-
mon.service	113f16a7.../172.17.8.101	active		running		healthy
mon.service	2c0ffee0.../172.17.8.102	failed		failed		-
web.service	113f16a7.../172.17.8.101	active		running		unhealthy
`,
		},
		{
			name: "fields, full, no legend", fields: "unit,hash,machine,load", full: true, noLegend: true,
			want: `db.service	-						-						-
gone.service	0123456789abcdef0123456789abcdef01234567	ffffffffffff					loaded
mon.service	0123456789abcdef0123456789abcdef01234567	113f16a7c1a44b8f9d0e1a2b3c4d5e6f/172.17.8.101	loaded
mon.service	0123456789abcdef0123456789abcdef01234567	2c0ffee0aa44b8f9d0e1a2b3c4d5e6f7/172.17.8.102	loaded
web.service	0123456789abcdef0123456789abcdef01234567	113f16a7c1a44b8f9d0e1a2b3c4d5e6f/172.17.8.101	loaded
`,
		},
		{
			name: "short hash", fields: "hash", noLegend: true,
			want: "-\n0123456\n0123456\n0123456\n0123456\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := table(t, unitFields(), tc.fields, rows, tc.full, tc.noLegend); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestUnitFilesTable(t *testing.T) {
	units, _, machines := sampleData()
	rows := unitFileRows(units, machines)
	for _, tc := range []struct {
		name, fields   string
		full, noLegend bool
		want           string
	}{
		{
			name: "default", fields: defaultUnitFileFields,
			want: `UNIT		HASH	DSTATE		STATE		TARGET
db.service	fedcba9	launched	inactive	-
idle.service	-	inactive	inactive	-
mon.service	0123456	launched	launched	-
web.service	0123456	launched	launched	113f16a7.../172.17.8.101
`,
		},
		{
			name: "tmachine, desc, reason, full", fields: "unit,tmachine,desc,reason", full: true, noLegend: true,
			want: `db.service	-						-	no machine matches MachineMetadata=role=db
idle.service	-						-	-
mon.service	-						-	-
web.service	113f16a7c1a44b8f9d0e1a2b3c4d5e6f/172.17.8.101	Web	-
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := table(t, unitFileFields(), tc.fields, rows, tc.full, tc.noLegend); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
	var b bytes.Buffer
	writeReasons(&b, rows)
	if b.String() != "Unit db.service cannot be placed: no machine matches MachineMetadata=role=db\n" {
		t.Errorf("writeReasons = %q", b.String())
	}
}

func TestMachinesTable(t *testing.T) {
	rows := machineRows([]apiv1.Machine{testMachines[1], testMachines[0]})
	for _, tc := range []struct {
		name, fields   string
		full, noLegend bool
		want           string
	}{
		{
			name: "default", fields: defaultMachineFields,
			want: `MACHINE		IP		METADATA	DRIVERS	VERSION
113f16a7...	172.17.8.101	az=a,role=web	-	0.2.0+abc1234
2c0ffee0...	172.17.8.102	-		-	-
`,
		},
		{
			name: "all, full", fields: "machine,leader,units", full: true, noLegend: true,
			want: `113f16a7c1a44b8f9d0e1a2b3c4d5e6f	true	0
2c0ffee0aa44b8f9d0e1a2b3c4d5e6f7	false	0
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := table(t, machineFields(), tc.fields, rows, tc.full, tc.noLegend); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestJSONRows(t *testing.T) {
	units, states, machines := sampleData()
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{
			name: "unit row",
			v:    unitRows(units, states, machines)[2],
			want: `{"unit":"mon.service","machine":"113f16a7c1a44b8f9d0e1a2b3c4d5e6f","load":"loaded","active":"active","sub":"running","hash":"0123456789abcdef0123456789abcdef01234567"}`,
		},
		{
			name: "unit row without state",
			v:    unitRows(units, states, machines)[0],
			want: `{"unit":"db.service","machine":"","load":"","active":"","sub":"","hash":""}`,
		},
		{
			name: "unit row of a unit a drain keeps",
			v: unitRows([]apiv1.Unit{{Name: "db.service", Machine: "m1", Reason: "machine m1 is draining, and the unit fits nowhere else: no machine has role=db"}},
				[]apiv1.UnitState{{Name: "db.service", Machine: "m1", Active: "active"}}, nil)[0],
			want: `{"unit":"db.service","machine":"m1","load":"","active":"active","sub":"","hash":"","reason":"machine m1 is draining, and the unit fits nowhere else: no machine has role=db"}`,
		},
		{
			name: "unit file row",
			v:    unitFileRows(units, machines)[0],
			want: `{"unit":"db.service","hash":"fedcba9","dstate":"launched","state":"inactive","tmachine":"","desc":"","reason":"no machine matches MachineMetadata=role=db"}`,
		},
		{
			name: "machine row",
			v:    machineRows(machines)[1],
			want: `{"machine":"2c0ffee0aa44b8f9d0e1a2b3c4d5e6f7","ip":"172.17.8.102","metadata":{},"leader":false,"units":0,"drivers":null,"version":""}`,
		},
		{name: "no rows", v: unitRows(nil, nil, nil), want: `[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("got  %s\nwant %s", b, tc.want)
			}
		})
	}
}

func TestParseFields(t *testing.T) {
	for _, tc := range []struct {
		spec, want, wantErr string
	}{
		{spec: "unit,machine", want: "unit,machine"},
		{spec: " unit , sub ", want: "unit,sub"},
		{spec: "hash,hash", want: "hash,hash"},
		{spec: "", wantErr: "--fields is empty: want a comma-separated list of unit, machine, load, active, sub, hash"},
		{spec: "unit,ip", wantErr: `invalid field "ip" in --fields: valid fields are unit, machine, load, active, sub, hash`},
		{spec: "unit,", wantErr: `invalid field ""`},
	} {
		fields, err := parseFields(tc.spec, unitFields())
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr && !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("parseFields(%q) error = %v, want %q", tc.spec, err, tc.wantErr)
			}
			continue
		}
		if err != nil || fieldNames(fields) != tc.want {
			t.Errorf("parseFields(%q) = %s, %v; want %s", tc.spec, fieldNames(fields), err, tc.want)
		}
	}
}

func TestMachineLegend(t *testing.T) {
	for _, tc := range []struct {
		id, ip string
		full   bool
		want   string
	}{
		{m1, "10.0.0.1", false, "113f16a7.../10.0.0.1"},
		{m1, "10.0.0.1", true, m1 + "/10.0.0.1"},
		{m1, "", false, "113f16a7..."},
		{"short", "10.0.0.1", false, "short/10.0.0.1"},
		{"", "10.0.0.1", false, "-"},
	} {
		if got := machineLegend(tc.id, tc.ip, tc.full); got != tc.want {
			t.Errorf("machineLegend(%q, %q, %v) = %q, want %q", tc.id, tc.ip, tc.full, got, tc.want)
		}
	}
}

func TestFormatMetadata(t *testing.T) {
	for _, tc := range []struct {
		md   map[string]string
		want string
	}{
		{nil, "-"},
		{map[string]string{}, "-"},
		{map[string]string{"role": "web"}, "role=web"},
		{map[string]string{"z": "1", "a": "2", "m": "x=y"}, "a=2,m=x=y,z=1"},
	} {
		if got := formatMetadata(tc.md); got != tc.want {
			t.Errorf("formatMetadata(%v) = %q, want %q", tc.md, got, tc.want)
		}
	}
}

func TestJudge(t *testing.T) {
	running := &apiv1.UnitState{Active: "active", Sub: "running", Since: "2024-05-01T12:00:00Z"}
	oldFailure := &apiv1.UnitState{Active: "failed", Sub: "failed", Result: "exit-code", Since: "2024-05-01T11:00:00Z"}
	newFailure := &apiv1.UnitState{Active: "failed", Sub: "failed", Result: "exit-code", Since: "2024-05-01T12:00:05Z"}
	for _, tc := range []struct {
		name   string
		target waitTarget
		want   string
		unit   *apiv1.Unit
		v      verdict
	}{
		{"gone", waitTarget{}, stateLaunched, nil, vanished},
		{"launched", waitTarget{changed: true}, stateLaunched, &apiv1.Unit{CurrentState: "launched", State: running}, reached},
		{"not yet", waitTarget{changed: true}, stateLaunched, &apiv1.Unit{CurrentState: "loaded"}, pending},
		{"cannot be placed", waitTarget{changed: true}, stateLaunched, &apiv1.Unit{CurrentState: "inactive", Reason: "no machine"}, unplaceable},
		{"reason does not matter to unload", waitTarget{changed: true}, stateInactive, &apiv1.Unit{CurrentState: "loaded", Reason: "x"}, pending},
		{"moving", waitTarget{changed: true}, stateLoaded, &apiv1.Unit{CurrentState: "inactive", Reason: "stopping on m1 before it moves"}, pending},
		{"unloaded", waitTarget{changed: true}, stateInactive, &apiv1.Unit{CurrentState: "inactive"}, reached},
		{"failed after the change", waitTarget{changed: true, snapshot: oldFailure}, stateLaunched,
			&apiv1.Unit{CurrentState: "loaded", State: newFailure}, failed},
		{"failed before the change: wait for news", waitTarget{changed: true, snapshot: oldFailure}, stateLaunched,
			&apiv1.Unit{CurrentState: "loaded", State: oldFailure}, pending},
		{"failed and reported launched", waitTarget{changed: true}, stateLaunched,
			&apiv1.Unit{CurrentState: "launched", State: newFailure}, failed},
		{"failed, desired state unchanged", waitTarget{changed: false, snapshot: oldFailure}, stateLaunched,
			&apiv1.Unit{CurrentState: "loaded", State: oldFailure}, failed},
		{"failed unit counts as loaded", waitTarget{changed: true}, stateLoaded,
			&apiv1.Unit{CurrentState: "loaded", State: newFailure}, reached},
		{"applied launched, process still starting", waitTarget{changed: true, running: true}, stateLaunched,
			&apiv1.Unit{CurrentState: "launched", State: &apiv1.UnitState{Active: "activating", Sub: "start"}}, pending},
		{"applied launched, no report", waitTarget{changed: true, running: true}, stateLaunched,
			&apiv1.Unit{CurrentState: "launched"}, pending},
		{"launched and running", waitTarget{changed: true, running: true}, stateLaunched,
			&apiv1.Unit{CurrentState: "launched", State: running}, reached},
		{"applied loaded, process still stopping", waitTarget{changed: true, running: true}, stateLoaded,
			&apiv1.Unit{CurrentState: "loaded", State: &apiv1.UnitState{Active: "deactivating", Sub: "stop-sigterm"}}, pending},
		{"loaded and stopped", waitTarget{changed: true, running: true}, stateLoaded,
			&apiv1.Unit{CurrentState: "loaded", State: &apiv1.UnitState{Active: "inactive", Sub: "dead"}}, reached},
		{"loaded and failed counts as stopped", waitTarget{changed: true, running: true}, stateLoaded,
			&apiv1.Unit{CurrentState: "loaded", State: newFailure}, reached},
		{"global, launched everywhere", waitTarget{changed: true, running: true}, stateLaunched,
			&apiv1.Unit{Global: true, CurrentState: "launched"}, reached},
		{"process not asked for: applied loaded is enough", waitTarget{changed: true}, stateLoaded,
			&apiv1.Unit{CurrentState: "loaded", State: &apiv1.UnitState{Active: "deactivating"}}, reached},
		{"no machines yet: they may be joining", waitTarget{changed: true, joinUntil: time.Now().Add(time.Hour)}, stateLaunched,
			&apiv1.Unit{Reason: scheduler.NoMachines}, pending},
		{"no machines, past the grace", waitTarget{changed: true, joinUntil: time.Now().Add(-time.Second)}, stateLaunched,
			&apiv1.Unit{Reason: scheduler.NoMachines}, unplaceable},
		{"another reason is not waited out", waitTarget{changed: true, joinUntil: time.Now().Add(time.Hour)}, stateLaunched,
			&apiv1.Unit{Reason: "no machine has region=mars"}, unplaceable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judge(tc.target, tc.want, tc.unit); got != tc.v {
				t.Errorf("judge = %v, want %v", got, tc.v)
			}
		})
	}
}

func TestWriteStatus(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		unit apiv1.Unit
		want string
	}{
		{
			name: "running",
			unit: apiv1.Unit{Name: "web.service", Description: "Web", DesiredState: "launched", Machine: m1,
				State: &apiv1.UnitState{Load: "loaded", Active: "active", Sub: "running", PID: 42, Since: "2024-05-01T09:58:00Z", Health: "healthy"}},
			want: `● web.service - Web
   Loaded: loaded
   Active: active (running) since Wed 2024-05-01 09:58:00 UTC; 2h 2min ago
   Health: healthy
 Main PID: 42
  Machine: M
  Desired: launched
`,
		},
		{
			name: "failed",
			unit: apiv1.Unit{Name: "bad.service", DesiredState: "launched", Machine: m1,
				State: &apiv1.UnitState{Load: "loaded", Active: "failed", Sub: "failed", Result: "exit-code", Message: "exit status 1", Since: "2024-05-01T11:59:58Z"}},
			want: `● bad.service
   Loaded: loaded
   Active: failed (Result: exit-code) since Wed 2024-05-01 11:59:58 UTC; 2s ago
   Status: "exit status 1"
  Machine: M
  Desired: launched
`,
		},
		{
			name: "watchdog",
			unit: apiv1.Unit{Name: "dog.service", DesiredState: "launched", Machine: m1,
				State: &apiv1.UnitState{Load: "loaded", Active: "activating", Sub: "auto-restart", Result: "watchdog", Health: "unhealthy",
					Message: "watchdog timeout: no WATCHDOG=1 within 5s; killed with SIGABRT", Since: "2024-05-01T11:59:58Z"}},
			want: `● dog.service
   Loaded: loaded
   Active: activating (auto-restart) since Wed 2024-05-01 11:59:58 UTC; 2s ago
   Health: unhealthy
   Status: "watchdog timeout: no WATCHDOG=1 within 5s; killed with SIGABRT"
  Machine: M
  Desired: launched
`,
		},
		{
			name: "unplaceable",
			unit: apiv1.Unit{Name: "db.service", DesiredState: "launched", Reason: "no machine matches MachineMetadata=role=db"},
			want: `● db.service
   Loaded: -
   Active: -
  Machine: M
   Reason: no machine matches MachineMetadata=role=db
  Desired: launched
`,
		},
		{
			name: "singleton replaced",
			unit: apiv1.Unit{Name: "lock.service", DesiredState: "launched", Machine: m1, Singleton: true, LostAfter: "30s",
				State: &apiv1.UnitState{Load: "loaded", Active: "active", Sub: "running", PID: 7, Since: "2024-05-01T11:59:00Z"},
				History: []apiv1.HistoryEntry{
					{Time: "2024-05-01T11:58:59Z", Event: "lost on m3 (unheard for 30.6s)"},
					{Time: "2024-05-01T11:58:59.5Z", Event: "replaced on m1 (its machine m3 was lost)"},
				}},
			want: `● lock.service
   Loaded: loaded
   Active: active (running) since Wed 2024-05-01 11:59:00 UTC; 1min 0s ago
 Main PID: 7
  Machine: M
  Desired: launched
   Policy: singleton: killed on its machine after 30s cut off, then started elsewhere
  History: Wed 2024-05-01 11:58:59 UTC lost on m3 (unheard for 30.6s)
           Wed 2024-05-01 11:58:59 UTC replaced on m1 (its machine m3 was lost)
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			writeStatus(&b, tc.unit, "M", now, time.UTC)
			if b.String() != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tc.want)
			}
		})
	}
}

func TestAgo(t *testing.T) {
	const day = 24 * time.Hour
	for d, want := range map[time.Duration]string{
		-time.Second:                    "in the future",
		0:                               "just now",
		time.Second:                     "1s ago",
		59 * time.Second:                "59s ago",
		61 * time.Second:                "1min 1s ago",
		7 * time.Minute:                 "7min ago",
		time.Hour + 5*time.Minute:       "1h 5min ago",
		7 * time.Hour:                   "7h ago",
		26 * time.Hour:                  "1 day 2h ago",
		3 * day:                         "3 days ago",
		8 * day:                         "1 week 1 day ago",
		40 * day:                        "1 month 9 days ago",
		800 * day:                       "2 years 2 months ago",
		365*day + 6*time.Hour + 31*day:  "1 year 1 month ago",
		14*day + 12*time.Hour + 1*day/2: "2 weeks 1 day ago",
	} {
		if got := ago(d); got != want {
			t.Errorf("ago(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestNoMachinesReason keeps the CLI's copy of the scheduler's reason true:
// the CLI does not import the scheduler.
func TestNoMachinesReason(t *testing.T) {
	if noMachinesReason != scheduler.NoMachines {
		t.Fatalf("noMachinesReason = %q, scheduler says %q", noMachinesReason, scheduler.NoMachines)
	}
}
