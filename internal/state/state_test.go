package state

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"path"
	"testing"
	"time"
	"unsafe"

	apiv1 "github.com/flotilla/flotilla/api"
)

func sample(units, machines int) *Snapshot {
	r := rand.New(rand.NewPCG(1, 2))
	s := &Snapshot{Generation: 7, Revision: 1234, Leader: "m0"}
	for i := range machines {
		s.Machines = append(s.Machines, apiv1.Machine{ID: fmt.Sprintf("m%d", i), IP: "10.0.0.1",
			Metadata: map[string]string{"role": "web", "az": fmt.Sprint(i % 3)}, Leader: i == 0, Units: units / machines,
			Capacity: apiv1.Resources{CPUPercent: 400, MemoryBytes: 8 << 30}, Free: apiv1.Resources{CPUPercent: 100}})
		if i%2 == 0 { // half of them upgraded
			s.Machines[i].Version, s.Machines[i].Protocol = "0.2.0+abc1234", 2
		}
		if i%3 != 2 { // a connectedAt, in UTC and with an offset (none: a machine patched while away)
			zone := map[bool]*time.Location{true: time.UTC, false: time.FixedZone("x", 5*3600+1800)}[i%3 == 0]
			s.Machines[i].ConnectedAt = time.Date(2026, 11, 29, 6, 1, 2, i*1000, zone)
		}
	}
	states := []string{"active", "failed", "inactive", ""}
	for i := range units {
		u := apiv1.StateUnit{Name: fmt.Sprintf("web@%06d.service", i), Hash: "0123456789abcdef0123456789abcdef01234567",
			DesiredState: "launched", Machine: fmt.Sprintf("m%d", r.IntN(machines)), Load: "loaded", Active: states[r.IntN(4)], Sub: "running"}
		if u.Active == "active" {
			u.Health = []string{"healthy", "unhealthy", "unknown"}[i%3]
		}
		if i%50 == 0 {
			u.Machine, u.Reason, u.Active = "", `needs 4096M memory, largest free is 1024M <"quoted" & 'odd'> é `+"\u2028\x01\xff", ""
		}
		if i%77 == 0 {
			u.Global, u.Machine = true, ""
		}
		if i%13 == 0 {
			u.Singleton = true
		}
		if i%17 == 0 {
			u.LostAfter = "1m30s"
		}
		s.Units = append(s.Units, NewUnit(u))
	}
	return s
}

// TestAppendStateMatchesEncodingJSON: the hand-written encoder writes
// exactly what encoding/json writes.
func TestAppendStateMatchesEncodingJSON(t *testing.T) {
	s := sample(2000, 10)
	for _, since := range []string{"", "2024-05-01T12:02:03Z"} { // a degraded leader's state says since when
		s.EtcdUnreachableSince = since
		st := s.view(s.Units, len(s.Units), "web@000010.service")
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(st); err != nil {
			t.Fatal(err)
		}
		got := AppendState(nil, &st)
		if !bytes.Equal(got, want.Bytes()) {
			for i := range min(len(got), want.Len()) {
				if got[i] != want.Bytes()[i] {
					t.Fatalf("AppendState differs from encoding/json at byte %d:\ngot  %q\nwant %q", i, got[max(0, i-80):min(len(got), i+80)], want.Bytes()[max(0, i-80):min(want.Len(), i+80)])
				}
			}
			t.Fatalf("AppendState length %d, encoding/json %d", len(got), want.Len())
		}
	}
}

func TestSnapshotJSONAndGzip(t *testing.T) {
	s := sample(100, 3)
	var st apiv1.State
	if err := json.Unmarshal(s.JSON(), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Units) != 100 || st.Total != 100 || st.Generation != 7 || s.ETag() != `"0.7"` {
		t.Errorf("decoded state: %d units, total %d, generation %d, etag %s", len(st.Units), st.Total, st.Generation, s.ETag())
	}
	// The whole document, encoded from the compact units, is what
	// encoding/json writes of their view.
	var want bytes.Buffer
	if err := json.NewEncoder(&want).Encode(s.Select(Filter{})); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.JSON(), want.Bytes()) {
		t.Errorf("JSON() differs from encoding/json of the view:\n%.300s\n%.300s", s.JSON(), want.Bytes())
	}
	zr, err := gzip.NewReader(bytes.NewReader(s.Gzip()))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if !bytes.Equal(plain, s.JSON()) {
		t.Error("Gzip does not decompress to JSON")
	}
}

