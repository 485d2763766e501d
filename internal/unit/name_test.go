package unit

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	valid := []string{
		"web.service",
		"web@.service",
		"web@1.service",
		"a.b.c.service",
		"x:y_z-1\\x2d.service",
		"web@a.b:c_d-e\\x2d.service",
		strings.Repeat("a", MaxNameLength-len(".service")) + ".service",
	}
	for _, name := range valid {
		if err := ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", name, err)
		}
	}

	invalid := []struct {
		name string
		want string // in the error message
	}{
		{"", "empty"},
		{strings.Repeat("a", MaxNameLength-len(".service")+1) + ".service", "256 bytes long; the maximum is 255"},
		{"web", `missing a unit type suffix such as ".service"`},
		{"web.device", `unit type ".device" is not supported: Flotilla schedules ".service", ".socket"`},
		{"web.slice", `unit type ".slice" is not supported`},
		{"web.scope", `unit type ".scope" is not supported`},
		{"web.Timer", `the suffix must be ".timer", in lower case`},
		{"web.txt", `unknown unit type ".txt"`},
		{"web.SERVICE", "in lower case"},
		{"web.", `unknown unit type "."`},
		{".service", "empty name"},
		{"@.service", `must not start with "@"`},
		{"@1.service", `must not start with "@"`},
		{"web@a@b.service", `more than one "@"`},
		{"a/b.service", `must not contain "/"`},
		{"../web.service", `must not contain "/"`},
		{"web app.service", `character ' ' at offset 3`},
		{"wéb.service", `character 'é' at offset 1`},
		{"web@a b.service", `character ' ' at offset 5`},
		{"web$.service", `character '$'`},
	}
	for _, tt := range invalid {
		err := ValidateName(tt.name)
		var e *Error
		if !errors.As(err, &e) || e.Field != "name" {
			t.Errorf("ValidateName(%q) = %v, want an *Error with Field \"name\"", tt.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ValidateName(%q) = %v, want an error containing %q", tt.name, err, tt.want)
		}
		if tt.name != "" && !strings.Contains(err.Error(), quote(tt.name)) {
			t.Errorf("ValidateName(%q) = %v, want the error to name the unit", tt.name, err)
		}
	}
}

func TestNameParts(t *testing.T) {
	tests := []struct {
		name                 string
		template, instance   bool
		templateOf           string
		prefix, instanceName string
	}{
		{"web.service", false, false, "", "web", ""},
		{"web@.service", true, false, "", "web", ""},
		{"web@1.service", false, true, "web@.service", "web", "1"},
		{"a.b@c.d.service", false, true, "a.b@.service", "a.b", "c.d"},
		{"web@1.timer", false, true, "web@.timer", "web", "1"},
		{"web@1.device", false, false, "", "", ""},
		{"bad name@1.service", false, false, "", "", ""},
		{"", false, false, "", "", ""},
	}
	for _, tt := range tests {
		if got := IsTemplate(tt.name); got != tt.template {
			t.Errorf("IsTemplate(%q) = %v, want %v", tt.name, got, tt.template)
		}
		if got := IsInstance(tt.name); got != tt.instance {
			t.Errorf("IsInstance(%q) = %v, want %v", tt.name, got, tt.instance)
		}
		if got := TemplateOf(tt.name); got != tt.templateOf {
			t.Errorf("TemplateOf(%q) = %q, want %q", tt.name, got, tt.templateOf)
		}
		if got := Prefix(tt.name); got != tt.prefix {
			t.Errorf("Prefix(%q) = %q, want %q", tt.name, got, tt.prefix)
		}
		if got := Instance(tt.name); got != tt.instanceName {
			t.Errorf("Instance(%q) = %q, want %q", tt.name, got, tt.instanceName)
		}
	}
}
