package unit

import (
	"reflect"
	"testing"
	"time"
)

func TestParseCheck(t *testing.T) {
	f := mustParse(t, "web.service", minimal+`
[X-Check]
HTTP=http://127.0.0.1:8080/health
TCP=127.0.0.1:8080 [::1]:8080
Exec=/usr/bin/test -f /run/web.ready
Interval=2s
Timeout=500ms
HealthyAfter=10s
UnhealthyAfter=5
StartPeriod=1min 30s
OnUnhealthy=restart
`)
	want := &Check{
		Exec:     []Command{{Argv: []string{"/usr/bin/test", "-f", "/run/web.ready"}}},
		HTTP:     []string{"http://127.0.0.1:8080/health"},
		TCP:      []string{"127.0.0.1:8080", "[::1]:8080"},
		Interval: 2 * time.Second, Timeout: 500 * time.Millisecond, HealthyAfter: 10 * time.Second,
		UnhealthyAfter: 5, StartPeriod: 90 * time.Second, OnUnhealthy: "restart",
	}
	if !reflect.DeepEqual(f.Check, want) {
		t.Errorf("Check = %+v\nwant %+v", f.Check, want)
	}
	if f := mustParse(t, "web.service", minimal); f.Check != nil {
		t.Errorf("a unit without [X-Check] has Check %+v", f.Check)
	}
}

func TestParseCheckDefaults(t *testing.T) {
	f := mustParse(t, "web.service", minimal+"[X-Check]\nTCP=localhost:80\n")
	want := &Check{TCP: []string{"localhost:80"}, Interval: DefaultCheckInterval, Timeout: DefaultCheckTimeout,
		UnhealthyAfter: DefaultUnhealthyAfter, OnUnhealthy: "none"}
	if !reflect.DeepEqual(f.Check, want) {
		t.Errorf("Check = %+v\nwant %+v", f.Check, want)
	}
	// A short interval bounds the default timeout.
	f = mustParse(t, "web.service", minimal+"[X-Check]\nTCP=localhost:80\nInterval=1s\n")
	if f.Check.Timeout != time.Second {
		t.Errorf("Timeout with Interval=1s = %v, want 1s", f.Check.Timeout)
	}
}

// TestParseCheckTemplate: a template's checks keep %i until an instance is
// made, which checks its own port.
func TestParseCheckTemplate(t *testing.T) {
	tmpl := mustParse(t, "web@.service", "[Service]\nExecStart=/bin/web --port 80%i\n[X-Check]\nHTTP=http://127.0.0.1:80%i/\nTCP=127.0.0.1:80%i\n")
	if got := tmpl.Check.HTTP[0]; got != "http://127.0.0.1:80%i/" {
		t.Errorf("the template's HTTP= = %q, want its specifier kept", got)
	}
	f, err := Instantiate(tmpl, "81")
	if err != nil {
		t.Fatal(err)
	}
	if f.Check.HTTP[0] != "http://127.0.0.1:8081/" || f.Check.TCP[0] != "127.0.0.1:8081" {
		t.Errorf("web@81's checks: %+v", f.Check)
	}
	if _, err := Instantiate(tmpl, "x"); err == nil {
		t.Error("web@x checks port 80x, want an error")
	}
}

func TestParseCheckErrors(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       []string
	}{
		{"web.service", "[X-Check]\nInterval=5s\n", []string{"[X-Check]", "nothing to check"}},
		{"web.service", "[X-Check]\nHTTP=ftp://x/\n", []string{"HTTP", "want http:// or https://"}},
		{"web.service", "[X-Check]\nHTTP=http:///x\n", []string{"no host"}},
		{"web.service", "[X-Check]\nHTTP=http://u:p@h/\n", []string{"credentials"}},
		{"web.service", "[X-Check]\nTCP=localhost\n", []string{"TCP", "host:port"}},
		{"web.service", "[X-Check]\nTCP=localhost:70000\n", []string{"not 1 to 65535"}},
		{"web.service", "[X-Check]\nExec=-/bin/false\n", []string{"always pass"}},
		{"web.service", "[X-Check]\nTCP=h:1\nInterval=10ms\n", []string{"Interval", "too often"}},
		{"web.service", "[X-Check]\nTCP=h:1\nInterval=1s\nTimeout=2s\n", []string{"Timeout", "longer than Interval=1s"}},
		{"web.service", "[X-Check]\nTCP=h:1\nTimeout=infinity\n", []string{"finite"}},
		{"web.service", "[X-Check]\nTCP=h:1\nUnhealthyAfter=0\n", []string{"UnhealthyAfter", "1 to 1000"}},
		{"web.service", "[X-Check]\nTCP=h:1\nStartPeriod=infinity\n", []string{"StartPeriod", "finite"}},
		{"web.service", "[X-Check]\nTCP=h:1\nStartPeriod=soon\n", []string{"StartPeriod"}},
		{"web.service", "[X-Check]\nTCP=h:1\nOnUnhealthy=reboot\n", []string{"want none or restart"}},
		{"web.service", "[X-Check]\nTCP=h:1\nIntervl=1s\n", []string{"did you mean Interval="}},
		{"web.socket", "[Socket]\nListenStream=80\n[X-Check]\nTCP=h:1\n", []string{"a .socket unit has no [X-Check] section"}},
	} {
		body := tt.body
		if tt.name == "web.service" {
			body = minimal + body
		}
		_, err := Parse(tt.name, []byte(body))
		checkError(t, "Parse("+tt.body+")", err, tt.want...)
	}
}

// TestCheckChangesHash: the checks are part of the file, so a change of
// them is a new file (a unit replaced with it restarts).
func TestCheckChangesHash(t *testing.T) {
	a := mustParse(t, "web.service", minimal+"[X-Check]\nTCP=h:1\n")
	b := mustParse(t, "web.service", minimal+"[X-Check]\nTCP=h:2\n")
	c := mustParse(t, "web.service", minimal)
	if a.Hash == b.Hash || a.Hash == c.Hash {
		t.Errorf("hashes %s %s %s: want a change of [X-Check] to change the hash", a.Hash, b.Hash, c.Hash)
	}
}
