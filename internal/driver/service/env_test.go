package service

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

func TestExpandArgv(t *testing.T) {
	env := NewEnviron()
	env.Add([]string{"ONE=1", "WORDS=a  b\t'c d'", "SPACED=x y", "EMPTY="})
	tests := []struct {
		argv []string
		want []string
	}{
		{[]string{"/bin/echo", "plain"}, []string{"/bin/echo", "plain"}},
		{[]string{"/bin/echo", "$ONE"}, []string{"/bin/echo", "1"}},
		{[]string{"/bin/echo", "$WORDS"}, []string{"/bin/echo", "a", "b", "c d"}},
		{[]string{"/bin/echo", "${WORDS}"}, []string{"/bin/echo", "a  b\t'c d'"}},
		{[]string{"/bin/echo", "--x=${SPACED}!"}, []string{"/bin/echo", "--x=x y!"}},
		{[]string{"/bin/echo", "$UNSET", "z"}, []string{"/bin/echo", "z"}},
		{[]string{"/bin/echo", "$EMPTY", "z"}, []string{"/bin/echo", "z"}},
		{[]string{"/bin/echo", "${UNSET}"}, []string{"/bin/echo", ""}},
		{[]string{"/bin/echo", "$$ONE"}, []string{"/bin/echo", "$ONE"}},
		{[]string{"/bin/echo", "cost: $$5"}, []string{"/bin/echo", "cost: $5"}},
		{[]string{"/bin/echo", "a$ONE"}, []string{"/bin/echo", "a$ONE"}},
		{[]string{"/bin/echo", "${ONE"}, []string{"/bin/echo", "${ONE"}},
		{[]string{"/bin/echo", "x$"}, []string{"/bin/echo", "x$"}},
		{[]string{"$ONE", "${ONE}"}, []string{"$ONE", "1"}}, // the program is never expanded
	}
	for _, tt := range tests {
		if got := ExpandArgv(tt.argv, env); !slices.Equal(got, tt.want) {
			t.Errorf("ExpandArgv(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}

func TestSplitWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  ", nil},
		{"a b", []string{"a", "b"}},
		{" a\t b\n", []string{"a", "b"}},
		{`"a b" c`, []string{"a b", "c"}},
		{`'a "b"' c`, []string{`a "b"`, "c"}},
		{`a\ b`, []string{"a b"}},
		{`x"y z"w`, []string{"xy zw"}},
		{`''`, []string{""}},
		{`"unterminated x`, []string{"unterminated x"}},
	}
	for _, tt := range tests {
		if got := splitWords(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("splitWords(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseEnvFile(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"simple", "A=1\nB=2\n", []string{"A=1", "B=2"}},
		{"no final newline", "A=1", []string{"A=1"}},
		{"crlf", "A=1\r\nB=2\r\n", []string{"A=1", "B=2"}},
		{"comments and blanks", "# c\n; c\n\n  \nA=1\n", []string{"A=1"}},
		{"spaces", "  A = 1 2  \n", []string{"A=1 2"}},
		{"empty value", "A=\n", []string{"A="}},
		{"double quotes", `A="x  y "` + "\n", []string{"A=x  y "}},
		{"double quote escapes", `A="q\"b\\s\$d\n"` + "\n", []string{`A=q"b\s$d\n`}},
		{"single quotes", `A='$x "y" \z'` + "\n", []string{`A=$x "y" \z`}},
		{"quotes glued", `A="a"'b'c` + "\n", []string{"A=abc"}},
		{"multi-line quoted", "A=\"one\ntwo\"\nB=3\n", []string{"A=one\ntwo", "B=3"}},
		{"continuation", "A=one\\\ntwo\nB=3\n", []string{"A=onetwo", "B=3"}},
		{"escaped space kept", "A=x\\ \n", []string{"A=x "}},
		{"invalid names skipped", "1A=x\nA-B=y\nexport C=z\nnoequals\nD=ok\n", []string{"D=ok"}},
		{"equals in value", "A=b=c\n", []string{"A=b=c"}},
	}
	for _, tt := range tests {
		if got := parseEnvFile([]byte(tt.in)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: parseEnvFile(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

func TestUnitEnviron(t *testing.T) {
	dir := t.TempDir()
	f1 := filepath.Join(dir, "one.env")
	f2 := filepath.Join(dir, "two.env")
	os.WriteFile(f1, []byte("B=file1\nC=file1\n"), 0o644)
	os.WriteFile(f2, []byte("C=file2\n"), 0o644)
	svc := &unit.Service{
		Environment: []string{"A=env", "B=env", "PATH=/opt/bin"},
		EnvironmentFiles: []unit.EnvFile{
			{Path: f1},
			{Path: filepath.Join(dir, "missing.env"), Optional: true},
			{Path: f2},
		},
	}
	env, err := UnitEnviron([]string{"PATH=" + DefaultPath, "HOME=/root"}, svc)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=/opt/bin", "HOME=/root", "A=env", "B=file1", "C=file2"}
	if got := env.List(); !slices.Equal(got, want) {
		t.Errorf("environment = %q, want %q", got, want)
	}

	svc.EnvironmentFiles = append(svc.EnvironmentFiles, unit.EnvFile{Path: filepath.Join(dir, "required.env")})
	if _, err := UnitEnviron(nil, svc); err == nil || !strings.Contains(err.Error(), "required.env") {
		t.Errorf("UnitEnviron with a missing required file: error %v, want one naming required.env", err)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "data"), nil, 0o644)
	if got, err := LookPath("tool", "/nonexistent:"+dir); err != nil || got != exe {
		t.Errorf("LookPath(tool) = %q, %v; want %q", got, err, exe)
	}
	if got, err := LookPath("./rel/x", dir); err != nil || got != "./rel/x" {
		t.Errorf("LookPath(./rel/x) = %q, %v; want it unchanged", got, err)
	}
	if _, err := LookPath("data", dir); err == nil {
		t.Error("LookPath found a file that is not executable")
	}
	if _, err := LookPath("tool", "relative:"+filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), `"tool"`) {
		t.Errorf("LookPath(tool) in the wrong PATH: error %v, want one naming the program", err)
	}
}

// TestReadEnvFileRefusesSpecialFiles: an EnvironmentFile= that is a FIFO
// without a writer, an endless device or a huge file is refused at once
// with an error naming it, instead of blocking or eating memory.
func TestReadEnvFileRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "wedge.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.env")
	if err := os.WriteFile(big, bytes.Repeat([]byte("A=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n"), (maxEnvFileBytes/48)+10), 0o644); err != nil {
		t.Fatal(err)
	}
	limit := filepath.Join(dir, "limit.env")
	if err := os.WriteFile(limit, append(bytes.Repeat([]byte("#"), maxEnvFileBytes-4), "\nA=1"...), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, want string
	}{
		{fifo, "is a FIFO, not a regular file"},
		{"/dev/zero", "is a character device, not a regular file"},
		{dir, "is a directory, not a regular file"},
		{big, "bytes, over the limit of 1048576"},
	}
	for _, tt := range tests {
		done := make(chan error, 1)
		go func() { _, err := readEnvFile(tt.path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("readEnvFile(%s): error %v, want one naming the path and saying %q", tt.path, err, tt.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("readEnvFile(%s) blocked", tt.path)
		}
	}
	// The FIFO is refused through UnitEnviron too, "-" or not: only a
	// missing file is optional.
	svc := &unit.Service{EnvironmentFiles: []unit.EnvFile{{Path: fifo, Optional: true}}}
	if _, err := UnitEnviron(nil, svc); err == nil || !strings.Contains(err.Error(), "EnvironmentFile=: "+fifo) {
		t.Errorf("UnitEnviron with a FIFO: error %v, want one naming EnvironmentFile= and the path", err)
	}
	// A file of exactly the limit is read.
	data, err := readEnvFile(limit)
	if err != nil || len(data) != maxEnvFileBytes || !slices.Equal(parseEnvFile(data), []string{"A=1"}) {
		t.Errorf("readEnvFile of a %d-byte file: %d bytes, %v; want it read whole", maxEnvFileBytes, len(data), err)
	}
}
