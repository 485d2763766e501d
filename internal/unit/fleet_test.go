package unit

import (
	"reflect"
	"testing"
	"time"
)

func TestParseMetadata(t *testing.T) {
	tests := []struct {
		in   string
		want map[string]string
	}{
		{"", map[string]string{}},
		{"  ", map[string]string{}},
		{"region=us-east", map[string]string{"region": "us-east"}},
		{"region=us-east,disk=ssd", map[string]string{"region": "us-east", "disk": "ssd"}},
		{" region = us-east , disk=ssd ", map[string]string{"region": "us-east", "disk": "ssd"}},
		{"role=web server", map[string]string{"role": "web server"}},
	}
	for _, tt := range tests {
		got, err := ParseMetadata(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseMetadata(%q) = %v, %v, want %v, nil", tt.in, got, err, tt.want)
		}
	}
	errs := []struct{ in, want string }{
		{"region", `"region" is not a key=value pair`},
		{"=us", "empty key"},
		{"region=", "empty value"},
		{"region=us,region=eu", `duplicate key "region" (region=us and region=eu)`},
		{"a=1,,b=2", `empty entry 2 in "a=1,,b=2"`},
		{"a=1,", "empty entry 2"},
		{",a=1", "empty entry 1"},
		{"a b=1", "may not contain spaces or commas"},
		{"a=b=c", `may not contain "=" or ","`},
	}
	for _, tt := range errs {
		got, err := ParseMetadata(tt.in)
		checkError(t, "ParseMetadata("+quote(tt.in)+")", err, "metadata: ", tt.want)
		if got != nil {
			t.Errorf("ParseMetadata(%q) = %v, want nil with the error", tt.in, got)
		}
	}
}

func TestMetadataRequirements(t *testing.T) {
	f := Fleet{MachineMetadata: []string{"region=us", "region=eu", "disk=ssd", "region=us", "bad"}}
	want := map[string][]string{"region": {"us", "eu"}, "disk": {"ssd"}}
	if got := MetadataRequirements(f); !reflect.DeepEqual(got, want) {
		t.Errorf("MetadataRequirements(%q) = %v, want %v", f.MachineMetadata, got, want)
	}
	if got := MetadataRequirements(Fleet{}); got != nil {
		t.Errorf("MetadataRequirements(Fleet{}) = %v, want nil", got)
	}
	parsed := mustParse(t, "a.service", minimal+"[X-Fleet]\nMachineMetadata=region=us region=eu\nX-ConditionMachineMetadata=disk=ssd\n")
	if got := MetadataRequirements(parsed.Fleet); !reflect.DeepEqual(got, want) {
		t.Errorf("MetadataRequirements(%q) = %v, want %v", parsed.Fleet.MachineMetadata, got, want)
	}
}

func TestParsePlacement(t *testing.T) {
	tests := []struct {
		body string
		want string
	}{
		{"Placement=spread", PlacementSpread},
		{"Placement=binpack", PlacementBinpack},
		{`Placement="binpack"`, PlacementBinpack},
		{"Placement=binpack\nPlacement=spread", PlacementSpread},
		{"Placement=binpack\nPlacement=", ""},
		{"Placement=", ""},
		{"Role=batch", ""},
	}
	for _, tt := range tests {
		data := minimal + "[X-Fleet]\n" + tt.body + "\n"
		f := mustParse(t, "a.service", data)
		if f.Fleet.Placement != tt.want {
			t.Errorf("Parse(%q).Fleet.Placement = %q, want %q", data, f.Fleet.Placement, tt.want)
		}
	}
	errs := []struct{ body, want string }{
		{"Placement=pack", `invalid placement "pack" (want spread or binpack, or empty for the cluster's default)`},
		{"Placement=Spread", `invalid placement "Spread"`},
		{"Placement=spread binpack", "takes one value, not 2"},
		{"Placment=spread", "did you mean Placement=?"},
	}
	for _, tt := range errs {
		data := minimal + "[X-Fleet]\n" + tt.body + "\n"
		_, err := Parse("a.service", []byte(data))
		checkError(t, "Parse("+quote(data)+")", err, "[X-Fleet] ", "line 4:", tt.want)
	}
	// A template's instances inherit it.
	tmpl := mustParse(t, "web@.service", minimal+"[X-Fleet]\nPlacement=binpack\n")
	inst, err := Instantiate(tmpl, "1")
	if err != nil || inst.Fleet.Placement != PlacementBinpack {
		t.Errorf("Instantiate(web@.service, 1) = %+v, %v, want Placement %q", inst, err, PlacementBinpack)
	}
}

func TestPlacementHash(t *testing.T) {
	hash := func(fleet string) string {
		return mustParse(t, "a.service", minimal+"[X-Fleet]\n"+fleet).Hash
	}
	none, spread, binpack := hash(""), hash("Placement=spread\n"), hash("Placement=binpack\n")
	if spread == none || binpack == none || spread == binpack {
		t.Errorf("hashes without Placement=, with spread, with binpack = %s, %s, %s, want three different hashes", none, spread, binpack)
	}
	if got := hash(`Placement="spread"` + "\n"); got != spread {
		t.Errorf(`hash with Placement="spread" = %s, want %s as for Placement=spread`, got, spread)
	}
	if got := hash("Placement = spread  \n"); got != spread {
		t.Errorf("hash with Placement = spread = %s, want %s as for Placement=spread", got, spread)
	}
}

