package machine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstance(t *testing.T) {
	dir := t.TempDir()
	a, err := Instance(dir)
	if err != nil || !validInstance(a) {
		t.Fatalf("Instance(new dir) = %q, %v; want 32 hex digits", a, err)
	}
	b, err := Instance(dir)
	if err != nil || b != a {
		t.Fatalf("Instance(same dir) = %q, %v; want %q again", b, err, a)
	}
	if c, err := Instance(t.TempDir()); err != nil || c == a {
		t.Fatalf("Instance(another dir) = %q, %v; want another ID than %q", c, err, a)
	}
	if err := os.WriteFile(filepath.Join(dir, InstanceFile), []byte("not hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Instance(dir); err == nil || !strings.Contains(err.Error(), "not an instance ID") {
		t.Fatalf("Instance(dir with a bad file) error = %v, want one naming the file's content", err)
	}
}