// TestETag: a leader's snapshot is named by term and generation, the
// durable record read from etcd (no term, no generation) by its revision.
func TestETag(t *testing.T) {
	for _, c := range []struct {
		s    *Snapshot
		want string
	}{
		{&Snapshot{Term: 12, Generation: 345, Revision: 9}, `"12.345"`},
		{&Snapshot{Revision: 42}, `"etcd.42"`},
		{&Snapshot{Revision: 43}, `"etcd.43"`},
	} {
		if got := c.s.ETag(); got != c.want {
			t.Errorf("ETag of term %d generation %d revision %d = %s, want %s", c.s.Term, c.s.Generation, c.s.Revision, got, c.want)
		}
	}
}

func units(views ...apiv1.StateUnit) []Unit {
	out := make([]Unit, len(views))
	for i, v := range views {
		out[i] = NewUnit(v)
	}
	return out
}

func TestSelect(t *testing.T) {
	s := &Snapshot{Units: units(
		apiv1.StateUnit{Name: "a.service", DesiredState: "launched", Machine: "m1", Active: "active"},
		apiv1.StateUnit{Name: "b.service", DesiredState: "launched", Machine: "m2", Active: "failed"},
		apiv1.StateUnit{Name: "c.service", DesiredState: "launched", Reason: "no machines available"},
		apiv1.StateUnit{Name: "d.service", DesiredState: "inactive"},
		apiv1.StateUnit{Name: "web@1.service", DesiredState: "loaded", Machine: "m1", Active: "inactive"},
	)}
	names := func(st apiv1.State) string {
		var out []string
		for _, u := range st.Units {
			out = append(out, u.Name)
		}
		return fmt.Sprintf("%v total=%d next=%q", out, st.Total, st.Next)
	}
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Filter{}, `[a.service b.service c.service d.service web@1.service] total=5 next=""`},
		{Filter{Machine: "m1"}, `[a.service web@1.service] total=2 next=""`},
		{Filter{Unit: "web@*"}, `[web@1.service] total=1 next=""`},
		{Filter{State: "failed"}, `[b.service] total=1 next=""`},
		{Filter{State: "unplaced"}, `[c.service] total=1 next=""`},
		{Filter{State: "inactive"}, `[d.service web@1.service] total=2 next=""`},
		{Filter{Limit: 2}, `[a.service b.service] total=5 next="b.service"`},
		{Filter{Limit: 2, After: "b.service"}, `[c.service d.service] total=3 next="d.service"`},
		{Filter{Limit: 2, After: "d.service"}, `[web@1.service] total=1 next=""`},
	} {
		if got := names(s.Select(tc.f)); got != tc.want {
			t.Errorf("Select(%+v) = %s, want %s", tc.f, got, tc.want)
		}
	}
}

// BenchmarkEncode compares the hand-written encoder with encoding/json on
// the /v1/state document of 100,000 units on 1,000 machines.
func BenchmarkEncode(b *testing.B) {
	s := sample(100_000, 1000)
	st := s.view(s.Units, len(s.Units), "")
	b.Run("AppendState", func(b *testing.B) {
		buf := make([]byte, 0, 32<<20)
		for b.Loop() {
			buf = AppendState(buf[:0], &st)
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encoding/json", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			json.NewEncoder(&buf).Encode(st)
		}
		b.SetBytes(int64(buf.Len()))
	})
}

// BenchmarkSelectPage is one page of 1,000 units from the middle of a
// million-unit state: unfiltered (what paging through everything costs),
// and filtered by a glob (every unit after the page is still counted).
func BenchmarkSelectPage(b *testing.B) {
	s := sample(1_000_000, 10_000)
	after := s.Units[len(s.Units)/2].Name
	for _, bc := range []struct {
		name string
		f    Filter
	}{
		{"plain", Filter{Limit: 1000, After: after}},
		{"glob", Filter{Limit: 1000, After: after, Unit: "*.service"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if st := s.Select(bc.f); len(st.Units) != 1000 {
					b.Fatalf("a page of %d units", len(st.Units))
				}
			}
		})
	}
}

// BenchmarkPage is what GET /v1/state?limit=1000 costs on a state of
// 100,000 units on 10,000 machines: a page of 1,000 units, plain and
// gzipped, every machine included.
func BenchmarkPage(b *testing.B) {
	s := sample(100_000, 10_000)
	for _, gz := range []bool{false, true} {
		b.Run(fmt.Sprintf("gzip=%v", gz), func(b *testing.B) {
			n := 0
			for b.Loop() {
				n = pageBytes(s, Filter{Limit: 1000}, gz)
			}
			b.SetBytes(int64(n))
		})
	}
}

func pageBytes(s *Snapshot, f Filter, gz bool) int {
	head, rest := s.Page(f, gz)
	return len(head) + len(rest)
}