func TestParseCutOffPolicy(t *testing.T) {
	tests := []struct {
		body      string
		lostAfter time.Duration
		singleton bool
	}{
		{"", 0, false},
		{"LostAfter=30s", 30 * time.Second, false},
		{"LostAfter=1min 30s", 90 * time.Second, false},
		{"LostAfter=infinity", Infinity, false},
		{"LostAfter=30s\nLostAfter=", 0, false},
		{"Singleton=true", 0, true},
		{"Singleton=yes\nLostAfter=5s", 5 * time.Second, true},
		{"Singleton=true\nSingleton=false", 0, false},
	}
	for _, tt := range tests {
		data := minimal + "[X-Fleet]\n" + tt.body + "\n"
		f := mustParse(t, "a.service", data)
		if f.Fleet.LostAfter != tt.lostAfter || f.Fleet.Singleton != tt.singleton {
			t.Errorf("Parse(%q).Fleet = LostAfter %v Singleton %v, want %v %v", data, f.Fleet.LostAfter, f.Fleet.Singleton, tt.lostAfter, tt.singleton)
		}
	}
	errs := []struct{ body, want string }{
		{"LostAfter=soon", `invalid time span "soon"`},
		{"LostAfter=0", "must be a positive time span or infinity"},
		{"LostAfter=-5s", "negative time span"},
		{"Singleton=maybe", "maybe"},
		{"Global=true\nSingleton=true", "Global= cannot be used with Singleton="},
		{"Global=true\nLostAfter=10s", "Global= cannot be used with LostAfter="},
		{"Singelton=true", "did you mean Singleton=?"},
	}
	for _, tt := range errs {
		data := minimal + "[X-Fleet]\n" + tt.body + "\n"
		_, err := Parse("a.service", []byte(data))
		checkError(t, "Parse("+quote(data)+")", err, "[X-Fleet]", tt.want)
	}
	// The policy changes the hash: it is part of the unit's meaning.
	a := mustParse(t, "a.service", minimal)
	b := mustParse(t, "a.service", minimal+"[X-Fleet]\nSingleton=true\n")
	if a.Hash == b.Hash {
		t.Errorf("Singleton=true did not change the hash %s", a.Hash)
	}
}

func TestParseLogLimits(t *testing.T) {
	intp := func(n int) *int { return &n }
	tests := []struct {
		body  string
		size  int64
		files *int
	}{
		{"", 0, nil},
		{"LogMaxSize=16M", 16 << 20, nil},
		{"LogMaxSize=2048", 2048, nil},
		{"LogMaxSize=1K\nLogMaxSize=", 0, nil},
		{"LogMaxFiles=0", 0, intp(0)},
		{"LogMaxFiles=5\nLogMaxSize=1M", 1 << 20, intp(5)},
		{"LogMaxFiles=5\nLogMaxFiles=", 0, nil},
	}
	for _, tt := range tests {
		data := minimal + "[X-Fleet]\n" + tt.body + "\n"
		f := mustParse(t, "a.service", data)
		gotFiles, wantFiles := -1, -1
		if f.Fleet.LogMaxFiles != nil {
			gotFiles = *f.Fleet.LogMaxFiles
		}
		if tt.files != nil {
			wantFiles = *tt.files
		}
		if f.Fleet.LogMaxSize != tt.size || gotFiles != wantFiles {
			t.Errorf("Parse(%q).Fleet = LogMaxSize %d LogMaxFiles %d, want %d %d (-1: unset)", data, f.Fleet.LogMaxSize, gotFiles, tt.size, wantFiles)
		}
	}
	errs := []struct{ body, want string }{
		{"LogMaxSize=100", "must be at least 1K"},
		{"LogMaxSize=lots", `invalid size "lots"`},
		{"LogMaxSize=16MB", "did you mean 16M?"},
		{"LogMaxFiles=-1", "must be a whole number from 0 to 100"},
		{"LogMaxFiles=101", "must be a whole number from 0 to 100"},
		{"LogMaxFiles=two", `not "two"`},
		{"LogMaxFile=2", "did you mean LogMaxFiles=?"},
	}
	for _, tt := range errs {
		data := minimal + "[X-Fleet]\n" + tt.body + "\n"
		_, err := Parse("a.service", []byte(data))
		checkError(t, "Parse("+quote(data)+")", err, "[X-Fleet]", tt.want)
	}
	a := mustParse(t, "a.service", minimal)
	b := mustParse(t, "a.service", minimal+"[X-Fleet]\nLogMaxSize=1M\n")
	c := mustParse(t, "a.service", minimal+"[X-Fleet]\nLogMaxSize=1024K\n")
	if a.Hash == b.Hash || b.Hash != c.Hash {
		t.Errorf("hashes without LogMaxSize=, with 1M, with 1024K = %s, %s, %s: want the last two equal and different from the first", a.Hash, b.Hash, c.Hash)
	}
}
