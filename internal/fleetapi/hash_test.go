package fleetapi

import "testing"

// The expected hashes are the SHA-1 of the unit file fleet serializes from
// a unit's options (sha1sum of the text below), computed outside Flotilla.
// The first four files are fleet's functional/fixtures/units, which are
// already in fleet's serialized form.
func TestHashIsFleets(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"hello.service", "[Service]\nExecStart=/bin/bash -c \"while true; do echo Hello, World!; sleep 1; done\"\n",
			"3750b3e9f3962a56c7582929426e9abb012754cf"},
		{"global.service", "[Service]\nExecStart=/bin/bash -c \"while true; do echo Hello, Global World!; sleep 1; done\"\n\n[X-Fleet]\nGlobal=true\n",
			"a1ea262096895e7dc412ae001dfecff2142ce3f5"},
		{"conflict.0.service", "[Unit]\nDescription=Test Unit\n\n[Service]\nExecStart=/bin/bash -c \"while true; do echo Hello, World!; sleep 1; done\"\n\n[X-Fleet]\nConflicts=conflict.*.service\n",
			"52e8acb19db0f3f776c7b8c6bf2209fa41ce46ac"},
		{"hello@.service", "[Service]\nExecStart=/bin/bash -c \"while true; do echo Hello, World %i!; sleep 1; done\"\n",
			"79699e32624ad46c366ef37de89006ae9da617cd"},
		// Comments, blank lines and spaces around "=" are not options, so
		// this is hello.service to fleet.
		{"commented hello", "# greets\n\n[Service]\n; the loop\nExecStart = /bin/bash -c \"while true; do echo Hello, World!; sleep 1; done\"  \n\n\n",
			"3750b3e9f3962a56c7582929426e9abb012754cf"},
		// A section split in two is written once, where it first appears:
		// "[Unit]\nDescription=a\nAfter=b\n\n[Service]\nExecStart=/bin/true\n".
		{"split section", "[Unit]\nDescription=a\n[Service]\nExecStart=/bin/true\n[Unit]\nAfter=b\n",
			"53884e63cfc3bd47446eefe8142e9ac80d1decf3"},
	}
	for _, tt := range tests {
		got, err := HashFile(tt.file)
		if err != nil {
			t.Fatalf("HashFile(%s): %v", tt.name, err)
		}
		if got != tt.want {
			t.Errorf("HashFile(%s) = %s, want fleet's %s", tt.name, got, tt.want)
		}
	}
}

func TestFileRoundTrips(t *testing.T) {
	raw := "[Unit]\nDescription=a\n\n[Service]\nExecStart=/bin/true\nEnvironment=A=1\n\n[X-Fleet]\nMachineMetadata=\"a=b\" \"c=d\"\n"
	opts, err := Options(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := File(opts); got != raw {
		t.Errorf("File(Options(%q)) = %q, want it unchanged", raw, got)
	}
	if len(opts) != 4 || *opts[3] != (UnitOption{Section: "X-Fleet", Name: "MachineMetadata", Value: `"a=b" "c=d"`}) {
		t.Errorf("Options(%q) = %v, want 4 options, the last MachineMetadata as written", raw, opts)
	}
}
