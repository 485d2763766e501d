package unit

import (
	"strings"
	"testing"
)

const hashBase = `[Unit]
Description=Web server

[Service]
ExecStart=/bin/web --port 80 --name "a  b"
Environment=A=1 "B=x  y"
Restart=always

[X-Fleet]
Conflicts=web*.service
`

func TestHashIgnoresFormatting(t *testing.T) {
	base := mustParse(t, "web.service", hashBase)
	same := map[string]string{
		"comments and blank lines": "# The web server.\n\n; another comment\n" + strings.ReplaceAll(hashBase, "\n[", "\n# section\n\n\n["),
		"trailing spaces":          strings.ReplaceAll(hashBase, "\n", "   \n"),
		"spaces around =":          strings.ReplaceAll(hashBase, "Restart=always", "Restart  =   always"),
		"leading spaces":           strings.ReplaceAll(hashBase, "\nRestart=", "\n    Restart="),
		"spaces between words":     strings.ReplaceAll(hashBase, "--port 80", "--port    80"),
		"line continuation":        strings.ReplaceAll(hashBase, "/bin/web --port 80", "/bin/web \\\n    --port 80"),
		"CRLF line endings":        strings.ReplaceAll(hashBase, "\n", "\r\n"),
		"reordered sections": `[X-Fleet]
Conflicts=web*.service
[Service]
ExecStart=/bin/web --port 80 --name "a  b"
Environment=A=1 "B=x  y"
Restart=always
[Unit]
Description=Web server
`,
		"split section": `[Service]
ExecStart=/bin/web --port 80 --name "a  b"
[Unit]
Description=Web server
[Service]
Environment=A=1 "B=x  y"
Restart=always
[X-Fleet]
Conflicts=web*.service
`,
		"deprecated spelling": strings.ReplaceAll(hashBase, "Conflicts=", "X-Conflicts="),
		"quoted fleet value":  strings.ReplaceAll(hashBase, "Conflicts=web*.service", `Conflicts="web*.service"`),
		"no final newline":    strings.TrimSuffix(hashBase, "\n"),
	}
	for desc, data := range same {
		f := mustParse(t, "web.service", data)
		if f.Hash != base.Hash {
			t.Errorf("Parse(%q).Hash = %s, want %s as for the original (%s does not change the meaning)", data, f.Hash, base.Hash, desc)
		}
	}
	// The hash depends on the content, not the name.
	if f := mustParse(t, "other.service", hashBase); f.Hash != base.Hash {
		t.Errorf("Parse(other.service).Hash = %s, want %s as for web.service", f.Hash, base.Hash)
	}
}

func TestHashChangesWithMeaning(t *testing.T) {
	base := mustParse(t, "web.service", hashBase)
	changes := map[string]string{
		"argument":             strings.ReplaceAll(hashBase, "--port 80", "--port 81"),
		"space inside quotes":  strings.ReplaceAll(hashBase, `"a  b"`, `"a b"`),
		"space inside env":     strings.ReplaceAll(hashBase, `"B=x  y"`, `"B=x y"`),
		"extra option":         hashBase + "Global=true\n",
		"description":          strings.ReplaceAll(hashBase, "Web server", "Web  server!"),
		"ignore-failure":       strings.ReplaceAll(hashBase, "ExecStart=/bin/", "ExecStart=-/bin/"),
		"unused option":        strings.ReplaceAll(hashBase, "[Service]\n", "[Service]\nLimitNOFILE=4096\n"),
		"install section":      hashBase + "[Install]\nWantedBy=multi-user.target\n",
		"fleet value":          strings.ReplaceAll(hashBase, "web*.service", "api*.service"),
		"option moved section": strings.ReplaceAll(strings.ReplaceAll(hashBase, "Restart=always\n", ""), "[X-Fleet]", "[X-Fleet]\nRole=always"),
	}
	seen := map[string]string{base.Hash: "original"}
	for desc, data := range changes {
		f := mustParse(t, "web.service", data)
		if prev, ok := seen[f.Hash]; ok {
			t.Errorf("Parse(%q).Hash = %s, the same as for the %s; want a new hash (%s changes the meaning)", data, f.Hash, prev, desc)
		}
		seen[f.Hash] = desc
	}
}

func TestShortHash(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0123456789abcdef0123456789abcdef01234567", "0123456"},
		{"0123456", "0123456"},
		{"abc", "abc"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := ShortHash(tt.in); got != tt.want {
			t.Errorf("ShortHash(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
