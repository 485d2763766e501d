package unit

import (
	"errors"
	"strings"
	"testing"

	sdunit "github.com/coreos/go-systemd/v22/unit"
)

func FuzzParse(f *testing.F) {
	seeds := []struct{ name, data string }{
		{"a.service", minimal},
		{"web.service", hashBase},
		{"web@.service", webTemplate},
		{"web@1.service", webTemplate},
		{"a.service", "[Service]\nExecStart=-@/bin/sh sh -c 'echo \"$X\" \\x41' ; /bin/b\nType=oneshot\nEnvironment=\"A=1 2\" B=\\u00e9\n"},
		{"a.service", "[Service]\r\nExecStart=/bin/a \\\r\n  b\r\n# c \\\nx\n[X-Fleet]\nX-Conflicts=a*\nGlobal=yes\n"},
		{"a.service", "[Unit]\nStartLimitIntervalSec=1min 30s\nStartLimitBurst=0\n[Service]\nExecStart=/bin/a\nCPUQuota=12.5%\nMemoryMax=1.5G\nTimeoutSec=infinity\n"},
		{"a.service", "[X-Flet]\n[Service]\nExecStrat=x\n"},
		{"a.timer", "[Timer]\nOnCalendar=daily\n"},
		{"db@2.service", "[Service]\nExecStart=/bin/db %i\n[X-Fleet]\nConflicts=db@*.service\nMachineMetadata=disk=ssd\nMachineMetadata=\"region=eu\" rack=%i\n"},
		{"a.service", "[Service]\nExecStart=/bin/a\n[X-Fleet]\nX-ConditionMachineOf=b.service\nX-ConditionMachineID=m1\nSingleton=true\nLostAfter=30s\nRole=batch\nPlacement=binpack\n"},
		{"a.service", "[Unit]\nDescription=  spaced   out  \nAfter=b.service c.service\n[Service]\nExecStart=/bin/a \"x  y\"   z\n[Install]\nWantedBy=multi-user.target\n[Unit]\nRequires=b.service\n"},
	}
	for _, s := range seeds {
		f.Add(s.name, []byte(s.data))
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		file, err := Parse(name, data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse(%q, %q) = %v, want an *Error", name, data, err)
			}
			checkParsers(t, data)
			return
		}
		if len(file.Hash) != 40 || strings.Trim(file.Hash, "0123456789abcdef") != "" {
			t.Fatalf("Parse(%q, %q).Hash = %q, want 40 hex digits", name, data, file.Hash)
		}
		again, err := Parse(name, []byte(file.Raw))
		if err != nil || again.Hash != file.Hash {
			t.Fatalf("Parse(%q, Raw) = %v, %v; want hash %s again", name, again, err, file.Hash)
		}
		// The canonical form (what the hash is of) is itself a unit file
		// that parses to the same hash, and is its own canonical form.
		p, err := parse(name, data)
		if err != nil {
			t.Fatalf("parse(%q, %q) = %v after Parse accepted it", name, data, err)
		}
		canon := canonical(p.opts)
		fromCanon, err := parse(name, []byte(canon))
		if err != nil || fromCanon.f.Hash != file.Hash {
			t.Fatalf("Parse(%q, canonical form %q) = %v; want hash %s again (from %q)", name, canon, err, file.Hash, data)
		}
		if again := canonical(fromCanon.opts); again != canon {
			t.Fatalf("the canonical form of %q is %q, but its own canonical form is %q", data, canon, again)
		}
		if _, err := ParseStored(name, file.Raw); err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("ParseStored(%q, Raw) = %v, want nil or an *Error", name, err)
			}
		}
		if TypeOf(name) == "service" && file.Container == nil && len(file.Service.ExecStart) == 0 && file.Service.Type != "oneshot" {
			t.Fatalf("Parse(%q, %q) accepted a service without ExecStart=", name, data)
		}
		if IsTemplate(name) {
			if _, err := Instantiate(file, "x"); err != nil {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("Instantiate(%q, x) = %v, want an *Error", name, err)
				}
			}
		}
		checkParsers(t, data)
	})
}

// checkParsers checks that whatever scan accepts, go-systemd parses into the
// same options, so that every option gets its line number.
func checkParsers(t *testing.T, data []byte) {
	t.Helper()
	if len(data) > MaxFileSize {
		return
	}
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	if checkText(text) != nil {
		return
	}
	found, _, err := scan(text)
	if err != nil {
		return
	}
	raw, err := sdunit.DeserializeOptions(strings.NewReader(text))
	if err != nil {
		t.Fatalf("scan(%q) accepted what go-systemd rejects: %v", text, err)
	}
	lines := optionLines(found, raw)
	for i, l := range lines {
		if l == 0 {
			t.Fatalf("scan(%q) and go-systemd disagree on option %d (%+v); scan found %+v", text, i, raw[i], found)
		}
	}
}
