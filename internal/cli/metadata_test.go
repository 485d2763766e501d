package cli

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/version"
)

func TestMetadataPatch(t *testing.T) {
	for _, tc := range []struct {
		name          string
		sets, removes []string
		want          string // JSON body
		wantErr       string
	}{
		{name: "set", sets: []string{"role=web", "az=eu-1"}, want: `{"metadata":{"az":"eu-1","role":"web"}}`},
		{name: "remove", removes: []string{"role"}, want: `{"metadata":{"role":null}}`},
		{name: "set and remove", sets: []string{"disk=ssd"}, removes: []string{"role", "az"}, want: `{"metadata":{"az":null,"disk":"ssd","role":null}}`},
		{name: "value with =", sets: []string{"url=a=b"}, want: `{"metadata":{"url":"a=b"}}`},
		{name: "same pair twice", sets: []string{"a=1", "a=1"}, removes: []string{"b", "b"}, want: `{"metadata":{"a":"1","b":null}}`},
		{name: "nothing", wantErr: "nothing to change: give KEY=VALUE arguments or --remove KEY"},
		{name: "no =", sets: []string{"role"}, wantErr: `invalid metadata "role": want KEY=VALUE (to remove a key, use --remove KEY)`},
		{name: "empty key", sets: []string{"=web"}, wantErr: `invalid metadata "=web": empty key`},
		{name: "empty value", sets: []string{"role="}, wantErr: `invalid metadata "role=": empty value (to remove key role, use --remove role)`},
		{name: "space in key", sets: []string{"my role=web"}, wantErr: `invalid metadata key "my role": it may not contain spaces or commas`},
		{name: "key twice", sets: []string{"role=web", "role=db"}, wantErr: "metadata key role is given twice: role=web and role=db"},
		{name: "set and removed", sets: []string{"role=web"}, removes: []string{"role"}, wantErr: "metadata key role is both set (role=web) and removed (--remove role)"},
		{name: "remove empty", removes: []string{""}, wantErr: "invalid --remove: empty key"},
		{name: "remove pair", removes: []string{"role=web"}, wantErr: `invalid --remove "role=web": want a key, not KEY=VALUE`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := metadataPatch(tc.sets, tc.removes)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(p)
			if string(b) != tc.want {
				t.Errorf("body = %s, want %s", b, tc.want)
			}
		})
	}
}

// patches returns the PATCH requests the commands sent, as "path body".
func patches(srv *testServer) []string {
	var p []string
	for _, r := range srv.Log() {
		if r.Method == "PATCH" {
			p = append(p, r.Path+" "+strings.TrimSpace(string(r.Body)))
		}
	}
	return p
}

func TestSetMetadata(t *testing.T) {
	srv := newServer(t, testMachines...)

	r := run(t, srv, "set-metadata", "113f16a7...", "role=db", "disk=ssd", "--remove", "az").mustSucceed(t)
	v := version.Get().Short() // what the test's daemons report
	want := "MACHINE\t\tIP\t\tMETADATA\t\tDRIVERS\tVERSION\n113f16a7...\t172.17.8.101\tdisk=ssd,role=db\tsim\t" + v + "\n"
	if r.out != want {
		t.Errorf("stdout:\n%q\nwant:\n%q", r.out, want)
	}
	wantReq := "/v1/machines/" + m1 + ` {"metadata":{"az":null,"disk":"ssd","role":"db"}}`
	if got := patches(srv); len(got) != 1 || got[0] != wantReq {
		t.Errorf("PATCH requests = %q, want %q", got, wantReq)
	}
	if m, _ := srv.Machine(t, m1); formatMetadata(m.Metadata) != "disk=ssd,role=db" {
		t.Errorf("metadata on the server = %v", m.Metadata)
	}

	// Full IDs, list flags, JSON.
	r = run(t, srv, "set-metadata", "--no-legend", "--full", m2, "role=web").mustSucceed(t)
	if r.out != m2+"\t172.17.8.102\trole=web\tsim\t"+v+"\n" {
		t.Errorf("--no-legend --full: %q", r.out)
	}
	r = run(t, srv, "-o", "json", "set-metadata", "2c0f", "--remove", "role").mustSucceed(t)
	if want := `{
  "machine": "` + m2 + `",
  "ip": "172.17.8.102",
  "metadata": {},
  "leader": false,
  "units": 0,
  "drivers": [
    "sim"
  ],
  "version": "` + v + `",
  "protocol": ` + strconv.Itoa(version.ProtocolVersion) + `
}
`; r.out != want {
		t.Errorf("-o json:\n%s\nwant:\n%s", r.out, want)
	}
}

func TestSetMetadataErrors(t *testing.T) {
	srv := newServer(t, slices.Concat(testMachines, []apiv1.Machine{{ID: "11aa0000", IP: "172.17.8.109"}})...)
	for _, tc := range []struct {
		args    []string
		want    string
		patches int // PATCH requests sent
	}{
		{[]string{}, "no machine given (usage: flotilla set-metadata", 0},
		{[]string{m1}, "nothing to change", 0},
		{[]string{m1, "role"}, `invalid metadata "role": want KEY=VALUE`, 0},
		{[]string{m1, "role=web", "--remove", "role"}, "metadata key role is both set (role=web) and removed", 0},
		{[]string{"11", "role=web"}, "machine 11 is ambiguous: it begins the IDs of 113f16a7c1a44b8f9d0e1a2b3c4d5e6f, 11aa0000", 0},
		{[]string{"...", "role=web"}, `invalid machine "...": want a machine ID or a prefix of one`, 0},
		{[]string{m1, "role=web", "--fields", "nope"}, `invalid field "nope" in --fields`, 0},
		{[]string{"ffff", "role=web"}, "machine ffff is not part of the cluster (see flotilla list-machines)", 1},
		{[]string{m1, "role=a,b"}, `set metadata of machine ` + m1 + `: machine ` + m1 + `: metadata: "b" is not a key=value pair`, 1},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			before := srv.Requests("PATCH /v1/machines/" + m1)
			before += srv.Requests("PATCH /v1/machines/ffff")
			run(t, srv, append([]string{"set-metadata"}, tc.args...)...).mustFail(t, tc.want)
			after := srv.Requests("PATCH /v1/machines/"+m1) + srv.Requests("PATCH /v1/machines/ffff")
			if after-before != tc.patches {
				t.Errorf("%d PATCH requests, want %d", after-before, tc.patches)
			}
		})
	}
	if m, _ := srv.Machine(t, m1); formatMetadata(m.Metadata) != "az=a,role=web" {
		t.Errorf("metadata changed: %v", m.Metadata)
	}
}

// Units follow the metadata: they leave a machine that no longer fits them
// and are placed where they fit.
func TestSetMetadataMovesUnits(t *testing.T) {
	srv := newServer(t, testMachines...)
	dir := writeUnits(t, map[string]string{"web.service": "[Service]\nExecStart=/bin/web\n[X-Fleet]\nMachineMetadata=role=web\n"})
	run(t, srv, "start", dir+"/web.service").mustSucceed(t)

	run(t, srv, "set-metadata", m1, "role=db").mustSucceed(t)
	// The engine moves units after the change, not within the request.
	srv.waitUnit(t, "web.service", func(u apiv1.Unit) bool { return u.Machine == "" && u.Reason != "" })
	run(t, srv, "set-metadata", m2, "role=web").mustSucceed(t)
	r := run(t, srv, "start", "web.service").mustSucceed(t)
	if r.out != "Unit web.service launched on 2c0ffee0.../172.17.8.102\n" {
		t.Errorf("start after m2 became role=web: %q", r.out)
	}
}
