package docsrun

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	md := "# T\n<!-- docs: env dev -->\n\n```sh\necho one   # exits 3: because\n```\n\n" +
		"<!-- docs: skip needs real hosts -->\n```sh\nrm -rf /\n```\n\n```yaml\nnot: run\n```\n" +
		"```sh\ncat > f <<'U'\nx # exits 1\nU\nflotilla journal -f x  # follow (Ctrl-C to stop)\n" +
		"curl -X PUT \\\n  localhost   # exits 22\necho '# exits 9'\n```\n"
	f, err := Parse(strings.NewReader(md))
	if err != nil {
		t.Fatal(err)
	}
	if f.Env != "dev" || len(f.Blocks) != 3 {
		t.Fatalf("Parse = env %q, %d blocks; want dev, 3", f.Env, len(f.Blocks))
	}
	want := []Block{
		{Line: 4, Script: "docs_exits 3 echo one   # exits 3: because\n"},
		{Line: 9, Script: "rm -rf /\n", Skip: "needs real hosts"},
		{Line: 16, Script: "cat > f <<'U'\nx # exits 1\nU\ndocs_follow flotilla journal -f x  # follow (Ctrl-C to stop)\n" +
			"docs_exits 22 curl -X PUT \\\n  localhost   # exits 22\necho '# exits 9'\n"},
	}
	for i, b := range f.Blocks {
		if b != want[i] {
			t.Errorf("block %d = %+v\nwant %+v", i, b, want[i])
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ md, want string }{
		{"<!-- docs: skip -->\n```sh\nx\n```\n", "needs a reason"},
		{"<!-- docs: env prod -->\n", "unknown env"},
		{"<!-- docs: run -->\n", "unknown mark"},
		{"```sh\nx\n", "never closed"},
		{"<!-- docs: skip why -->\n```yaml\nx\n```\n", "not sh"},
		{"<!-- docs: interrupt -->\n```sh\nx\n```\n", "needs the file's env dev"},
	} {
		if _, err := Parse(strings.NewReader(c.md)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", c.md, err, c.want)
		}
	}
}