// TestPage: a page's head and rest are the view's document, and gzipped
// they are one gzip stream of it.
func TestPage(t *testing.T) {
	for _, s := range []*Snapshot{sample(500, 7), sample(50, 1), {Generation: 1, EtcdUnreachableSince: "2024-05-01T12:02:03Z"}} {
		for _, f := range []Filter{{Limit: 100}, {Limit: 10, After: "web@000100.service"}, {Unit: "web@0001*"}, {Limit: 5, State: "failed"},
			{Machine: "none"}, {Limit: 1, After: "zzz"}} {
			st := s.Select(f)
			want := AppendState(nil, &st)
			head, rest := s.Page(f, false)
			if got := append(append([]byte{}, head...), rest...); !bytes.Equal(got, want) {
				t.Fatalf("Page(%+v) = %q\nwant %q", f, got, want)
			}
			head, rest = s.Page(f, true)
			zr, err := gzip.NewReader(io.MultiReader(bytes.NewReader(head), bytes.NewReader(rest)))
			if err != nil {
				t.Fatal(err)
			}
			zr.Multistream(false)
			plain, err := io.ReadAll(zr)
			if err != nil || !bytes.Equal(plain, want) {
				t.Fatalf("Page(%+v) gzipped = %q, %v\nwant %q", f, plain, err, want)
			}
		}
	}
}

// TestPageRemembered: a small filtered view of a snapshot is answered
// again from what the first answer encoded (a snapshot never changes), and
// a large one, or one past the memo's bound, is not remembered.
func TestPageRemembered(t *testing.T) {
	s := sample(2000, 10)
	count := Filter{Unit: "web@*", State: "active", Limit: 1}
	for _, gz := range []bool{false, true} {
		_, first := s.Page(count, gz)
		s.Units = s.Units[:10] // a test's change: answers from the memo cannot see it
		_, again := s.Page(count, gz)
		if !bytes.Equal(first, again) {
			t.Fatalf("gzip %v: the same view of a snapshot answered anew:\n%q\n%q", gz, first, again)
		}
		s = sample(2000, 10)
	}
	s = sample(2000, 10)
	if _, rest := s.Page(Filter{Limit: 2000, State: "active"}, false); len(rest) <= maxPageMemo {
		t.Fatalf("a view of 2,000 units is %d bytes: make it larger than the memo's bound", len(rest))
	}
	if len(s.pages) != 0 {
		t.Errorf("a view larger than %d bytes was remembered", maxPageMemo)
	}
	for i := range maxPagesMemod + 5 {
		s.Page(Filter{Unit: fmt.Sprintf("web@%d*", i), Limit: 1}, false)
	}
	if len(s.pages) != maxPagesMemod {
		t.Errorf("%d views remembered, want at most %d", len(s.pages), maxPagesMemod)
	}
}

// TestFilterNames: the shortcuts for plain names and prefixes match what
// path.Match matches.
func TestFilterNames(t *testing.T) {
	names := []string{"web@1.service", "web@.service", "web.service", "web@1.socket", "db@web@1.service", "a/b.service", "web@a/b.service", ""}
	for _, glob := range []string{"web@*", "web@1.service", "web*", "*", "web@?.service", "web@[0-9].service", `web\@1.service`, "web@1.service*", "[", "web@*.service"} {
		match := Filter{Unit: glob}.names()
		for _, name := range names {
			want, _ := path.Match(glob, name)
			if got := match(name); got != want {
				t.Errorf("unit=%q on %q: %v, path.Match says %v", glob, name, got, want)
			}
		}
	}
}

// TestUnitsShare: a snapshot's unit is its name and a pointer (two copies
// of a million-unit snapshot live at once while one is built), and the
// units with the same machine, reason, spec and status share one Shared.
func TestUnitsShare(t *testing.T) {
	if size := unsafe.Sizeof(Unit{}); size != 24 {
		t.Errorf("state.Unit is %d bytes; want 24 (a name and one pointer)", size)
	}
	spec, st := &Spec{Hash: "h", DesiredState: "launched"}, &Status{Active: "active"}
	var sh Sharer
	a := sh.Get(Shared{Machine: "m1", Spec: spec, Status: st})
	b := sh.Get(Shared{Machine: "m2", Spec: spec, Status: st})
	c := sh.Get(Shared{Machine: "m1", Spec: spec, Status: st})
	if a == b || a != c {
		t.Errorf("Get(m1), Get(m2), Get(m1) = %p, %p, %p; want the first and last the same, the second another", a, b, c)
	}
	if d := sh.Get(Shared{Machine: "m1", Spec: spec}); d == a || d.Status != nil {
		t.Errorf("Get without a status = %+v (same as with one: %v)", d, d == a)
	}
}
