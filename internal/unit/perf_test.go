package unit

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPerfScratch(t *testing.T) {
	mk := func(prefix, line string) []byte {
		var b strings.Builder
		b.WriteString(prefix)
		for b.Len()+len(line) < MaxFileSize {
			b.WriteString(line)
		}
		return []byte(b.String())
	}
	cases := map[string][]byte{
		"spaces":      mk("", " "),
		"newlines":    mk("", "\n"),
		"comments":    mk("", "#\n"),
		"commentcont": mk("[Service]\n", "# \\\n"),
		"conflicts":   mk("[Service]\nExecStart=/bin/a\n[X-Fleet]\n", "Conflicts=a b c d e f g h i j k l m n o p q r s t u v w x y z\n"),
		"machineof":   mk("[Service]\nExecStart=/bin/a\n[X-Fleet]\nConflicts=z*\n", "MachineOf=a.service\n"),
		"env":         mk("[Service]\nExecStart=/bin/a\n", "Environment=A=1 B=2 C=3 D=4\n"),
		"exec":        mk("[Service]\nType=oneshot\n", "ExecStart=/bin/a ; /bin/b ; /bin/c\n"),
		"cont":        mk("[Service]\nExecStart=/bin/a \\\n", "b \\\n"),
		"sections":    mk("", "[Service]\n"),
		"brackets":    mk("", "["),
		"eq":          mk("[Service]\nEnvironment=", "="),
	}
	var u strings.Builder
	u.WriteString("[Service]\nExecStart=/bin/a\n[X-Fleet]\n")
	for i := 0; u.Len() < MaxFileSize-200; i++ {
		if i%2 == 0 {
			u.WriteString("MachineOf=m" + strconv.Itoa(i) + ".service\n")
		} else {
			u.WriteString("Conflicts=c" + strconv.Itoa(i) + "*\n")
		}
	}
	cases["unique"] = []byte(u.String())
	for name, data := range cases {
		start := time.Now()
		_, err := Parse("a.service", data)
		t.Logf("%s: %v (%.200v)", name, time.Since(start), err)
	}
}

