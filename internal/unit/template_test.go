package unit

import (
	"reflect"
	"testing"
)

const webTemplate = `[Unit]
Description=Web %i

[Service]
ExecStart=/bin/web --id %i --name %n

[X-Fleet]
MachineOf=db@%i.service
Conflicts=%p@*.service
MachineMetadata=instance=%i unit=%N
Role=%n
`

func TestInstantiate(t *testing.T) {
	tmpl := mustParse(t, "web@.service", webTemplate)
	// The template keeps its specifiers.
	if want := []string{"db@%i.service"}; !reflect.DeepEqual(tmpl.Fleet.MachineOf, want) {
		t.Errorf("Parse(web@.service).Fleet.MachineOf = %q, want %q", tmpl.Fleet.MachineOf, want)
	}

	one, err := Instantiate(tmpl, "1")
	if err != nil {
		t.Fatalf("Instantiate(web@.service, %q) = %v, want no error", "1", err)
	}
	if one.Name != "web@1.service" || one.Raw != tmpl.Raw {
		t.Errorf("Instantiate(web@.service, %q) = Name %q, Raw %q; want web@1.service and the template's text", "1", one.Name, one.Raw)
	}
	wantFleet := Fleet{
		MachineOf:       []string{"db@1.service"},
		Conflicts:       []string{"web@*.service"},
		MachineMetadata: []string{"instance=1", "unit=web@1"},
		Role:            "web@1.service",
	}
	if !reflect.DeepEqual(one.Fleet, wantFleet) {
		t.Errorf("Instantiate(web@.service, %q).Fleet = %+v, want %+v", "1", one.Fleet, wantFleet)
	}
	// [Service] values get the unit-name specifiers, as systemd expands them.
	if want := []string{"/bin/web", "--id", "1", "--name", "web@1.service"}; !reflect.DeepEqual(one.Service.ExecStart[0].Argv, want) {
		t.Errorf("Instantiate(web@.service, %q).Service.ExecStart = %q, want %q", "1", one.Service.ExecStart[0].Argv, want)
	}
	if one.Description != "Web %i" {
		t.Errorf("Instantiate(web@.service, %q).Description = %q, want %q", "1", one.Description, "Web %i")
	}

	two, err := Instantiate(tmpl, "2")
	if err != nil {
		t.Fatalf("Instantiate(web@.service, %q) = %v, want no error", "2", err)
	}
	if one.Hash == two.Hash || one.Hash == tmpl.Hash {
		t.Errorf("Instantiate hashes: template %s, web@1 %s, web@2 %s; want three different hashes", tmpl.Hash, one.Hash, two.Hash)
	}
	// Parsing the instance directly gives the same unit.
	direct := mustParse(t, "web@1.service", webTemplate)
	if direct.Hash != one.Hash || !reflect.DeepEqual(direct.Fleet, one.Fleet) {
		t.Errorf("Parse(web@1.service) = hash %s, fleet %+v; want hash %s, fleet %+v as from Instantiate", direct.Hash, direct.Fleet, one.Hash, one.Fleet)
	}

	// Without specifiers in [X-Fleet], instances hash like their template.
	plain := mustParse(t, "api@.service", "[Service]\nExecStart=/bin/api %i\n[X-Fleet]\nConflicts=api@*.service\n")
	if inst, err := Instantiate(plain, "x"); err != nil || inst.Hash != plain.Hash {
		t.Errorf("Instantiate(api@.service, %q) = hash %v, %v; want hash %s, nil", "x", inst, err, plain.Hash)
	}
}

func TestInstantiateSpecifiers(t *testing.T) {
	tests := []struct {
		role string
		want string
	}{
		{"%n", "web@a.b.service"},
		{"%N", "web@a.b"},
		{"%p", "web"},
		{"%i", "a.b"},
		{"%%", "%"},
		{"%%i", "%i"},
		{"100%%", "100%"},
		{"%z", "%z"},
		{"x%", "x%"},
		{"%p-%i", "web-a.b"},
	}
	for _, tt := range tests {
		data := minimal + "[X-Fleet]\nRole=" + tt.role + "\n"
		tmpl := mustParse(t, "web@.service", data)
		if tmpl.Fleet.Role != tt.role {
			t.Errorf("Parse(web@.service, Role=%s).Fleet.Role = %q, want it unexpanded", tt.role, tmpl.Fleet.Role)
		}
		f, err := Instantiate(tmpl, "a.b")
		if err != nil {
			t.Errorf("Instantiate(Role=%s, %q) = %v, want no error", tt.role, "a.b", err)
			continue
		}
		if f.Fleet.Role != tt.want {
			t.Errorf("Instantiate(Role=%s, %q).Fleet.Role = %q, want %q", tt.role, "a.b", f.Fleet.Role, tt.want)
		}
	}
	// Non-template units expand specifiers too, as in fleet.
	f := mustParse(t, "db.service", minimal+"[X-Fleet]\nRole=%p:%i:%n\n")
	if want := "db::db.service"; f.Fleet.Role != want {
		t.Errorf("Parse(db.service, Role=%%p:%%i:%%n).Fleet.Role = %q, want %q", f.Fleet.Role, want)
	}
}

func TestInstantiateErrors(t *testing.T) {
	tmpl := mustParse(t, "web@.service", webTemplate)
	tests := []struct {
		tmpl     *File
		instance string
		want     []string
	}{
		{nil, "1", []string{"no template"}},
		{mustParse(t, "web.service", minimal), "1", []string{`"web.service" is not a template unit`}},
		{mustParse(t, "web@1.service", minimal), "2", []string{`"web@1.service" is not a template unit`}},
		{tmpl, "", []string{"instance name is empty"}},
		{tmpl, "a b", []string{`invalid instance name "a b"`, "' '"}},
		{tmpl, "a@b", []string{`invalid instance name "a@b"`}},
		{tmpl, "a/b", []string{`invalid instance name "a/b"`}},
		{tmpl, string(make([]byte, 300)), []string{"invalid instance name"}},
	}
	for _, tt := range tests {
		_, err := Instantiate(tt.tmpl, tt.instance)
		checkError(t, "Instantiate("+quote(tt.instance)+")", err, tt.want...)
	}
	long := mustParse(t, "web@.service", minimal)
	_, err := Instantiate(long, string(make([]byte, 0))+stringOf('x', 250))
	checkError(t, "Instantiate(<250 x>)", err, "bytes long; the maximum is 255")

	// An expansion that makes an invalid unit name fails the instance.
	bad := mustParse(t, "web@.service", minimal+"[X-Fleet]\nMachineOf=%i\n")
	_, err = Instantiate(bad, "db")
	checkError(t, `Instantiate(MachineOf=%i, "db")`, err, "web@db.service: [X-Fleet] MachineOf=:", `invalid unit name "db"`)

	// Templates are validated too, where specifiers do not hide the value.
	_, err = Parse("web@.service", []byte(minimal+"[X-Fleet]\nMachineOf=db\n"))
	checkError(t, "Parse(web@.service, MachineOf=db)", err, `invalid unit name "db"`)
	_, err = Parse("web@.service", []byte("[Service]\nType=simple\n"))
	checkError(t, "Parse(web@.service, no ExecStart)", err, "ExecStart=")
}

func stringOf(c byte, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return string(b)
}
