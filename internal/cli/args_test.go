package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnitName(t *testing.T) {
	for arg, want := range map[string]string{
		"hello":                  "hello.service",
		"hello.service":          "hello.service",
		"hello.socket":           "hello.socket",
		"hello.timer":            "hello.timer",
		"my.app":                 "my.app.service",
		"units/hello.service":    "hello.service",
		"/etc/units/web@1":       "web@1.service",
		"./units/web@.service":   "web@.service",
		"units/hello.service.sh": "hello.service.sh.service",
	} {
		if got := unitName(arg); got != want {
			t.Errorf("unitName(%q) = %q, want %q", arg, got, want)
		}
	}
}

func TestTemplateOf(t *testing.T) {
	for _, tc := range []struct {
		name, tmpl string
		ok         bool
	}{
		{"web@1.service", "web@.service", true},
		{"web@a.b.service", "web@.service", true},
		{"web@.service", "", false},
		{"web.service", "", false},
		{"@1.service", "", false},
		{"web@1", "", false},
	} {
		tmpl, ok := templateOf(tc.name)
		if tmpl != tc.tmpl || ok != tc.ok {
			t.Errorf("templateOf(%q) = %q, %v; want %q, %v", tc.name, tmpl, ok, tc.tmpl, tc.ok)
		}
	}
}

func TestReadUnitArgs(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"hello.service":      "hello",
		"plain":              "plain file",
		"sub/web@.service":   "web template",
		"sub/hello.service":  "other hello",
		"other/a.service":    "a",
		"cwd/local.service":  "local",
		"cwd/noext.service":  "noext",
		"cwd/tmpl@.service":  "cwd template",
		"cwd/dir.service/x":  "",
		"cwd/empty.service":  "",
		"other/same.service": "same",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(filepath.Join(dir, "cwd"))
	d := func(p string) string { return filepath.Join(dir, p) }

	for _, tc := range []struct {
		name    string
		args    []string
		want    []unitRef
		wantErr string
	}{
		{
			name: "path",
			args: []string{d("hello.service")},
			want: []unitRef{{Arg: d("hello.service"), Name: "hello.service", Path: d("hello.service"), File: "hello"}},
		},
		{
			name: "file without unit type is a service",
			args: []string{d("plain")},
			want: []unitRef{{Arg: d("plain"), Name: "plain.service", Path: d("plain"), File: "plain file"}},
		},
		{
			name: "name of a file in the current directory",
			args: []string{"local.service"},
			want: []unitRef{{Arg: "local.service", Name: "local.service", Path: "local.service", File: "local"}},
		},
		{
			name: "short name of a file in the current directory",
			args: []string{"noext"},
			want: []unitRef{{Arg: "noext", Name: "noext.service", Path: "noext.service", File: "noext"}},
		},
		{
			name: "name of a cluster unit",
			args: []string{"remote", "web@3"},
			want: []unitRef{{Arg: "remote", Name: "remote.service"}, {Arg: "web@3", Name: "web@3.service"}},
		},
		{
			name: "instance path reads its template",
			args: []string{d("sub/web@2.service")},
			want: []unitRef{{Arg: d("sub/web@2.service"), Name: "web@2.service", Path: d("sub/web@.service"), File: "web template"}},
		},
		{
			name: "repeated units once",
			args: []string{d("hello.service"), d("hello.service"), "x", "x.service"},
			want: []unitRef{
				{Arg: d("hello.service"), Name: "hello.service", Path: d("hello.service"), File: "hello"},
				{Arg: "x", Name: "x.service"},
			},
		},
		{name: "missing path", args: []string{d("nope.service")}, wantErr: "unit file " + d("nope.service") + " not found"},
		{name: "missing instance path", args: []string{d("other/db@1.service")}, wantErr: "nor its template " + d("other/db@.service")},
		{name: "directory", args: []string{"dir.service"}, wantErr: "dir.service is a directory"},
		{name: "empty file", args: []string{"empty.service"}, wantErr: "empty.service is empty"},
		{name: "two files for one unit", args: []string{d("hello.service"), d("sub/hello.service")}, wantErr: "both name unit hello.service"},
		{name: "empty argument", args: []string{""}, wantErr: "empty unit name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readUnitArgs(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("readUnitArgs(%q) error = %v, want %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("readUnitArgs(%q): %v", tc.args, err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("readUnitArgs(%q) = %+v, want %+v", tc.args, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("readUnitArgs(%q)[%d] = %+v, want %+v", tc.args, i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestNameArgs(t *testing.T) {
	got := strings.Join(nameArgs([]string{"a", "units/a.service", "b.socket", "dir/c@1"}), " ")
	if want := "a.service b.socket c@1.service"; got != want {
		t.Errorf("nameArgs = %q, want %q", got, want)
	}
}

func TestLookupNames(t *testing.T) {
	refs := []unitRef{
		{Name: "a.service"},
		{Name: "web@1.service"},
		{Name: "web@2.service"},
		{Name: "api@1.service", Path: "api@.service", File: "x"},
	}
	got := strings.Join(lookupNames(refs), " ")
	if want := "a.service web@1.service web@.service web@2.service api@1.service"; got != want {
		t.Errorf("lookupNames = %q, want %q", got, want)
	}
}
